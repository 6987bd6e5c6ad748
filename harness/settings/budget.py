"""The budget plan (issue 42): a checkpoint of real size gets the cases that cover every suite at the
smallest cost, not the zoo's full grid, and the run says what it left out and why.

`--budget 5m` (or `[tool.harness] budget = "5m"`) asks for a plan that fits that wall time;
`--budget full` runs every case whatever the size. Without either, a model over `THRESHOLD`
parameters gets the plan at `DEFAULT_BUDGET`, a smaller one the full grid (the zoo's models, ~1M
parameters, and any small model of yours keep exactly the cases they had).

What the plan keeps of a user model's cases is each case table's own rule, beside the table
(harness/cases/<suite>.py: `Table(plan=Rule(...))`); a table without one is kept whole (one case per
model-level suite already). `harness check` lists what a plan left out, table by table, with the
rule's reason.

The latency suite keeps its case with `LATENCY_SAMPLES` samples a path (its fields state the
smallest effect those samples detect). Pure functions over plain data: no file access.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.schema import Case

THRESHOLD = 100e6  # parameters: above this a model's default is the budget plan (a 100M model's full grid ~10 min here)
DEFAULT_BUDGET = 300.0  # seconds: the plan's default target (issue 42: a 1B checkpoint within 5 minutes)
FULL = ("full", "off", "none")
LATENCY_SAMPLES = 3  # generate() samples a path in a budget plan's latency case (the full grid: 8)
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}


class BudgetError(ValueError):
    """A budget the run cannot use; the message names the flag or key and the fix."""


def parse(text: str | None, where: str = "--budget") -> float | None:
    """'5m', '300s', '300', '1.5h' -> seconds; 'full' / 'off' / 'none' -> 0 (the full grid, any size);
    None -> None (the default: the plan above THRESHOLD)."""
    if text is None or text == "":
        return None
    value = str(text).strip().lower()
    if value in FULL:
        return 0.0
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([smh]?)", value)
    if not match or float(match.group(1)) <= 0:
        raise BudgetError(f"{where} {text!r}: expected a wall time such as 5m, 300s or 1h, or 'full' for every case")
    return float(match.group(1)) * UNITS[match.group(2)]


@dataclass(frozen=True)
class Plan:
    """What one model's run is: the full grid, or the budget plan with its target seconds and why."""

    kind: str  # "full" | "budget"
    seconds: float | None = None
    why: str = ""

    @property
    def budgeted(self) -> bool:
        return self.kind == "budget"


def plan_for(params: int, budget: float | None) -> Plan:
    """The plan of a model of `params` parameters under the run's `budget` (`parse`'s value)."""
    if budget == 0.0:
        return Plan("full", why="--budget full: every case")
    if budget is not None:
        return Plan("budget", budget, f"--budget {budget:g} s")
    if params > THRESHOLD:
        return Plan("budget", DEFAULT_BUDGET, f"{params / 1e6:.0f}M parameters, over the {THRESHOLD / 1e6:.0f}M "
                                              "threshold of the full grid (--budget full runs every case)")
    return Plan("full")


def select(keeps: Callable[[Case, Sequence[Case]], bool] | None, plan: Plan, cases: list[Case]) -> list[Case]:
    """The cases of one user model's table that `plan` runs: all of them unless budgeted, else those
    the table's rule `keeps` (given each case and all of them; None: the table is kept whole)."""
    if not plan.budgeted or keeps is None:
        return cases
    kept = [c for c in cases if keeps(c, cases)]
    return kept or cases[:1]  # every table keeps at least one case: each suite stays covered


def left_out(keeps: Callable[[Case, Sequence[Case]], bool], why: str, plan: Plan,
             cases: list[Case]) -> tuple[list[str], str]:
    """(ids the plan leaves out of a table, why) - ([], "") when it keeps them all."""
    kept = {c.id for c in select(keeps, plan, cases)}
    ids = [c.id for c in cases if c.id not in kept]
    return ids, (why if ids else "")


BACKSTOP_WHY = ("the budget plan does not draw the black-box backstop's N generate() calls on a model of this size; "
                "the exact_* white-box fields check every sampled decision of this path exactly")
