"""The latency suite's table (suites/test_latency.py): prefill, decode and generate() per path, the
serving paths, then each user model's generate()."""

from __future__ import annotations

from harness.cases.common import (
    ASSISTANT,
    DRAFT_TOKENS,
    ENSEMBLE_WEIGHTS,
    MTP,
    NEW_TOKENS,
    TARGET,
)
from harness.cases.registry import Rule, Suite, Table
from harness.schema import Case
from harness.settings.models import UserModel
from harness.settings.run import RunSettings


def timed_paths(model: UserModel) -> tuple[str, ...]:
    """The paths of a user model whose generate() is timed (here and by the paired mode,
    harness/designs/paired.py): all it runs but MTP, whose draft schedule differs, and early exit."""
    return tuple(p for p in model.paths if p not in ("mtp", "early_exit"))


def user_latency(model: UserModel) -> Case:
    """`<name>.generate`: one greedy generate() per timed path of the model's (`timed_paths`), plain
    first - the speculative paths' speedups are over it."""
    paths = timed_paths(model)
    return Case(model.name, name=f"{model.name}.generate", new_tokens=NEW_TOKENS, draft_tokens=DRAFT_TOKENS,
                assistant=model.assistant_name, params=(("paths", paths), ("weight", ENSEMBLE_WEIGHTS[0])))


def zoo_latency(run: RunSettings | None = None) -> list[Case]:
    """Prefill and steady-state decode of llama-target (dynamic and static cache), generate() per
    path - llama-target: plain, assisted, prompt lookup, ensemble w=0.3; glm4moe-mtp: plain, MTP -
    llama-target's serving paths (compiled static cache, continuous batching: harness/designs/latency.py),
    then a user model's generate() on its paths but MTP (`user_latency`)."""
    return [
        Case(TARGET, name=f"{TARGET}.prefill"),
        Case(TARGET, name=f"{TARGET}.decode"),
        Case(TARGET, name=f"{TARGET}.generate", new_tokens=NEW_TOKENS, draft_tokens=DRAFT_TOKENS,
             assistant=ASSISTANT, params=(("paths", ("plain", "assisted", "prompt_lookup", "ensemble")),
                                          ("weight", ENSEMBLE_WEIGHTS[0]))),
        Case(MTP, name=f"{MTP}.generate", new_tokens=8, draft_tokens=1, params=(("paths", ("plain", "mtp")),)),
        Case(TARGET, name=f"{TARGET}.serving", new_tokens=NEW_TOKENS),
    ]




latency = Table("latency", zoo_latency, user=lambda m: [user_latency(m)])

SUITE = Suite("latency", (latency,), api='generate() latency', units=(160,),
              quick=Rule(lambda c: not c.id.endswith((".generate", ".serving")),
                         "generate() per path (the speculative speedups) and the serving paths (compiled, continuous "
                         "batching)"))
