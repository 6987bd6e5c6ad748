"""The checking core's rules, directly (harness/checking/core.py `CaseCheck`, `missing_fields`,
`compare_records`): no pytest plugin, no store, no model - observations in, outcomes out.

  Holm within a case   two statistical fields of one case share its alpha; a p between alpha / 2
                       and alpha fails alone and passes beside a second, larger one
  strict               a field without a baseline record is a regression (missing-record)
  missing              a baseline field nobody observed is `missing`, a regression under strict
  regen                a difference from this env's own record is the regeneration (changed)
  unreadable           a baseline record that cannot be read makes every field a regression
  categories           text follows its tokens' tie-flip; a seeded stream whose distribution fits
                       is an rng-stream change; a fix is changed, a breakage a regression
  observations         every part of an `Observation` lands as one outcome; a note may not decide
                       a statistical kind
The workflow through pytest (records written, xdist, strictness from CI) is tests/test_plugin_workflow.py.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from harness.checking.core import CaseCheck, Rules, compare_records, missing_fields
from harness.schema import Category, Field, Observation, Record, RecordError, Status
from harness.settings.config import Thresholds

ENV = {"dtype": "fp32", "device": {"type": "cpu"}, "threads": 1, "torch": "2.13.0", "attn_implementation": "sdpa"}
BF16 = {**ENV, "dtype": "bf16"}


def rules(**kw) -> Rules:
    return Rules(alpha=kw.pop("alpha", 0.01), thresholds=Thresholds(), env=kw.pop("env", ENV), **kw)


def record(env=ENV, **fields: Field) -> Record:
    return Record("suite", "case", env, dict(fields))


def rate(k: int, n: int) -> Field:
    return Field("rate", {"k": k, "n": n})


def outcomes(check: CaseCheck) -> dict[str, tuple[Status, Category]]:
    return {o.field: (o.status, o.category) for o in check.outcomes()}


# ----------------------------------------------------------------------------------------------
# Holm within a case


def _binomial_p(k: int, n: int, p: float) -> float:
    from harness.checking import stats

    return stats.binomial_test(k, n, p).p_value


def test_holm_decides_a_case_s_statistical_fields_together():
    """k = 62 of 100 against p = 0.5: p ~ 0.021. At alpha 0.03 it fails alone; beside a second
    field with p ~ 1 Holm decides the smaller one at alpha / 2 = 0.015, so it passes."""
    assert 0.015 < _binomial_p(62, 100, 0.5) < 0.03
    alone = CaseCheck("suite", "case", rules(alpha=0.03))
    alone.reference("r1", rate(62, 100), Field("rate", {"p": 0.5}))
    assert outcomes(alone)["r1"][0] is Status.REGRESSION
    together = CaseCheck("suite", "case", rules(alpha=0.03))
    together.reference("r1", rate(62, 100), Field("rate", {"p": 0.5}))
    together.reference("r2", rate(50, 100), Field("rate", {"p": 0.5}))
    decided = {o.field: o for o in together.outcomes()}
    assert decided["r1"].status is Status.PASS and decided["r1"].diff["holm_adjusted_p"] > 0.03
    assert decided["r2"].status is Status.PASS


def test_holm_leaves_exact_fields_alone():
    check = CaseCheck("suite", "case", rules(alpha=0.03))
    check.reference("r1", rate(62, 100), Field("rate", {"p": 0.5}))
    check.reference("same", Field("exact", [1, 2]), Field("exact", [1, 2]))
    assert outcomes(check) == {"r1": (Status.REGRESSION, Category.RATE_UP), "same": (Status.PASS, Category.NONE)}


# ----------------------------------------------------------------------------------------------
# the run's rules: new, strict, regen, missing, unreadable


@pytest.mark.parametrize(("run", "baseline", "value", "expected"), [
    (rules(), None, 1, (Status.NEW, Category.NONE)),
    (rules(strict=True), None, 1, (Status.REGRESSION, Category.MISSING_RECORD)),
    (rules(), record(f=Field("exact", 1)), 1, (Status.PASS, Category.NONE)),
    (rules(), record(f=Field("exact", 1)), 2, (Status.REGRESSION, Category.REAL_CHANGE)),
    (rules(regen=True), record(f=Field("exact", 1)), 2, (Status.CHANGED, Category.REGENERATED)),
    (rules(strict=True, regen=True), record(f=Field("exact", 1)), 2, (Status.CHANGED, Category.REGENERATED)),
], ids=["new", "strict-new", "pass", "changed-value", "regen", "regen-wins-over-strict"])
def test_the_run_s_rules(run, baseline, value, expected):
    check = CaseCheck("suite", "case", run, baseline=baseline)
    check.observe("f", Field("exact", value))
    assert outcomes(check)["f"] == expected


def test_an_unreadable_baseline_makes_every_field_a_regression():
    bad = RecordError("/records/suite/case.json", "corrupt JSON")
    check = CaseCheck("suite", "case", rules(), unreadable=bad)
    check.observe("f", Field("exact", 1))
    (o,) = check.outcomes()
    assert (o.status, o.category) == (Status.REGRESSION, Category.UNREADABLE_RECORD)
    assert o.diff["file"] == "/records/suite/case.json"


@pytest.mark.parametrize(("strict", "status"), [(False, Status.MISSING), (True, Status.REGRESSION)])
def test_a_baseline_field_nobody_observed_is_missing(strict, status):
    (o,) = missing_fields(record(f=Field("exact", 1), g=Field("exact", 2)), {"f"}, rules(strict=strict))
    assert (o.field, o.status, o.category) == ("g", status, Category.MISSING_FIELD)


@pytest.mark.parametrize("strict", [False, True])
def test_a_field_lost_because_its_case_raises_now_names_the_crash_and_never_advises_a_regen(strict):
    """5.24.0's prompt lookup with a static cache raises IndexError: the case's other fields are not
    observed. Their outcome points at the crash; "accept its removal with `harness regen`" would
    record the crash as golden. A field lost without a crash keeps the regen advice."""
    crash = {"type": "IndexError", "message": "index_copy_(): index 43 is out of bounds"}
    a = {("outputs", "case"): record(error=Field("exact", None), tokens=Field("tokens", [[1, 2]]))}
    b = {("outputs", "case"): record(error=Field("exact", crash))}
    got = {o.field: o for o in compare_records(a, b, alpha=0.01, thresholds=Thresholds(), name_a="old", name_b="new")}
    assert got["error"].category is Category.BROKEN
    lost = got["tokens"]
    assert lost.status is Status.MISSING and "raises now (IndexError: index_copy_" in lost.detail and "would record the crash" in lost.detail
    (o,) = missing_fields(record(f=Field("exact", 1)), set(), rules(strict=strict), crashed="raises now: IndexError: x")
    assert o.status is (Status.REGRESSION if strict else Status.MISSING) and "accepting this loss" in o.detail
    (plain,) = missing_fields(record(f=Field("exact", 1)), set(), rules(strict=strict))
    assert ("accept its removal with `harness regen`" in plain.detail) is not strict


@pytest.mark.parametrize("strict", [False, True])
def test_fields_of_a_step_that_raises_now_are_its_consequences_one_finding_never_missing_to_accept(strict):
    """A step's own exception field (caches' `rollback_error`, continuous' `request_errors`) raising
    now: the fields that step produces are listed under that finding, their detail names the
    exception, and none advises `harness regen` - in a live run's rules and under --strict (CI)."""
    from harness.checking.findings import group_findings

    crash = {"type": "RuntimeError", "message": "shape mismatch in the sliding-window rollback"}
    a = {("caches", "m"): Record("caches", "m", ENV, {"rollback_error": Field("exact", None),
                                                     "rollback": Field("exact", [1, 2]), "kept": Field("exact", 1)})}
    b = {("caches", "m"): Record("caches", "m", ENV, {"rollback_error": Field("exact", crash), "kept": Field("exact", 1)})}
    outcomes = compare_records(a, b, alpha=0.01, thresholds=Thresholds())
    if strict:  # what a strict run's rules make of the same missing field
        outcomes = [replace(o, status=Status.REGRESSION) if o.field == "rollback" else o for o in outcomes]
    lost = next(o for o in outcomes if o.field == "rollback")
    assert lost.category is Category.MISSING_FIELD and "raises now (RuntimeError: shape mismatch" in lost.detail
    assert "accept its removal" not in lost.detail
    (finding,) = group_findings(outcomes)
    assert finding.category == Category.BROKEN.value and [o.field for o in finding.follows] == ["rollback"]


