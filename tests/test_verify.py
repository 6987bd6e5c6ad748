"""Unit tests of harness/engine/verify.py on hand-built p / q.

Every expected value is derived in the test from the formula it checks (argmax of a row,
min(q, v), [p - q]+, ...), never typed in as an unexplained number.
"""

from __future__ import annotations

import math
from collections import defaultdict

import pytest
import torch

from harness.engine.verify import (
    Verdict,
    acceptance_probability,
    emitted_distribution,
    ensemble_greedy,
    ensemble_sample,
    ensemble_target,
    greedy_verify,
    match_sample,
    speculative_sample,
    step_bias,
    step_distribution,
    tv_distance,
)


def rows(*rs: list[float]) -> torch.Tensor:
    return torch.tensor(rs, dtype=torch.float32)


def onehot(i: int, V: int) -> list[float]:
    return [1.0 if j == i else 0.0 for j in range(V)]


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------- greedy


P3 = rows([0.1, 0.7, 0.2, 0.0], [0.5, 0.1, 0.1, 0.3], [0.2, 0.2, 0.5, 0.1], [0.0, 0.0, 0.1, 0.9])


def test_greedy_accepts_longest_matching_prefix_then_corrects():
    argmax = [max(range(4), key=lambda x: float(P3[i, x])) for i in range(4)]  # [1, 0, 2, 3]
    wrong = (argmax[2] + 1) % 4
    v = greedy_verify(torch.tensor([argmax[0], argmax[1], wrong]), P3)
    assert v == Verdict(accepted=2, tokens=[argmax[0], argmax[1], argmax[2]], bonus=False)


def test_greedy_all_accepted_emits_bonus_argmax():
    argmax = P3.argmax(dim=-1).tolist()
    v = greedy_verify(torch.tensor(argmax[:3]), P3)
    assert v.accepted == 3 and v.bonus and v.tokens == argmax


def test_greedy_first_rejection_ignores_later_matches():
    argmax = P3.argmax(dim=-1).tolist()
    draft = torch.tensor([(argmax[0] + 1) % 4, argmax[1], argmax[2]])
    v = greedy_verify(draft, P3)
    assert v.accepted == 0 and v.tokens == [argmax[0]]


def test_greedy_tie_takes_first_index():
    p = rows([0.4, 0.2, 0.4], [0.3, 0.3, 0.4])
    # ties at row 0 between 0 and 2: torch.argmax's first index -> 0
    assert greedy_verify(torch.tensor([2]), p).tokens == [0]
    assert greedy_verify(torch.tensor([0]), p).tokens == [0, 2]


def test_greedy_k0_is_plain_argmax():
    p = rows([0.2, 0.5, 0.3])
    assert greedy_verify(torch.tensor([], dtype=torch.long), p) == Verdict(0, [1], bonus=True)


def test_shape_errors_are_clear():
    with pytest.raises(ValueError, match=r"p must have shape \[k \+ 1, V\]"):
        greedy_verify(torch.tensor([0, 1]), rows([0.5, 0.5], [0.5, 0.5]))
    with pytest.raises(ValueError, match="q must have shape"):
        speculative_sample(torch.tensor([0]), rows([0.5, 0.5], [0.5, 0.5]), rows([0.5, 0.5], [0.5, 0.5]), gen())
    with pytest.raises(ValueError, match="draft token ids"):
        greedy_verify(torch.tensor([7]), rows([0.5, 0.5], [0.5, 0.5]))


@pytest.mark.parametrize("w", [0.0, 1.0, -0.1, 1.5])
def test_ensemble_weight_must_be_in_open_unit_interval(w):
    p, q = rows([0.5, 0.5], [0.5, 0.5]), rows([0.5, 0.5])
    with pytest.raises(ValueError, match=r"open interval \(0, 1\)"):
        ensemble_greedy(torch.tensor([0]), q, p, w)
    with pytest.raises(ValueError, match=r"open interval \(0, 1\)"):
        ensemble_sample(torch.tensor([0]), q, p, w, gen())


# ----------------------------------------------------------------------------- ensemble greedy


