"""In-run reference verdicts in the records (schema 2) and the oracle arbitrating direction
(harness/checking/oracles.py): a reference failing in the baseline release too is known, a field
moving toward its oracle is fixed, away from it broken. Every verdict here is computed by the
comparers from values built in the test; none is written by hand."""

from __future__ import annotations

import json

import pytest

from harness.checking.core import CaseCheck, Rules, compare_records
from harness.checking.humane import reference_words
from harness.schema import (
    SCHEMA_VERSION,
    Category,
    Field,
    Outcome,
    Record,
    RecordedReference,
    RecordError,
    Status,
)
from harness.settings.config import Thresholds
from harness.store.records import GoldenStore

OLD = {"dtype": "fp32", "device": {"type": "cpu"}, "threads": 1, "torch": "2.13.0", "transformers": "5.14.0"}
NEW = {**OLD, "transformers": "5.20.2"}
RIGHT = [[1.0, 2.0, 3.0]]  # the oracle's value
WRONG = [[1.0, 2.0, 30.0]]  # a value far beyond fp32 tolerance of it


def _rules(env: dict) -> Rules:
    return Rules(alpha=0.01, thresholds=Thresholds(), env=env, baseline_key="base")


def _run(env: dict, logits: list, baseline: Record | None = None) -> CaseCheck:
    """One case as a design observes it: a `logits` field naming its oracle and the reference of
    the same quantity against the oracle's value (RIGHT)."""
    check = CaseCheck("backends", "m", _rules(env), baseline)
    check.observe("logits", Field("tensor", logits, {"oracle": "logits_vs_engine"}))
    check.observe("text", Field("exact", str(logits), {"follows": "logits"}))
    check.reference("logits_vs_engine", Field("tensor", logits), Field("tensor", RIGHT))
    check.outcomes()
    return check


def _recorded(check: CaseCheck) -> Record:
    """The record a check writes: its fields and its reference verdicts, in its env."""
    return Record(check.suite, check.case, check.rules.env, dict(check.observed), references=dict(check.references))


def _record(env: dict, logits: list) -> Record:
    """The record a run in `env` observing `logits` writes."""
    return _recorded(_run(env, logits))


def _by_field(check: CaseCheck) -> dict:
    return {o.field: o for o in check.outcomes()}


def test_a_record_keeps_its_reference_verdicts(tmp_path):
    store = GoldenStore(tmp_path)
    check = _run(OLD, WRONG)
    store.update("k", "backends", "m", OLD, check.observed, references=check.references)
    data = json.loads(store.path("k", "backends", "m").read_text())
    assert data["schema"] == SCHEMA_VERSION == 2
    assert data["references"]["logits_vs_engine"]["status"] == "regression"
    assert data["references"]["logits_vs_engine"]["measure"] == pytest.approx(27.0)
    back = store.read("k", "backends", "m")
    assert back.references == check.references


def test_schema_1_reads_and_unknown_schema_fails_naming_it(tmp_path):
    data = _record(OLD, RIGHT).to_json()
    old = {**data, "schema": 1}
    del old["references"]
    assert Record.from_json(old, "r.json").references == {}
    with pytest.raises(RecordError, match="unknown schema version 3"):
        Record.from_json({**data, "schema": 3}, "r.json")
    with pytest.raises(RecordError, match="reference 'x' has unknown status"):
        Record.from_json({**data, "references": {"x": {"kind": "tensor", "status": "bad"}}}, "r.json")


def test_a_reference_failing_in_the_baseline_release_too_is_known():
    out = _by_field(_run(NEW, WRONG, _record(OLD, WRONG)))["logits_vs_engine"]
    assert (out.status, out.category) == (Status.CHANGED, Category.KNOWN_FAILURE)
    assert "fails in base too" in out.detail


@pytest.mark.parametrize("baseline_env, baseline_logits", [(OLD, RIGHT), (NEW, [[1.0, 2.0, 27.0]]), (None, None)],
                         ids=["passed-in-baseline", "same-release-other-size", "first-run"])
def test_a_reference_failure_stays_a_regression(baseline_env, baseline_logits):
    """It passed in the baseline, or the baseline is this release's own record failing by another
    size (a fault injected on top of a known bug: 24 there, 27 now), or there is no record at all."""
    baseline = _record(baseline_env, baseline_logits) if baseline_env else None
    out = _by_field(_run(NEW, WRONG, baseline))["logits_vs_engine"]
    assert out.status is Status.REGRESSION


