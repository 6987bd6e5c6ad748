"""The compiled suite's table (suites/test_compiled.py): static-cache generate() compiled through
aot_eager (and inductor in deep mode)."""

from __future__ import annotations

from harness.cases.common import (
    TARGET,
    _deep,
    _p,
)
from harness.cases.registry import Rule, Suite, Table
from harness.schema import Case
from harness.settings.run import RunSettings


def compiled_case(model: str, backend: str) -> Case:
    """`<model>.compiled.<backend>`: generate() on a static cache with a CompileConfig for torch's
    `backend` (harness/designs/compiled.py says which calls it makes)."""
    return Case(model, cache="static", prompt="short-0", name=f"{model}.compiled.{backend}", params=_p(backend=backend))


COMPILED_SLIDING = "mistral-sliding"  # every layer a sliding window: the static cache's sliding layers


def zoo_compiled(run: RunSettings | None = None) -> list[Case]:
    """llama-target through aot_eager (graph capture and functionalization, seconds on a CPU), in deep
    mode through inductor too (generated kernels: ~30 s to compile on 2 cores); mistral-sliding through
    aot_eager (a full run: the quick tier keeps llama-target) - a sliding window's static cache layer
    keeps its length as a Python int that dynamo guards on, so each decode step recompiles until the
    recompile limit sends the rest eager (transformers #44609: found by this suite on a user's Gemma 2);
    each user model through aot_eager."""
    backends = ("aot_eager", "inductor") if _deep(run) else ("aot_eager",)
    return [compiled_case(TARGET, b) for b in backends] + [compiled_case(COMPILED_SLIDING, "aot_eager")]




compiled = Table("compiled", zoo_compiled, user=lambda m: [compiled_case(m.name, "aot_eager")])

# a user model's case: a static-cache generate() compiled, run twice (the second call's guards), and the eager
# reference - about the outputs suite's static case twice over, plus the compile
SUITE = Suite("compiled", (compiled,), api='generate() with a compiled static cache (torch.compile)', units=(200,),
              quick=Rule(lambda c: c.model == TARGET, "mistral-sliding's compiled static cache (transformers "
                                                      "#44609's recompiles: a sliding window's cache layer)"))
