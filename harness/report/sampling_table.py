"""The report's sampling table: one row per path x setting (a case of the sampling suite, or a sampled
outputs case), from its outcomes (harness/designs/sampling.py `observe`):

- the exact bias: `exact_emitted`'s TV between the emitted distribution the white box observed and the
  intended one, its status (pass, known-deviation, deviation, fixed) and the observed mechanism;
- the black-box backstop: N, the fit's p-value, the measured TV to the target with its interval
  (`<field>_bias_vs_target`) next to the exact bias of the path's joint, the cells that misfit most;
- what was skipped and why (a white-box field that could not be observed, a fit not checkable).
A row's status is the worst of every outcome of its case but information, so the table never says
pass for a case that "Needs attention" lists as a regression.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.schema import Outcome, Status

BIAS = "_bias_vs_target"
WHITE_BOX = ("exact_target", "exact_draft", "exact_acceptance", "exact_residual", "exact_emitted")
RANK = {Status.REGRESSION: 0, Status.MISSING: 1, Status.CHANGED: 2, Status.SKIPPED: 3, Status.NEW: 4, Status.PASS: 5}


@dataclass(frozen=True)
class SamplingRow:
    suite: str
    case: str
    status: str  # the worst status of the case's white-box fields and fit
    exact_tv: float | None  # TV(emitted as observed, intended)
    exact_status: str  # exact_emitted's status (and category)
    mechanism: str  # what the white box observed where it deviates
    n: int | None
    p_value: float | None
    tv: float | None  # measured TV(emitted, target), black box
    tv_ci: tuple[float, float] | None
    bias: float | None  # exact TV(path joint, target joint)
    misfit: str
    skipped: str  # "field: reason; ..."


def _misfit(cells: Any) -> str:
    if not isinstance(cells, list):
        return ""
    return ", ".join(f"[{c.get('cell')}] {c.get('observed')} vs {c.get('expected')}" for c in cells[:3]
                     if isinstance(c, dict))


def _row(suite: str, case: str, members: list[Outcome]) -> SamplingRow | None:
    by = {o.field: o for o in members}
    fit = next((o for o in members if o.kind == "distribution"), None)
    info = next((o for o in members if o.field.endswith(BIAS)), None)
    white = [by[f] for f in WHITE_BOX if f in by]
    if info is None and not white:
        return None  # a distribution of another design (the bias suite's one step)
    checks = [o for o in [*white, fit] if o is not None]
    status = min((o.status for o in members if o.status is not Status.INFO), key=lambda s: RANK.get(s, 6))
    emitted = by.get("exact_emitted")
    mechanism = "; ".join(emitted.diff.get("mechanism") or []) if emitted is not None else ""
    ci = info.diff.get("tv_to_target_ci") if info is not None else None
    fitted = fit is not None and fit.status is not Status.SKIPPED
    return SamplingRow(
        suite=suite, case=case, status=status.value,
        exact_tv=emitted.diff.get("tv") if emitted is not None else None,
        exact_status=(emitted.status.value + (f" ({emitted.category.value})" if emitted.category else ""))
        if emitted is not None else "",
        mechanism=mechanism,
        n=fit.diff.get("n") if fitted else None, p_value=fit.diff.get("p_value") if fitted else None,
        tv=info.diff.get("tv_to_target") if info is not None else None,
        tv_ci=(float(ci[0]), float(ci[1])) if isinstance(ci, list) and len(ci) == 2 else None,
        bias=info.diff.get("bias_exact") if info is not None else None,
        misfit=_misfit(fit.diff.get("misfit")) if fit is not None and fit.status is Status.REGRESSION else "",
        skipped="; ".join(f"{o.field}: {o.detail}" for o in checks if o.status is Status.SKIPPED),
    )


def sampling_rows(outcomes: list[Outcome]) -> list[SamplingRow]:
    """One row per case with white-box fields or a sampled fit (in order of appearance)."""
    grouped: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        if o.field in WHITE_BOX or o.field.endswith(BIAS) or o.kind == "distribution":
            grouped.setdefault((o.suite, o.case), []).append(o)
    rows = [_row(suite, case, members) for (suite, case), members in grouped.items()]
    return [r for r in rows if r is not None]
