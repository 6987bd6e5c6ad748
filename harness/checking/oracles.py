"""The oracle arbitrates direction: what an in-run reference's verdict, recorded in both envs,
says about a difference. Pure functions on outcomes and recorded verdicts, no I/O.

An in-run reference compares an observation with its oracle's value in the same run (the
reference engine, the harness's own search, another route of the library); a record keeps its
verdict (schema 2, `schema.RecordedReference`). Two rules read the baseline record's verdict
beside this run's:

- `known_failure`: a reference that fails now and failed in the baseline record too, no worse
  (its measure - a tensor's max abs error - at most `WORSE` times the baseline's) and the same way
  (an exact reference: the same detail; another kind: the same words, numbers aside), is not the
  upgrade's: `changed` (known-failure), with both details; failing otherwise is a regression. A first run (no recorded verdict) keeps
  the regression: the in-run reference alone must catch a fault.
- `same_failure`: within one env (a rerun against the env's own record), a reference that fails
  now exactly as the record holds it is the known upstream bug `harness regen` accepted into the
  record (5.24.0's added tokens losing their lstrip / rstrip; 5.14.0's SDPA dropping Gemma 2's
  soft-cap): `changed` (known-deviation), tracked every run, never a regression and nothing to
  regenerate. "Exactly" is per kind: an exact or tokens reference with the same detail (the library's
  answer and the oracle's differ in the same places by the same values: 5.25.0's prompt lookup on
  Qwen3.5 parting from greedy at step 8); a tensor reference of the same
  category whose failure has the same size, its max abs error within `SAME_SIZE` of the record's
  (a tensor's detail quotes float digits that move across the CPUs of one env key by far less:
  5.14.0's soft-cap error is 0.0406 on an AMX Xeon and an AVX512 EPYC alike). Any other failure of
  it - another detail, an error grown or shrunk beyond `SAME_SIZE` (a fault on top of the known
  bug), no recorded verdict (a first run) - stays a regression.
- `arbitrate`: a field compared with the baseline record that names its oracle (extras
  ``oracle="<reference>"``, the same case's reference of the same quantity, or a list of them: one
  moved away breaks the field, else one moved toward fixes it) and differs from the
  record: toward the oracle - the reference passes now and failed in the baseline - is `changed`
  (fixed); away from it - fails now, passed in the baseline - a regression (broken), a relaxation
  too (accepting what the baseline refused is feature-added only while the oracle holds: a
  checkpoint's custom code running without consent is no feature); otherwise the field's own
  verdict stands. An outcome field (a load or call that works or fails) naming its
  oracle: working now where it failed (fixed) while its oracle fails now is not a fix - it loads,
  and what it gives is wrong (broken: SDPA loading for a soft-capped model and dropping the cap);
  failing now (broken) where its oracle failed in the baseline and is not observed now refuses what
  was wrong there (fixed).
- `composed_known`: a reference that composes two others - `COMPOSED`: the rollback's logits
  against the engine's = the rollback against a fresh run of the same library (`rollback_vs_fresh`,
  exact within one library) then that fresh run against the engine (`engine_rollback_vs_fresh`) -
  failing now with no verdict in the baseline (its case stopped before it there: 5.14 could not
  crop a sliding layer), while the same-library step passes and the engine step is a known failure,
  no smaller than it by more than `WORSE`: by |r - e| <= |r - f| + |f - e| its failure is that known
  one, `changed` (known-failure). Any other failure of it stays a regression.
- `failed_before_too`: in an upgrade, a call that failed in the baseline release and fails now with
  another error (error-changed) is not the upgrade's failure: `changed` (error-changed), both
  errors said. Within one release it stays a regression.
"""

from __future__ import annotations

import re
from dataclasses import replace

from harness.checking.humane import change_set
from harness.schema import Category, Outcome, RecordedReference, Status

WORSE = 2.0  # a known failure that grew more than this factor (in its measure) is a regression again
DETERMINISTIC = ("exact", "tokens")  # kinds whose failure within one env repeats word for word (ids, values, margins)
SAME_SIZE = 0.05  # within one env, a tensor reference failing by its record's max abs error +- 5 % fails as recorded
ORACLE = "oracle"  # the extra of a baseline-compared field naming its in-run reference
# outcome field -> its oracle, for fields recorded before they named one in their extras (the
# committed records keep their extras; a table here judges them the same in a check and a compare)
OUTCOME_ORACLES = {"attn_load_error": "eager_vs_sdpa"}
# reference -> (the same-library step that must pass, the oracle step whose failure it would be)
COMPOSED = {"rollback_vs_engine": ("rollback_vs_fresh", "engine_rollback_vs_fresh")}


