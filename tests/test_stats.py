"""harness/checking/stats.py: multiple testing, proportions, G-test, TV bounds, power, latency shifts.

Every statistical test here is measured, not assumed: null runs give its false-alarm rate,
alternative runs its power. A measured rate is an estimate from N runs, so "at or below alpha"
is asserted as: the measured count of false alarms is consistent with a true rate <= alpha
(one-sided binomial test, its own false-alarm rate 1e-3; for N = 1000 and alpha = 0.05 it
fails from 74 false alarms, a measured rate of 0.074, and catches a true rate of 0.09 with
probability 0.969). Against a rate 1.5 x alpha - a miscalibration that matters - the checks
below have power (computed in `test_rate_check_figures`):

    runs x alpha     fails from       power at 1.5 alpha
    1000 x 0.05      74 (0.074)       0.565
    2000 x 0.05      132 (0.066)      0.944
    5000 x 0.05      300 (0.060)      > 0.9999
    5000 x 0.01      74 (0.0148)      0.562
    20000 x 0.01     246 (0.0123)     0.9994

so the 1000- and 5000 x 0.01-run checks are near-certain to catch only a rate nearer 2 alpha
(power at 2 alpha: 0.998 and 0.997). Seeds are fixed, so the numbers are reproducible.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from harness.checking import stats

CHECK_LEVEL = 1e-3  # false-alarm rate of the rate checks themselves


def assert_rate_at_most(alarms: int, runs: int, alpha: float) -> float:
    """The measured false-alarm rate, after checking it is consistent with a true rate <= alpha."""
    p_value = sps.binom.sf(alarms - 1, runs, alpha)  # P(X >= alarms | rate = alpha)
    rate = alarms / runs
    assert p_value >= CHECK_LEVEL, f"false-alarm rate {rate:.4f} over {runs} null runs exceeds alpha {alpha}"
    return rate


def first_failing_count(runs: int, alpha: float) -> int:
    """The smallest number of false alarms in `runs` null runs that `assert_rate_at_most` rejects."""
    counts = np.arange(runs + 1)
    return int(counts[sps.binom.sf(counts - 1, runs, alpha) < CHECK_LEVEL][0])


def rate_check_power(runs: int, alpha: float, true_rate: float) -> float:
    """Probability that `assert_rate_at_most` fails when the test's true false-alarm rate is `true_rate`."""
    return float(sps.binom.sf(first_failing_count(runs, alpha) - 1, runs, true_rate))


def test_rate_check_figures():
    """The figures stated in the module docstring."""
    assert first_failing_count(1000, 0.05) == 74 and round(rate_check_power(1000, 0.05, 0.09), 3) == 0.969
    table = {(1000, 0.05): (74, 0.565), (2000, 0.05): (132, 0.944), (5000, 0.05): (300, 1.0),
             (5000, 0.01): (74, 0.562), (20000, 0.01): (246, 0.9994)}
    for (runs, alpha), (fails_from, power) in table.items():
        assert first_failing_count(runs, alpha) == fails_from
        assert rate_check_power(runs, alpha, 1.5 * alpha) == pytest.approx(power, abs=5e-4 if power < 1 else 1e-4)
    assert round(rate_check_power(1000, 0.05, 0.1), 3) == 0.998 and round(rate_check_power(5000, 0.01, 0.02), 3) == 0.997
    # the check itself has false-alarm rate <= CHECK_LEVEL at a true rate of exactly alpha
    assert rate_check_power(1000, 0.05, 0.05) <= CHECK_LEVEL


# ----------------------------------------------------------------------------------------------
# multiple testing


def test_holm_textbook_example():
    pvalues = [0.01, 0.04, 0.03, 0.005]
    # sorted 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 -> max(0.06, 0.04) = 0.06
    assert stats.holm_adjust(pvalues) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert stats.holm(pvalues, 0.05) == [True, False, False, True]
    assert stats.holm(pvalues, 0.06) == [True, True, True, True]
    assert stats.holm([], 0.05) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=8), st.floats(0.001, 0.2))