def test_fields_of_requests_whose_generation_loop_failed_follow_that_failure_never_advise_a_regen():
    """Issue 62: 5.17.0's request manager fails each request (MemoryError sizing the cache without
    psutil) and records it per request (`request_errors`, an outcome list: "fails now (request_errors.0)");
    the requests' `drawn` / `tokens` are not produced. Against 5.24.0's record they read "accept its
    removal with `harness regen`" - they follow the failure instead, one finding."""
    from harness.checking.findings import group_findings

    each = {"outcome": "each"}
    a = {("continuous", "r"): Record("continuous", "r", ENV, {"request_errors": Field("exact", [None, None], each),
                                                             "drawn": Field("exact", [1, 2]),
                                                             "tokens": Field("exact", [[1], [2]])})}
    failed = "Memory footprint 1157632 is more than available memory 0"
    b = {("continuous", "r"): Record("continuous", "r", ENV, {"request_errors": Field("exact", [failed, failed], each)})}
    outcomes = compare_records(a, b, alpha=0.01, thresholds=Thresholds())
    lost = {o.field: o for o in outcomes if o.category is Category.MISSING_FIELD}
    assert set(lost) == {"drawn", "tokens"}
    assert all("accept its removal" not in o.detail and "Memory footprint" in o.detail for o in lost.values())
    (finding,) = group_findings(outcomes)
    assert finding.category == Category.BROKEN.value and sorted(o.field for o in finding.follows) == ["drawn", "tokens"]


