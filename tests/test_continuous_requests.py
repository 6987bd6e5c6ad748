"""The continuous-batching manager check's rules (harness/designs/continuous_requests.py), as pure
functions: which token gives one request its own early eos, how many tokens a request's own settings
let it emit, what breaks the streaming contract; and that the case is in the table."""

from __future__ import annotations

import pytest
import torch

from harness import cases
from harness.designs import continuous_requests as cr


def test_own_stop_token_is_new_in_its_stream_and_absent_from_the_others():
    assert cr.own_stop_token([5, 6, 7, 8, 9], [[7, 1, 2]]) == 8  # 7 is in the other stream
    assert cr.own_stop_token([5, 6, 5, 8], [[]], min_step=2) == 8  # 5 was met at step 0: it would stop there
    assert cr.own_stop_token([5, 6, 7], [[7]], min_step=2) is None


@pytest.mark.parametrize(("row", "limit", "eos", "expected"), [
    ([4, 5, 6, 7], 4, [6], 3),  # stops at its own end token, which it emits
    ([4, 5, 6, 7], 4, [2], 4),  # none met: exactly its max_new_tokens
    ([4, 5], 4, [2], 4),  # stopped early with no end token: the length it should have is 4
    ([4, 5, 6, 7, 8], 4, [8], 4),  # an end token past the limit does not count: it ran past its limit
])
def test_expected_end_is_the_stop_rule_on_the_requests_own_tokens(row, limit, eos, expected):
    assert cr.expected_end(row, limit, eos) == expected


def test_a_clean_stream_has_no_violation():
    assert cr.stream_violations([[1], [1, 2], [1, 2, 3]], [1, 2, 3]) == []
    assert cr.stream_violations([[1], [1, 2], [1, 2]], [1, 2]) == []  # a status-only update adds nothing


@pytest.mark.parametrize(("updates", "final", "why"), [
    ([[1, 2], [1, 3]], [1, 3], "update 1 does not extend update 0"),  # a token changed
    ([[1, 2], [1]], [1], "update 1 does not extend update 0"),  # a token taken back
    ([[1], [1, 2]], [1, 2, 3], "the last update is not the final result"),
    ([], [1], "the last update is not the final result"),  # streaming asked, nothing streamed
    ([[1, 2, 3]], [1, 2, 3], "update 0 hands out 3 new tokens at once"),  # held back, handed out whole
    ([[1], [1, 2, 3]], [1, 2, 3], "update 1 hands out 2 new tokens at once"),  # in chunks
])
def test_each_break_of_the_streaming_contract_is_named(updates, final, why):
    assert any(v.startswith(why) for v in cr.stream_violations(updates, final))


def test_the_requests_case_is_in_the_table_seeded():
    case = next(c for c in cases.continuous() if c.param("check") == "requests")
    assert case.id == "llama-target.cb.requests" and case.seed == 0
    greedy = [r for r in cr.REQUESTS if r[2] == cr.GREEDY]
    assert len(greedy) == 2 and any(r[3] for r in greedy)  # one greedy request has its own eos list


