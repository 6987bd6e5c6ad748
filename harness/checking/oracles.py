"""The oracle arbitrates direction: what an in-run reference's verdict, recorded in both envs,
says about a difference. Pure functions on outcomes and recorded verdicts, no I/O.

An in-run reference compares an observation with its oracle's value in the same run (the
reference engine, the harness's own search, another route of the library); a record keeps its
verdict (schema 2, `schema.RecordedReference`). Two rules read the baseline record's verdict
beside this run's:

- `known_failure`: a reference that fails now and failed in the baseline record too, no worse
  (its measure - a tensor's max abs error - at most `WORSE` times the baseline's), is not the
  upgrade's: `changed` (known-failure), with both details. A first run (no recorded verdict) keeps
  the regression: the in-run reference alone must catch a fault.
- `arbitrate`: a field compared with the baseline record that names its oracle (extras
  ``oracle="<reference>"``, the same case's reference of the same quantity) and differs from the
  record: toward the oracle - the reference passes now and failed in the baseline - is `changed`
  (fixed); away from it - fails now, passed in the baseline - a regression (broken); otherwise the
  field's own verdict stands.
"""

from __future__ import annotations

from dataclasses import replace

from harness.schema import Category, Outcome, RecordedReference, Status

WORSE = 2.0  # a known failure that grew more than this factor (in its measure) is a regression again
ORACLE = "oracle"  # the extra of a baseline-compared field naming its in-run reference


def known_failure(outcome: Outcome, before: RecordedReference | None, baseline: str) -> Outcome:
    """`outcome` (a reference, this run) against the baseline record's verdict of the same reference."""
    if outcome.status is not Status.REGRESSION or before is None or not before.failed or before.kind != outcome.kind:
        return outcome
    now = outcome.diff.get("max_abs_err")
    if isinstance(now, (int, float)) and before.measure is not None and now > WORSE * before.measure:
        return replace(outcome, detail=f"{outcome.detail} (fails in {baseline} too, but worse: "
                                       f"{before.measure:.3g} there)",
                       diff={**outcome.diff, "baseline_reference": before.to_json()})
    return replace(outcome, status=Status.CHANGED, category=Category.KNOWN_FAILURE,
                   detail=f"fails in {baseline} too, not the upgrade's: {outcome.detail} ({baseline}: {before.detail})",
                   diff={**outcome.diff, "baseline_reference": before.to_json(), "was_category": outcome.category.value})


def arbitrate(outcome: Outcome, oracle: str, now: RecordedReference | None, before: RecordedReference | None,
              baseline: str) -> Outcome:
    """`outcome` (a field against the baseline record) judged by the direction its oracle says."""
    if outcome.status is not Status.REGRESSION or now is None or before is None:
        return outcome
    diff = {**outcome.diff, ORACLE: oracle, "oracle_now": now.to_json(), "oracle_baseline": before.to_json()}
    if now.status == Status.PASS.value and before.failed:
        return replace(outcome, status=Status.CHANGED, category=Category.FIXED, diff=diff,
                       detail=f"moved to its oracle's value: `{oracle}` passes now and failed in {baseline} "
                              f"({before.detail}); vs {baseline}: {outcome.detail}")
    if now.failed and before.status == Status.PASS.value:
        return replace(outcome, category=Category.BROKEN, diff=diff,
                       detail=f"moved away from its oracle's value: `{oracle}` fails now ({now.detail}) and passed "
                              f"in {baseline}; vs {baseline}: {outcome.detail}")
    return outcome
