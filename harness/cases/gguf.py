"""The gguf suite's table and row (suites/test_gguf.py): transformers' `gguf_file=` load of a real
model's GGUF - SmolLM2-135M-Instruct's Q4_1 file (harness/zoo/real.py) - judged against the
harness's own conversion of it (harness/designs/gguf.py). The `real` extra and the cached (or
fetchable) file are what it needs: without them the case is skipped (not observable) with the
install line."""

from __future__ import annotations

from harness.cases.common import _p
from harness.cases.registry import Rule, Suite, Table
from harness.schema import Case
from harness.settings.run import RunSettings

GGUF_MODEL = "smollm2-135m"


def zoo_gguf(run: RunSettings | None = None) -> list[Case]:
    """`smollm2-135m.gguf`: SmolLM2-135M-Instruct's Q4_1 GGUF, one case (a real model, not the zoo's)."""
    # the case's model is the .gguf file, not the converted checkpoint the other suites run as `smollm2-135m`
    # (harness/settings/real.py): no checkpoint fingerprint of that conversion is its to record
    return [Case(f"{GGUF_MODEL}.gguf", new_tokens=16, name=f"{GGUF_MODEL}.gguf",
                 params=_p(file="SmolLM2-135M-Instruct.Q4_1.gguf", quantization="Q4_1"))]


gguf = Table("gguf", zoo_gguf)

SUITE = Suite("gguf", (gguf,), api='from_pretrained(gguf_file=...): the GGUF load', quick=Rule(
    lambda c: False, "transformers' gguf_file= load of the real model alone takes 19-27 s on 2 cores, beyond what "
                     "`harness check`'s 60 s allows beside the zoo; nothing else covers it"))