def test_a_field_checked_twice_is_a_harness_bug():
    check = CaseCheck("suite", "case", rules())
    check.observe("f", Field("exact", 1))
    with pytest.raises(ValueError, match="checked twice"):
        check.reference("f", Field("exact", 1), Field("exact", 1))


# ----------------------------------------------------------------------------------------------
# categories that refine a status


def test_text_follows_the_tie_flip_of_its_tokens_across_numerics():
    """bf16 against fp32: the tokens diverge at a near-tie on both sides, so the text that follows
    them is the same tie-flip, not a second finding."""
    base = record(tokens=Field("tokens", [[5, 6, 7]], {"margins": [[2.0, 0.1, 3.0]]}), text=Field("exact", "a b c"))
    check = CaseCheck("suite", "case", rules(env=BF16), baseline=base)
    check.observe("tokens", Field("tokens", [[5, 9, 7]], {"margins": [[2.0, 0.2, 3.0]]}))
    check.observe("text", Field("exact", "a x c", {"follows": "tokens"}))
    assert outcomes(check) == {"tokens": (Status.PASS, Category.TIE_FLIP), "text": (Status.PASS, Category.TIE_FLIP)}


def test_the_same_divergence_in_the_same_numerics_is_a_real_change():
    base = record(tokens=Field("tokens", [[5, 6, 7]], {"margins": [[2.0, 0.1, 3.0]]}), text=Field("exact", "a b c"))
    check = CaseCheck("suite", "case", rules(), baseline=base)
    check.observe("tokens", Field("tokens", [[5, 9, 7]], {"margins": [[2.0, 0.2, 3.0]]}))
    check.observe("text", Field("exact", "a x c", {"follows": "tokens"}))
    assert outcomes(check) == {"tokens": (Status.REGRESSION, Category.REAL_CHANGE),
                               "text": (Status.REGRESSION, Category.REAL_CHANGE)}


