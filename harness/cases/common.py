"""What every case table shares: the zoo's roles, the generation lengths, the helpers of the budget
plan's rules, and the model-level suites' table (each suite's tables: harness/cases/<suite>.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from harness.cases.registry import Table
from harness.schema import Case
from harness.settings.run import RunSettings
from harness.zoo.specs import SPECS

NEW_TOKENS = 24
DRAFT_TOKENS = 4
ENSEMBLE_WEIGHTS = (0.3, 0.7)
TARGET, ASSISTANT, MTP = "llama-target", "llama-assistant", "glm4moe-mtp"
# the rope-scaled fixtures are the long_context suite's alone: the model-level suites (caches, backends,
# loading) check llama-target, whose shape they share
LONG_CONTEXT = "long-context"



def _deep(run: RunSettings | None) -> bool:
    return bool(run is not None and run.deep)


def _p(**kwargs: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(kwargs.items()))


def draft_tokens_of(path: str) -> int | None:
    """The constant draft length a path runs with: none for plain decoding, one token for an MTP
    layer, DRAFT_TOKENS for an assistant or prompt lookup."""
    return None if path == "plain" else 1 if path == "mtp" else DRAFT_TOKENS

def named(*suffixes: str) -> Callable[[Case, Sequence[Case]], bool]:
    """A budget plan's rule: keep the cases whose id ends with one of `suffixes`."""
    return lambda case, cases: any(case.id.endswith("." + s) for s in suffixes)


def setting(name: str) -> Callable[[Case, Sequence[Case]], bool]:
    """A budget plan's rule: keep the sampling cases at setting `name`."""
    return lambda case, cases: case.param("setting") == name


def _zoo_models(run: RunSettings | None = None) -> list[Case]:
    return [Case(s.name, name=s.name) for s in SPECS if s.role != LONG_CONTEXT]


# one case per checkpoint (its id is the model's name): the model-level suites (caches, backends)
models = Table("models", _zoo_models, user=lambda m: [Case(m.name, name=m.name)])