def test_ensemble_greedy_accepts_what_plain_greedy_rejects():
    w = 0.3
    p = rows([0.5, 0.4, 0.1], [0.1, 0.1, 0.8])
    q = rows(onehot(1, 3))
    v = w * p[0] + (1 - w) * q[0]
    assert int(v.argmax()) == 1 != int(p[0].argmax())  # the premise of the test
    assert greedy_verify(torch.tensor([1]), p).accepted == 0
    out = ensemble_greedy(torch.tensor([1]), q, p, w)
    # accepted, and the bonus is argmax of p[k] (the target alone), not of any mixture
    assert out == Verdict(accepted=1, tokens=[1, int(p[1].argmax())], bonus=True)


def test_ensemble_greedy_correction_is_argmax_of_v_not_p():
    w = 0.3
    p = rows([0.5, 0.4, 0.1], [0.2, 0.2, 0.6])
    q = rows([0.0, 0.5, 0.5])
    v = ensemble_target(p[:1], q, w)[0]
    assert int(v.argmax()) != int(p[0].argmax())  # premise: the two rules disagree
    draft = torch.tensor([2])
    assert int(draft[0]) != int(v.argmax())  # premise: the draft is rejected
    out = ensemble_greedy(draft, q, p, w)
    assert out == Verdict(accepted=0, tokens=[int(v.argmax())], bonus=False)


def test_ensemble_target_formula():
    p, q, w = rows([0.6, 0.3, 0.1]), rows([0.2, 0.5, 0.3]), 0.25
    assert torch.equal(ensemble_target(p, q, w), w * p + (1 - w) * q)


# --------------------------------------------------------------------------- sampling verifiers


def test_speculative_sample_p_equals_q_accepts_everything():
    # ratio p/q = 1 >= r for every r in [0, 1): all drafts accepted, bonus from p[k] (one-hot)
    V = 4
    q = rows([0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1])
    p = torch.cat([q, rows(onehot(2, V))])
    for seed in range(20):
        out = speculative_sample(torch.tensor([3, 0]), q, p, gen(seed))
        assert out == Verdict(accepted=2, tokens=[3, 0, 2], bonus=True)


def test_speculative_sample_zero_target_mass_rejects_and_samples_residual():
    # p_0(draft) = 0 -> ratio 0 -> rejected (unless r == 0 exactly: probability 2^-24);
    # residual [p - q]+ is one-hot on p's mode, so the correction is deterministic
    V = 3
    q = rows(onehot(1, V))
    p = rows(onehot(2, V), onehot(0, V))
    residual = torch.clamp(p[0] - q[0], min=0)
    for seed in range(20):
        out = speculative_sample(torch.tensor([1]), q, p, gen(seed))
        assert out == Verdict(accepted=0, tokens=[int(residual.argmax())])


def test_speculative_sample_accepts_when_target_likes_draft_more():
    # p(x) >= q(x) -> ratio >= 1 -> always accepted
    q = rows([0.5, 0.5], [0.9, 0.1])
    p = rows([0.2, 0.8], [0.3, 0.7], onehot(0, 2))
    for seed in range(20):
        out = speculative_sample(torch.tensor([1, 1]), q, p, gen(seed))
        assert out.tokens == [1, 1, 0] and out.bonus


def test_sampling_is_reproducible_from_the_generator():
    q = rows([0.3, 0.3, 0.4], [0.6, 0.2, 0.2])
    p = rows([0.5, 0.2, 0.3], [0.1, 0.1, 0.8], [0.3, 0.3, 0.4])
    draft = torch.tensor([2, 0])
    for f in (lambda g: speculative_sample(draft, q, p, g), lambda g: ensemble_sample(draft, q, p, 0.5, g),
              lambda g: match_sample(draft, p, g)):
        runs = [[f(gen(s)) for s in range(30)] for _ in range(2)]
        assert runs[0] == runs[1]
        assert len({tuple(v.tokens) for v in runs[0]}) > 1  # and it is actually random


