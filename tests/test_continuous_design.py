"""The continuous-batching suite's decisions (harness/designs/continuous.py, harness/subjects/hf_continuous.py),
as pure functions on small inputs: which token makes one request stop early and no other, where a
stream stops, which processors a version declares dropped and what the engine then applies, the
engine's greedy and white-box reads of a draw, what num_beams did, how results are matched to their
requests and where each option goes; and the case table."""

from __future__ import annotations

import math

import pytest
import torch

from harness import cases
from harness.designs import continuous, continuous_requests
from harness.engine.processors import Processor
from harness.subjects import hf_continuous
from harness.subjects.hf_continuous import Served


def test_the_early_eos_is_a_token_of_one_stream_only_from_the_given_step():
    streams = [[5, 6, 7, 8, 9], [5, 6, 7, 3, 9], [5, 6, 7, 8, 4]]
    # step 2: 7 is in every stream; step 3: 8 is in two, 3 only in request 1
    assert continuous.early_stop_token(streams) == (3, 1, 3)
    assert continuous.early_stop_token(streams, min_step=4) == (4, 2, 4)  # 9 is in two streams, 4 in one


def test_a_token_met_earlier_in_its_own_stream_would_stop_it_earlier_and_is_not_chosen():
    assert continuous.early_stop_token([[1, 2, 3, 2], [1, 2, 4, 4]], min_step=3) is None
    assert continuous.early_stop_token([[1, 2, 3, 2], [1, 2, 4, 4]], min_step=2) == (3, 0, 2)


def test_no_early_eos_when_every_token_is_shared():
    assert continuous.early_stop_token([[1, 2, 3], [3, 2, 1]]) is None
    assert continuous.early_stop_token([]) is None


@pytest.mark.parametrize(("stream", "eos", "expected"), [
    ([4, 5, 6, 7], [6], [4, 5, 6]),  # the end token is emitted
    ([4, 5, 6, 7], [2, 9], [4, 5, 6, 7]),  # none met: max_new_tokens
    ([2, 5], [2, 5], [2]),
    ([], [2], []),
])
def test_a_stream_stops_after_its_first_end_token(stream, eos, expected):
    assert continuous.stopped(stream, eos) == expected


def test_the_dropped_processors_are_read_from_the_drop_warnings_only():
    warnings = ["Processor RepetitionPenaltyLogitsProcessor isn't supported by CB. Dropping it.",
                "Processor SuppressTokensLogitsProcessor might not be supported by CB.",
                "Processor RepetitionPenaltyLogitsProcessor isn't supported by CB. Dropping it.",
                "Processor NoRepeatNGramLogitsProcessor isn't supported by CB. Kept it because drop_unsupported = False."]
    assert continuous.dropped_processors(warnings) == ["RepetitionPenaltyLogitsProcessor"]
    assert continuous.dropped_processors([]) == []


def test_the_engine_applies_every_processor_but_the_declared_dropped_ones():
    chain = [Processor.of("repetition_penalty", penalty=1.3, ignore=0), Processor.of("suppress_tokens", tokens=(3,))]
    assert continuous.kept_chain(chain, ["RepetitionPenaltyLogitsProcessor"]) == chain[1:]
    assert continuous.kept_chain(chain, []) == chain
    assert continuous.kept_chain(chain, ["SomeOtherProcessor"]) == chain  # an unknown name drops nothing of ours


def _bigram(vocab: int, table: dict[int, int]):
    """A fake model: the logits after a context put 5.0 on table[last token], 1.0 elsewhere."""
    def logits_of(tokens: list[int]) -> torch.Tensor:
        out = torch.ones(len(tokens), vocab)
        for i, t in enumerate(tokens):
            out[i, table.get(t, 0)] = 5.0
        return out
    return logits_of


