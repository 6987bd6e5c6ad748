"""Property tests of harness/engine/verify.py (hypothesis).

Statistical tests (sampling verifiers vs their exact distributions) use a G-test
(scipy.stats.power_divergence, lambda_="log-likelihood") at ALPHA = 1e-4 per example, after
pooling cells whose expected count is below 5. There are N_EXAMPLES examples for each of the
three weights (None, 0.3, 0.7) plus 2 fixed cases, so if the verifiers are right the chance that
*any* of them fails is at most (3 * N_EXAMPLES + 2) * ALPHA = 0.26% (Bonferroni) for a fresh draw
of examples and seeds. The run itself is reproducible: hypothesis is derandomized with no
example database, and every torch.Generator seed is derived from the example (crc32 of its
values), so a given checkout passes or fails the same way every time.

Power (`harness.checking.stats.gtest_power`, least favourable alternative, asserted in
`test_stated_power_of_the_property_examples`): with N_DRAWS = 600 one example detects a verifier
whose first token is off by TV 0.05 with probability only 0.075 / 0.046 / 0.019 (V = 2 / 3 / 6),
by TV 0.1 with 0.843 / 0.763 / 0.590, and by TV 0.2 with >= 0.9999: the examples catch gross errors
across many distributions. The smallest effect that matters, thresholds.tv_max = 0.05, is the
negative control's: a verifier biased by exactly TV 0.05, N = stats.samples_needed(0.05, 0.99,
ALPHA, 3) = 4257 draws, detection probability >= 0.99 (0.9990 for that alternative), measured in
`test_g_test_power_at_tv_max_is_as_stated`. The decode loop is checked at TV 0.05 in
tests/test_decode_sampling.py.

Exact properties (no randomness) are checked to 1e-6 or tighter.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats as sps
from scipy.stats import power_divergence

from harness.checking.stats import gtest_power, samples_needed
from harness.engine.verify import (
    acceptance_probability,
    emitted_distribution,
    ensemble_sample,
    speculative_sample,
    step_bias,
    step_distribution,
    tv_distance,
)
from harness.settings.config import Thresholds

ALPHA = 1e-4
TV_MAX = Thresholds().tv_max
N_EXAMPLES = 8
N_DRAWS = 600

STAT = settings(max_examples=N_EXAMPLES, derandomize=True, database=None, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
EXACT = settings(max_examples=60, derandomize=True, database=None, deadline=None)

WEIGHTS = [None, 0.3, 0.7]


@st.composite
def dist_pair(draw, max_v: int = 6):
    """Two distributions over the same small vocabulary, with exact zeros allowed."""
    V = draw(st.integers(2, max_v))
    mass = st.one_of(st.just(0.0), st.floats(0.02, 1.0))

    def one():
        xs = draw(st.lists(mass, min_size=V, max_size=V).filter(lambda xs: sum(xs) > 0))
        s = sum(xs)
        return [x / s for x in xs]

    return one(), one()


def seed_of(*values) -> int:
    return zlib.crc32(repr(values).encode())


def g_test_pvalue(counts, probs) -> float:
    """G-test p-value of observed counts against exact cell probabilities. Cells with
    probability 0 must be empty (an impossible outcome fails outright); cells with expected
    count < 5 are pooled (and a pool still < 5 is merged into the smallest other cell)."""
    counts = np.asarray(counts, dtype=float)
    probs = np.asarray(probs, dtype=float)
    zero = probs <= 0
    assert counts[zero].sum() == 0, f"impossible outcomes observed: counts {counts}, probabilities {probs}"
    counts, probs = counts[~zero], probs[~zero]
    n = counts.sum()
    exp = probs / probs.sum() * n
    small = exp < 5
    obs_c, exp_c = list(counts[~small]), list(exp[~small])
    if small.any():
        pooled_o, pooled_e = counts[small].sum(), exp[small].sum()
        if pooled_e >= 5 or not exp_c:
            obs_c.append(pooled_o)
            exp_c.append(pooled_e)
        else:
            i = int(np.argmin(exp_c))
            obs_c[i] += pooled_o
            exp_c[i] += pooled_e
    if len(exp_c) < 2:
        return 1.0
    return float(power_divergence(obs_c, exp_c, lambda_="log-likelihood").pvalue)


def first_token_counts(p_row, q_row, w, seed, n=N_DRAWS, verifier=None):
    """Counts of the first emitted token over n steps of (draft x ~ q, verify with k = 1)."""
    V = len(p_row)
    g = torch.Generator().manual_seed(seed)
    q = torch.tensor([q_row], dtype=torch.float32)
    p = torch.tensor([p_row, p_row], dtype=torch.float32)  # row 1 = bonus, irrelevant to token 0
    drafts = torch.multinomial(q[0], n, replacement=True, generator=g)
    if verifier is None:
        verifier = (lambda d, g: speculative_sample(d, q, p, g)) if w is None else (
            lambda d, g: ensemble_sample(d, q, p, w, g))
    counts = np.zeros(V)
    for x in drafts:
        counts[verifier(x.view(1), g).tokens[0]] += 1
    return counts


@pytest.mark.parametrize("w", WEIGHTS)
@STAT
@given(pq=dist_pair())
def test_first_token_matches_step_distribution(w, pq):
    p_row, q_row = pq
    counts = first_token_counts(p_row, q_row, w, seed_of(p_row, q_row, w))
    expected = step_distribution(p_row, q_row, w).numpy()
    pval = g_test_pvalue(counts, expected)
    assert pval > ALPHA, f"G-test p={pval:.2e}: counts {counts} vs expected {expected * counts.sum()}"


def test_g_test_has_power_against_a_wrong_verifier():
    """Gross negative control: a verifier that always accepts (emits q instead of p, TV 0.4)."""
    p_row, q_row = [0.6, 0.3, 0.1], [0.2, 0.5, 0.3]
    assert tv_distance(torch.tensor(p_row), torch.tensor(q_row)) == pytest.approx(0.4)

    def always_accept(d, g):
        return type("V", (), {"tokens": [int(d[0])]})()

    counts = first_token_counts(p_row, q_row, None, seed_of("control"), verifier=always_accept)
    assert g_test_pvalue(counts, step_distribution(p_row, q_row).numpy()) < ALPHA


# the negative control at the smallest effect that matters: the lossless verifier silently
# replaced by the static ensemble at the weight whose bias (1 - w) TV(p, q) is exactly tv_max
CONTROL_P, CONTROL_Q = [0.6, 0.3, 0.1], [0.2, 0.5, 0.3]
CONTROL_W = 1 - TV_MAX / 0.4
CONTROL_POWER = 0.99
CONTROL_N = samples_needed(TV_MAX, CONTROL_POWER, ALPHA, 3)


def control_power() -> float:
    """Asymptotic power of the G-test against the control's own alternative: noncentral
    chi-square with df = 2 and noncentrality N * chi2(v || p)."""
    p = np.array(CONTROL_P)
    v = step_distribution(CONTROL_P, CONTROL_Q, CONTROL_W).numpy()
    return float(sps.ncx2.sf(sps.chi2.ppf(1 - ALPHA, 2), 2, CONTROL_N * ((v - p) ** 2 / p).sum()))


def test_stated_power_of_the_property_examples():
    """The figures in the module docstring, computed."""
    rounded = {V: [round(gtest_power(N_DRAWS, tv, ALPHA, V), 3) for tv in (0.05, 0.1)] for V in (2, 3, 6)}
    assert rounded == {2: [0.075, 0.843], 3: [0.046, 0.763], 6: [0.019, 0.590]}
    assert min(gtest_power(N_DRAWS, 0.2, ALPHA, V) for V in range(2, 7)) >= 0.9999
    assert CONTROL_N == 4257 and gtest_power(CONTROL_N, TV_MAX, ALPHA, 3) >= CONTROL_POWER
    assert step_bias(CONTROL_P, CONTROL_Q, CONTROL_W) == pytest.approx(TV_MAX, abs=1e-12)
    assert round(control_power(), 4) == 0.9990


def test_wrong_verifier_at_tv_max_is_caught():
    """A 'lossless' verifier whose first token is biased by exactly TV 0.05, through the real
    ensemble verifier: detected at ALPHA with probability >= 0.99 (this draw: detected)."""
    counts = first_token_counts(CONTROL_P, CONTROL_Q, CONTROL_W, seed_of("control", TV_MAX), n=CONTROL_N)
    expected = step_distribution(CONTROL_P, CONTROL_Q).numpy()  # what a lossless verifier must emit
    assert g_test_pvalue(counts, expected) < ALPHA
    # and the same draws fit the biased distribution they come from
    assert g_test_pvalue(counts, step_distribution(CONTROL_P, CONTROL_Q, CONTROL_W).numpy()) > ALPHA


def test_g_test_power_at_tv_max_is_as_stated():
    """The stated detection probability is met: 2000 count vectors of CONTROL_N draws from the
    biased distribution, the same pooled G-test; the measured miss rate must be consistent with
    a true miss rate <= 1 - 0.99 (one-sided binomial test at 1e-3; 2000 runs fail it from 36
    misses, i.e. a measured power below 0.982)."""
    rng = np.random.default_rng(5)
    runs = 2000
    biased = step_distribution(CONTROL_P, CONTROL_Q, CONTROL_W).numpy()
    expected = np.array(CONTROL_P)
    misses = sum(g_test_pvalue(c, expected) >= ALPHA for c in rng.multinomial(CONTROL_N, biased, runs))
    assert sps.binom.sf(misses - 1, runs, 1 - CONTROL_POWER) >= 1e-3, f"measured power {1 - misses / runs:.4f}"


def test_two_step_sequences_match_emitted_distribution():
    """Whole emitted sequences of k = 2 drafts with context-dependent p, q (lossless and
    ensemble): empirical counts vs `emitted_distribution`, G-test at ALPHA each."""
    V, k, n = 3, 2, 1200

    def table(seed):
        out = {}

        def fn(ctx):
            if ctx not in out:
                g = torch.Generator().manual_seed(seed_of(seed, ctx))
                out[ctx] = torch.softmax(torch.randn(V, generator=g, dtype=torch.float64), 0)
            return out[ctx]

        return fn

    p_fn, q_fn = table("p"), table("q")
    for w in (None, 0.5):
        exact = emitted_distribution(p_fn, q_fn, (), k, w)
        g = torch.Generator().manual_seed(seed_of("seq", w))
        counts: dict = {}
        for _ in range(n):
            ctx: tuple[int, ...] = ()
            q_rows = []
            for _ in range(k):
                q_row = q_fn(ctx).float()
                q_rows.append(q_row)
                ctx += (int(torch.multinomial(q_row, 1, generator=g)),)
            p = torch.stack([p_fn(ctx[:i]).float() for i in range(k + 1)])
            draft, q = torch.tensor(ctx), torch.stack(q_rows)
            v = speculative_sample(draft, q, p, g) if w is None else ensemble_sample(draft, q, p, w, g)
            counts[tuple(v.tokens)] = counts.get(tuple(v.tokens), 0) + 1
        assert set(counts) <= set(exact), f"impossible sequences: {set(counts) - set(exact)}"
        keys = sorted(exact)
        pval = g_test_pvalue([counts.get(t, 0) for t in keys], [exact[t] for t in keys])
        assert pval > ALPHA, f"w={w}: G-test p={pval:.2e}"


# --------------------------------------------------------------------------------- exact


@EXACT
@given(pq=dist_pair(8))
def test_lossless_step_distribution_is_p(pq):
    p_row, q_row = pq
    got = step_distribution(p_row, q_row)
    assert torch.allclose(got, torch.tensor(p_row, dtype=torch.float64), atol=1e-6, rtol=0)
    assert step_bias(p_row, q_row) < 1e-6


@EXACT
@given(pq=dist_pair(8), w=st.floats(0.01, 0.99))
def test_ensemble_step_distribution_is_v(pq, w):
    p_row, q_row = pq
    p, q = torch.tensor(p_row, dtype=torch.float64), torch.tensor(q_row, dtype=torch.float64)
    v = w * p + (1 - w) * q
    got = step_distribution(p_row, q_row, w)
    assert torch.allclose(got, v, atol=1e-6, rtol=0)
    assert abs(float(got.sum()) - 1.0) < 1e-9
    assert abs(step_bias(p_row, q_row, w) - (1 - w) * tv_distance(q, p)) < 1e-6


@EXACT
@given(pq=dist_pair(8), w=st.one_of(st.none(), st.floats(0.01, 0.99)))
def test_acceptance_probability_identity(pq, w):
    p_row, q_row = pq
    p, q = torch.tensor(p_row, dtype=torch.float64), torch.tensor(q_row, dtype=torch.float64)
    v = p if w is None else w * p + (1 - w) * q
    alpha = acceptance_probability(p_row, q_row, w)
    assert abs(alpha - float(torch.minimum(q, v).sum())) < 1e-9
    assert abs(alpha - (1 - tv_distance(q, v))) < 1e-9
    assert abs(alpha - (1 - (1.0 if w is None else w) * tv_distance(p, q))) < 1e-9


@EXACT
@given(p_row=dist_pair(8).map(lambda pq: pq[0]), w=st.one_of(st.none(), st.floats(0.01, 0.99)))
def test_degenerate_p_equals_q(p_row, w):
    got = step_distribution(p_row, p_row, w)
    assert torch.allclose(got, torch.tensor(p_row, dtype=torch.float64), atol=1e-12, rtol=0)
    assert abs(acceptance_probability(p_row, p_row, w) - 1.0) < 1e-12