def _exact_run(env: dict, ids: list, baseline: Record | None = None, kind: str = "exact") -> CaseCheck:
    """A tokenizer case: the library's ids against the `tokenizers` library's (RIGHT_IDS); `tokens`:
    the same ids as a generated row against the oracle's (a decode parting from greedy)."""
    check = CaseCheck("text", "tok", _rules(env), baseline)
    value, right = (ids, RIGHT_IDS) if kind == "exact" else ([ids], [RIGHT_IDS])
    check.observe("encoded", Field(kind, value))
    check.reference("encode_as_tokenizers_lib", Field(kind, value), Field(kind, right))
    check.outcomes()
    return check


RIGHT_IDS = [87, 506, 220, 88]
LOST_LSTRIP = [87, 220, 506, 220, 88]  # 5.24.0's added-token lstrip lost


@pytest.mark.parametrize("kind", ["exact", "tokens"])
def test_within_one_env_an_exact_reference_failing_exactly_as_recorded_is_tracked(kind):
    """The rerun of a known upstream bug the record holds is tracked (pass, nothing to regenerate);
    another failure of the same reference, or a first run, is a regression. Tokens too: 5.25.0's
    prompt lookup on Qwen3.5 parting from greedy at step 8, rerun against 5.25.0's own record."""
    first = _exact_run(NEW, LOST_LSTRIP, kind=kind)
    record = _recorded(first)
    assert _by_field(first)["encode_as_tokenizers_lib"].status is Status.REGRESSION  # first run: caught
    again = _by_field(_exact_run(NEW, LOST_LSTRIP, record, kind))["encode_as_tokenizers_lib"]
    assert (again.status, again.category) == (Status.CHANGED, Category.KNOWN_DEVIATION)
    assert "fails exactly as the record holds it" in again.detail
    other = _by_field(_exact_run(NEW, [87, 220, 506, 88], record, kind))["encode_as_tokenizers_lib"]
    assert other.status is Status.REGRESSION


@pytest.mark.parametrize("now, tracked", [(WRONG, True), ([[1.0, 2.0, 30.5]], True), ([[1.0, 2.0, 32.0]], False),
                                          ([[1.0, 2.0, 28.0]], False)],
                         ids=["same-error", "grown-2-percent", "grown-7-percent", "shrunk-7-percent"])
def test_within_one_env_a_tensor_reference_failing_by_the_recorded_size_is_tracked(now, tracked):
    """5.14.0's SDPA dropping Gemma 2's soft-cap, rerun against 5.14.0's own record: the same error
    (27 here) within oracles.SAME_SIZE (5 %) is the known bug; a larger or smaller one is a fault on
    top of it, and a first run is caught."""
    record = _record(NEW, WRONG)  # |30 - 3| = 27 recorded
    out = _by_field(_run(NEW, now, record))["logits_vs_engine"]
    assert (out.status, out.category) == ((Status.CHANGED, Category.KNOWN_DEVIATION) if tracked
                                          else (Status.REGRESSION, Category.REAL_CHANGE))
    assert _by_field(_run(NEW, now))["logits_vs_engine"].status is Status.REGRESSION


def test_a_known_failure_that_grew_is_a_regression():
    worse = [[1.0, 2.0, 3.0 + 27.0 * 3]]
    out = _by_field(_run(NEW, worse, _record(OLD, WRONG)))["logits_vs_engine"]
    assert out.status is Status.REGRESSION and "but worse" in out.detail


def test_toward_the_oracle_is_fixed_and_its_followers_too():
    outs = _by_field(_run(NEW, RIGHT, _record(OLD, WRONG)))
    assert (outs["logits"].status, outs["logits"].category) == (Status.CHANGED, Category.FIXED)
    assert "moved to its oracle's value" in outs["logits"].detail
    assert (outs["text"].status, outs["text"].category) == (Status.CHANGED, Category.FIXED)


def test_away_from_the_oracle_is_broken():
    out = _by_field(_run(NEW, WRONG, _record(OLD, RIGHT)))["logits"]
    assert (out.status, out.category) == (Status.REGRESSION, Category.BROKEN)


def test_compare_reads_the_recorded_verdicts():
    a, b = _record(OLD, WRONG), _record(NEW, WRONG)
    outs = {o.field: o for o in compare_records({("backends", "m"): a}, {("backends", "m"): b}, alpha=0.01,
                                                thresholds=Thresholds(), name_a="A", name_b="B")}
    assert (outs["logits_vs_engine"].status, outs["logits_vs_engine"].category) == (Status.CHANGED,
                                                                                    Category.KNOWN_FAILURE)
    fixed = {o.field: o for o in compare_records({("backends", "m"): a}, {("backends", "m"): _record(NEW, RIGHT)},
                                                 alpha=0.01, thresholds=Thresholds(), name_a="A", name_b="B")}
    assert fixed["logits"].category is Category.FIXED and fixed["logits_vs_engine"].status is Status.PASS