def test_the_engines_greedy_follows_its_processors_and_stops_at_an_end_token():
    logits_of = _bigram(6, {1: 2, 2: 3, 3: 4, 4: 5})
    tokens, margins, scales = continuous.processed_greedy(logits_of, [1], 10, [], eos=[4])
    assert tokens == [2, 3, 4]  # 4 is an end token: emitted, then the request stops
    assert margins == [4.0, 4.0, 4.0] and len(scales) == 3
    banned = [Processor.of("suppress_tokens", tokens=(3,))]
    tokens, _, _ = continuous.processed_greedy(logits_of, [1], 3, banned, eos=[4])
    assert tokens[0] == 2 and tokens[1] != 3  # the suppressed token is never chosen
    assert len(tokens) == 3  # no end token met: new_tokens steps


def test_a_draw_outside_the_engines_top_k_is_named_by_its_step():
    logits = torch.tensor([[0.0, 3.0, 2.0, 1.0], [3.0, 0.0, 1.0, 2.0], [0.0, 0.0, 0.0, 0.0]])
    top2 = [Processor.of("top_k", top_k=2, keep=1)]
    # prompt [9, 9]: step 0 reads position 1, step 1 position 2 (all ties: every token kept)
    assert continuous.outside_support(logits, 2, [1, 1], top2, [9, 9, 1, 1]) == [0]  # position 1 keeps 0 and 3
    assert continuous.outside_support(logits, 2, [3, 1], top2, [9, 9, 3, 1]) == []


def test_the_engines_log_probability_of_a_draw_is_that_of_its_processed_distribution():
    logits = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]])
    got = continuous_requests.engine_logprobs(logits, 2, [0], [], [7, 7, 0])
    assert got == pytest.approx([math.log(0.75)])
    hot = continuous_requests.engine_logprobs(logits, 2, [0], [Processor.of("temperature", temperature=2.0)], [7, 7, 0])
    assert hot == pytest.approx([math.log(3 ** 0.5 / (3 ** 0.5 + 1))])


@pytest.mark.parametrize(("served", "outcome"), [
    (Served(error={"type": "NotImplementedError", "message": "no beams"}), "raised NotImplementedError"),
    (Served(rows=[[1], [2]], request_errors=["boom", None]), "a request failed"),
    (Served(rows=[[1, 2], [3]], request_errors=[None, None]), "ignored: greedy tokens"),
    (Served(rows=[[1, 5], [3]], request_errors=[None, None]), "other tokens"),
])
def test_what_num_beams_did(served, outcome):
    assert continuous.beam_outcome(served, [[1, 2], [3]]) == outcome


class _Out:
    def __init__(self, prompt_ids, tokens):
        self.prompt_ids, self.generated_tokens = prompt_ids, tokens


def test_results_are_matched_to_their_requests_by_prompt_whatever_order_they_come_in():
    a, b = _Out([1, 2], [7]), _Out([3], [8])
    assert hf_continuous._by_prompt({"req_1": b, "req_0": a}, [[1, 2], [3]]) == [a, b]
    assert hf_continuous._by_prompt({"req_0": a}, [[1, 2], [3]]) == [a, None]  # a request without a result


def test_each_option_goes_where_the_version_reads_it():
    new = {"config_kwarg": True, "fields": ["num_blocks", "page_size", "max_batch_tokens", "seed"], "page_size": "page_size"}
    old = {"config_kwarg": False, "fields": [], "page_size": "block_size"}
    _, cb, placed = hf_continuous._configs(None, new, {"max_new_tokens": 2}, {"num_blocks": 4, "page_size": 16, "seed": 1})
    assert placed == {"continuous_batching_config": ["num_blocks", "page_size", "seed"], "generation_config": []}
    assert cb is not None and cb.num_blocks == 4
    config, cb, placed = hf_continuous._configs(None, old, {"max_new_tokens": 2}, {"num_blocks": 4, "page_size": 16})
    assert cb is None and placed == {"continuous_batching_config": [], "generation_config": ["block_size", "num_blocks"]}
    assert config.block_size == 16 and config.num_blocks == 4