def test_ensemble_sample_residual_fallback_to_p():
    # Unnormalised rows exercise the numerical-zero branch: p <= q everywhere, so [p - q]+ == 0.
    # With w = 0.5 the draft is accepted with prob 1 - w + w p/q = 0.8; on a rejection the
    # correction falls back to p (transformers: sum [p - q]+ <= finfo.tiny -> p_prime = p).
    w = 0.5
    q = rows([0.5, 0.5])
    p = rows([0.3, 0.5], onehot(0, 2))
    assert float(torch.clamp(p[0] - q[0], min=0).sum()) == 0.0
    rejected = [v for v in (ensemble_sample(torch.tensor([0]), q, p, w, gen(s)) for s in range(60))
                if v.accepted == 0]
    # the seeds are fixed; for fresh ones P(no rejection in 60) = 0.8^60 = 1.53e-6
    assert f"{0.8**60:.2e}" == "1.53e-06"
    assert rejected, "expected some rejections at acceptance probability 0.8 over 60 seeds"
    assert all(v.fallback and v.tokens[0] in (0, 1) for v in rejected)
    # the lossless verifier has no such fallback: it refuses instead of sampling from garbage
    with pytest.raises(ValueError, match="residual"):
        for s in range(60):
            speculative_sample(torch.tensor([0]), q, p, gen(s))


def test_match_sample_accepts_only_equal_samples():
    # p rows one-hot -> the target's samples are deterministic
    p = rows(onehot(1, 3), onehot(2, 3), onehot(0, 3))
    assert match_sample(torch.tensor([1, 2]), p, gen()) == Verdict(2, [1, 2, 0], bonus=True)
    assert match_sample(torch.tensor([1, 0]), p, gen()) == Verdict(1, [1, 2])


# ------------------------------------------------------------------------ exact distributions

P = [0.6, 0.3, 0.1]
Q = [0.2, 0.5, 0.3]


def test_tv_distance():
    assert tv_distance(P, Q) == pytest.approx(0.5 * sum(abs(a - b) for a, b in zip(P, Q, strict=True)))
    assert tv_distance(P, P) == 0.0


def test_step_distribution_hand_example_lossless():
    accepted = [min(a, b) for a, b in zip(P, Q, strict=True)]  # draft y accepted: min(q, p)
    rejection = 1 - sum(accepted)
    plus = [max(a - b, 0) for a, b in zip(P, Q, strict=True)]
    expected = [acc + rejection * pl / sum(plus) for acc, pl in zip(accepted, plus, strict=True)]
    got = step_distribution(P, Q)
    assert got.tolist() == pytest.approx(expected, abs=1e-15)
    assert got.tolist() == pytest.approx(P, abs=1e-15)  # ... which is p: lossless
    assert acceptance_probability(P, Q) == pytest.approx(1 - tv_distance(P, Q))


@pytest.mark.parametrize("w", [0.2, 0.5, 0.9])
def test_step_distribution_hand_example_ensemble(w):
    v = [w * a + (1 - w) * b for a, b in zip(P, Q, strict=True)]
    got = step_distribution(P, Q, w)
    assert got.tolist() == pytest.approx(v, abs=1e-15)
    assert acceptance_probability(P, Q, w) == pytest.approx(sum(min(a, b) for a, b in zip(Q, v, strict=True)))
    assert acceptance_probability(P, Q, w) == pytest.approx(1 - w * tv_distance(P, Q))
    assert step_bias(P, Q, w) == pytest.approx((1 - w) * tv_distance(Q, P))
    assert step_bias(P, Q) == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize("w", [None, 0.4])
def test_step_distribution_degenerate_p_equals_q(w):
    got = step_distribution(P, P, w)
    assert got.tolist() == pytest.approx(P, abs=1e-15)
    assert acceptance_probability(P, P, w) == pytest.approx(1.0)


def test_emitted_distribution_k0_is_p():
    dist = emitted_distribution(lambda c: P, lambda c: Q, (), 0)
    assert dist == pytest.approx({(y,): P[y] for y in range(3)})


