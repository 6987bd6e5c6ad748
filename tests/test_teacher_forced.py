"""The teacher-forced oracle (harness/engine/teacher_forced.py): a greedy stream judged at every step
along its own prefix, each step alone by the tie rule (harness/checking/compare.py `compare_tokens`
with one single-token row per step), so a near-tie early in the stream does not end the check."""

from __future__ import annotations

import torch

from harness.checking.compare import compare_tokens
from harness.checking.policy import Policy
from harness.engine.processors import Processor
from harness.engine.teacher_forced import teacher_forced
from harness.schema import Case, Field, Observation, Status

# a prompt of 2 tokens, then a row of 3: positions 1, 2, 3 predict the row's tokens
LOGITS = torch.tensor([[0.0, 0.0, 0.0, 0.0],
                       [5.0, 1.0, 0.0, 0.0],    # step 0: 0 is best by 4
                       [1.0, 3.0, 2.9995, 0.0],  # step 1: 1 is best, 2 a near-tie (5e-4, inside fp32's 1e-3)
                       [0.0, 0.0, 1.0, 9.0]])   # step 2: 3 is best by 8


def test_the_row_s_token_is_judged_against_the_reference_s_best_after_the_row_s_own_prefix():
    forced = teacher_forced(LOGITS, 2, [0, 2, 3])
    assert forced.best == [0, 1, 3]
    assert abs(forced.gaps[1] - 5e-4) < 1e-5  # the row took the near-tie
    assert abs(forced.gaps[0] - 4.0) < 1e-6 and abs(forced.gaps[2] - 8.0) < 1e-6  # agreeing steps: their margin
    far = teacher_forced(LOGITS, 2, [0, 1, 0])
    assert far.best[2] == 3 and abs(far.gaps[2] - 9.0) < 1e-6


def test_a_processor_of_the_chain_changes_the_reference_s_best():
    suppressed = teacher_forced(LOGITS, 2, [1, 1, 3], [Processor.of("suppress_tokens", tokens=[0])])
    assert suppressed.best[0] == 1  # token 0 suppressed: 1 is best at step 0


def _judge(row: list[int]) -> object:
    forced = teacher_forced(LOGITS, 2, row)
    labels = [f"step {i}" for i in range(len(row))]
    observed = Field("tokens", [[t] for t in row], {"row_labels": labels})
    expected = Field("tokens", [[b] for b in forced.best],
                     {"margins": [[g] for g in forced.gaps], "scales": [[s] for s in forced.scales],
                      "row_labels": labels})
    return compare_tokens("steps_as_engine", observed, expected, Policy(implementations_differ=True))


def test_a_near_tie_taken_is_a_tie_flip_and_the_steps_after_it_are_still_judged():
    assert _judge([0, 2, 3]).category == "tie-flip"  # step 1 took the near-tie; step 2 still the best
    out = _judge([0, 2, 0])  # ... then a token the reference would never choose: seen, though after a tie
    assert out.status is Status.REGRESSION and "step 2" in out.detail


class _Drafted:
    """A speculative run as hf.Generated records it: the emitted tokens and each step's drafts."""

    def __init__(self, tokens, drafts):
        self.tokens, self.drafts = tokens, drafts

    def acceptance_trace(self):
        from harness.subjects.hf import Generated

        return Generated.acceptance_trace(self)


def _drafted_reference(drafts):
    from harness.designs.outputs import drafted_within_k

    obs = Observation()
    drafted_within_k(obs, Case("m", "assisted", draft_tokens=4), _Drafted([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], drafts))
    return obs.references["drafted_within_k"]


def test_a_step_that_drafts_more_than_k_fails_drafted_within_k_in_any_dtype():
    ok = _drafted_reference([[1, 2, 3, 4], [9, 9]])
    assert ok.observed.value == ok.expected.value == [4, 2]
    over = _drafted_reference([[1, 2, 3, 4, 5, 6, 0]])  # a cap that does not bind (PR #47195's class)
    assert over.observed.value == [7] and over.expected.value == [4]


def test_each_draft_is_judged_after_the_context_the_library_drafted_it_from(monkeypatch):
    """drafts_as_drafter asks the engine's assistant about prompt + the tokens emitted before each step
    + that step's drafts: step 0 after the prompt, step 1 after the accepted draft and the correction."""
    from types import SimpleNamespace

    from harness.designs import outputs
    from harness.subjects.hf import Generated

    asked: list[list[int]] = []
    vocab = 8

    def logits_cached(zoo, name, tokens):  # an assistant that always prefers token 5
        asked.append(list(tokens))
        z = torch.zeros(len(tokens), vocab)
        z[:, 5] = 1.0
        return z

    monkeypatch.setattr(outputs.engine, "logits_cached", logits_cached)
    zoo = SimpleNamespace(prompt_ids=lambda model, prompt: torch.tensor([[1, 2]]))
    got = Generated(tokens=[5, 6, 5, 5], drafts=[[5, 5], [5, 5]])  # step 0: 1 accepted + 6; step 1: 2 accepted
    obs = Observation()
    outputs.drafts_as_drafter(obs, zoo, Case("m", "assisted", assistant="a", draft_tokens=2), got)
    assert asked == [[1, 2, 5, 5], [1, 2, 5, 6, 5, 5]]
    ref = obs.references["drafts_as_drafter"]
    assert ref.observed.value == ref.expected.value == [[5], [5], [5], [5]]
    assert ref.expected.extras["row_labels"] == ["step 0 draft 0", "step 0 draft 1", "step 1 draft 0", "step 1 draft 1"]


