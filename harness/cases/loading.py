"""The loading suite's table (suites/test_loading.py): the load contract of every zoo model as shipped,
llama-target's checkpoint variants, then each user model as shipped."""

from __future__ import annotations

from harness.cases.common import (
    LONG_CONTEXT,
    TARGET,
    _p,
)
from harness.cases.registry import Suite, Table
from harness.schema import Case
from harness.settings.models import UserModel
from harness.settings.run import RunSettings
from harness.zoo.specs import SPECS

LOAD_PROMPT = "short-0"
# llama-target's checkpoint variants (harness/designs/loading.py `VARIANTS` says what each edits)
LOAD_VARIANTS = ("config-fp16", "config-no-dtype", "legacy-config", "genconfig-file", "genconfig-max-new-tokens")


def load_case(model: str, variant: str, prompt: str = LOAD_PROMPT, own: bool = False) -> Case:
    """`<model>.<variant>`: the checkpoint (as shipped, or a variant built from its files) loaded
    with no arguments; `own`: a user's checkpoint, whose every route is run."""
    return Case(model, prompt=prompt, name=f"{model}.{variant}", params=_p(variant=variant, own=own))


def zoo_loading(run: RunSettings | None = None) -> list[Case]:
    """Every zoo model as shipped, llama-target's variants, then each user model as shipped (on
    its first prompt)."""
    return ([load_case(s.name, "as-shipped") for s in SPECS if s.role != LONG_CONTEXT]
            + [load_case(TARGET, v) for v in LOAD_VARIANTS])


def user_loading(model: UserModel) -> list[Case]:
    return [load_case(model.name, "as-shipped", model.prompts[0].id if model.prompts else LOAD_PROMPT, own=True)]




loading = Table("loading", zoo_loading, user=user_loading)

SUITE = Suite("loading", (loading,), api='from_pretrained() loading', units=(110,))
