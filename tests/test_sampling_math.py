"""The sampling suite's expected side: processors against transformers' warpers, and the exact
joints (harness/engine/joint.py) against independent derivations."""

from __future__ import annotations

import itertools

import pytest
import torch

from harness.checking.core import CaseCheck, Rules
from harness.engine import joint, verify
from harness.engine.processors import Sampling, probs
from harness.schema import Category, Field, Record, Status
from harness.settings.config import Thresholds

SETTINGS = [Sampling(temperature=0.7), Sampling(top_k=8), Sampling(top_p=0.7), Sampling(min_p=0.2),
            Sampling(repetition_penalty=1.5), Sampling(temperature=0.8, top_k=20, top_p=0.9, min_p=0.05,
                                                       repetition_penalty=1.2)]


def _transformers_probs(logits: torch.Tensor, context: list[int], s: Sampling) -> torch.Tensor:
    from transformers.generation import logits_process as lp

    procs = []
    if s.repetition_penalty:
        procs.append(lp.RepetitionPenaltyLogitsProcessor(s.repetition_penalty))
    if s.temperature != 1.0:
        procs.append(lp.TemperatureLogitsWarper(s.temperature))
    if s.top_k:
        procs.append(lp.TopKLogitsWarper(s.top_k))
    if s.top_p is not None:
        procs.append(lp.TopPLogitsWarper(s.top_p))
    if s.min_p is not None:
        procs.append(lp.MinPLogitsWarper(s.min_p))
    z = logits[None].clone()
    ids = torch.tensor([context])
    for p in procs:
        z = p(ids, z)
    return torch.softmax(z[0], dim=-1)


@pytest.mark.parametrize("s", SETTINGS, ids=lambda s: s.describe())
def test_processors_match_transformers_warpers(s):
    """Written from the definitions, they agree with transformers' processors on random logits
    (which tokens survive, and the probabilities to float32 rounding)."""
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        logits = torch.randn(64, generator=gen) * 3
        context = torch.randint(0, 64, (12,), generator=gen).tolist()
        ours, theirs = probs(logits, context, s), _transformers_probs(logits, context, s)
        assert torch.equal(ours > 0, theirs > 0)
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)


def test_sampling_kwargs_only_name_active_settings():
    assert Sampling().kwargs() == {}
    assert Sampling(temperature=0.7, top_k=5).kwargs() == {"temperature": 0.7, "top_k": 5}


# ----------------------------------------------------------------------------------------------
# exact joints on small random "models" (a next-token table per context)


