"""What every case table shares: the zoo's roles, the generation lengths, and the helpers that
add your own models' rows (harness/cases/__init__.py holds the tables)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from harness.fixtures.zoo import SPECS
from harness.schema import Case
from harness.settings import budget
from harness.settings.models import UserModel
from harness.settings.run import RunSettings

NEW_TOKENS = 24
DRAFT_TOKENS = 4
ENSEMBLE_WEIGHTS = (0.3, 0.7)
TARGET, ASSISTANT, MTP = "llama-target", "llama-assistant", "glm4moe-mtp"
# the rope-scaled fixtures are the long_context suite's alone: the model-level suites (caches, backends,
# loading) check llama-target, whose shape they share
LONG_CONTEXT = "long-context"



def _users(run: RunSettings | None) -> Sequence[UserModel]:
    return run.user_models if run is not None else ()


def _planned(run: RunSettings | None, table: str, make: Callable[[UserModel], list[Case]]) -> list[Case]:
    """Each user model's cases of `table`, as its plan runs them (harness/settings/budget.py: the
    full grid, or the budget plan's selection)."""
    return [c for m in _users(run) for c in budget.select(table, m.plan, make(m))]



def _deep(run: RunSettings | None) -> bool:
    return bool(run is not None and run.deep)


def _p(**kwargs: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(kwargs.items()))


def draft_tokens_of(path: str) -> int | None:
    """The constant draft length a path runs with: none for plain decoding, one token for an MTP
    layer, DRAFT_TOKENS for an assistant or prompt lookup."""
    return None if path == "plain" else 1 if path == "mtp" else DRAFT_TOKENS

def models(run: RunSettings | None = None) -> list[Case]:
    """One case per checkpoint (its id is the model's name): the model-level suites."""
    return ([Case(s.name, name=s.name) for s in SPECS if s.role != LONG_CONTEXT]
            + [Case(m.name, name=m.name) for m in _users(run)])