# the ensemble rule on the verifier's own numbers (outputs `ensemble_on_own_scores`)

W = 0.3
# one drafted position over a vocabulary of 4: p prefers token 0, q prefers token 1 strongly, so
# v = 0.3 p + 0.7 q prefers token 1 - the rule's choice is not the target's
P_ROW = torch.log(torch.tensor([0.50, 0.30, 0.15, 0.05]))
Q_ROW = torch.log(torch.tensor([0.10, 0.80, 0.05, 0.05]))
BONUS = torch.tensor([0.0, 0.0, 4.0, 1.0])  # the bonus position: the target's argmax, 2


def test_the_rule_on_own_scores_takes_argmax_v_at_a_draft_and_argmax_p_at_the_bonus():
    from harness.engine.verify import ensemble_greedy_on_scores

    q = Q_ROW[None]
    # draft 1 accepted (argmax v is 1), then the bonus token
    assert ensemble_greedy_on_scores(torch.stack([P_ROW, BONUS]), q, [1, 2], W) == [1, 2]
    # a verifier that compares with argmax p (greedy-ensemble-argmax-p): it emits 0 where the rule says 1
    assert ensemble_greedy_on_scores(P_ROW[None], q, [0], W) == [1]
    # a bonus token that is not the target's argmax
    assert ensemble_greedy_on_scores(torch.stack([P_ROW, BONUS]), q, [1, 3], W) == [1, 2]


def test_a_tie_to_the_bit_follows_the_library_and_anything_wider_does_not():
    from harness.engine.verify import ensemble_greedy_on_scores

    tied = torch.tensor([2.0, 2.0, 0.0, 0.0])
    assert ensemble_greedy_on_scores(tied[None], tied[None], [1], W) == [1]  # either is the rule's
    apart = torch.tensor([2.0, 2.0 - 1e-3, 0.0, 0.0])  # 1e-3 apart: far beyond one softmax kernel's rounding
    assert ensemble_greedy_on_scores(apart[None], apart[None], [1], W) == [0]


def test_the_choices_agree_with_the_engine_s_ensemble_verifier():
    from harness.engine.verify import ensemble_greedy, ensemble_greedy_choices

    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        p = torch.softmax(torch.randn(4, 16, generator=gen) * 3, -1)
        q = torch.softmax(torch.randn(3, 16, generator=gen) * 3, -1)
        y = ensemble_greedy_choices(q, p, W)
        draft = y[:3].clone()
        draft[1] = (draft[1] + 1) % 16  # rejected at position 1
        verdict = ensemble_greedy(draft, q, p, W)
        assert verdict.accepted == 1 and verdict.tokens == [int(y[0]), int(y[1])]
        assert ensemble_greedy_choices(q, p[:2], W).tolist() == y[:2].tolist()  # fewer rows: a prefix


def _ensemble_reference(tokens, drafts, token_scores, draft_scores):
    from types import SimpleNamespace

    from harness.designs.outputs import ensemble_on_own_scores
    from harness.subjects.hf import Generated

    got = Generated(tokens=tokens, drafts=drafts, token_scores=token_scores, draft_scores=draft_scores)
    zoo = SimpleNamespace(prompt_ids=lambda model, prompt: torch.tensor([[1, 2]]))
    obs = Observation()
    ensemble_on_own_scores(obs, zoo, Case("m", "ensemble", assistant="a", draft_tokens=1, weight=W), got)
    return obs


def test_ensemble_on_own_scores_sees_a_verifier_that_compares_with_argmax_p():
    from harness.checking.compare import compare_field

    q = Q_ROW[None]
    # step 0: draft 1 accepted, bonus 2; step 1: draft 3 rejected - the rule corrects to 1, not p's 0
    good = _ensemble_reference([1, 2, 1], [[1], [3]], torch.stack([P_ROW, BONUS, P_ROW]), [q, q])
    ref = good.references["ensemble_on_own_scores"]
    assert ref.observed.value == ref.expected.value == {"step 0": [1, 2], "step 1": [1]}
    bad = _ensemble_reference([1, 2, 0], [[1], [3]], torch.stack([P_ROW, BONUS, P_ROW]), [q, q])
    ref = bad.references["ensemble_on_own_scores"]
    assert ref.observed.value["step 1"] == [0] and ref.expected.value["step 1"] == [1]
    assert compare_field("ensemble_on_own_scores", ref.observed, ref.expected, Policy()).status is Status.REGRESSION


def test_ensemble_on_own_scores_is_not_checkable_without_the_verifier_s_numbers():
    obs = _ensemble_reference([1, 2], [[1]], None, [Q_ROW[None]])
    assert "ensemble_on_own_scores" not in obs.references
    assert obs.notes["ensemble_on_own_scores"].category == "not-checkable"
