"""harness/engine/decode.py under sampling: the whole draft -> verify -> commit/rewind loop, run
many times, against the exact distribution of its output computed from transformers' own
next-token probabilities.

A tiny Llama (vocab 3, one layer, random weights; target and assistant with different seeds)
is built once in transformers and loaded into the engine with the same tensors. For T = 3 new
tokens and k = 2 the loop takes the steps decode takes (draft min(k, room) tokens, one target
pass, verify, rewind); the exact distribution of the 3 tokens composes `emitted_distribution`
over those steps, with p and q read from transformers' LlamaForCausalLM (float64 softmax of its
fp32 logits). Lossless paths (assistant, prompt lookup) must give the target's chain rule
p(x1) p(x2|x1) p(x3|x1,x2); the static ensemble its own biased distribution.

Decisions: `stats.g_test` (Monte Carlo G-test, exact size) at ALPHA = 1e-3 per check. N is
`stats.samples_needed(tv_max, POWER, ALPHA, 27)` draws, so every check detects an output
distribution at TV >= thresholds.tv_max = 0.05 from the expected one with probability >= POWER
(least favourable alternative, `stats.gtest_power`). The negative control runs the ensemble at
the weight whose output is exactly at TV = tv_max from the lossless distribution - the smallest
bias that matters - and must be told apart from lossless. Seeds are fixed (reproducible); for a
fresh seed the chance that one of the three null checks fails is <= 3 * ALPHA = 0.3 %.
Draw-for-draw equality with transformers' generate() is not attempted: assisted generation
draws the draft with the global RNG inside the assistant's own generate() call, in an order
decode() does not reproduce; one verification step is matched draw for draw in
tests/test_verify_vs_transformers.py.
"""

from __future__ import annotations

import pytest
import torch
from scipy import optimize
from scipy import stats as sps

from harness.checking import stats
from harness.engine.decode import decode
from harness.engine.drafters import AssistantDrafter, PromptLookupDrafter
from harness.engine.model import Config, Model
from harness.engine.verify import emitted_distribution, tv_distance
from harness.settings.config import Thresholds

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

V, T, K = 3, 3, 2
PROMPT = [0, 1, 2, 0]
ALPHA, POWER = 1e-3, 0.95
TV_MAX = Thresholds().tv_max
BINS = V**T
N = stats.samples_needed(TV_MAX, POWER, ALPHA, BINS)


def tiny_llama(seed: int) -> tuple[Model, object]:
    """The same random weights as a transformers LlamaForCausalLM and as an engine Model."""
    config = transformers.LlamaConfig(vocab_size=V, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1, head_dim=4,
                                      rms_norm_eps=1e-6, tie_word_embeddings=False)
    hf = transformers.LlamaForCausalLM(config).eval()
    g = torch.Generator().manual_seed(seed)
    state = {name: (torch.randn(t.shape, generator=g) * (0.25 if name == "lm_head.weight" else 0.5)
                    if t.dim() == 2 else torch.ones(t.shape))
             for name, t in hf.state_dict().items()}
    hf.load_state_dict(state, strict=True)
    return Model(Config.from_dict(config.to_dict()), state), hf


@pytest.fixture(scope="module")
def models():
    target, hf_target = tiny_llama(1)
    assistant, hf_assistant = tiny_llama(2)
    cache: dict = {}

    def next_token(hf, ctx: tuple[int, ...]) -> torch.Tensor:
        key = (id(hf), ctx)
        if key not in cache:
            with torch.no_grad():
                logits = hf(torch.tensor([PROMPT + list(ctx)])).logits[0, -1]
            cache[key] = torch.softmax(logits.double(), dim=-1)
        return cache[key]

    return target, assistant, (lambda ctx: next_token(hf_target, ctx)), (lambda ctx: next_token(hf_assistant, ctx))


def decode_distribution(p_fn, q_fn, k: int, w: float | None = None) -> dict[tuple[int, ...], float]:
    """Exact distribution of decode()'s T new tokens: each step drafts min(k, room) tokens
    (room = T - emitted - 1; none when room is 0) and emits `emitted_distribution`'s tuple."""
    out: dict[tuple[int, ...], float] = {}

    def walk(seq: tuple[int, ...], prob: float) -> None:
        if len(seq) >= T:
            out[seq] = out.get(seq, 0.0) + prob
            return
        room = T - len(seq) - 1
        for emitted, mass in emitted_distribution(p_fn, q_fn, seq, min(k, room), w).items():
            walk(seq + emitted, prob * mass)

    walk((), 1.0)
    return out