def test_the_table_runs_every_check_on_llama_target_with_prompts_of_different_lengths():
    table = cases.continuous()
    assert [c.id for c in table] == [f"llama-target.cb.{c}" for c in cases.CONTINUOUS_CHECKS]
    assert {c.param("prompts") for c in table} == {cases.BATCH_PROMPTS}
    sampled = [c for c in table if c.decoding == "sample"]
    # sample, and the manager's requests (one of its three requests samples: continuous_requests.py)
    assert [c.param("check") for c in sampled] == ["sample", "requests"] and all(c.seed is not None for c in sampled)


def test_two_served_streams_parting_after_the_engines_own_stream_went_elsewhere_are_judged_on_their_prefix():
    """The 1.1B Llama in bf16 (2026-12-04): the engine's stream took 7106 at step 2 where the served one
    took 9801 (a near-tie, 0.018); at step 3 the served request and generate() parted at a margin of
    0.019 after their shared prefix, but the engine's own stream - after 7106 - had 0.50 there, and
    tokens_as_generate called the tie a regression. The served side's margins are the engine's after
    the served prefix (teacher-forced), so the step is judged on the prefix both streams share."""
    from harness.checking.compare import Policy, compare_field
    from harness.engine.teacher_forced import teacher_forced
    from harness.schema import Field, Status
    from harness.store.env import fingerprint

    served, alone = [0, 1, 2], [0, 1, 3]  # generate() alone parts at step 2, a near-tie after [0, 1]
    logits = torch.full((4, 5), -4.0)  # prompt [4] + served: the engine's logits after each prefix
    logits[0, 0] = 2.0
    logits[1, 1] = 2.0
    logits[2, 2], logits[2, 3] = 2.0, 1.98  # after [0, 1]: 2 and 3 near-tied
    forced = teacher_forced(logits, 1, served)
    own_stream_margins = [4.0, 4.0, 0.5]  # the engine's own stream had gone another way before step 2
    bf16 = Policy(observed_env=fingerprint(dtype="bf16"), baseline_env=fingerprint(dtype="bf16"),
                  implementations_differ=True)
    generate_side = Field("tokens", [alone], {"margins": [[4.0, 4.0, 0.01]], "scales": [[8.0, 8.0, 8.0]]})

    def judged(margins):
        return compare_field("tokens_as_generate", Field("tokens", [served], {"margins": [margins],
                                                                               "scales": [forced.scales]}),
                             generate_side, bf16)

    assert forced.gaps[2] < 0.03
    assert judged(forced.gaps).category == "tie-flip"
    assert judged(own_stream_margins).status is Status.REGRESSION


@pytest.mark.parametrize(("rows", "forwards", "expected"), [
    ([[1] * 12, [2] * 12, [3] * 12], 12, "pass"),  # served together: max(len) forwards
    ([[1] * 12, [2] * 12, [3] * 12], 36, "fail"),  # one after another: sum(len) forwards
    ([[1] * 12, [2] * 7, [3] * 12], 24, "fail"),  # the first alone, the others together: 24 < 31 but > 15
    ([[1] * 12, [2] * 7, [3] * 12], 15, "pass"),  # a prefill forward per request on top: the bound itself
    ([[1] * 12, [2] * 3, [3] * 12], 14, "pass"),  # an early stop does not change the rule
    ([[1] * 12, [2] * 12, [3] * 12], 0, "not-checked"),  # no forward the harness could count
    ([[1] * 12, [2], [3]], 12, "not-applicable"),  # one request decodes: nothing to share
])
def test_served_together_bounds_the_forwards_by_the_shared_schedule(rows, forwards, expected):
    from harness.schema import Observation

    obs = Observation()
    continuous.served_together(obs, Served(rows=rows, request_errors=[None] * len(rows), forwards=forwards))
    if expected in ("not-checked", "not-applicable"):
        assert obs.notes["served_together"].category == expected
        return
    ref = obs.references["served_together"]
    assert (ref.observed.value == ref.expected.value) is (expected == "pass")
    assert ref.observed.extras == {"forwards": forwards, "bound": max(map(len, rows)) + len(rows),
                                   "one_at_a_time": sum(len(r) for r in rows)}