def test_a_reference_detail_never_calls_the_oracle_old():
    out = _by_field(_run(NEW, WRONG))["logits_vs_engine"]
    assert " old " not in out.detail and "expected 3 vs observed 30" in out.detail
    assert reference_words("old [1] vs new [2]") == "expected [1] vs observed [2]"


def test_recorded_reference_measure_comes_from_the_comparer():
    out = _by_field(_run(NEW, WRONG))["logits_vs_engine"]
    assert RecordedReference.from_outcome(out).measure == out.diff["max_abs_err"]


FAR = [[1.0, 2.0, 3.5]]  # the engine's value off by 0.5 (a backend dropping a soft-cap, say)


def _rollback(env: dict, rolled: list | None, fresh: list, baseline: Record | None = None) -> CaseCheck:
    """The caches suite's rollback references: the engine's own rollback against the library's fresh
    run, and - where the library could roll back (`rolled`) - its rollback against that fresh run
    and against the engine's value (RIGHT)."""
    check = CaseCheck("caches", "m", _rules(env), baseline)
    check.reference("engine_rollback_vs_fresh", Field("tensor", RIGHT), Field("tensor", fresh))
    if rolled is not None:
        check.reference("rollback_vs_fresh", Field("tensor", rolled), Field("tensor", fresh),
                        implementations_differ=False)
        check.reference("rollback_vs_engine", Field("tensor", rolled), Field("tensor", RIGHT))
    check.outcomes()
    return check


def _rollback_record(env: dict, rolled: list | None, fresh: list) -> Record:
    return _recorded(_rollback(env, rolled, fresh))


def test_a_composed_reference_failing_as_its_known_step_is_known():
    """5.14 could not crop (no rollback_vs_engine verdict) and its fresh run missed the engine; 5.20
    crops exactly (rollback_vs_fresh passes), so rollback_vs_engine misses it by the same amount."""
    base = _rollback_record(OLD, None, FAR)
    out = _by_field(_rollback(NEW, FAR, FAR, base))
    assert out["engine_rollback_vs_fresh"].category is Category.KNOWN_FAILURE
    assert (out["rollback_vs_engine"].status, out["rollback_vs_engine"].category) == (Status.CHANGED,
                                                                                      Category.KNOWN_FAILURE)
    assert "engine_rollback_vs_fresh" in out["rollback_vs_engine"].detail
    compared = {o.field: o for o in compare_records({("caches", "m"): base},
                                                    {("caches", "m"): _rollback_record(NEW, FAR, FAR)},
                                                    alpha=0.01, thresholds=Thresholds(), name_a="A", name_b="B")}
    assert compared["rollback_vs_engine"].category is Category.KNOWN_FAILURE


@pytest.mark.parametrize("rolled, fresh", [(WRONG, FAR), ([[1.0, 2.0, 3.5 + 27.0]], [[1.0, 2.0, 3.5 + 27.0]])],
                         ids=["rollback-differs-from-fresh", "fresh-run-grew-worse"])
def test_a_composed_reference_failing_otherwise_stays_a_regression(rolled, fresh):
    """The rollback itself is wrong (its same-library step fails), or the engine step grew past
    WORSE of its baseline size (then it is a regression itself, and so is the composite)."""
    out = _by_field(_rollback(NEW, rolled, fresh, _rollback_record(OLD, None, FAR)))
    assert out["rollback_vs_engine"].status is Status.REGRESSION


def test_a_composed_reference_on_a_first_run_stays_a_regression():
    assert _by_field(_rollback(NEW, FAR, FAR))["rollback_vs_engine"].status is Status.REGRESSION


def _error_run(env: dict, baseline: Record | None, error: dict) -> Outcome:
    check = CaseCheck("outputs", "m", _rules(env), baseline)
    check.observe("error", Field("exact", error))
    return _by_field(check)["error"]