def test_holm_matches_the_step_down_definition(pvalues, alpha):
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    m = len(pvalues)
    expected = [False] * m
    for rank, index in enumerate(order):
        if pvalues[index] > alpha / (m - rank):
            break
        expected[index] = True
    assert stats.holm(pvalues, alpha) == expected


def test_holm_rejects_bad_pvalues():
    with pytest.raises(ValueError, match="p-values"):
        stats.holm([0.5, 1.5], 0.05)


def test_holm_family_wise_rate_measured():
    """2000 null families of 20 p-values, independent and equicorrelated (rho = 0.5):
    P(any rejection) <= alpha = 0.05. Independent: the exact rate is 1 - (1 - alpha/m)^m = 0.0488;
    positive dependence makes Holm conservative (measured well below alpha)."""
    rng = np.random.default_rng(11)
    runs, m, alpha = 2000, 20, 0.05
    independent = rng.uniform(size=(runs, m))
    shared = rng.normal(size=(runs, 1))
    correlated = sps.norm.sf(np.sqrt(0.5) * shared + np.sqrt(0.5) * rng.normal(size=(runs, m)))
    assert 1 - (1 - alpha / m) ** m <= alpha
    assert_rate_at_most(sum(any(stats.holm(row, alpha)) for row in independent), runs, alpha)
    rate = assert_rate_at_most(sum(any(stats.holm(row, alpha)) for row in correlated), runs, alpha)
    assert rate <= alpha


def test_run_level_false_alarm_rate_bonferroni_across_tests_holm_within():
    """The plugin's scheme: m tests, each Holm over its own k checks at alpha/bucket(m) (m rounded
    up to a power of two). 2000 null runs of m = 10 tests x k = 3 checks: P(any regression in the
    run) <= alpha = 0.05 (at most 1 - (1 - alpha/(m k))^(m k) = 0.0488 for independent p-values)."""
    rng = np.random.default_rng(12)
    runs, m, k, alpha = 2000, 10, 3, 0.05
    per_test = stats.per_test_alpha(alpha, m)
    assert per_test == pytest.approx(alpha / 16)  # m = 10 -> the next power of two
    pvalues = rng.uniform(size=(runs, m, k))
    alarms = sum(any(any(stats.holm(test, per_test)) for test in run) for run in pvalues)
    assert_rate_at_most(alarms, runs, alpha)
    with pytest.raises(ValueError):
        stats.per_test_alpha(1.5, 3)


# ----------------------------------------------------------------------------------------------
# two proportions


def test_two_proportion_false_alarm_rate_1000_null_runs():
    """Fisher exact, n = 150 per side, p = 0.3: measured rate <= alpha = 0.05 (exact test)."""
    rng = np.random.default_rng(21)
    runs, n, alpha = 1000, 150, 0.05
    k1, k2 = rng.binomial(n, 0.3, runs), rng.binomial(n, 0.3, runs)
    alarms = sum(stats.two_proportion_test(int(a), n, int(b), n).p_value < alpha for a, b in zip(k1, k2, strict=True))
    rate = assert_rate_at_most(alarms, runs, alpha)
    assert rate <= alpha


def test_two_proportion_power_and_statistic():
    """0.30 vs 0.42 at n = 400 per side: the Fisher test's power at alpha 0.05 is 0.936 (exact:
    its rejections summed over both binomials' outcomes, 1e-9 tails dropped; 9 s, so not
    repeated here); measured >= 0.85 over 300 runs (P(measured < 0.85 | 0.936) < 1e-6)."""
    rng = np.random.default_rng(22)
    runs, n = 300, 400
    k1, k2 = rng.binomial(n, 0.42, runs), rng.binomial(n, 0.30, runs)
    power = np.mean([stats.two_proportion_test(int(a), n, int(b), n).p_value < 0.05 for a, b in zip(k1, k2, strict=True)])
    assert power >= 0.85
    test = stats.two_proportion_test(60, 100, 40, 100)
    assert test.difference == pytest.approx(0.2)
    assert test.z == pytest.approx(0.2 / np.sqrt(0.25 * 0.02))
    assert test.p_value == pytest.approx(sps.fisher_exact([[60, 40], [40, 60]]).pvalue)
    with pytest.raises(ValueError, match="observed rate"):
        stats.two_proportion_test(5, 4, 1, 2)