def _fitting_distribution(n: int = 1000) -> Field:
    return Field("distribution", {"a": n // 2, "b": n // 2}, {"expected": {"a": 0.5, "b": 0.5}})


def test_a_seeded_stream_that_differs_while_its_distribution_fits_is_an_rng_stream_change():
    base = record(distribution=_fitting_distribution(), tokens=Field("tokens", [[1, 2]]))
    check = CaseCheck("suite", "case", rules(), baseline=base)
    check.observe("distribution", _fitting_distribution())
    check.observe("tokens", Field("tokens", [[1, 3]], {"seeded_by": "distribution"}))
    assert outcomes(check)["tokens"] == (Status.CHANGED, Category.RNG_STREAM)


def test_a_seeded_stream_whose_distribution_no_longer_fits_stays_a_regression():
    base = record(distribution=_fitting_distribution(), tokens=Field("tokens", [[1, 2]]))
    check = CaseCheck("suite", "case", rules(), baseline=base)
    check.observe("distribution", Field("distribution", {"a": 900, "b": 100}, {"expected": {"a": 0.5, "b": 0.5}}))
    check.observe("tokens", Field("tokens", [[1, 3]], {"seeded_by": "distribution"}))
    got = outcomes(check)
    assert got["distribution"][0] is Status.REGRESSION and got["tokens"] == (Status.REGRESSION, Category.REAL_CHANGE)


def test_in_compare_the_other_envs_recorded_judge_decides_the_rng_stream():
    """`harness compare` reads the draws' judge from the record (a reference the other env ran): a seeded
    stream whose recorded judge passed is an rng-stream change, one whose judge failed stays a regression."""
    from harness.schema import RecordedReference

    for status, expected in (("pass", (Status.CHANGED, Category.RNG_STREAM)),
                             ("regression", (Status.REGRESSION, Category.REAL_CHANGE))):
        check = CaseCheck("suite", "case", rules(), baseline=record(tokens=Field("tokens", [[1, 2]])))
        check.observe("tokens", Field("tokens", [[1, 3]], {"seeded_by": "draws_as_engine"}))
        check.recorded("draws_as_engine", RecordedReference("exact", status, "", "the draws fit: True -> True"))
        assert outcomes(check)["tokens"] == expected


@pytest.mark.parametrize(("old", "new", "expected"), [
    ({"type": "ValueError", "message": "no"}, None, (Status.CHANGED, Category.FIXED)),
    (None, {"type": "ValueError", "message": "no"}, (Status.REGRESSION, Category.BROKEN)),
    ({"type": "ValueError", "message": "no"}, {"type": "TypeError", "message": "no"},
     (Status.REGRESSION, Category.ERROR_CHANGED)),
], ids=["fixed", "broken", "error-changed"])
def test_a_recorded_exception_s_transitions(old, new, expected):
    check = CaseCheck("suite", "case", rules(), baseline=record(error=Field("exact", old)))
    check.observe("error", Field("exact", new))
    assert outcomes(check)["error"] == expected


# ----------------------------------------------------------------------------------------------
# observations


def test_every_part_of_an_observation_is_one_outcome():
    obs = Observation()
    obs.add("value", 1)
    obs.reference("equal", [1, 2], [1, 2])
    obs.skipped("not_here", "tensor", "the engine does not implement this family")
    obs.info("bias_point", "exact bias 0.1", {"tv": 0.1})
    check = CaseCheck("suite", "case", rules())
    check.check_all(obs)
    got = {o.field: (o.status, o.against) for o in check.outcomes()}
    assert got == {"value": (Status.NEW, "baseline"), "equal": (Status.PASS, "reference"),
                   "not_here": (Status.SKIPPED, "reference"), "bias_point": (Status.INFO, "reference")}


def test_a_field_observed_twice_is_refused_by_the_observation():
    obs = Observation()
    obs.add("f", 1)
    with pytest.raises(ValueError, match="observed twice"):
        obs.skipped("f", "exact", "why")


def test_a_statistical_kind_is_never_decided_by_a_note():
    from harness.schema import Note

    obs = Observation()
    obs.notes["fit"] = Note("distribution", "pass", "looks fine")
    with pytest.raises(ValueError, match="must be compared"):
        CaseCheck("suite", "case", rules()).check_all(obs)


def test_an_offline_comparison_decides_as_a_live_run():
    a = {("suite", "case"): record(f=Field("exact", 1), gone=Field("exact", 0))}
    b = {("suite", "case"): record(f=Field("exact", 2), added=Field("exact", 1)),
         ("suite", "other"): Record("suite", "other", ENV, {"x": Field("exact", 1)})}
    got = {(o.case, o.field): (o.status, o.category) for o in compare_records(a, b, alpha=0.01,
                                                                               thresholds=Thresholds())}
    assert got == {("case", "f"): (Status.REGRESSION, Category.REAL_CHANGE),
                   ("case", "added"): (Status.NEW, Category.NONE),
                   ("case", "gone"): (Status.MISSING, Category.MISSING_FIELD),
                   ("other", "x"): (Status.NEW, Category.RECORD_ADDED)}


def test_a_latency_field_one_record_set_holds_no_measurement_of_is_not_judged_not_missing():
    """Regen keeps only judgeable latency (checking/regen.py `latency_field`): a field the newer env's
    record lacks is one every run there was too busy to keep - `harness compare` says not judged
    (never a pass), not "missing: accept its removal"; another kind's absent field stays missing."""
    lat = {"samples": [1.0], "calibration": [1.0], "cpu": [1.0], "cpu_calibration": [1.0]}
    a = {("latency", "case"): record(prefill=Field("latency", {"by_hardware": {"cpu": lat}}), gone=Field("exact", 0))}
    b = {("latency", "case"): record()}
    got = {o.field: (o.status, o.category, o.detail) for o in compare_records(a, b, alpha=0.01, thresholds=Thresholds(),
                                                                             name_a="old", name_b="new")}
    assert got["prefill"][:2] == (Status.SKIPPED, Category.NOT_JUDGED) and "new holds no judgeable" in got["prefill"][2]
    assert got["gone"][:2] == (Status.MISSING, Category.MISSING_FIELD)


def test_an_information_row_is_never_a_pass_nor_a_check_anywhere():
    """`Observation.info` (an exact bias point, a measured TV beside a fit) is status `info`: not a pass in
    the counts, not a finding, not a JUnit test, not in the report's check total, never the verdict."""
    from harness.checking.claims import meets
    from harness.checking.findings import group_findings
    from harness.report.junit import junit_tree
    from harness.report.page import context
    from harness.schema import Outcome, Results

    obs = Observation()
    obs.info("joint_bias_vs_target", "exact TV(emitted, target) = 0.3186", {"bias_exact": 0.3186}, "bias")
    check = CaseCheck("sampling", "c", rules())
    check.check_all(obs)
    (info,) = check.outcomes()
    assert info.status is Status.INFO
    fit = Outcome("sampling", "c", "joint", "distribution", Status.PASS, "fits")
    results = Results({}, None, [fit, info])
    assert results.counts()["pass"] == 1 and results.counts()["info"] == 1 and results.verdict == "pass"
    assert group_findings(results.outcomes) == []
    assert junit_tree(results).get("tests") == "1"
    assert context(results)["total"] == 1
    assert not meets({}, info)


def test_regen_keeps_a_statistical_field_whose_samples_are_the_same_when_only_the_alpha_moved():
    """A case added anywhere moves the run's per-test alpha, and with it every statistical field's
    alpha / power / detectable TV: the samples unchanged, the record is unchanged. Other samples, or
    another observed extra, are still a change to look at."""
    from harness.checking.policy import Policy
    from harness.checking.regen import field_unchanged

    extras = {"alpha": 2.5641026e-05, "holm_level": 2.5641026e-05, "power": 0.894, "detectable_tv": 0.1404,
              "n": 500, "settings": "top_k=8", "expected": {"1,2": 0.5, "3,4": 0.5}}
    before = Field("distribution", {"1,2": 260, "3,4": 240}, extras)
    moved = Field("distribution", {"1,2": 260, "3,4": 240},
                  {**extras, "alpha": 2.5188917e-05, "holm_level": 2.5188917e-05, "power": 0.893, "detectable_tv": 0.1405})
    policy = Policy(alpha=0.01)
    assert field_unchanged("joint", before, moved, policy)
    other_n = Field("distribution", {"1,2": 260, "3,4": 240}, {**extras, "n": 400})
    assert not field_unchanged("joint", before, other_n, policy)
    other_settings = Field("distribution", {"1,2": 260, "3,4": 240}, {**extras, "settings": "top_k=9"})
    assert not field_unchanged("joint", before, other_settings, policy)


def test_regen_keeps_a_record_whose_only_change_is_another_cpus_last_float_digits():
    """Regenerated on another CPU (an Intel Xeon after an AMD EPYC), the same draws come with the
    oracle's expected frequencies moved in the 8th digit (one 0.0 -> 1.5e-9), their pooling into one
    more bin, and a 1e-8 TV whose worst position moved: no change to review. An expected frequency
    that really moved, or another observation, still is one."""
    from harness.checking.policy import Policy
    from harness.checking.regen import field_unchanged

    extras = {"alpha": 2.5e-05, "n": 500, "bins": 12, "expected": {"1,2": 0.62217250, "3,4": 0.3778275, "other": 0.0}}
    before = Field("distribution", {"1,2": 310, "3,4": 190}, extras)
    noise = Field("distribution", {"1,2": 310, "3,4": 190},
                  {**extras, "bins": 13, "expected": {"1,2": 0.62217243, "3,4": 0.37782757, "other": 1.4639971e-09}})
    policy = Policy(alpha=0.01)
    assert field_unchanged("joint", before, noise, policy)
    residual = Field("distribution", {"1,2": 310, "3,4": 190},  # AVX512 -> AVX2: the pooled bucket's 1.2e-7
                     {**extras, "expected": {"1,2": 0.62217243, "3,4": 0.37782745, "other": 1.21e-07}})
    assert field_unchanged("joint", before, residual, policy)
    moved = Field("distribution", {"1,2": 310, "3,4": 190}, {**extras, "expected": {"1,2": 0.6, "3,4": 0.4, "other": 0.0}})
    assert not field_unchanged("joint", before, moved, policy)
    other_draws = Field("distribution", {"1,2": 300, "3,4": 200}, extras)
    assert not field_unchanged("joint", before, other_draws, policy)

    where = {"detectable_tv": 1e-05, "min_positions": 16, "worst_at": "call 1 step 10 position 0"}
    tv = Field("deviation", {"positions": 16, "tv": 2.9802322e-08}, where)
    tv_noise = Field("deviation", {"positions": 16, "tv": 1.4901161e-08}, {**where, "worst_at": "call 0 step 4 position 0"})
    assert field_unchanged("exact_emitted", tv, tv_noise, policy)
    fewer = Field("deviation", {"positions": 16, "tv": 1.4901161e-08}, {**where, "min_positions": 15})
    assert not field_unchanged("exact_emitted", tv, fewer, policy)
    known = Field("deviation", {"positions": 16, "tv": 0.24233333}, where)  # a known upstream deviation
    assert field_unchanged("exact_emitted", known, Field("deviation", {"positions": 16, "tv": 0.2423333}, where), policy)
    assert not field_unchanged("exact_emitted", known, Field("deviation", {"positions": 16, "tv": 0.25}, where), policy)


def test_regen_keeps_a_passing_tensor_reference_identical_on_one_cpu_and_drifting_on_another():
    """`identical` (category none) and `tolerated-drift` of 2e-8 are the same pass; a drift that
    became a regression, or a pass that became a drift of an exact reference, is not."""
    from harness.checking.regen import reference_unchanged
    from harness.schema import RecordedReference

    drift = RecordedReference("tensor", "pass", "tolerated-drift", "within tolerance (fp32): max abs err 2e-08")
    assert reference_unchanged(drift, RecordedReference("tensor", "pass", "", "identical"))
    assert reference_unchanged(RecordedReference("tensor", "pass", "", "identical"), drift)
    assert not reference_unchanged(drift, RecordedReference("tensor", "regression", "real-change", "max abs err 0.1"))
    assert not reference_unchanged(drift, RecordedReference("tensor", "pass", "tie-flip", "tokens differ at a tie"))


def test_regen_rewrites_a_failing_exact_references_detail_and_keeps_a_tensors():
    """A rerun matches a failing exact reference by its detail (oracles.same_failure), so regen keeps
    that detail current; a tensor reference's detail quotes numbers that move, and is kept."""
    from harness.checking.regen import reference_unchanged
    from harness.schema import RecordedReference

    exact = RecordedReference("exact", "regression", "real-change", "ids: [1, 2] -> [1, 3]")
    assert reference_unchanged(exact, exact)
    assert not reference_unchanged(exact, RecordedReference("exact", "regression", "real-change", "ids: [1, 2] -> [2, 2]"))
    tensor = RecordedReference("tensor", "regression", "real-change", "max abs err 0.0157", 0.0157)
    assert reference_unchanged(tensor, RecordedReference("tensor", "regression", "real-change", "max abs err 0.0158", 0.0158))
