"""The quick tier: what `harness check` runs of the zoo by default, so the everyday command fits its
budget (60 s on 2 quiet cores, benchmarks/budgets.json); `--budget full` (or `[tool.harness]
budget = "full"`) runs the whole recorded grid, as `harness regen` always does.

The tier is a selection, not a second grid: every case keeps its record, its id and its fields;
the cases it does not run are deselected (their records are not `missing`), and m, the number of
golden tests behind the per-test alpha, is still the whole grid's (harness/plugin/selection.py),
so a case decides exactly as in a full run. What it keeps of the zoo is each suite's own rule, in
its registry row (harness/cases/<suite>.py: `Suite(quick=Rule(keeps, why))`, the why saying what the
rest repeats); a suite without one runs whole.

Not applied (the run is full) under `--budget full`, `--deep`, `harness regen`, an injected fault,
a case selection (`--harness-case`, `harness check --suite`, pytest's `-k` or a node id) and
a one-off `--model` run; never to your own models' cases (their plan is harness/settings/budget.py's).
Pure functions over plain data.
"""

from __future__ import annotations

from collections.abc import Mapping

FULL_FLAG = "--budget full"


def left_out_line(dropped: Mapping[str, int], total: int, why: Mapping[str, str]) -> str:
    """The run's one line on what the tier did not run: cases per suite, what they repeat (`why`:
    suite -> its rule's reason), and how to run them."""
    parts = ", ".join(f"{suite} {n} ({why.get(suite, '')})" for suite, n in sorted(dropped.items()) if n)
    n = sum(dropped.values())
    return (f"quick tier: {n} of the zoo's {total} cases not run - {parts}; `harness check {FULL_FLAG}` runs every "
            "case (harness/cases/tier.py)")