def _tables(V: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    memo: dict[tuple, torch.Tensor] = {}

    def model(tag: str):
        def f(ctx: tuple[int, ...]) -> torch.Tensor:
            key = (tag, ctx)
            if key not in memo:
                memo[key] = torch.softmax(torch.randn(V, generator=gen, dtype=torch.float64) * 2, dim=-1)
            return memo[key]
        return f

    return model("p"), model("q")


def _chain(p, q, prompt, K, w, schedule_last_is_p=True):
    """v(z1|.) ... v(z_{K-1}|.) p(z_K|.) for w, all-p for lossless (no lumping)."""
    V = p(tuple(prompt)).numel()
    out = {}
    for seq in itertools.product(range(V), repeat=K):
        mass = 1.0
        for t in range(K):
            ctx = tuple(prompt) + seq[:t]
            row = p(ctx) if (w is None or (schedule_last_is_p and t == K - 1)) else w * p(ctx) + (1 - w) * q(ctx)
            mass *= float(row[seq[t]])
        out[seq] = mass
    return out


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lossless_speculative_joint_is_the_target_chain(K, seed):
    p, q = _tables(5, seed)
    target = joint.target_joint(p, [1, 2], K, eos=None, min_mass=0.0)
    for draft_tokens in (1, 2, 4):
        spec = joint.speculative_joint(p, q, [1, 2], K, draft_tokens, w=None, eos=None, min_mass=0.0)
        assert set(spec.cells) == set(target.cells)
        for cell, mass in target.cells.items():
            assert spec.cells[cell] == pytest.approx(mass, abs=1e-12)


@pytest.mark.parametrize("w", [0.3, 0.7])
def test_ensemble_joint_follows_v_at_drafted_positions_and_p_at_the_last(w):
    """Derived, not assumed: with the drafter never drafting past max_length (k = min(D, r - 1)),
    every token but the last is emitted at a drafted position (v) and the last at a bonus / plain
    position (p), whatever the step boundaries - K = 3, D = 4 computed through the step process."""
    p, q = _tables(4, 7)
    spec = joint.speculative_joint(p, q, [3], 3, 4, w=w, eos=None, min_mass=0.0)
    closed = _chain(p, q, [3], 3, w)
    assert sum(spec.cells.values()) == pytest.approx(1.0, abs=1e-12)
    for cell, mass in closed.items():
        assert spec.cells.get(cell, 0.0) == pytest.approx(mass, abs=1e-12)


@pytest.mark.parametrize("w", [None, 0.4])
def test_two_token_joint_composes_one_verifier_step(w):
    """K = 2, one draft in the first step (verify.emitted_distribution, an independent
    enumeration of a step); when that step emits one token the second comes from a plain step (p)."""
    p, q = _tables(5, 3)
    prompt = (2,)
    step = verify.emitted_distribution(p, q, prompt, 1, w)
    expected: dict[tuple[int, ...], float] = {}
    for emitted, mass in step.items():
        if len(emitted) == 2:
            expected[emitted] = expected.get(emitted, 0.0) + mass
        else:
            for z, pz in enumerate(p(prompt + emitted).tolist()):
                expected[emitted + (z,)] = expected.get(emitted + (z,), 0.0) + mass * pz
    spec = joint.speculative_joint(p, q, prompt, 2, 4, w=w, eos=None, min_mass=0.0)
    for cell, mass in expected.items():
        assert spec.cells.get(cell, 0.0) == pytest.approx(mass, abs=1e-12)


def test_end_token_stops_a_tuple_and_lumping_is_a_function_of_the_tuple():
    p, q = _tables(4, 11)
    full = joint.target_joint(p, [0], 3, eos=1, min_mass=0.0)
    assert all(c[-1] == 1 or len(c) == 3 for c in full.cells)
    assert all(1 not in c[:-1] for c in full.cells)
    assert sum(full.cells.values()) == pytest.approx(1.0, abs=1e-12)
    lumped = joint.target_joint(p, [0], 3, eos=1, min_mass=0.02)
    assert set(lumped.cells) == {c for c, m in full.cells.items() if m >= 0.02}
    probs_ = lumped.probabilities()
    assert probs_[joint.OTHER] == pytest.approx(sum(m for m in full.cells.values() if m < 0.02), abs=1e-12)
    counts = lumped.counts([c for c in full.cells][:5])
    assert sum(counts.values()) == 5 and set(counts) == set(probs_)


# ----------------------------------------------------------------------------------------------
# the rng-stream rule


def _outputs(tokens_new, counts_new):
    expected = {"a": 0.5, "b": 0.5}
    base = Record("outputs", "c", {}, {
        "tokens": Field("tokens", [[1, 2, 3]], {"margins": [[5.0, 5.0, 5.0]], "seeded_by": "distribution"}),
        "text": Field("exact", "x y z", {"follows": "tokens"}),
        "distribution": Field("distribution", {"a": 1000, "b": 1000}, {"expected": expected}),
    })
    check = CaseCheck("outputs", "c", Rules(0.01, Thresholds(), {}), baseline=base)
    check.observe("distribution", Field("distribution", counts_new, {"expected": expected}))
    check.observe("tokens", Field("tokens", [tokens_new], {"margins": [[5.0, 5.0, 5.0]], "seeded_by": "distribution"}))
    check.observe("text", Field("exact", "x q z", {"follows": "tokens"}))
    return {o.field: o for o in check.outcomes()}


def test_a_seeded_stream_that_differs_while_the_distribution_fits_is_rng_stream():
    out = _outputs([1, 9, 3], {"a": 976, "b": 1024})  # n = 2000: a fit that can rule out TV 0.05
    assert out["tokens"].status is Status.CHANGED and out["tokens"].category is Category.RNG_STREAM
    assert out["text"].status is Status.CHANGED and out["text"].category is Category.RNG_STREAM
    assert out["distribution"].status is Status.PASS


def test_a_seeded_stream_whose_distribution_no_longer_fits_stays_a_regression():
    out = _outputs([1, 9, 3], {"a": 1400, "b": 600})
    assert out["distribution"].status is Status.REGRESSION
    assert out["tokens"].status is Status.REGRESSION and out["tokens"].category is Category.REAL_CHANGE
    assert out["text"].status is Status.REGRESSION


def test_an_applied_processor_the_engine_does_not_implement_is_never_silently_dropped():
    """The expected joint is computed from the processors generate() really applied; one outside
    `Sampling` (e.g. typical-p) makes `effective()` None, and the suite then skips the fit with the
    processor list as its reason instead of checking against a distribution it cannot compute."""
    from harness.subjects.hf_sampling import Draws

    known = Draws(processor_lists=[[["TopKLogitsWarper", {"top_k": 50}], ["TemperatureLogitsWarper", {"temperature": 0.7}]]])
    assert known.effective() == Sampling(temperature=0.7, top_k=50)
    unknown = Draws(processor_lists=[[["TopKLogitsWarper", {"top_k": 50}], ["TypicalLogitsWarper", {"mass": 0.9}]]])
    assert unknown.effective() is None


def test_a_processor_chain_applies_each_processor_in_its_order_repeats_kept():
    """The drafter's list as 5.x builds it - the target's warpers, then its own copies again - is applied
    as built: the temperature twice is T^2; a min-length processor is identity once the context is long."""
    from harness.subjects.hf_sampling import Draws, chain_steps

    doubled = [["TemperatureLogitsWarper", {"temperature": 1.5}], ["TopKLogitsWarper", {"top_k": 50}],
               ["MinLengthLogitsProcessor", {"min_length": 3}],
               ["TemperatureLogitsWarper", {"temperature": 1.5}], ["TopKLogitsWarper", {"top_k": 50}]]
    assert Draws(processor_lists=[doubled[:2], doubled]).drafter_processors == doubled
    assert effective_of(doubled) is None  # not one Sampling: the black box applies the chain itself
    logits, context = torch.randn(512, generator=torch.Generator().manual_seed(3)), [5, 6, 7]
    steps = chain_steps(doubled, len(context))
    assert len(steps) == 4
    assert torch.allclose(probs(logits, context, steps), probs(logits, context, Sampling(temperature=2.25, top_k=50)),
                          atol=1e-6)
    with pytest.raises(ValueError, match="masks the end token"):
        chain_steps(doubled, 2)
    with pytest.raises(ValueError, match="no engine counterpart"):
        chain_steps([["TypicalLogitsWarper", {"mass": 0.9}]], 9)


def effective_of(chain):
    from harness.subjects.hf_sampling import effective

    return effective(chain)


# ----------------------------------------------------------------------------------------------
# the white box's implied emitted distribution against the closed forms


def _rule(p: torch.Tensor, q: torch.Tensor, w: float | None) -> tuple[dict[int, float], dict[int, torch.Tensor]]:
    """What the textbook verifier does with each draft y: A(y) = min(1, v(y)/q(y)), R = norm([p - q]+)
    (the ensemble's fallback p when that is 0) - the probes of a correct verifier."""
    v = p if w is None else w * p + (1 - w) * q
    res = torch.clamp(p - q, min=0)
    res = p if float(res.sum()) <= 1e-300 else res / res.sum()
    support = torch.nonzero(q > 0).flatten().tolist()
    return {y: min(1.0, float(v[y] / q[y])) for y in support}, {y: res for y in support}


@pytest.mark.parametrize("w", [None, 0.3, 0.7])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_implied_emission_of_the_textbook_verifier_is_the_closed_form(w, seed):
    """P(z) = sum_y q(y)[A(y) 1{z=y} + (1 - A(y)) R(z|y)] equals `step_distribution` (= p lossless, = v
    ensemble) - the white box's emitted distribution is the engine's exact one when the verifier is right."""
    gen = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(64, generator=gen, dtype=torch.float64) * 2, -1)
    q = torch.softmax(torch.randn(64, generator=gen, dtype=torch.float64) * 2, -1)
    q[q < q.quantile(0.5)] = 0  # a drafter that filters (top-k): part of p lies outside supp(q)
    q = q / q.sum()
    accept, residual = _rule(p, q, w)
    implied = verify.implied_emission(q, accept, residual)
    closed = verify.step_distribution(p, q, w)
    assert verify.tv_distance(implied, closed) < 1e-12
    assert verify.tv_distance(implied, p if w is None else w * p + (1 - w) * q) < 1e-12


def test_the_implied_emission_shows_a_wrong_rule_by_its_exact_bias():
    """A verifier whose acceptance ratio is read 3 % low (p/q x 0.97) emits P != p, by exactly the TV the
    closed form gives; a rejection that draws nothing cannot be turned into a distribution."""
    gen = torch.Generator().manual_seed(4)
    p = torch.softmax(torch.randn(32, generator=gen, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(32, generator=gen, dtype=torch.float64), -1)
    accept, residual = _rule(p, q, None)
    low = {y: min(1.0, 0.97 * float(p[y] / q[y])) for y in accept}
    implied = verify.implied_emission(q, low, residual)
    res = residual[0]
    by_hand = torch.stack([q[y] * low[y] * torch.nn.functional.one_hot(torch.tensor(y), 32).double()
                           + q[y] * (1 - low[y]) * res for y in accept]).sum(0)
    assert verify.tv_distance(implied, by_hand) < 1e-12 and verify.tv_distance(implied, p) > 1e-3
    with pytest.raises(ValueError, match="draws nothing"):
        verify.implied_emission(q, low, {})
    with pytest.raises(ValueError, match="no acceptance probability"):
        verify.implied_emission(q, {}, residual)