def test_a_call_failing_in_the_baseline_release_too_is_not_the_upgrade_s():
    from transformers import AutoConfig

    from harness.subjects import observe

    (_, before), (_, now) = (observe(lambda t=t: AutoConfig.for_model(t)) for t in ("harness-old", "harness-new"))
    baseline = Record("outputs", "m", OLD, {"error": Field("exact", before)})
    out = _error_run(NEW, baseline, now)
    assert (out.status, out.category) == (Status.CHANGED, Category.ERROR_CHANGED)
    assert "fails in base too" in out.detail and now["message"] in out.detail and before["message"] in out.detail
    same_release = _error_run(OLD, baseline, now)
    assert (same_release.status, same_release.category) == (Status.REGRESSION, Category.ERROR_CHANGED)


def _sdpa_error() -> dict:
    from transformers import AutoConfig

    from harness.subjects import observe

    _, err = observe(lambda: AutoConfig.for_model("harness-no-sdpa"))
    return err


def _backend(env: dict, sdpa_error: dict | None, sdpa: list | None, baseline: Record | None = None) -> CaseCheck:
    """The backends suite's eager_vs_sdpa case: whether each implementation loads (an outcome field
    naming its oracle) and, where both load, SDPA's logits against eager's (RIGHT)."""
    check = CaseCheck("backends", "m", _rules(env), baseline)
    check.observe("attn_load_error", Field("exact", {"eager": None, "sdpa": sdpa_error},
                                           {"outcome": "each"}))
    if sdpa_error is None:
        check.reference("eager_vs_sdpa", Field("tensor", sdpa), Field("tensor", RIGHT))
    else:
        check.add(Outcome("backends", "m", "eager_vs_sdpa", "tensor", Status.SKIPPED, "cannot load with sdpa",
                          Category.UNSUPPORTED, {}, "reference"))
    check.outcomes()
    return check


def _backend_record(env: dict, sdpa_error: dict | None, sdpa: list | None) -> Record:
    return _recorded(_backend(env, sdpa_error, sdpa))


def test_a_load_that_works_now_but_gives_what_its_oracle_rejects_is_broken():
    """5.24 refused SDPA for Gemma 2; 5.20 loads it and drops the soft-cap (eager_vs_sdpa fails)."""
    base = _backend_record(OLD, _sdpa_error(), None)
    out = _by_field(_backend(NEW, None, WRONG, base))["attn_load_error"]
    assert (out.status, out.category) == (Status.REGRESSION, Category.BROKEN)
    assert "eager_vs_sdpa" in out.detail
    right = _by_field(_backend(NEW, None, RIGHT, base))["attn_load_error"]
    assert (right.status, right.category) == (Status.CHANGED, Category.FIXED)


def test_refusing_what_its_oracle_found_wrong_in_the_baseline_is_fixed():
    base = _backend_record(OLD, None, WRONG)
    out = _by_field(_backend(NEW, _sdpa_error(), None, base))["attn_load_error"]
    assert (out.status, out.category) == (Status.CHANGED, Category.FIXED)
    passed = _by_field(_backend(NEW, _sdpa_error(), None, _backend_record(OLD, None, RIGHT)))["attn_load_error"]
    assert (passed.status, passed.category) == (Status.REGRESSION, Category.BROKEN)


def _mtp(env: dict, load: dict, layout: dict, baseline: Record | None = None) -> CaseCheck:
    check = CaseCheck("contracts", "mtp-checkpoint-m", _rules(env), baseline)
    check.observe("load", Field("exact", load, {"outcome": "error"}))
    check.observe("expected", Field("exact", layout, {"outcome": "error", "follows": "load"}))
    return check


def test_a_layout_that_changed_as_its_load_was_fixed_is_the_same_fix():
    """5.14 built a dense MTP layer for an MoE checkpoint (the load missed its keys); 5.20 builds the
    experts and loads - `expected` changed with the fix, and is that fix."""
    dense, experts = {"mtp.mlp.down_proj.weight": "0"}, {"mtp.mlp.experts.down_proj": "0"}
    failed = {"raises": "RuntimeError", "missing": dense}
    base = Record("contracts", "mtp-checkpoint-m", OLD, dict(_mtp(OLD, failed, dense).observed))
    out = _by_field(_mtp(NEW, {"raises": None}, experts, base))
    assert out["load"].category is Category.FIXED
    assert (out["expected"].status, out["expected"].category) == (Status.CHANGED, Category.FIXED)
    assert "follows the fix of load (works now)" in out["expected"].detail
    still = _by_field(_mtp(NEW, failed, experts, base))["expected"]
    assert still.status is Status.REGRESSION


