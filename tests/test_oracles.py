"""In-run reference verdicts in the records (schema 2) and the oracle arbitrating direction
(harness/checking/oracles.py): a reference failing in the baseline release too is known, a field
moving toward its oracle is fixed, away from it broken. Every verdict here is computed by the
comparers from values built in the test; none is written by hand."""

from __future__ import annotations

import json

import pytest

from harness.checking.core import CaseCheck, Rules, compare_records
from harness.checking.humane import reference_words
from harness.schema import SCHEMA_VERSION, Category, Field, Record, RecordedReference, RecordError, Status
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


def _record(env: dict, logits: list) -> Record:
    """The record a run in `env` observing `logits` writes: its fields and its reference verdicts."""
    check = _run(env, logits)
    return Record("backends", "m", env, dict(check.observed), references=dict(check.references))


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


@pytest.mark.parametrize("baseline_env, baseline_logits", [(OLD, RIGHT), (NEW, WRONG), (None, None)],
                         ids=["passed-in-baseline", "same-release", "first-run"])
def test_a_reference_failure_stays_a_regression(baseline_env, baseline_logits):
    """It passed in the baseline, or the baseline is this release's own record (a fault injected, a
    rerun of a faulty case), or there is no record at all."""
    baseline = _record(baseline_env, baseline_logits) if baseline_env else None
    out = _by_field(_run(NEW, WRONG, baseline))["logits_vs_engine"]
    assert out.status is Status.REGRESSION


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
