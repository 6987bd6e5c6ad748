"""Statistics of the harness: goodness of fit, TV bounds, power / sample size, multiple testing.

Randomness is decided with tests at a stated false-alarm rate, never with a loose tolerance.
The tests themselves come from scipy; this module only chooses them, prepares their input and
documents what they promise.

Run-level false alarms. A run makes many statistical decisions (one per rate / distribution /
latency field). `per_test_alpha(alpha, m)` gives each of the run's `m` tests that may compare
statistically the level ``alpha / m`` (Bonferroni; m rounded up to a power of two, `tests_bucket`), and the plugin applies Holm's step-down
procedure (`holm`) to the p-values of the statistical checks *within* one test at that level.
By the union bound the probability that a run with no real change reports any statistical
regression is at most ``sum_t alpha/m = alpha`` (Holm controls the family-wise rate of each test at
its level, for any dependence between the p-values).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


class _Lazy:
    """A module imported on first use: scipy.stats and scipy.optimize take ~0.4 s to import, and
    every pytest start loads this module through the plugin, also where nothing statistical is
    decided (a toy project, a collect-only run)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        import importlib

        return getattr(importlib.import_module(self._name), attr)


optimize = _Lazy("scipy.optimize")
sps = _Lazy("scipy.stats")

# ----------------------------------------------------------------------------------------------
# multiple testing


def tests_bucket(m: int) -> int:
    """`m` rounded up to the next power of two (at least 1): the test count a run's alpha is split by.

    A statistical field's sample size is chosen for power at the per-test alpha, so an alpha that
    moved with every case added to or removed from a suite would change the draws - and the golden
    records - of every sampling and bias field at each such edit. Rounding m up to a power of two
    keeps alpha, the sample sizes and the records fixed until the run doubles (399 golden tests of a
    default run -> 512), at a cost of at most ~5 % more draws (z at alpha/2m vs alpha/m). It is
    conservative: alpha / bucket(m) <= alpha / m, so the run-level false-alarm rate stays <= alpha.
    """
    m = max(int(m), 1)
    return 1 << (m - 1).bit_length()