def _mechanism_run(env: dict, logits: list, attn: str, baseline: Record | None = None) -> CaseCheck:
    """The backends case of a model: the attention implementation it loads with is the mechanism of
    its logits, which name the engine's as their oracle."""
    check = CaseCheck("backends", "m", _rules(env), baseline)
    check.observe("default_attn_implementation", Field("exact", attn, {"mechanism_of": "logits"}))
    check.observe("logits", Field("tensor", logits, {"oracle": "logits_vs_engine"}))
    check.reference("logits_vs_engine", Field("tensor", logits), Field("tensor", RIGHT))
    check.outcomes()
    return check


def _mechanism_record(env: dict, logits: list, attn: str) -> Record:
    return _recorded(_mechanism_run(env, logits, attn))


def test_a_backend_change_that_fixes_the_logits_is_that_fix_and_any_other_stays_a_regression():
    """5.14.0 loads Gemma 2 with SDPA, which drops its soft-cap (WRONG); 5.24.0 refuses SDPA and loads
    eager (RIGHT): the backend's change is the mechanism of the fix. A silent fall-back to eager with
    the logits right in both (eager-instead-of-sdpa) is a regression, and so is one that breaks them."""
    fix = _by_field(_mechanism_run(NEW, RIGHT, "eager", _mechanism_record(OLD, WRONG, "sdpa")))
    assert (fix["default_attn_implementation"].status, fix["default_attn_implementation"].category) == (
        Status.CHANGED, Category.FIXED)
    assert "the mechanism of the fix of logits" in fix["default_attn_implementation"].detail
    quiet = _by_field(_mechanism_run(NEW, RIGHT, "eager", _mechanism_record(OLD, RIGHT, "sdpa")))
    assert quiet["default_attn_implementation"].status is Status.REGRESSION
    broke = _by_field(_mechanism_run(NEW, WRONG, "eager", _mechanism_record(OLD, RIGHT, "sdpa")))
    assert broke["default_attn_implementation"].status is Status.REGRESSION
    assert broke["logits"].category is Category.BROKEN


def test_a_field_broken_by_its_oracle_and_that_oracle_s_failure_are_one_finding():
    """5.24.0 -> 5.22.2's TextStreamer: `streamed` moved away from `stream_as_decode`, which fails now:
    one break, told once."""
    from harness.checking.findings import group_findings

    outcomes = _run(NEW, WRONG, _record(OLD, RIGHT)).outcomes()
    broken = [o for o in outcomes if o.status is Status.REGRESSION]
    assert {o.field for o in broken} >= {"logits", "logits_vs_engine"}
    merged = [f for f in group_findings(outcomes) if {"logits", "logits_vs_engine"} <= set(f.fields)]
    assert len(merged) == 1 and merged[0].cause == "`logits_vs_engine` fails now"


def test_an_exact_reference_failing_in_the_baseline_release_is_known_only_when_it_fails_the_same_way():
    """Issue 58 item 12: across an upgrade, an exact reference that failed in the baseline was
    known-failure whatever it failed on now. The same answer (5.24.0's lost lstrip in both) is the
    known failure; another wrong answer is the upgrade's regression."""
    before = _exact_run(OLD, LOST_LSTRIP)
    record = Record("text", "tok", OLD, dict(before.observed), references=dict(before.references))
    same = _by_field(_exact_run(NEW, LOST_LSTRIP, record))["encode_as_tokenizers_lib"]
    assert (same.status, same.category) == (Status.CHANGED, Category.KNOWN_FAILURE)
    other = _by_field(_exact_run(NEW, [87, 220, 506, 88], record))["encode_as_tokenizers_lib"]
    assert other.status is Status.REGRESSION and "but otherwise" in other.detail


def _consent(env: dict, ran: bool | None, baseline: Record | None = None) -> CaseCheck:
    """The trust_remote_code contract as its probe observes it: the load's result (refused where
    `ran` is None) naming its oracle, the contract `custom_code_not_run` checked in the same case."""
    check = CaseCheck("contracts", "trust-remote-code-default", _rules(env), baseline)
    refused = ran is None
    check.observe("result", Field("exact", {"raises": "ValueError" if refused else None,
                                            "message": "needs trust_remote_code=True" if refused else None,
                                            "custom_code_ran": bool(ran)}, {"oracle": "custom_code_not_run"}))
    check.reference("custom_code_not_run", Field("exact", {"custom_code_ran": bool(ran)}),
                    Field("exact", {"custom_code_ran": False}))
    check.outcomes()
    return check