def known_failure(outcome: Outcome, before: RecordedReference | None, baseline: str) -> Outcome:
    """`outcome` (a reference, this run) against the baseline record's verdict of the same reference."""
    if outcome.status is not Status.REGRESSION or before is None or not before.failed or before.kind != outcome.kind:
        return outcome
    now = outcome.diff.get("max_abs_err")
    if isinstance(now, (int, float)) and before.measure is not None and now > WORSE * before.measure:
        return replace(outcome, detail=f"{outcome.detail} (fails in {baseline} too, but worse: "
                                       f"{before.measure:.3g} there)",
                       diff={**outcome.diff, "baseline_reference": before.to_json()})
    same = (outcome.detail == before.detail if outcome.kind == "exact"
            else outcome.kind == "tensor" or numbers_masked(outcome.detail) == numbers_masked(before.detail))
    if not same and outcome.kind == "exact" and narrower(outcome.detail, before.detail):
        # fewer of the same differences: part of the baseline's failure is gone, the rest is the baseline's
        gone = "; ".join(sorted(change_set(before.detail) - change_set(outcome.detail)))
        return replace(outcome, status=Status.CHANGED, category=Category.KNOWN_FAILURE,
                       detail=f"fails in {baseline} too, less now (no longer differs: {gone}), not the upgrade's: "
                              f"{outcome.detail}",
                       diff={**outcome.diff, "baseline_reference": before.to_json(), "was_category": outcome.category.value})
    if not same:
        # an exact reference is the same failure only with the same answer (deterministic ids, values);
        # another kind's only where it fails the same way, numbers aside
        return replace(outcome, detail=f"{outcome.detail} (fails in {baseline} too, but otherwise: {before.detail[:160]})",
                       diff={**outcome.diff, "baseline_reference": before.to_json()})
    return replace(outcome, status=Status.CHANGED, category=Category.KNOWN_FAILURE,
                   detail=f"fails in {baseline} too, not the upgrade's: {outcome.detail} ({baseline}: {before.detail})",
                   diff={**outcome.diff, "baseline_reference": before.to_json(), "was_category": outcome.category.value})


def narrower(now: str, before: str) -> bool:
    """An exact comparer's details ("eos: 2 -> 1; pad: 2 -> None", `change_set`): each difference of
    `now` is one of `before`'s, and some of `before`'s are gone."""
    a, b = change_set(now), change_set(before)
    return bool(a) and a < b


_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def numbers_masked(detail: str) -> str:
    """A failure's words with its numbers masked (steps, ids, sizes move with the run; the words name the failure)."""
    return _NUMBER.sub("#", str(detail)).strip()


def same_failure(outcome: Outcome, before: RecordedReference | None) -> Outcome:
    """`outcome` (a reference, this run) against the same env's record of it."""
    if outcome.status is not Status.REGRESSION or before is None or not before.failed or before.kind != outcome.kind:
        return outcome
    if not (outcome.kind in DETERMINISTIC and before.detail == outcome.detail or _same_size(outcome, before)):
        return outcome
    return replace(outcome, status=Status.CHANGED, category=Category.KNOWN_DEVIATION,
                   detail=f"known deviation: fails exactly as the record holds it (a finding in the library, "
                          f"tracked): {outcome.detail}",
                   diff={**outcome.diff, "baseline_reference": before.to_json(), "was_category": outcome.category.value})


def _same_size(outcome: Outcome, before: RecordedReference) -> bool:
    """A tensor reference failing now in the record's category by the record's max abs error, +- SAME_SIZE."""
    now = outcome.diff.get("max_abs_err")
    if outcome.kind != "tensor" or before.category != outcome.category.value or before.measure is None:
        return False
    return isinstance(now, (int, float)) and abs(now - before.measure) <= SAME_SIZE * before.measure


