"""Outcome fields instead of presence fields (harness/checking/compare.py `_outcome_transition`,
the capability rule for honoured keywords): a load or call records that it worked or how it
failed every time, so a failure gone is `fixed` and one appearing `broken`; a keyword accepted
without effect is a regression. The errors are raised by real calls and recorded through the
subject boundary (`observe`), not written by hand."""

from __future__ import annotations

import pytest

from harness.checking.compare import compare_field
from harness.checking.policy import Policy
from harness.schema import Category, Field, Status
from harness.subjects import observe


def _transformers_error(model_type: str) -> dict:
    """An exception transformers raises (an unknown model type), recorded by the subject boundary."""
    from transformers import AutoConfig

    _, err = observe(lambda: AutoConfig.for_model(model_type))
    assert err is not None
    return err


def _judge(name: str, old, new, **extras) -> tuple[Status, Category]:
    out = compare_field(name, Field("exact", new, extras), Field("exact", old))
    return out.status, out.category


def test_a_load_error_gone_is_fixed_and_appearing_is_broken():
    err = _transformers_error("harness-no-sdpa")
    ok, failing = {"eager": None, "sdpa": None}, {"eager": None, "sdpa": err}
    assert _judge("attn_load_error", failing, ok, outcome="each") == (Status.CHANGED, Category.FIXED)
    assert _judge("attn_load_error", ok, failing, outcome="each") == (Status.REGRESSION, Category.BROKEN)
    other = {"eager": None, "sdpa": _transformers_error("harness-other")}
    assert _judge("attn_load_error", failing, other, outcome="each") == (Status.REGRESSION, Category.ERROR_CHANGED)


def test_a_recorded_raise_gone_is_fixed():
    """`load` as the MTP contract records it: {"raises": None} when it loaded."""
    err = _transformers_error("harness-no-mtp")
    before = {"raises": err["type"], "missing": None}
    assert _judge("load", before, {"raises": None}, outcome="error") == (Status.CHANGED, Category.FIXED)
    assert _judge("load", {"raises": None}, before, outcome="error") == (Status.REGRESSION, Category.BROKEN)
    assert _judge("expected", {"error": err}, ["layers.*.mlp"], outcome="error") == (Status.CHANGED, Category.FIXED)


def test_a_clean_load_report_is_the_outcome():
    problems = {"missing_keys": ["mtp.fc.weight"], "unexpected_keys": [], "error_msgs": []}
    clean = {k: [] for k in problems}
    assert _judge("loading_info", problems, clean, outcome="clean") == (Status.CHANGED, Category.FIXED)
    assert _judge("loading_info", clean, problems, outcome="clean") == (Status.REGRESSION, Category.BROKEN)


def test_without_the_outcome_rule_a_difference_stays_a_real_change():
    assert _judge("value", {"tokens": [1, 2]}, {"tokens": [1, 3]}) == (Status.REGRESSION, Category.REAL_CHANGE)


def test_a_call_result_is_judged_by_its_contract_direction():
    """A contract's call result without the outcome rule (compare.py `_refusal_transition`): refusing
    what the baseline accepted is a regression (feature-removed), accepting what it refused a change
    to review (feature-added) - never a fix, never silent."""
    accepted, refused = {"raises": None}, {"raises": "ValueError", "message": "n must be <= 0"}
    assert _judge("value", accepted, refused) == (Status.REGRESSION, Category.FEATURE_REMOVED)
    assert _judge("value", refused, accepted) == (Status.CHANGED, Category.FEATURE_ADDED)
    assert _judge("value", refused, dict(refused))[0] is Status.PASS


def _honoured(old, new) -> tuple[Status, Category]:
    out = compare_field("fills_cache", Field("capability", new), Field("capability", old))
    return out.status, out.category


@pytest.mark.parametrize("old", [{"cache": "accepted"}, {"cache": True}], ids=["word", "old-flag"])
def test_a_keyword_accepted_without_effect_is_a_regression(old):
    assert _honoured(old, {"cache": "ignored"}) == (Status.REGRESSION, Category.FEATURE_IGNORED)


def test_a_keyword_rejected_or_honoured_again_is_a_change():
    assert _honoured({"cache": "accepted"}, {"cache": "rejected"}) == (Status.CHANGED, Category.FEATURE_REMOVED)
    assert _honoured({"cache": "ignored"}, {"cache": "accepted"}) == (Status.CHANGED, Category.FEATURE_ADDED)
    assert _honoured({"cache": "accepted"}, {"cache": "accepted"})[0] is Status.PASS


def test_a_special_token_is_told_from_ordinary_text_by_its_effect():
    """The effect the tokenizer keywords probe checks (hf_contracts.py `_is_special`): the token
    the keyword names is one id that skip_special_tokens drops - not merely a load that raised nothing."""
    from transformers import AutoTokenizer

    from harness.cases import TARGET
    from harness.subjects.hf import Zoo
    from harness.subjects.hf_contracts import SPECIAL, _is_special

    directory = str(Zoo().checkpoints.directory(TARGET))
    assert not _is_special(AutoTokenizer.from_pretrained(directory))
    assert _is_special(AutoTokenizer.from_pretrained(directory, extra_special_tokens=[SPECIAL]))


def test_a_value_now_reported_where_none_was_is_a_feature_added_and_the_reverse_is_removed():
    """5.25's linear-attention layers answer get_seq_length() (None -> 83 at layers 0 and 2): added,
    not a regression; a layer that stops answering is feature-removed; any other change beside stays
    a real change."""
    from harness.checking.compare import compare_exact

    policy = Policy()
    old, new = [None, 83, None, 83], [83, 83, 83, 83]
    added = compare_exact("seq_len_after_prefill", Field("exact", new), Field("exact", old), policy)
    assert (added.status, added.category) == (Status.CHANGED, Category.FEATURE_ADDED)
    assert "root[0]: None -> 83" in added.detail
    removed = compare_exact("seq_len_after_prefill", Field("exact", old), Field("exact", new), policy)
    assert (removed.status, removed.category) == (Status.REGRESSION, Category.FEATURE_REMOVED)
    mixed = compare_exact("seq_len_after_prefill", Field("exact", [83, 84, 83, 83]), Field("exact", old), policy)
    assert (mixed.status, mixed.category) == (Status.REGRESSION, Category.REAL_CHANGE)
    nested = compare_exact("rollback", Field("exact", {"prefill": [83, 1], "decode": [87, 1]}),
                           Field("exact", {"prefill": [None, 1], "decode": [None, 1]}), policy)
    assert nested.category is Category.FEATURE_ADDED
    error = compare_exact("error", Field("exact", {"type": "TypeError", "message": "x"}), Field("exact", None), policy)
    assert error.status is Status.REGRESSION and error.category is not Category.FEATURE_ADDED