# ----------------------------------------------------------------------------------------------
# G-test and TV


@pytest.mark.parametrize("n", [20, 60, 400])
def test_g_test_false_alarm_rate_measured(n):
    """5000 null samples of n draws over 6 values (expected counts down to 0.4): the Monte Carlo
    G-test stays at alpha for alpha in {0.05, 0.01} where the chi-square approximation does not
    (measured 5-45 % above alpha at these n). The rows share one set of null draws, which adds
    a little variance to the measured rate (averaged over 10 null sets: 0.048 / 0.0092 at n = 60,
    0.049 / 0.0100 at n = 400; with independent draws per test, 3000 runs: 0.050 / 0.010)."""
    rng = np.random.default_rng(30 + n)
    p = np.array([0.4, 0.3, 0.2, 0.05, 0.03, 0.02])
    runs = 5000
    pvalues = stats.g_test_pvalues(rng.multinomial(n, p, runs), p, resamples=4999, rng=rng)
    for alpha in (0.05, 0.01):
        assert_rate_at_most(int((pvalues < alpha).sum()), runs, alpha)


def test_g_test_detects_a_shift_and_impossible_values():
    p = np.array([0.5, 0.3, 0.2])
    rng = np.random.default_rng(31)
    fitting = stats.g_test(rng.multinomial(2000, p), p, resamples=999)
    shifted = stats.g_test(rng.multinomial(2000, [0.42, 0.33, 0.25]), p, resamples=999)
    assert fitting.p_value > 0.01 and shifted.p_value < 0.01
    impossible = stats.g_test([10, 5, 1], [0.6, 0.4, 0.0])
    assert impossible.p_value == 0.0 and impossible.impossible == 1
    assert stats.g_test([0, 0, 0], p).p_value == 1.0
    with pytest.raises(ValueError):
        stats.g_test([1, 2], p)


def test_g_statistic_is_scipys_log_likelihood_ratio():
    counts = np.array([30.0, 50.0, 20.0])
    expected = np.array([0.3, 0.5, 0.2]) * 100
    by_hand = 2 * np.sum(counts * np.log(counts / expected))
    assert float(stats.g_statistic(counts, expected)) == pytest.approx(by_hand, abs=1e-12)
    counts = np.array([35.0, 40.0, 25.0])
    assert stats.g_test(counts, [0.3, 0.5, 0.2]).statistic == pytest.approx(2 * np.sum(counts * np.log(counts / expected)))


def test_g_test_two_sample():
    rng = np.random.default_rng(32)
    same = stats.g_test_two_sample(rng.multinomial(500, [0.5, 0.3, 0.2]), rng.multinomial(500, [0.5, 0.3, 0.2]), resamples=999)
    moved = stats.g_test_two_sample(rng.multinomial(500, [0.5, 0.3, 0.2]), rng.multinomial(500, [0.3, 0.3, 0.4]), resamples=999)
    assert same.p_value > 0.01 and moved.p_value < 0.01
    assert stats.g_test_two_sample([5, 0], [0, 0]).p_value == 1.0


def test_tv_distance():
    assert stats.tv_distance([0.5, 0.5], [1.0, 0.0]) == pytest.approx(0.5)
    assert stats.tv_distance([2, 2], [1, 1]) == 0.0
    with pytest.raises(ValueError):
        stats.tv_distance([1, 0], [1, 0, 0])


def test_tv_upper_bound_coverage_measured():
    """1000 runs of n = 500 draws from q at TV 0.1 from p: the (1 - delta) upper bound covers the
    true TV in >= 1 - delta of runs (delta = 0.05; the bound is conservative: misses ~0)."""
    rng = np.random.default_rng(41)
    p = np.array([0.25, 0.25, 0.25, 0.25])
    q = np.array([0.35, 0.25, 0.15, 0.25])
    true_tv = stats.tv_distance(q, p)
    assert true_tv == pytest.approx(0.1)
    delta, runs = 0.05, 1000
    misses = sum(stats.tv_upper_bound(c, p, delta) < true_tv for c in rng.multinomial(500, q, runs))
    assert assert_rate_at_most(misses, runs, delta) <= delta
    # the bound shrinks like 1/sqrt(n)
    assert stats.l1_deviation_bound(4000, 4, delta) == pytest.approx(stats.l1_deviation_bound(1000, 4, delta) / 2)