def per_test_alpha(alpha: float, m: int) -> float:
    """Bonferroni share of one of `m` tests, m rounded up (`tests_bucket`): ``alpha / bucket(m)``."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    return alpha / tests_bucket(m)


def holm_adjust(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values: with p_(1) <= ... <= p_(m) sorted ascending,

        p~_(i) = max_{j <= i} min(1, (m - j + 1) * p_(j)),

    returned in the input order. Rejecting every hypothesis with ``p~ <= alpha`` is Holm's
    step-down procedure, which keeps the family-wise error rate at ``alpha``.
    """
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return []
    if np.any(np.isnan(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError(f"p-values must lie in [0, 1], got {list(pvalues)!r}")
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted_sorted = np.maximum.accumulate(scaled)
    adjusted = np.empty(m)
    adjusted[order] = adjusted_sorted
    return adjusted.tolist()


def holm(pvalues: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down rejections at family-wise level `alpha` (True = reject), input order.

    Reject H_(1..i) while ``p_(j) <= alpha / (m - j + 1)`` for every j <= i; stop at the first
    p-value that fails. Family-wise false-alarm rate <= alpha for any dependence structure.
    """
    return [q <= alpha for q in holm_adjust(pvalues)]


# ----------------------------------------------------------------------------------------------
# proportions


@dataclass(frozen=True)
class ProportionTest:
    """Two proportions k1/n1 (observed) vs k2/n2 (baseline).

    `p_value` is the two-sided Fisher exact test (`scipy.stats.fisher_exact`) of the 2x2 table
    ``[[k1, n1-k1], [k2, n2-k2]]``; being exact and conditional it never exceeds its level under
    the null (false-alarm rate <= alpha, conservative for small n). `z` is the pooled two-proportion
    z statistic ``(p1 - p2) / sqrt(p(1-p)(1/n1 + 1/n2))``, p = (k1+k2)/(n1+n2), reported for the
    reader only.
    """

    p1: float
    p2: float
    difference: float
    z: float
    p_value: float


def two_proportion_test(k1: int, n1: int, k2: int, n2: int) -> ProportionTest:
    """Is k1/n1 different from k2/n2? (two-sided; see `ProportionTest`)."""
    for name, k, n in (("observed", k1, n1), ("baseline", k2, n2)):
        if n <= 0 or not 0 <= k <= n:
            raise ValueError(f"{name} rate needs 0 <= k <= n and n > 0, got k={k}, n={n}")
    p1, p2 = k1 / n1, k2 / n2
    pooled = (k1 + k2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    z = (p1 - p2) / se if se > 0 else 0.0
    result = sps.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]], alternative="two-sided")
    return ProportionTest(p1=p1, p2=p2, difference=p1 - p2, z=z, p_value=float(min(1.0, result.pvalue)))


@dataclass(frozen=True)
class BinomialTest:
    """Is k out of n consistent with the exact probability p? Two-sided exact binomial test
    (scipy.stats.binomtest: false-alarm rate <= alpha) and the Clopper-Pearson interval."""

    p_value: float
    low: float
    high: float


def binomial_test(k: int, n: int, p: float, confidence: float = 0.99) -> BinomialTest:
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"binomial test needs 0 <= k <= n and n > 0, got k={k}, n={n}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"binomial test needs a probability in [0, 1], got {p}")
    result = sps.binomtest(k, n, p)
    ci = result.proportion_ci(confidence)
    return BinomialTest(float(result.pvalue), float(ci.low), float(ci.high))


# ----------------------------------------------------------------------------------------------
# distributions


def tv_distance(p: Sequence[float], q: Sequence[float]) -> float:
    """Total variation distance ``TV(p, q) = 1/2 * sum_i |p_i - q_i|`` (both normalised first)."""
    a, b = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"distributions have different support sizes: {a.shape} vs {b.shape}")
    return float(0.5 * np.abs(a / a.sum() - b / b.sum()).sum())


def l1_deviation_bound(n: int, k: int, delta: float) -> float:
    """Weissman et al. (2003): for the empirical distribution p^ of n draws from p over k values,

        P(||p^ - p||_1 >= eps) <= (2^k - 2) * exp(-n * eps^2 / 2),

    so with probability >= 1 - delta: ``||p^ - p||_1 <= sqrt(2/n * ln((2^k - 2) / delta))``.
    """
    if n <= 0:
        return 2.0
    k = max(int(k), 2)
    log_count = k * math.log(2.0) + math.log1p(-(2.0 ** (1 - k)))  # ln(2^k - 2) without overflow
    return min(2.0, math.sqrt(2.0 / n * (log_count - math.log(delta))))


def tv_upper_bound(counts: Sequence[float], expected: Sequence[float], delta: float) -> float:
    """Upper (1 - delta) confidence bound on TV(q, p) between the sampled distribution q and the
    expected p, from counts of n draws of q:

        TV(q, p) <= TV(p^, p) + TV(p^, q) <= TV(p^, p) + 1/2 * sqrt(2/n * ln((2^k - 2)/delta))

    (triangle inequality + `l1_deviation_bound`; k = support size). Coverage >= 1 - delta for
    every q, at every n; it is conservative.
    """
    c = np.asarray(counts, dtype=float)
    n = int(round(c.sum()))
    if n == 0:
        return 1.0
    return min(1.0, tv_distance(c, expected) + 0.5 * l1_deviation_bound(n, c.size, delta))


@dataclass(frozen=True)
class GTest:
    """A G-test: ``G = 2 * sum_i O_i ln(O_i / E_i)`` (`scipy.stats.power_divergence`,
    lambda_="log-likelihood").

    `p_value` is a Monte Carlo p-value (`scipy.stats.monte_carlo_test`): ``(1 + #{G_b >= G}) /
    (B + 1)`` over B tables drawn under the null hypothesis. It is valid at every sample size,
    so the false-alarm rate is <= alpha exactly, unlike the chi-square approximation
    (`p_asymptotic`, df = bins - 1, reported for the reader), which was measured 5-45 % above
    alpha at n = 20..400 and alpha = 0.05..0.002. `impossible` counts draws that landed where
    the expected probability is 0 (then p = 0: the null is certainly false).
    """

    statistic: float
    df: int
    p_value: float
    p_asymptotic: float
    bins: int
    resamples: int = 0
    impossible: int = 0


def monte_carlo_resamples(alpha: float | None) -> int:
    """The most resamples a Monte Carlo p-value may need to go well below `alpha`: max(9999,
    20/alpha), capped at 4,000,000 (the smallest attainable p is 1/(B+1); levels below 2.5e-7 are
    not reachable). `sequential_g_pvalue` stops long before B unless the data are far in the tail."""
    if alpha is None:
        return 9999
    return int(min(4_000_000, max(9999, math.ceil(20.0 / alpha))))


SEQUENTIAL_HITS = 20  # Besag-Clifford: stop once this many null statistics reach the observed one


def sequential_g_pvalue(counts: np.ndarray, probabilities: np.ndarray, max_resamples: int, rng: Any) -> tuple[float, int]:
    """A sequential Monte Carlo p-value (Besag & Clifford 1991) for the G-test: draw null tables
    from Multinomial(n, p) until h = SEQUENTIAL_HITS of them have G_b >= G (at draw L: p = h / L),
    or until `max_resamples` (then p = (1 + hits) / (B + 1), the fixed-B p-value). Valid - P(p <= a)
    <= a under the null - for every a; a fitting sample stops after ~h / p draws, so only a sample in
    the far tail pays for the B a small level needs. Returns (p, draws)."""
    n = int(round(counts.sum()))
    expected = n * probabilities
    observed = float(g_statistic(counts, expected))
    tolerance = abs(observed) * 1e-12
    drawn, hits, batch = 0, 0, 2_000
    while drawn < max_resamples:
        size = min(batch, max_resamples - drawn)
        null = g_statistic(rng.multinomial(n, probabilities, size=size), expected)
        reached = np.flatnonzero(null >= observed - tolerance)
        if hits + reached.size >= SEQUENTIAL_HITS:
            at = drawn + int(reached[SEQUENTIAL_HITS - hits - 1]) + 1
            return SEQUENTIAL_HITS / at, at
        hits, drawn, batch = hits + reached.size, drawn + size, min(batch * 4, 200_000)
    return (1 + hits) / (drawn + 1), drawn


def _seed(*arrays: np.ndarray) -> np.random.Generator:
    """A generator seeded from the data, so a check is reproducible run to run."""
    digest = hashlib.sha256(b"".join(np.ascontiguousarray(a, dtype=float).tobytes() for a in arrays)).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def g_statistic(counts: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """``G = 2 sum_i O_i ln(O_i / E_i)`` along the last axis (`scipy.stats.power_divergence`)."""
    return sps.power_divergence(counts, expected, axis=-1, lambda_="log-likelihood").statistic


def g_test_pvalues(counts: Any, probabilities: Sequence[float], resamples: int = 9999, rng: Any = None) -> np.ndarray:
    """Monte Carlo G-test p-values of each row of `counts` (rows: independent count vectors with
    one common total n) against `probabilities`: ``(1 + #{G_b >= G}) / (B + 1)`` with B tables
    drawn from Multinomial(n, p) (`scipy.stats.monte_carlo_test`; all rows share the null draws).
    Every probability must be > 0 (see `g_test` for zero-probability values)."""
    obs = np.atleast_2d(np.asarray(counts, dtype=float))
    prob = np.asarray(probabilities, dtype=float)
    prob = prob / prob.sum()
    totals = obs.sum(axis=1)
    n = int(round(totals[0]))
    if not np.allclose(totals, n):
        raise ValueError("every row of counts needs the same total n")
    expected = n * prob

    def statistic(x: np.ndarray, axis: int = -1) -> np.ndarray:
        return g_statistic(np.moveaxis(x, axis, -1), expected)

    rng = rng if rng is not None else _seed(obs, prob)
    result = sps.monte_carlo_test(
        obs,
        lambda size: rng.multinomial(n, prob, size=size[0]),
        statistic,
        n_resamples=resamples,
        batch=min(resamples, 50_000),
        alternative="greater",
        axis=1,
    )
    return np.asarray(result.pvalue, dtype=float).reshape(obs.shape[0])


def g_test(
    counts: Sequence[float],
    probabilities: Sequence[float],
    alpha: float | None = None,
    resamples: int | None = None,
) -> GTest:
    """Do the counts fit the exact probabilities? G statistic, sequential Monte Carlo p-value drawn
    from Multinomial(n, p) (`GTest`, `sequential_g_pvalue`). `alpha` only sizes the most resamples
    it may draw (`monte_carlo_resamples`), so p can always go below it.
    Repeated calls with the same input return the remembered result (`_G_TESTS`)."""
    obs = np.asarray(counts, dtype=float)
    prob = np.asarray(probabilities, dtype=float)
    if obs.shape != prob.shape or obs.ndim != 1:
        raise ValueError(f"counts and probabilities need the same 1-d shape, got {obs.shape} and {prob.shape}")
    if np.any(prob < 0) or np.any(obs < 0) or not np.isfinite(prob).all():
        raise ValueError("counts and probabilities must be finite and non-negative")
    n = int(round(obs.sum()))
    impossible = int(obs[prob <= 0].sum())
    support = prob > 0
    if impossible:
        return GTest(math.inf, int(support.sum()) - 1, 0.0, 0.0, obs.size, 0, impossible)
    obs, prob = obs[support], prob[support] / prob[support].sum()
    if n == 0 or obs.size < 2:
        return GTest(0.0, 0, 1.0, 1.0, int(obs.size))
    b = resamples or monte_carlo_resamples(alpha)
    key = (obs.tobytes(), prob.tobytes(), b)
    if key not in _G_TESTS:
        g = float(g_statistic(obs, n * prob))
        p_value, b = sequential_g_pvalue(obs, prob, b, _seed(obs, prob))
        if len(_G_TESTS) >= 64:
            _G_TESTS.pop(next(iter(_G_TESTS)))
        _G_TESTS[key] = GTest(g, int(obs.size - 1), p_value, float(sps.chi2.sf(g, obs.size - 1)), int(obs.size), b)
    return _G_TESTS[key]


# The Monte Carlo p-value is a deterministic function of (counts, probabilities, B) (its generator is
# seeded from the data), and one case often tests the same counts twice (its record field and its
# reference field, then Holm's re-decision): the last 64 results are kept.
_G_TESTS: dict[tuple[bytes, bytes, int], GTest] = {}


def g_test_two_sample(
    counts_a: Sequence[float], counts_b: Sequence[float], alpha: float | None = None, resamples: int | None = None
) -> GTest:
    """Were two count vectors drawn from the same distribution? The 2 x k table's independence
    test: G statistic reported, p-value from `scipy.stats.chi2_contingency` with a
    `MonteCarloMethod` (tables drawn with the observed margins, Pearson statistic), which is
    exact-size like `g_test`. Columns empty in both are dropped."""
    table = np.vstack([np.asarray(counts_a, dtype=float), np.asarray(counts_b, dtype=float)])
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2 or np.any(table.sum(axis=1) == 0):
        return GTest(0.0, 0, 1.0, 1.0, int(table.shape[1]))
    g, p_asym, dof, _ = sps.chi2_contingency(table, correction=False, lambda_="log-likelihood")
    b = resamples or monte_carlo_resamples(alpha)
    method = sps.MonteCarloMethod(n_resamples=b, batch=min(b, 50_000), rng=_seed(table))
    result = sps.chi2_contingency(table.astype(int), correction=False, method=method)
    return GTest(float(g), int(dof), float(result.pvalue), float(p_asym), int(table.shape[1]), b)


# ----------------------------------------------------------------------------------------------
# power and sample size


def gtest_power(n: int, tv: float, alpha: float, k: int) -> float:
    """Power of the G-test (df = k - 1, level alpha) against the least favourable alternative at
    total-variation distance `tv` from the expected distribution, with n draws.

    Under a local alternative q the G (and Pearson) statistic is approximately noncentral
    chi-square with df = k - 1 and noncentrality ``lambda = n * chi2(q || p)``, where
    ``chi2(q || p) = sum_i (q_i - p_i)^2 / p_i`` (G: ``2n KL(q||p)``, equal to second order).
    By Cauchy-Schwarz ``2 TV = sum_i |q_i - p_i| <= sqrt(chi2(q||p))``, so every alternative at
    distance tv has ``lambda >= 4 n tv^2``, with equality when |q_i - p_i| is proportional to p_i.
    The power at that least favourable alternative is

        power = P(ncx2(df, 4 n tv^2) > chi2.ppf(1 - alpha, df)).
    """
    df = max(int(k) - 1, 1)
    critical = sps.chi2.ppf(1.0 - alpha, df)
    return float(sps.ncx2.sf(critical, df, 4.0 * n * tv * tv))


def samples_needed(tv: float, power: float = 0.8, alpha: float = 0.01, k: int = 2) -> int:
    """Smallest n whose G-test detects every distribution at TV distance >= `tv` from the expected
    one with probability >= `power` at level `alpha` over `k` outcomes (see `gtest_power`):

        n = ceil(lambda* / (4 tv^2)),  lambda* solves  ncx2.sf(chi2.ppf(1-alpha, k-1), k-1, lambda*) = power.
    """
    if not 0.0 < tv <= 1.0:
        raise ValueError(f"tv must be in (0, 1], got {tv!r}")
    if not 0.0 < power < 1.0 or not 0.0 < alpha < 1.0:
        raise ValueError(f"power and alpha must be in (0, 1), got power={power!r}, alpha={alpha!r}")
    if power <= alpha:
        return 1
    df = max(int(k) - 1, 1)
    critical = sps.chi2.ppf(1.0 - alpha, df)

    def gap(lam: float) -> float:
        return float(sps.ncx2.sf(critical, df, lam)) - power

    upper = 1.0
    while gap(upper) < 0:
        upper *= 2.0
    lam = optimize.brentq(gap, 1e-12, upper, xtol=1e-10)
    return max(1, math.ceil(lam / (4.0 * tv * tv)))


def detectable_tv(n: int, power: float = 0.8, alpha: float = 0.01, k: int = 2) -> float:
    """The smallest TV distance the G-test with `n` draws over `k` outcomes detects with
    probability >= `power` at level `alpha` (the inverse of `samples_needed` in tv, see
    `gtest_power`): ``tv = sqrt(lambda* / (4 n))``."""
    if n <= 0:
        raise ValueError(f"n must be > 0, got {n!r}")
    if not 0.0 < power < 1.0 or not 0.0 < alpha < 1.0:
        raise ValueError(f"power and alpha must be in (0, 1), got power={power!r}, alpha={alpha!r}")
    if gtest_power(n, 1.0, alpha, k) < power:
        return math.inf
    return float(optimize.brentq(lambda tv: gtest_power(n, tv, alpha, k) - power, 1e-9, 1.0, xtol=1e-12))


# ----------------------------------------------------------------------------------------------
# latency


@dataclass(frozen=True)
class Slowdown:
    """A latency field's decision quantities (`slowdown_test`, `paired_slowdown_test`); ratios are
    new / old, d = log(ratio).

    The tests are of *no change*: p_slower is the one-sided p-value of H0 "ratio <= 1", p_faster of
    H0 "ratio >= 1". `detectable` is the smallest slowdown detected with probability DESIGN_POWER
    at the field's level, ``exp((q_alpha + q_power) * sd) - 1`` (q: the normal, or Student's t with
    `df` degrees of freedom, quantiles), `detectable_speedup` the speed-up ``1 - exp(-(...) sd)``.
    Whether a detected change is beyond the tolerance is `latency_call`'s."""

    ratio: float  # exp(d): the point estimate (1.10 = 10 % slower)
    low: float  # the (1 - alpha) lower confidence bound of the ratio (one-sided)
    high: float  # ... upper bound
    p_slower: float  # H0: ratio <= 1
    p_faster: float  # H0: ratio >= 1
    sd: float  # the standard error of d (log scale)
    detectable: float  # the slowdown detected with probability DESIGN_POWER at alpha (0.2 = 20 %)
    detectable_speedup: float  # the speed-up detected so (0.2 = 20 % faster)
    df: float | None = None  # Student's t degrees of freedom (None: normal)


def _slowdown(d: float, sd: float, alpha: float, df: float | None = None) -> Slowdown:
    args = () if df is None else (df,)
    dist = sps.norm if df is None else sps.t
    q_alpha, q_power = float(dist.isf(alpha, *args)), float(dist.isf(1 - DESIGN_POWER, *args))
    reach = (q_alpha + q_power) * sd
    z = d / sd if sd > 0 else math.copysign(math.inf, d) if d else 0.0
    return Slowdown(ratio=math.exp(d), low=math.exp(d - q_alpha * sd), high=math.exp(d + q_alpha * sd),
                    p_slower=float(dist.sf(z, *args)), p_faster=float(dist.cdf(z, *args)), sd=sd,
                    detectable=math.expm1(reach), detectable_speedup=-math.expm1(-reach), df=df)


def paired_log_ratios(samples: Sequence[float], calibration: Sequence[float]) -> tuple[float, float]:
    """(median of l_i = log(s_i / c_i), its standard error): 1.2533 * 1.4826 * MAD / sqrt(n), the
    median's large-sample SE under a normal shape, from a robust scale."""
    s, c = np.asarray(samples, dtype=float), np.asarray(calibration, dtype=float)
    if s.shape != c.shape or s.size < 3 or not (s > 0).all() or not (c > 0).all():
        raise ValueError(f"need >= 3 positive paired samples, got {s.size} and {c.size}")
    lr = np.log(s / c)
    med = float(np.median(lr))
    mad = float(np.median(np.abs(lr - med)))
    return med, 1.2533 * 1.4826 * mad / math.sqrt(lr.size)


def slowdown_test(new: tuple[float, float], old: tuple[float, float], run_sd: float, alpha: float) -> Slowdown:
    """Is the new run slower (or faster) than the old, against a record taken at another time?

    Each run is summarised by (median log ratio to its calibration, its SE). Two runs of the same
    code differ by more than their samples say - a process's memory layout, its clock, what else
    ran - so the difference d = l_new - l_old has variance se_new^2 + se_old^2 + 2 run_sd^2, where
    run_sd is tau, the between-run SD of one run's l beyond its own SE (tau^2 = the SD of l across
    runs^2 - the runs' mean se^2: the SD across runs already holds each run's SE, which the sum adds
    once; measured by benchmarks/latency_power.py --sigma, kept in [tool.harness.thresholds]
    latency_run_sd*). One-sided z tests of d > 0 (slower) and d < 0 (faster) at alpha each: an
    unchanged library is a false alarm with probability <= alpha per direction. Power: a slowdown
    of `Slowdown.detectable` is detected with probability DESIGN_POWER. The tau term alone puts a
    floor under it: sd >= sqrt(2) tau, so at a full run's per-test alpha (2e-5: z 4.1, + 0.84 for
    power 0.8) the record path detects no less than exp(4.95 sqrt(2) tau) - 1 (8 % at tau 0.011,
    22 % at 0.029) - what `harness check --against` (`paired_slowdown_test`) is for."""
    d = new[0] - old[0]
    sd = math.sqrt(new[1] ** 2 + old[1] ** 2 + 2 * run_sd ** 2)
    return _slowdown(d, sd, alpha)


PAIRED_TRIM = 0.2  # the fraction of blocks trimmed from each end (Yuen's trimmed mean)


def paired_slowdown_test(blocks: Sequence[float], alpha: float) -> Slowdown:
    """The paired A/B statistic of `harness check --against` (harness/designs/paired.py): both envs
    timed in the same time window, call by call in ABBA blocks, so the host's state (a neighbour, the
    clock, the cache) is shared by neighbouring calls and cancels in their ratio.

    Block k holds four calls, new and old alternating as n o o n (or o n n o, the next block's
    order), and gives d_k = 1/2 [log(n_1 / o_1) + log(n_2 / o_2)] - the two neighbouring pairs'
    log ratios: a drift linear over the block cancels exactly, and so does an advantage of going
    first or second. The blocks are taken back to back, so they are treated as independent
    replicates of d; no term for between-run variance is needed, because both sides are this run.

    Statistic: Yuen's 20 %-trimmed mean of the d_k (robust to a descheduled block: the g = floor(0.2
    K) largest and smallest are trimmed) with its standard error from the winsorized variance,
    ``se = s_w / ((1 - 2 * 0.2) sqrt(K))``, and Student's t with h - 1 degrees of freedom (h = K - 2g
    the blocks kept) - Yuen (1974), the trimmed-mean t test, whose level holds under heavy tails
    and skew where the mean's t test does not. One-sided tests of d > 0 (slower) and d < 0
    (faster), each at `alpha` (the caller passes half its two-sided level: both directions are
    findings). Power: the smallest slowdown detected with probability DESIGN_POWER is
    ``exp((t_{alpha,h-1} + t_{0.2,h-1}) se) - 1`` (`Slowdown.detectable`; the speed-up likewise).
    Verified by tests/test_paired.py on synthetic blocks (level and power) and measured on this
    host by benchmarks/paired_power.py (A/A false alarms, injected 3 / 5 / 10 % slowdowns)."""
    d = np.sort(np.asarray(blocks, dtype=float))
    k = d.size
    if k < 5 or not np.isfinite(d).all():
        raise ValueError(f"need >= 5 finite blocks, got {k}")
    g = int(math.floor(PAIRED_TRIM * k))
    h = k - 2 * g
    trimmed = float(d[g:k - g].mean())
    winsorized = np.clip(d, d[g], d[k - g - 1])
    se = float(winsorized.std(ddof=1)) / ((1 - 2 * g / k) * math.sqrt(k))
    return _slowdown(trimmed, se, alpha, df=h - 1)


def latency_call(test: Slowdown, tolerance: float, alpha: float) -> str:
    """The verdict of a latency test at level `alpha` with `tolerance` (0.05 = 5 %), one of:

    "slower"        p_slower < alpha and the upper bound exceeds 1 + tolerance: a slowdown the run
                    cannot show is within the tolerance - a regression
    "faster"        p_faster < alpha and the lower bound is below 1 / (1 + tolerance): a speed-up
                    (changed: information)
    "within"        a change detected whose whole (1 - alpha) interval lies inside the tolerance
                    (a pass that moved: tolerated drift)
    "not-checked"   nothing detected and the smallest slowdown the field detects with power
                    DESIGN_POWER exceeds the tolerance: no pass without power
    "pass"          nothing detected, and a slowdown of the tolerance would have been (power >= 0.8)
    False alarms: with nothing changed, "slower" needs p_slower < alpha - probability <= alpha - and
    "faster" likewise. A real slowdown under the tolerance may be called "slower" when the interval
    cannot exclude the tolerance: the rule errs toward reporting, never toward passing."""
    margin = 1 + tolerance
    if test.p_slower < alpha:
        return "slower" if test.high > margin else "within"
    if test.p_faster < alpha:
        return "faster" if test.low < 1 / margin else "within"
    return "not-checked" if test.detectable > tolerance else "pass"


# ----------------------------------------------------------------------------------------------
# sample designs

DESIGN_POWER = 0.8  # the power every statistical field is sized for, at its detectable effect


@dataclass(frozen=True)
class SampleDesign:
    """How many draws a statistical field takes and what they buy, recorded in its extras so the
    record says what the check could detect (harness/designs/: sampling, one_step).

    alpha          the run's per-test alpha (alpha / m)
    level          the level a field of the case is sized at: alpha / checks, where checks is the number
                   of statistical fields Holm decides together in the case (the first at that level)
    n              draws
    target_tv      the TV the design was sized for; power: the G-test's power against every
                   distribution at TV = target_tv, at `level`
    detectable_tv  the smallest TV detected with probability DESIGN_POWER with n draws (<= target_tv)
    bins           outcomes with probability > 0 (the G-test's k)
    """

    n: int
    alpha: float
    level: float
    target_tv: float
    power: float
    detectable_tv: float
    bins: int

    @classmethod
    def gtest(cls, probabilities: Sequence[float], alpha: float, checks: int, tv: float,
              step: int = 100) -> SampleDesign:
        """The smallest multiple of `step` draws for which the G-test over `probabilities`' bins has
        DESIGN_POWER against every alternative at TV >= `tv` at level alpha / checks (`samples_needed`:
        noncentrality >= 4 N TV^2, a bound that holds for any alternative)."""
        bins = max(2, sum(1 for p in probabilities if p > 0))
        level = alpha / checks
        n = -(-samples_needed(tv, power=DESIGN_POWER, alpha=level, k=bins) // step) * step
        return cls(n, alpha, level, tv, 0.0, tv, bins).with_n(n)

    def with_n(self, n: int) -> SampleDesign:
        """The same design with `n` draws (its power and detectable TV recomputed)."""
        return SampleDesign(n, self.alpha, self.level, self.target_tv,
                            gtest_power(n, self.target_tv, self.level, self.bins),
                            detectable_tv(n, DESIGN_POWER, self.level, self.bins), self.bins)

    def extras(self) -> dict[str, float | int]:
        return {"alpha": self.alpha, "holm_level": self.level, "n": self.n, "power": self.power,
                "power_at_tv": self.target_tv, "detectable_tv": self.detectable_tv,
                "detectable_at_power": DESIGN_POWER, "bins": self.bins}