def test_accepting_what_was_refused_is_a_relaxation_only_while_its_oracle_holds():
    """Loading a checkpoint with custom code the baseline refused: feature-added while the code does
    not run without consent; the code running is the contract broken (a regression), not a feature."""
    base = _recorded(_consent(OLD, None))
    ran = _by_field(_consent(NEW, True, base))
    assert (ran["result"].status, ran["result"].category) == (Status.REGRESSION, Category.BROKEN)
    assert "custom_code_not_run" in ran["result"].detail
    assert ran["custom_code_not_run"].status is Status.REGRESSION
    held = _by_field(_consent(NEW, False, base))["result"]
    assert (held.status, held.category) == (Status.CHANGED, Category.FEATURE_ADDED)
    first_run = _by_field(_consent(NEW, True))["custom_code_not_run"]  # no baseline: the contract catches it
    assert first_run.status is Status.REGRESSION


def _tokenizer(env: dict, eos: int, ids: list, baseline: Record | None = None) -> CaseCheck:
    """A tokenizer field naming two oracles (its specials and its ids against the file's)."""
    check = CaseCheck("gguf", "m", _rules(env), baseline)
    check.observe("tokenizer", Field("exact", {"eos": eos, "ids": ids}, {"oracle": ["specials", "ids"]}))
    check.reference("specials", Field("exact", {"eos": eos}), Field("exact", {"eos": 2}))
    check.reference("ids", Field("exact", ids), Field("exact", [5, 6]))
    check.outcomes()
    return check



def test_a_field_naming_several_oracles_is_broken_by_the_one_that_moved_away():
    """5.17's GGUF converter takes the eos from the bos id: the tokenizer field differs from the 5.24
    record and its specials oracle fails now (its ids oracle passing in both): broken, by `specials`."""
    out = _by_field(_tokenizer(NEW, 1, [5, 6], _recorded(_tokenizer(OLD, 2, [5, 6]))))["tokenizer"]
    assert (out.status, out.category) == (Status.REGRESSION, Category.BROKEN) and out.diff["oracle"] == "specials"
    back = _by_field(_tokenizer(NEW, 2, [5, 6], _recorded(_tokenizer(OLD, 1, [5, 6]))))["tokenizer"]
    assert (back.status, back.category) == (Status.CHANGED, Category.FIXED) and back.diff["oracle"] == "specials"
    both = _by_field(_tokenizer(NEW, 1, [5, 7], _recorded(_tokenizer(OLD, 1, [5, 6]))))["tokenizer"]  # one fixed, one broke
    assert both.category is Category.BROKEN and both.diff["oracle"] == "ids"


def _specials(env: dict, eos: int, vocab: int, baseline: Record | None = None) -> CaseCheck:
    """A tokenizer field naming its specials oracle (the file's eos 2 and vocabulary 49152)."""
    check = CaseCheck("gguf", "m", _rules(env), baseline)
    check.observe("tokenizer", Field("exact", {"eos": eos, "vocab": vocab}, {"oracle": "specials"}))
    check.reference("specials", Field("exact", {"eos": eos, "vocab": vocab}), Field("exact", {"eos": 2, "vocab": 49152}))
    check.outcomes()
    return check



def test_an_oracle_failing_in_more_now_breaks_its_field_and_in_less_is_the_baseline_s():
    """4.57.6's GGUF tokenizer has the wrong eos; 5.0.0 also adds five ids: further from the oracle
    (broken, with the reference failing otherwise); 5.13.1 drops the five again: the eos is the
    baseline's failure (known, less now), and the field's own verdict stands."""
    worse = _by_field(_specials(NEW, 1, 49157, _recorded(_specials(OLD, 1, 49152))))
    assert (worse["tokenizer"].status, worse["tokenizer"].category) == (Status.REGRESSION, Category.BROKEN)
    assert "moved further from its oracle" in worse["tokenizer"].detail
    assert worse["specials"].status is Status.REGRESSION and "but otherwise" in worse["specials"].detail
    less = _by_field(_specials(NEW, 1, 49152, _recorded(_specials(OLD, 1, 49157))))
    assert (less["specials"].status, less["specials"].category) == (Status.CHANGED, Category.KNOWN_FAILURE)
    assert "less now (no longer differs: vocab" in less["specials"].detail
    assert less["tokenizer"].category is not Category.BROKEN
    other = _by_field(_specials(NEW, 3, 49152, _recorded(_specials(OLD, 1, 49152))))  # another wrong eos: not narrower
    assert other["specials"].status is Status.REGRESSION and other["tokenizer"].category is not Category.BROKEN
