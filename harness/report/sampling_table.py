"""The report's sampling table: per path x setting, the measured TV to the target with its interval
next to the exact bias (0 on lossless paths), N, the p-value of the fit and the cells that
contribute most to a misfit. Rows come from the sampling suite's outcomes (harness/designs/sampling.py
`observe`): the `<field>_vs_exact` fit and the `<field>_bias_vs_target` point of one case. A row's
status is the worst of every outcome of its field in that case - the fit, and the field against
its baseline record (`joint`, `joint_error`, ...) - so the table never says pass for a case that
"Needs attention" lists as a regression.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.schema import Outcome, Status

FIT = "_vs_exact"
BIAS = "_bias_vs_target"


@dataclass(frozen=True)
class SamplingRow:
    suite: str
    case: str
    status: str
    n: int | None
    p_value: float | None
    tv: float | None  # measured TV(emitted, target)
    tv_ci: tuple[float, float] | None
    bias: float | None  # exact TV(path joint, target joint)
    misfit: str


def _misfit(cells: Any) -> str:
    if not isinstance(cells, list):
        return ""
    return ", ".join(f"[{c.get('cell')}] {c.get('observed')} vs {c.get('expected')}" for c in cells[:3]
                     if isinstance(c, dict))


WORST_FIRST = (Status.REGRESSION, Status.MISSING, Status.CHANGED, Status.NEW, Status.SKIPPED, Status.PASS)


def worst(statuses: list[Status]) -> Status:
    return min(statuses, key=WORST_FIRST.index)


def sampling_rows(outcomes: list[Outcome]) -> list[SamplingRow]:
    """One row per case that has both a fit and a bias point (in order of appearance), its status
    the worst of its field's outcomes."""
    fits = {(o.suite, o.case, o.field[: -len(FIT)]): o for o in outcomes
            if o.field.endswith(FIT) and o.kind == "distribution"}
    rows = []
    for o in outcomes:
        if not o.field.endswith(BIAS):
            continue
        fit = fits.get((o.suite, o.case, o.field[: -len(BIAS)]))
        if fit is None:
            continue
        ci = o.diff.get("tv_to_target_ci")
        base = o.field[: -len(BIAS)]
        status = worst([x.status for x in outcomes if x.suite == o.suite and x.case == o.case
                        and x.field.startswith(base) and x is not o])
        rows.append(SamplingRow(
            suite=o.suite, case=o.case, status=status.value, n=fit.diff.get("n"), p_value=fit.diff.get("p_value"),
            tv=o.diff.get("tv_to_target"), tv_ci=(float(ci[0]), float(ci[1])) if isinstance(ci, list) and len(ci) == 2 else None,
            bias=o.diff.get("bias_exact"), misfit=_misfit(fit.diff.get("misfit")) if fit.status.value == "regression" else "",
        ))
    return rows