# ----------------------------------------------------------------------------------------------
# power and sample size


def _least_favourable(k: int, tv: float) -> tuple[np.ndarray, np.ndarray]:
    """Uniform p over even k, q = p * (1 +- 2 tv): TV(q, p) = tv, chi2(q||p) = 4 tv^2."""
    p = np.full(k, 1.0 / k)
    signs = np.array([1.0, -1.0] * (k // 2))
    return p, p * (1 + 2 * tv * signs)


@pytest.mark.parametrize(("tv", "k", "alpha"), [(0.1, 4, 0.05), (0.05, 6, 0.01)])
def test_samples_needed_reaches_the_stated_power(tv, k, alpha):
    """At n = samples_needed the G-test's measured power against the least favourable alternative
    is >= 0.8 (within 3 SE over 4000 runs); at n/2 it is clearly below."""
    power_target = 0.8
    n = stats.samples_needed(tv, power_target, alpha, k)
    p, q = _least_favourable(k, tv)
    assert stats.tv_distance(p, q) == pytest.approx(tv)
    rng = np.random.default_rng(51)
    runs = 4000
    critical = sps.chi2.ppf(1 - alpha, k - 1)

    def power(size: int) -> float:
        g = stats.g_statistic(rng.multinomial(size, q, runs).astype(float), size * p)
        return float(np.mean(g > critical))

    se = np.sqrt(power_target * (1 - power_target) / runs)
    assert power(n) >= power_target - 3 * se
    assert power(n // 2) < power_target - 5 * se
    assert stats.gtest_power(n, tv, alpha, k) >= power_target > stats.gtest_power(n - 1, tv, alpha, k)


def test_samples_needed_formula_and_input_checks():
    # closed form check: df = 1, power 0.5 -> lambda* where ncx2 median = chi2 critical value
    n = stats.samples_needed(0.1, 0.5, 0.05, 2)
    lam = 4 * n * 0.01
    assert sps.ncx2.sf(sps.chi2.ppf(0.95, 1), 1, lam) >= 0.5
    assert stats.samples_needed(0.2, 0.8, 0.01, 4) < stats.samples_needed(0.1, 0.8, 0.01, 4)
    for bad in [(0.0, 0.8, 0.01, 2), (0.1, 1.0, 0.01, 2), (0.1, 0.8, 0.0, 2)]:
        with pytest.raises(ValueError):
            stats.samples_needed(*bad)


# ----------------------------------------------------------------------------------------------
# latency


def simulated_run(rng: np.random.Generator, slowdown: float, run_sd: float, n: int = 20, noise: float = 0.05):
    """One run's (median log ratio, SE): n samples `slowdown` x their paired calibrations, with the
    run's own between-run offset (SD run_sd) and per-pair noise."""
    cal = 1e-3 * rng.lognormal(0.0, 0.02, n)
    samples = cal * slowdown * np.exp(rng.normal(0.0, run_sd) + rng.normal(0.0, noise, n))
    return stats.paired_log_ratios(samples, cal)


def test_latency_slowdown_test_holds_alpha_and_has_its_stated_power():
    """4000 simulated run pairs with the between-run SD the test assumes: an unchanged library is
    called slower at most alpha = 0.01 of the time (and faster likewise), and one slowed by the
    test's own stated detectable slowdown is caught at about DESIGN_POWER (0.8)."""
    rng = np.random.default_rng(61)
    runs, run_sd, alpha = 4000, 0.01, 0.01

    def fired(slowdown: float) -> tuple[int, int, float]:
        slower = faster = 0
        detectable = 0.0
        for _ in range(runs):
            test = stats.slowdown_test(simulated_run(rng, slowdown, run_sd), simulated_run(rng, 1.0, run_sd),
                                       run_sd, alpha)
            slower += test.p_slower < alpha
            faster += test.p_faster < alpha
            detectable = test.detectable
        return slower, faster, detectable

    slower, faster, detectable = fired(1.0)
    assert_rate_at_most(slower, runs, alpha)
    assert_rate_at_most(faster, runs, alpha)
    caught, _, _ = fired(1 + detectable)
    assert 0.7 < caught / runs < 0.9, (caught, detectable)


def test_latency_call_is_no_pass_without_power():
    """`latency_call`: nothing detected passes only when the tolerance is detectable at power 0.8;
    a detected change inside the tolerance is `within`; a slowdown whose interval reaches past the
    tolerance is `slower`."""
    quiet, loud = stats._slowdown(0.0, 0.005, 0.01), stats._slowdown(0.0, 0.05, 0.01)
    assert quiet.detectable < 0.05 < loud.detectable
    assert stats.latency_call(quiet, 0.05, 0.01) == "pass"
    assert stats.latency_call(loud, 0.05, 0.01) == "not-checked"
    assert stats.latency_call(stats._slowdown(0.02, 0.003, 0.01), 0.05, 0.01) == "within"
    assert stats.latency_call(stats._slowdown(0.045, 0.01, 0.01), 0.05, 0.01) == "slower"
    assert stats.latency_call(stats._slowdown(-0.2, 0.01, 0.01), 0.05, 0.01) == "faster"


@pytest.mark.parametrize(("n", "k", "alpha"), [(3000, 4, 6e-5), (800, 10, 0.01), (10_000, 2, 0.05)])
def test_detectable_tv_inverts_samples_needed(n, k, alpha):
    tv = stats.detectable_tv(n, 0.8, alpha, k)
    assert stats.gtest_power(n, tv, alpha, k) == pytest.approx(0.8, abs=1e-6)
    assert stats.samples_needed(tv * 1.0001, 0.8, alpha, k) <= n <= stats.samples_needed(tv * 0.9999, 0.8, alpha, k)


def test_the_sequential_monte_carlo_p_value_is_valid_and_reaches_below_small_levels():
    """Besag-Clifford: under the null P(p <= a) <= a (checked at a = 0.05, 0.1 over 400 null
    samples: 99.9 % binomial bounds), a fitting sample stops after a few hundred draws, and a sample
    far in the tail gets a p-value below a level of 1e-6 (the fixed B = 100,000 floor was 1e-5)."""
    rng = np.random.default_rng(7)
    p = np.array([0.4, 0.3, 0.2, 0.1])
    pvalues, draws = [], []
    for _ in range(400):
        value, used = stats.sequential_g_pvalue(rng.multinomial(300, p).astype(float), p, 99_999, rng)
        pvalues.append(value)
        draws.append(used)
    for a, bound in ((0.05, 36), (0.1, 62)):  # binomial(400, a) upper 99.9 % quantiles
        assert sum(v <= a for v in pvalues) <= bound
    assert np.median(draws) < 500
    far = stats.g_test(rng.multinomial(3000, [0.3, 0.3, 0.2, 0.2]), p, alpha=1e-6)
    assert far.p_value < 1e-6 and far.resamples >= 1_000_000


@pytest.mark.parametrize("m,bucket", [(0, 1), (1, 1), (2, 2), (3, 4), (399, 512), (512, 512), (513, 1024)])
def test_tests_bucket_rounds_up_to_a_power_of_two(m, bucket):
    assert stats.tests_bucket(m) == bucket


def test_per_test_alpha_does_not_move_when_a_few_cases_are_added():
    """Adding cases within one power of two keeps the per-test alpha, hence every statistical
    field's sample size and record; doubling the run halves it."""
    assert stats.per_test_alpha(0.01, 399) == stats.per_test_alpha(0.01, 420) == 0.01 / 512
    assert stats.per_test_alpha(0.01, 600) == 0.01 / 1024
    assert stats.per_test_alpha(0.01, 399) <= 0.01 / 399  # conservative
