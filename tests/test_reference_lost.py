"""A reference that cannot run now (harness/checking/core.py `CaseCheck._cannot_run`): a skip of
category not-applicable / unsupported - the installed version lacks the keyword the reference needs -
or not-checked (the call it reads raised) -
is `reference-lost` (a regression) against a baseline record where it ran, `not checked` on a first
run (a regression under --strict), and stays skipped where the baseline could not run it either.
The baseline's verdicts are computed by the comparers from values built here, never written by hand;
the catalogue fault `chat-sanitize-keyword-removed` shows the same on the text suite."""

from __future__ import annotations

from harness.checking.core import CaseCheck, Rules
from harness.schema import Category, Observation, Record, Status
from harness.settings.config import Thresholds

ENV = {"dtype": "fp32", "device": {"type": "cpu"}, "threads": 1, "torch": "2.13.0", "transformers": "5.24.0"}
IDS = [[5, 6, 7]]
WHY = "transformers X's apply_chat_template has no sanitize_control_tokens"


def _rules(strict: bool = False) -> Rules:
    return Rules(alpha=0.01, thresholds=Thresholds(), env=ENV, strict=strict, baseline_key="base")


def _ran() -> Observation:
    obs = Observation()
    obs.add("control_ids", IDS, kind="tokens")
    obs.reference("sanitized_content_is_text", IDS, IDS, kind="tokens", implementations_differ=False)
    return obs


def _cannot(category: str = "not-applicable") -> Observation:
    obs = Observation()
    obs.add("control_ids", IDS, kind="tokens")
    obs.skipped("sanitized_content_is_text", "tokens", WHY, category)
    return obs


def _record(obs: Observation) -> Record:
    check = CaseCheck("text", "m.chat", _rules())
    check.check_all(obs)
    check.outcomes()
    return Record("text", "m.chat", ENV, dict(check.observed), references=dict(check.references))


def _outcome(obs: Observation, baseline: Record | None, strict: bool = False):
    check = CaseCheck("text", "m.chat", _rules(strict), baseline)
    check.check_all(obs)
    return {o.field: o for o in check.outcomes()}["sanitized_content_is_text"]


def test_a_reference_that_ran_in_the_baseline_and_cannot_run_now_is_a_regression():
    for category in ("not-applicable", "unsupported"):
        got = _outcome(_cannot(category), _record(_ran()))
        assert (got.status, got.category) == (Status.REGRESSION, Category.REFERENCE_LOST)
        assert WHY in got.detail and got.diff["was_status"] == "pass"
        assert _outcome(_cannot(category), _record(_ran()), strict=True).status is Status.REGRESSION


def test_on_a_first_run_it_is_not_checked_and_fails_under_strict():
    got = _outcome(_cannot(), None)
    assert (got.status, got.category) == (Status.SKIPPED, Category.NOT_CHECKED) and WHY in got.detail
    strict = _outcome(_cannot(), None, strict=True)
    assert (strict.status, strict.category) == (Status.REGRESSION, Category.NOT_CHECKED)


def test_a_reference_the_baseline_could_not_run_either_stays_skipped():
    got = _outcome(_cannot(), _record(_cannot()))
    assert (got.status, got.category) == (Status.SKIPPED, Category.NOT_APPLICABLE)
    assert _outcome(_ran(), _record(_ran())).status is Status.PASS


def test_a_reference_not_checked_now_where_the_baseline_checked_it_is_lost():
    """not-checked (the call it reads raised - a continuous-batching manager crashing -, the version
    returned nothing to judge by) is a check gone like a removed keyword: reference-lost against a
    baseline where it ran, quiet on a first run, a regression there under --strict (issue 58 item 11)."""
    got = _outcome(_cannot("not-checked"), _record(_ran()))
    assert (got.status, got.category) == (Status.REGRESSION, Category.REFERENCE_LOST) and WHY in got.detail
    first = _outcome(_cannot("not-checked"), None)
    assert (first.status, first.category) == (Status.SKIPPED, Category.NOT_CHECKED)
    strict = _outcome(_cannot("not-checked"), None, strict=True)
    assert (strict.status, strict.category) == (Status.REGRESSION, Category.NOT_CHECKED)
    assert _outcome(_cannot("not-checked"), _record(_cannot("not-checked"))).status is Status.SKIPPED


def test_a_statistical_skip_is_not_a_lost_reference():
    """not-checkable (one bin, nothing observed) is the sample's limit, not a reference gone."""
    got = _outcome(_cannot("not-checkable"), _record(_ran()))
    assert (got.status, got.category) == (Status.SKIPPED, Category.NOT_CHECKABLE)


def _failed() -> Observation:
    obs = Observation()
    obs.add("control_ids", IDS, kind="tokens")
    obs.reference("sanitized_content_is_text", IDS, [[5, 6, 8]], kind="tokens", implementations_differ=False)
    return obs


def test_a_reference_that_failed_in_the_baseline_and_cannot_run_now_is_no_regression():
    """5.14.0's eager_vs_sdpa failed (SDPA drops Gemma 2's soft-cap); 5.22.2 refuses SDPA, so it cannot
    run: the known failure is not the upgrade's, and the outcome says nothing checks it now."""
    got = _outcome(_cannot(), _record(_failed()))
    assert (got.status, got.category) == (Status.CHANGED, Category.REFERENCE_LOST)
    assert "nothing checks it now" in got.detail and got.diff["was_status"] == "regression"


def _route(calls: int, checked: bool) -> Observation:
    """A backends case: the SDPA calls are the logits' mechanism and checked by the masks' reference."""
    obs = Observation()
    obs.add("logits", [[1.0, 2.0, 3.0 if checked else 30.0]], kind="tensor", oracle="logits_vs_engine")
    obs.reference("logits_vs_engine", [[1.0, 2.0, 3.0 if checked else 30.0]], [[1.0, 2.0, 3.0]], kind="tensor")
    obs.add("sdpa_prefill", {"calls": calls}, mechanism_of="logits", checked_by="sdpa_mask_vs_reference")
    if calls:
        obs.reference("sdpa_mask_vs_reference", [], [], implementations_differ=False)
    else:
        obs.skipped("sdpa_mask_vs_reference", "exact", "no SDPA calls to check")
    return obs


def test_a_reference_of_a_route_a_fix_no_longer_takes_follows_the_fix():
    """The baseline computes wrong logits through 4 SDPA calls whose masks are right; now no SDPA call
    and the logits at the engine's: the masks' reference is gone with the fix. Without the fix (the
    logits right in both) losing it stays a regression."""
    check = CaseCheck("backends", "m", _rules(), _record_of(_route(4, checked=False)))
    check.check_all(_route(0, checked=True))
    got = {o.field: o for o in check.outcomes()}
    assert (got["sdpa_prefill"].status, got["sdpa_prefill"].category) == (Status.CHANGED, Category.FIXED)
    assert (got["sdpa_mask_vs_reference"].status, got["sdpa_mask_vs_reference"].category) == (
        Status.CHANGED, Category.FIXED)
    again = CaseCheck("backends", "m", _rules(), _record_of(_route(4, checked=True)))
    again.check_all(_route(0, checked=True))
    assert {o.field: o for o in again.outcomes()}["sdpa_mask_vs_reference"].status is Status.REGRESSION


def _record_of(obs: Observation) -> Record:
    check = CaseCheck("backends", "m", _rules())
    check.check_all(obs)
    check.outcomes()
    return Record("backends", "m", ENV, dict(check.observed), references=dict(check.references))
