"""The quantized suite's table (suites/test_quantized.py): llama-target - and each user model, the
harness's real one included - loaded with torchao's int8 weight-only quantization (the serving extra)."""

from __future__ import annotations

from harness.cases.common import (
    TARGET,
    _p,
)
from harness.cases.registry import Suite, Table
from harness.schema import Case
from harness.settings.models import UserModel
from harness.settings.run import RunSettings


def zoo_quantized(run: RunSettings | None = None) -> list[Case]:
    """`<model>.quantized.int8-weight-only`: llama-target loaded with torchao's int8 weight-only
    quantization (harness/designs/quantized.py; torchao is the harness's optional `serving` extra)."""
    return [Case(TARGET, prompt="short-0", new_tokens=8, name=f"{TARGET}.quantized.int8-weight-only",
                 params=_p(scheme="int8-weight-only"))]




def user_quantized(model: UserModel) -> list[Case]:
    """`<name>.quantized.int8-weight-only`: a user model (the harness's real one too) loaded the same way."""
    return [Case(model.name, prompt="short-0", new_tokens=8, name=f"{model.name}.quantized.int8-weight-only",
                 params=_p(scheme="int8-weight-only"))]


quantized = Table("quantized", zoo_quantized, user=user_quantized)

SUITE = Suite("quantized", (quantized,), units=(60,), api='quantized weights (int8)')
