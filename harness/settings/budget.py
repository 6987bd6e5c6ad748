"""The budget plan (issue 42): a checkpoint of real size gets the cases that cover every suite at the
smallest cost, not the zoo's full grid, and the run says what it left out and why.

`--budget 5m` (or `[tool.harness] budget = "5m"`) asks for a plan that fits that wall time;
`--budget full` runs every case whatever the size. Without either, a model over `THRESHOLD`
parameters gets the plan at `DEFAULT_BUDGET`, a smaller one the full grid (the zoo's models, ~1M
parameters, and any small model of yours keep exactly the cases they had).

What the plan keeps of a user model's cases, per case table (`RULES`; everything else is kept whole:
one case per model-level suite already):

| table | kept | why the rest can go |
|---|---|---|
| outputs | every path greedy on the first prompt in the dynamic cache; plain greedy in the static cache | the second prompt repeats the same code path; sampling is the sampling suite's |
| sampling | each path at top-k | the white box (`exact_*`) checks every sampled decision exactly in 2 calls; the black-box backstop (N draws) is not drawn (`not checked`, with this reason) |
| stopping | eos list, stop string hit, max_new_tokens, the padded batch | the other limits are the same criteria at other values |
| streaming | the plain streamer | the batch refusal and the assisted streamer repeat its code |
| beam | n2 and n3 (3 returned sequences) | the length penalties and early stopping re-rank the same beams |
| batching | the left-padded greedy batch | right padding and the speculative batches repeat its masks |

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


def _first(cases: Sequence[Case]) -> str | None:
    return cases[0].prompt if cases else None


def _outputs(case: Case, cases: Sequence[Case]) -> bool:
    first = _first([c for c in cases if c.decoding == "greedy"])
    return case.decoding == "greedy" and case.prompt == first and (case.cache == "dynamic" or case.path == "plain")


def _named(*suffixes: str) -> Callable[[Case, Sequence[Case]], bool]:
    return lambda case, cases: any(case.id.endswith("." + s) for s in suffixes)


def _setting(name: str) -> Callable[[Case, Sequence[Case]], bool]:
    return lambda case, cases: case.param("setting") == name


# table -> (which cases the plan keeps, what the reason says of the rest)
RULES: dict[str, tuple[Callable[[Case, Sequence[Case]], bool], str]] = {
    "outputs": (_outputs, "each path runs once, greedy on the first prompt (dynamic cache; plain also static): the "
                          "second prompt repeats the code path, the sampled cases are the sampling suite's"),
    "sampling": (_setting("top_k"), "each path is sampled at top-k, checked exactly by the white box; the other "
                                    "settings repeat the same mechanism"),
    "stopping": (_named("stop.eos-list", "stop.stop-string-hit", "stop.max-new-tokens", "stop.pad-batch"),
                 "the other limits are the same stopping criteria at other values"),
    "streaming": (_named("stream.plain"), "the assisted streamer and the batch refusal repeat the plain one's code"),
    "beam": (_named("beam.n2", "beam.n3"), "length penalties and early stopping re-rank the same beams"),
    "batching": (_named("batch.greedy"), "right padding and the speculative batches repeat the padded masks"),
}


def select(table: str, plan: Plan, cases: list[Case]) -> list[Case]:
    """The cases of one user model's `table` that `plan` runs (all of them unless budgeted)."""
    if not plan.budgeted or table not in RULES:
        return cases
    keep, _ = RULES[table]
    kept = [c for c in cases if keep(c, cases)]
    return kept or cases[:1]  # every table keeps at least one case: each suite stays covered


def left_out(table: str, plan: Plan, cases: list[Case]) -> tuple[list[str], str]:
    """(ids the plan leaves out of `table`, why) - ([], "") when it keeps them all."""
    kept = {c.id for c in select(table, plan, cases)}
    ids = [c.id for c in cases if c.id not in kept]
    return ids, (RULES[table][1] if ids else "")


BACKSTOP_WHY = ("the budget plan does not draw the black-box backstop's N generate() calls on a model of this size; "
                "the exact_* white-box fields check every sampled decision of this path exactly")