def test_a_draw_just_below_the_kept_set_is_a_boundary_tie_only_within_the_slack():
    from harness.engine.processors import Processor
    from harness.settings.config import Thresholds

    logits = torch.tensor([[4.0, 3.0, 2.9, 1.0]])  # one position: the prompt's last
    top2 = [Processor("top_k", (("top_k", 2),))]
    assert cr.outside_support(logits, 1, [2], top2, [0, 2]) == [0]  # 2.9 is not in the top 2
    wide = cr.Slack("bf16", Thresholds(tie_rounding_ulps=20.0, tie_eps_bf16=0.2))  # the step's allowance capped at 0.2
    assert cr.outside_support(logits, 1, [2], top2, [0, 2], slack=wide) == []  # 0.1 below the kept 3.0: a tie
    assert cr.outside_support(logits, 1, [3], top2, [0, 3], slack=wide) == [0]  # 2.0 below: outside
    # the slack is per step: k u (|x_low| + |x_t| + 2 rms x), capped by the dtype's fixed tie epsilon
    narrow = cr.Slack("bf16", Thresholds(tie_rounding_ulps=4.0, tie_eps_bf16=0.75))
    rms = float(logits[0].pow(2).mean().sqrt())
    assert narrow.at(logits[0], 3.0, 2.9) == pytest.approx(4.0 * 2.0 ** -8 * (3.0 + 2.9 + 2 * rms))
    assert cr.outside_support(logits, 1, [2], top2, [0, 2], slack=narrow) == []  # 0.1 < 0.175
    assert cr.outside_support(torch.tensor([[4.0, 3.0, 2.5, 1.0]]), 1, [2], top2, [0, 2], slack=narrow) == [0]
    assert cr.support_slack("fp32", Thresholds()).at(logits[0], 3.0, 2.9) == 0.0
    # the project's own [tool.harness.thresholds] tie_eps_bf16 caps the slack, not the default
    assert cr.support_slack("bf16", Thresholds()).fixed == 0.75
    assert cr.support_slack("bf16", Thresholds(tie_eps_bf16=0.05)).at(logits[0], 3.0, 2.9) == 0.05


def test_a_setting_add_request_takes_now_is_a_feature_added_never_a_regression():
    """`takes` is a capability: 4.57.6 -> 5.0.0 gains streaming (feature-added), a setting no longer
    taken is feature-removed; whether a taken setting has its effect is the references' to judge."""
    from harness.checking.compare import compare_capability
    from harness.checking.policy import Policy
    from harness.schema import Field, Status

    old = {"max_new_tokens": True, "eos_token_id": False, "streaming": False, "logit_processor_kwargs": False}
    gained = compare_capability("takes", Field("capability", {**old, "streaming": True}), Field("capability", old), Policy())
    assert (gained.status, gained.category) == (Status.CHANGED, "feature-added")
    lost = compare_capability("takes", Field("capability", {**old, "max_new_tokens": False}), Field("capability", old),
                              Policy())
    assert (lost.status, lost.category) == (Status.CHANGED, "feature-removed")


def test_a_request_served_now_that_failed_before_is_fixed_and_the_reverse_broken():
    """request_errors is an outcome per request (extras outcome="each"): 5.14.0's loop left every
    request unfinished, 5.24.0 serves them - fixed, not a regression (real-change)."""
    from harness.checking.compare import compare_exact
    from harness.checking.policy import Policy
    from harness.schema import Field, Status

    failed = ["no finished result for this request"] * 3
    served = [None, None, None]
    fixed = compare_exact("request_errors", Field("exact", served, {"outcome": "each"}),
                          Field("exact", failed, {"outcome": "each"}), Policy())
    assert (fixed.status, fixed.category) == (Status.CHANGED, "fixed")
    broken = compare_exact("request_errors", Field("exact", [None, "boom", None], {"outcome": "each"}),
                           Field("exact", served, {"outcome": "each"}), Policy())
    assert (broken.status, broken.category) == (Status.REGRESSION, "broken")


def test_a_stopping_threads_dropped_requests_are_left_out_of_the_warnings():
    """How many "will be dropped" lines a failed loop logs is a race (the requests it still held):
    left out, so an unchanged rerun records the same warnings; the loop's error stays."""
    import logging

    from harness.subjects import hf_continuous

    sink: list[str] = []
    with hf_continuous.cb_warnings(sink):
        log = logging.getLogger(hf_continuous.CB_LOGGER)
        log.error("Error in generation loop: Memory footprint 1157632 is more than available memory 0")
        log.warning("Background thread is stopping. Request with ids [36, 71, ..., 14, 266] will be dropped.")
    assert sink == ["Error in generation loop: Memory footprint 1157632 is more than available memory 0"]