def draw(run, n: int = N) -> dict[tuple[int, ...], int]:
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(n):
        tokens = tuple(run())
        assert len(tokens) == T
        counts[tokens] = counts.get(tokens, 0) + 1
    return counts


def g_test(counts: dict, exact: dict) -> float:
    keys = sorted(exact)
    assert set(counts) <= set(exact), f"impossible outputs {set(counts) - set(exact)}"
    return stats.g_test([counts.get(key, 0) for key in keys], [exact[key] for key in keys], alpha=ALPHA).p_value


def test_sample_size_gives_the_stated_power():
    """N = 5312 draws over 27 outcomes: power >= 0.95 at TV 0.05, level 1e-3 (and N - 1 would not do)."""
    assert (N, BINS, TV_MAX) == (5312, 27, 0.05)
    assert stats.gtest_power(N, TV_MAX, ALPHA, BINS) >= POWER > stats.gtest_power(N - 1, TV_MAX, ALPHA, BINS)


def test_engine_and_transformers_agree_on_the_next_token_distributions(models):
    target, _, p_fn, _ = models
    for ctx in [(), (0,), (2, 1), (1, 1, 0)]:
        ids = PROMPT + list(ctx)
        ours = torch.softmax(target.forward(torch.tensor(ids), torch.arange(len(ids)), None).logits[-1].double(), -1)
        assert torch.allclose(ours, p_fn(ctx), atol=1e-6, rtol=0)


@pytest.mark.parametrize("drafter", ["assistant", "prompt_lookup"])
def test_lossless_sampling_decode_matches_the_target_chain_rule(models, drafter):
    target, assistant, p_fn, q_fn = models
    chain = decode_distribution(p_fn, q_fn, k=0)
    assert abs(sum(chain.values()) - 1) < 1e-12 and len(chain) == BINS
    g = torch.Generator().manual_seed(7)
    make = (lambda: AssistantDrafter(assistant)) if drafter == "assistant" else PromptLookupDrafter
    accepted = drafted = 0

    def run():
        nonlocal accepted, drafted
        result = decode(target, PROMPT, T, drafter=make(), k=K, mode="sample", generator=g,
                        static_max_len=16 if drafter == "assistant" else None)
        accepted, drafted = accepted + result.acceptance[0], drafted + result.acceptance[1]
        return result.tokens

    counts = draw(run)
    assert 0 < accepted < drafted  # drafts were accepted and rejected: both branches of the loop ran
    p_value = g_test(counts, chain)
    assert p_value > ALPHA, f"{drafter}: decode(mode='sample') differs from the chain rule, G-test p={p_value:.2e}"


def test_ensemble_sampling_decode_matches_its_exact_distribution_and_is_told_apart_from_lossless(models):
    """The negative control at the smallest effect that matters: w is chosen so that the
    ensemble's exact output distribution is at TV = tv_max from the lossless one."""
    target, assistant, p_fn, q_fn = models
    chain = decode_distribution(p_fn, q_fn, k=0)

    def bias(w: float) -> float:
        ens = decode_distribution(p_fn, q_fn, K, w)
        return tv_distance([ens[key] for key in sorted(chain)], [chain[key] for key in sorted(chain)])

    assert bias(0.05) > TV_MAX > bias(0.999)
    w = optimize.brentq(lambda x: bias(x) - TV_MAX, 0.05, 0.999, xtol=1e-12)
    exact = decode_distribution(p_fn, q_fn, K, w)
    assert bias(w) == pytest.approx(TV_MAX, abs=1e-9)
    # power of the control against this very alternative (noncentrality N * chi2(ens || chain)),
    # and the least favourable bound it must beat
    chi2 = sum((exact[key] - chain[key]) ** 2 / chain[key] for key in chain)
    power = float(sps.ncx2.sf(sps.chi2.ppf(1 - ALPHA, BINS - 1), BINS - 1, N * chi2))
    assert power >= stats.gtest_power(N, TV_MAX, ALPHA, BINS) >= POWER

    g = torch.Generator().manual_seed(8)
    counts = draw(lambda: decode(target, PROMPT, T, drafter=AssistantDrafter(assistant), k=K,
                                 mode="ensemble_sample", w=w, generator=g).tokens)
    p_own = g_test(counts, exact)
    assert p_own > ALPHA, f"ensemble decode differs from its exact distribution (w={w:.4f}), G-test p={p_own:.2e}"
    p_lossless = g_test(counts, chain)
    assert p_lossless < ALPHA, f"a bias of TV {TV_MAX} went undetected (p={p_lossless:.2e}, power {power:.3f})"
