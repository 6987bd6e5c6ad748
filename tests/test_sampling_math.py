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
        "distribution": Field("distribution", {"a": 500, "b": 500}, {"expected": expected}),
    })
    check = CaseCheck("outputs", "c", Rules(0.01, Thresholds(), {}), baseline=base)
    check.observe("distribution", Field("distribution", counts_new, {"expected": expected}))
    check.observe("tokens", Field("tokens", [tokens_new], {"margins": [[5.0, 5.0, 5.0]], "seeded_by": "distribution"}))
    check.observe("text", Field("exact", "x q z", {"follows": "tokens"}))
    return {o.field: o for o in check.outcomes()}


def test_a_seeded_stream_that_differs_while_the_distribution_fits_is_rng_stream():
    out = _outputs([1, 9, 3], {"a": 488, "b": 512})
    assert out["tokens"].status is Status.CHANGED and out["tokens"].category is Category.RNG_STREAM
    assert out["text"].status is Status.CHANGED and out["text"].category is Category.RNG_STREAM
    assert out["distribution"].status is Status.PASS


def test_a_seeded_stream_whose_distribution_no_longer_fits_stays_a_regression():
    out = _outputs([1, 9, 3], {"a": 700, "b": 300})
    assert out["distribution"].status is Status.REGRESSION
    assert out["tokens"].status is Status.REGRESSION and out["tokens"].category is Category.REAL_CHANGE
    assert out["text"].status is Status.REGRESSION


def test_an_applied_processor_the_engine_does_not_implement_is_never_silently_dropped():
    """The expected joint is computed from the processors generate() really applied; one outside
    `Sampling` (e.g. typical-p) makes `effective()` None, and the suite then skips the fit with the
    processor list as its reason instead of checking against a distribution it cannot compute."""
    from harness.subjects.hf_sampling import Draws

    known = Draws(processors=[["TopKLogitsWarper", {"top_k": 50}], ["TemperatureLogitsWarper", {"temperature": 0.7}]])
    assert known.effective() == Sampling(temperature=0.7, top_k=50)
    unknown = Draws(processors=[["TopKLogitsWarper", {"top_k": 50}], ["TypicalLogitsWarper", {"mass": 0.9}]])
    assert unknown.effective() is None