@pytest.mark.parametrize("k", [1, 2, 3])
def test_emitted_length_matches_leviathan_closed_form(k):
    # context-independent p, q: P(>= i + 1 tokens) = alpha^i, so E[#tokens] = (1 - alpha^(k+1)) / (1 - alpha)
    alpha = acceptance_probability(P, Q)
    dist = emitted_distribution(lambda c: P, lambda c: Q, (5,), k)
    assert sum(dist.values()) == pytest.approx(1.0, abs=1e-12)
    mean_len = sum(len(t) * pr for t, pr in dist.items())
    assert mean_len == pytest.approx((1 - alpha ** (k + 1)) / (1 - alpha), abs=1e-12)


def _table(seed: int, V: int, zeros: bool):
    """A random next-token table over contexts (deterministic per context)."""
    cache: dict = {}

    def fn(ctx):
        if ctx not in cache:
            g = torch.Generator().manual_seed(hash((seed, ctx)) % 2**31)
            logits = torch.randn(V, generator=g, dtype=torch.float64) * 1.5
            if zeros:
                logits[torch.rand(V, generator=g) < 0.3] = -math.inf
                if torch.isinf(logits).all():
                    logits[0] = 0.0
            cache[ctx] = torch.softmax(logits, 0)
        return cache[ctx]

    return fn


def chain_rule_errors(dist, p_fn, q_fn, prefix, k, w=None):
    """Max |P(starts with s + z) - P(starts with s, longer than |s|) * target(z | prefix + s)|,
    target = p (lossless), or v at drafted positions and p at the bonus (ensemble)."""
    starts, longer = defaultdict(float), defaultdict(float)
    for t, pr in dist.items():
        for j in range(len(t) + 1):
            starts[t[:j]] += pr
            if j < len(t):
                longer[t[:j]] += pr
    worst = 0.0
    for s, mass in longer.items():
        ctx = tuple(prefix) + s
        p = p_fn(ctx)
        tgt = p if (w is None or len(s) == k) else w * p + (1 - w) * q_fn(ctx)
        for z in range(len(p)):
            worst = max(worst, abs(starts.get(s + (z,), 0.0) - mass * float(tgt[z])))
    return worst, longer


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_emitted_distribution_is_lossless_chain_rule(k, seed):
    V = 3
    p_fn, q_fn = _table(seed, V, zeros=seed == 1), _table(100 + seed, V, zeros=False)
    prefix = (1, 2)
    dist = emitted_distribution(p_fn, q_fn, prefix, k)
    assert sum(dist.values()) == pytest.approx(1.0, abs=1e-12)
    assert max(len(t) for t in dist) == k + 1 and min(len(t) for t in dist) == 1
    # first token: exactly p(. | prefix)
    first = defaultdict(float)
    for t, pr in dist.items():
        first[t[0]] += pr
    assert [first[y] for y in range(V)] == pytest.approx(p_fn(prefix).tolist(), abs=1e-12)
    # first two tokens, when both are emitted: P(a, b) = P(a emitted and accepted) * p(b | prefix + a)
    worst, longer = chain_rule_errors(dist, p_fn, q_fn, prefix, k)
    assert worst < 1e-12
    assert any(len(s) == 1 for s in longer)  # the two-token case really was exercised


@pytest.mark.parametrize("w", [0.3, 0.7])
def test_emitted_distribution_ensemble_follows_v_then_p(w):
    k, V = 2, 3
    p_fn, q_fn = _table(7, V, zeros=False), _table(8, V, zeros=False)
    dist = emitted_distribution(p_fn, q_fn, (), k, w)
    worst, _ = chain_rule_errors(dist, p_fn, q_fn, (), k, w)
    assert worst < 1e-12
    # ... and it is not lossless: the first token is off by exactly (1 - w) TV(q, p)
    first = torch.zeros(V, dtype=torch.float64)
    for t, pr in dist.items():
        first[t[0]] += pr
    assert tv_distance(first, p_fn(())) == pytest.approx((1 - w) * tv_distance(q_fn(()), p_fn(())), abs=1e-12)
    assert chain_rule_errors(dist, p_fn, q_fn, (), k)[0] > 1e-3