def arbitrate(outcome: Outcome, oracle: str, now: RecordedReference | None, before: RecordedReference | None,
              baseline: str) -> Outcome:
    """`outcome` (a field against the baseline record) judged by the direction its oracle says."""
    if outcome.category in (Category.FIXED, Category.BROKEN):
        return _outcome_by_oracle(outcome, oracle, now, before, baseline)
    relaxed = outcome.category is Category.FEATURE_ADDED  # accepts what the baseline refused: its oracle decides
    if (outcome.status is not Status.REGRESSION and not relaxed) or now is None or before is None:
        return outcome
    diff = {**outcome.diff, ORACLE: oracle, "oracle_now": now.to_json(), "oracle_baseline": before.to_json()}
    if now.status == Status.PASS.value and before.failed:
        return replace(outcome, status=Status.CHANGED, category=Category.FIXED, diff=diff,
                       detail=f"moved to its oracle's value: `{oracle}` passes now and failed in {baseline} "
                              f"({before.detail}); vs {baseline}: {outcome.detail}")
    if now.failed and before.status == Status.PASS.value:
        return replace(outcome, status=Status.REGRESSION, category=Category.BROKEN, diff=diff,
                       detail=f"moved away from its oracle's value: `{oracle}` fails now ({now.detail}) and passed "
                              f"in {baseline}; vs {baseline}: {outcome.detail}")
    if now.failed and before.failed and now.kind == "exact" and narrower(before.detail, now.detail):
        # the oracle failed there too, and differs in more now: further from it (5.0.0's GGUF tokenizer
        # adding five special ids to specials already wrong in 4.57.6)
        return replace(outcome, status=Status.REGRESSION, category=Category.BROKEN, diff=diff,
                       detail=f"moved further from its oracle's value: `{oracle}` fails now ({now.detail}) beyond how "
                              f"it failed in {baseline} ({before.detail}); vs {baseline}: {outcome.detail}")
    return outcome


def composed_known(outcome: Outcome, same: Outcome | None, step: Outcome | None,
                   measures: dict[str, float | None]) -> Outcome:
    """`outcome` (a composed reference, `COMPOSED`, failing with no baseline verdict) judged by its
    two steps this run: `same` passes and `step` is a known failure at least 1 / WORSE of its size
    (`measures`: each reference's max abs error, None when its comparer gives none)."""
    if outcome.status is not Status.REGRESSION or same is None or step is None:
        return outcome
    if same.status is not Status.PASS or step.category is not Category.KNOWN_FAILURE:
        return outcome
    mine, theirs = measures.get(outcome.field), measures.get(step.field)
    if mine is None or theirs is None or mine > WORSE * theirs:
        return outcome
    return replace(outcome, status=Status.CHANGED, category=Category.KNOWN_FAILURE,
                   detail=f"the known failure of `{step.field}` ({mine:.3g} here, {theirs:.3g} there), not the "
                          f"upgrade's: `{same.field}` passes, so this differs from its oracle as `{step.field}` does, "
                          f"which {step.detail}; here: {outcome.detail}",
                   diff={**outcome.diff, "composed_of": [same.field, step.field], "was_category": outcome.category.value})


def failed_before_too(outcome: Outcome, baseline: str) -> Outcome:
    """`outcome` (a field against the baseline record of another release) that is error-changed:
    the call raised there too, so its failure is the baseline's - changed, not a regression."""
    if outcome.status is not Status.REGRESSION or outcome.category is not Category.ERROR_CHANGED:
        return outcome
    return replace(outcome, status=Status.CHANGED,
                   detail=f"fails in {baseline} too, not the upgrade's; now {outcome.detail}")


def _outcome_by_oracle(outcome: Outcome, oracle: str, now: RecordedReference | None,
                       before: RecordedReference | None, baseline: str) -> Outcome:
    """An outcome field's fix or break (a load that works now / fails now) against its oracle: a fix
    whose oracle fails now (and did not fail in the baseline) is broken; a break where the oracle
    failed in the baseline and cannot run now is fixed; otherwise the field's own verdict."""
    seen = {ORACLE: oracle, "oracle_now": now.to_json() if now else None,
            "oracle_baseline": before.to_json() if before else None}
    if outcome.category is Category.FIXED and now is not None and now.failed and not (before and before.failed):
        return replace(outcome, status=Status.REGRESSION, category=Category.BROKEN, diff={**outcome.diff, **seen},
                       detail=f"{outcome.detail}; but what it gives is wrong: `{oracle}` fails now ({now.detail})")
    if outcome.category is Category.BROKEN and now is None and before is not None and before.failed:
        return replace(outcome, status=Status.CHANGED, category=Category.FIXED, diff={**outcome.diff, **seen},
                       detail=f"refuses now what its oracle found wrong in {baseline} (`{oracle}`: {before.detail}); "
                              f"{outcome.detail}")
    return outcome
