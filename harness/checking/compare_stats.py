"""The statistical field kinds - rate, distribution, latency - and how each is decided at
`policy.alpha` (the checking core re-decides them together with Holm within a case; see
harness/checking/core.py). Each function states its test and its false-alarm guarantee.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from harness.checking import stats
from harness.checking.policy import UNIT_ROUNDOFF, Policy, coarser, dtype_of, is_upgrade, verdict
from harness.schema import Field, Outcome, Status
from harness.store.env import hardware_class, hardware_difference

# ----------------------------------------------------------------------------------------------
# rate


def _rate(f: Field, side: str) -> tuple[int, int]:
    value = f.value
    if not isinstance(value, dict) or "k" not in value or "n" not in value:
        raise ValueError(f"{side} rate must be {{'k': int, 'n': int}}, got {value!r}")
    return int(value["k"]), int(value["n"])


def compare_rate(name: str, observed: Field, baseline: Field | None, policy: Policy) -> Outcome:
    """Acceptance-style counts k/n. Against an exact probability - the observed extras' "expected"
    (the engine's acceptance probability, decided with or without a baseline), or a baseline value
    ``{"p": x}`` - two-sided exact binomial test of k out of n at p = x (`stats.binomial_test`);
    otherwise vs the baseline's counts: two-sided Fisher exact test (`stats.two_proportion_test`) at
    policy.alpha. One test per count vector. False-alarm rate <= alpha (both tests are exact)."""
    k1, n1 = _rate(observed, "observed")
    if "expected" in observed.extras:
        return _rate_vs_probability(name, k1, n1, float(observed.extras["expected"]), policy)
    if baseline is None:
        raise ValueError("a rate without an exact probability needs a baseline")
    if isinstance(baseline.value, dict) and "p" in baseline.value:
        return _rate_vs_probability(name, k1, n1, float(baseline.value["p"]), policy)
    k2, n2 = _rate(baseline, "baseline")
    test = stats.two_proportion_test(k1, n1, k2, n2)
    diff = {
        "old": {"k": k2, "n": n2, "rate": test.p2}, "new": {"k": k1, "n": n1, "rate": test.p1},
        "difference": test.difference, "z": test.z, "p_value": test.p_value, "alpha": policy.alpha,
    }
    text = f"old {k2}/{n2} = {test.p2:.4f} vs new {k1}/{n1} = {test.p1:.4f} (p = {test.p_value:.3g}, alpha {policy.alpha:.3g})"
    if test.p_value < policy.alpha:
        category = "rate-up" if test.difference > 0 else "rate-down"
        return verdict(name, "rate", Status.REGRESSION, f"rate changed: {text}", category, diff, test.p_value)
    category = "" if (k1, n1) == (k2, n2) else "within-noise"
    return verdict(name, "rate", Status.PASS, text, category, diff, test.p_value)


def _rate_vs_probability(name: str, k: int, n: int, p: float, policy: Policy) -> Outcome:
    test = stats.binomial_test(k, n, p, confidence=1 - policy.alpha)
    diff = {"new": {"k": k, "n": n, "rate": k / n}, "exact": p, "p_value": test.p_value, "alpha": policy.alpha,
            "ci": [test.low, test.high]}
    text = (f"{k}/{n} = {k / n:.4f} vs exact {p:.4f} (binomial p = {test.p_value:.3g}, alpha {policy.alpha:.3g}; "
            f"{1 - policy.alpha:.4g} CI [{test.low:.4f}, {test.high:.4f}])")
    if test.p_value < policy.alpha:
        category = "rate-up" if k / n > p else "rate-down"
        return verdict(name, "rate", Status.REGRESSION, f"rate differs from the exact probability: {text}",
                       category, diff, test.p_value)
    return verdict(name, "rate", Status.PASS, text, "", diff, test.p_value)


# ----------------------------------------------------------------------------------------------
# distribution


def _aligned(counts: Any, other: Any) -> tuple[np.ndarray, np.ndarray, list[str] | None]:
    """Two count/probability vectors on one support (dicts are aligned on the union of keys)."""
    if isinstance(counts, dict) or isinstance(other, dict):
        a = counts if isinstance(counts, dict) else {str(i): v for i, v in enumerate(counts)}
        b = other if isinstance(other, dict) else {str(i): v for i, v in enumerate(other)}
        keys = sorted(set(a) | set(b), key=lambda k: (len(k), k))
        return (np.array([float(a.get(k, 0)) for k in keys]), np.array([float(b.get(k, 0)) for k in keys]), keys)
    a, b = np.asarray(counts, dtype=float), np.asarray(other, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"support sizes differ: {a.shape} vs {b.shape}")
    return a, b, None


MISFIT_CELLS = 5


def misfit(counts: np.ndarray, probs: np.ndarray, keys: list[str] | None) -> list[dict[str, Any]]:
    """The cells that contribute most to a misfit: largest Pearson residuals |O - E| / sqrt(E)
    (E = n p; a cell with p = 0 and O > 0 first), with observed and expected counts."""
    n = float(counts.sum())
    if n == 0:
        return []
    expected = n * probs / max(float(probs.sum()), 1e-300)
    residual = np.where(expected > 0, np.abs(counts - expected) / np.sqrt(np.maximum(expected, 1e-300)),
                        np.where(counts > 0, np.inf, 0.0))
    order = np.argsort(-residual, kind="stable")[:MISFIT_CELLS]
    return [{"cell": keys[i] if keys else str(i), "observed": int(counts[i]), "expected": round(float(expected[i]), 2),
             "residual": float(residual[i]) if np.isfinite(residual[i]) else None} for i in order if residual[i] > 0]


EXPECTED_TV = 1e-6  # TV between two records' exact distributions that is only rounding


def _expected_change(observed: Field, baseline: Field | None, policy: Policy) -> dict[str, Any] | None:
    """TV between the observed and the baseline's exact expected probabilities, and what is allowed."""
    old = baseline.extras.get("expected") if baseline is not None else None
    if old is None:
        return None
    try:
        tv = stats.tv_distance(*_aligned(observed.extras["expected"], old)[:2])
    except ValueError:
        tv = 1.0  # a different support is a different distribution
    allowed = EXPECTED_TV
    if policy.numerics_differences():
        dtype = coarser(dtype_of(observed, policy.observed_env), dtype_of(baseline, policy.baseline_env))
        allowed = max(EXPECTED_TV, policy.thresholds.tensor_cross_env_ulps * UNIT_ROUNDOFF.get(dtype, 2.0**-24))
    return {"expected_tv_vs_baseline": tv, "expected_tv_allowed": allowed}


def checkable(probs: np.ndarray, n: int, extras: dict[str, Any], alpha: float) -> tuple[str, float | None]:
    """Why a fit of n draws against `probs` cannot distinguish anything ("" when it can), and the power
    it really has at the design's TV (None without a design). Power is recomputed at the support the
    exact distribution really has (bins with p > 0) and at the level this decision is taken at:

      - fewer than 2 bins: every draw lands in the one bin whatever the sampler does (power 0);
      - power below the design's (stats.DESIGN_POWER at extras["power_at_tv"]): the N was sized for
        another support or level (e.g. fewer statistical fields than the case has), so the TV the
        field states is not what it detects."""
    bins = int((probs > 0).sum())
    if bins < 2:
        return (f"every draw lands in one bin ({bins} bin with exact mass: "
                f"{'the lumped rest' if bins else 'none'}), so the counts cannot differ from it"), 0.0
    target = extras.get("power_at_tv")
    if target is None:
        return "", None
    power = stats.gtest_power(n, float(target), alpha, bins)
    if power < stats.DESIGN_POWER - 1e-6:
        return (f"power {power:.2f} at TV {float(target):g} with n = {n} over {bins} bins at level {alpha:.3g} is below "
                f"the design's {stats.DESIGN_POWER:g}"), power
    return "", power


def compare_distribution(name: str, observed: Field, baseline: Field | None, policy: Policy) -> Outcome:
    """Sampled counts vs the exact expected probabilities (extras["expected"], from the engine), one
    test per count vector, decided with or without a baseline:

    - not checkable (`skipped`, category not-checkable, `checkable`): one bin, or power below the
      field's design at the real support and level - never a pass;
    - G-test of fit at policy.alpha (`stats.g_test`: G statistic, exact-size Monte Carlo p-value;
      p = 0 if a draw hit a zero-probability value) -> regression (distribution-mismatch);
    - the expected probabilities are exact math, so they must also agree with the baseline's:
      ``TV(expected_new, expected_old) <= EXPECTED_TV`` (1e-6: rounding) in one environment, or
      ``<= max(1e-6, k * u(coarser dtype))`` across different numerics (as for tensors); beyond
      that the exact distribution itself changed: a regression ("exact-distribution-changed") until regenerated;
    - a fit whose TV upper (1 - alpha) confidence bound (`stats.tv_upper_bound`) exceeds
      thresholds.tv_max is `not checked` (skipped, category not-checked; `_not_checked`), never a
      pass: it cannot rule out the smallest effect that matters. The detail states the smallest
      effect it did detect (a misfit at that size is still a regression) and the n that would suffice.
    Without expected probabilities: two-sample test of the counts against the baseline's
    (`stats.g_test_two_sample`)."""
    alpha = policy.alpha
    expected = observed.extras.get("expected")
    if expected is not None:
        counts, probs, keys = _aligned(observed.value, expected)
        n = int(counts.sum())
        why, power = checkable(probs, n, observed.extras, alpha)
        if why:
            return verdict(name, "distribution", Status.SKIPPED, f"not checkable ({why})", "not-checkable",
                           {"n": n, "support": keys, "power": power, "alpha": alpha})
        test = stats.g_test(counts, probs, alpha=alpha)
        tv_hat = stats.tv_distance(counts, probs) if n else 0.0
        tv_ucb = stats.tv_upper_bound(counts, probs, delta=alpha)
        diff: dict[str, Any] = {
            "test": "g-test-fit", "statistic": test.statistic if math.isfinite(test.statistic) else None,
            "df": test.df, "p_value": test.p_value, "p_asymptotic": test.p_asymptotic, "resamples": test.resamples,
            "alpha": alpha, "n": n, "tv": tv_hat, "tv_upper": tv_ucb, "power": power,
            "impossible_draws": test.impossible, "support": keys, "misfit": misfit(counts, probs, keys),
        }
        expected_change = _expected_change(observed, baseline, policy)
        if expected_change is not None:
            diff.update(expected_change)
        text = f"n={n}, G p = {test.p_value:.3g} (alpha {alpha:.3g}), TV {tv_hat:.4f} <= {tv_ucb:.4f}"
        before = baseline_fit(baseline, alpha)
        if before is not None:
            diff["baseline_fit"] = before
        if test.p_value < alpha:
            why = f"{test.impossible} draws of zero-probability values" if test.impossible else "counts do not fit the expected probabilities"
            known = _failed_before(before, counts, keys, tv_hat, policy)
            if known:
                return verdict(name, "distribution", Status.CHANGED, f"{known}; {why}: {text}", known_category(policy),
                               diff, test.p_value)
            return verdict(name, "distribution", Status.REGRESSION, f"{why}: {text}", "distribution-mismatch", diff, test.p_value)
        if expected_change is not None and expected_change["expected_tv_vs_baseline"] > expected_change["expected_tv_allowed"]:
            detail = (f"the exact distribution changed: TV(old exact, new exact) = "
                      f"{expected_change['expected_tv_vs_baseline']:.3g} > {expected_change['expected_tv_allowed']:.3g}; {text}")
            return verdict(name, "distribution", Status.REGRESSION, detail, "exact-distribution-changed", diff, test.p_value)
        design = (f"; power {power:.2f} at TV {float(observed.extras['power_at_tv']):g}" if power is not None else "")
        if before is not None and before["misfit"] and n and stats.detectable_tv(n, stats.DESIGN_POWER, alpha,
                                                                                max(test.bins, 2)) <= before["tv"]:
            return verdict(name, "distribution", Status.CHANGED,
                           f"fixed: the baseline's counts did not fit its exact distribution (G p = {before['p_value']:.3g}, "
                           f"TV {before['tv']:.4f}); these fit, and this run detects a misfit of that size: {text}",
                           "fixed", diff, test.p_value)
        tv_max = policy.thresholds.tv_max
        if tv_ucb > tv_max and tv_max > 0:
            return _not_checked(name, diff, test, n, tv_max, alpha, text)
        return verdict(name, "distribution", Status.PASS, f"fits: {text}{design}", "", diff, test.p_value)
    if baseline is None:
        raise ValueError("a distribution without expected probabilities needs a baseline")
    new, old, keys = _aligned(observed.value, baseline.value)
    test = stats.g_test_two_sample(new, old, alpha=alpha)
    tv_hat = stats.tv_distance(new, old) if new.sum() and old.sum() else 0.0
    diff = {"test": "g-test-two-sample", "statistic": test.statistic, "df": test.df, "p_value": test.p_value,
            "p_asymptotic": test.p_asymptotic, "resamples": test.resamples,
            "alpha": alpha, "tv": tv_hat, "n_old": int(old.sum()), "n_new": int(new.sum()), "support": keys}
    text = f"old n={int(old.sum())} vs new n={int(new.sum())}: G p = {test.p_value:.3g} (alpha {alpha:.3g}), TV {tv_hat:.4f}"
    if test.p_value < alpha:
        return verdict(name, "distribution", Status.REGRESSION, f"distribution shifted: {text}", "distribution-shift", diff, test.p_value)
    return verdict(name, "distribution", Status.PASS, text, "", diff, test.p_value)


WORSE_TV = 2.0  # a misfit the baseline had too that grew beyond this factor of its TV is the upgrade's again


def baseline_fit(baseline: Field | None, alpha: float) -> dict[str, Any] | None:
    """The baseline record's own fit - its counts against its own exact probabilities, at this run's
    alpha - or None where the record holds no expected probabilities. A statistical field whose
    baseline failed the same fit is a known failure, not the upgrade's; one that fits where the
    baseline did not is `fixed` (issue 62)."""
    expected = baseline.extras.get("expected") if baseline is not None else None
    if expected is None or baseline is None:
        return None
    counts, probs, keys = _aligned(baseline.value, expected)
    if not counts.sum() or len(counts) < 2:
        return None
    test = stats.g_test(counts, probs, alpha=alpha)
    return {"p_value": test.p_value, "tv": stats.tv_distance(counts, probs), "misfit": bool(test.p_value < alpha),
            "counts": dict(zip(keys, counts.tolist(), strict=True)) if keys else counts.tolist()}


def _failed_before(before: dict[str, Any] | None, counts: np.ndarray, keys: list[str] | None, tv: float,
                   policy: Policy) -> str:
    """Why a misfit now is not the upgrade's ("" when it is): the baseline's counts misfit its own exact
    distribution too, with the same counts or a misfit at most `WORSE_TV` times its size."""
    if before is None or not before["misfit"]:
        return ""
    now = dict(zip(keys, counts.tolist(), strict=True)) if keys else counts.tolist()
    if now == before["counts"]:
        return (f"the baseline's record holds the same counts and fails the same fit (G p = {before['p_value']:.3g}): "
                "not the upgrade's")
    if tv <= WORSE_TV * before["tv"]:
        return (f"the baseline's record fails the same fit too (G p = {before['p_value']:.3g}, TV {before['tv']:.4f}; "
                f"now TV {tv:.4f}, within {WORSE_TV:g}x): not the upgrade's")
    return ""


def known_category(policy: Policy) -> str:
    """known-failure against another release's record (an upgrade: policy.py `is_upgrade`, the rule
    the checking core applies to references), known-deviation against this release's own."""
    return "known-failure" if is_upgrade(policy.observed_env, policy.baseline_env) else "known-deviation"


def _not_checked(name: str, diff: dict[str, Any], test: Any, n: int, tv_max: float, alpha: float,
                 text: str) -> Outcome:
    """A fit that cannot rule out TV > tv_max: skipped, `not-checked`, with the reason and what it
    could see - the smallest TV it detects with DESIGN_POWER at its level over its bins
    (`stats.detectable_tv`), and the n that would detect tv_max (`stats.samples_needed`)."""
    bins = max(test.bins, 2)
    need = stats.samples_needed(tv_max, power=stats.DESIGN_POWER, alpha=alpha, k=bins)
    seen = stats.detectable_tv(n, stats.DESIGN_POWER, alpha, bins) if n else 1.0
    diff.update(samples_needed=need, detectable_tv=seen)
    return verdict(name, "distribution", Status.SKIPPED,
                   f"not checked: n = {n} cannot rule out TV > {tv_max:g} (needs n >= {need} for "
                   f"{stats.DESIGN_POWER:.0%} power); the smallest effect it detects is TV {seen:.3f} - no misfit "
                   f"that large: {text}", "not-checked", diff, test.p_value)


# ----------------------------------------------------------------------------------------------
# latency


LATENCY_KEYS = ("samples", "calibration", "cpu", "cpu_calibration")


def latency_entries(f: Field, env: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """hardware class -> measurement of a latency field: a record keeps one per hardware class it
    was measured on (``{"by_hardware": {...}}``); a run's field is its own hardware's."""
    value = f.value
    if isinstance(value, dict) and isinstance(value.get("by_hardware"), dict):
        return dict(value["by_hardware"])
    return {hardware_class(env or {}): value}


def busy(entry: dict[str, Any], t: Any) -> str:
    """Why a measurement cannot be judged ("" when it can): the machine kept the process waiting
    (the calibration's wall / CPU time) or the calibration's own spread - both measured during the
    measurement itself. The entry's `load_per_core` (the 1-minute load average) is information only:
    it lags a minute behind and counts the run's own parallel phase, which had just ended when the
    latency phase starts (a quiet 2-core machine read 1.2-1.3 per core there and judged nothing);
    a neighbour that really competes for the cores shows in the wall / CPU ratio or the spread, and
    the paired calibration cancels a steady slowdown."""
    cal, cpu = np.asarray(entry["calibration"], float), np.asarray(entry["cpu_calibration"], float)
    waiting = float(np.median(cal / np.maximum(cpu, 1e-12)))
    q1, q3 = np.percentile(cal, [25, 75])
    spread = float((q3 - q1) / np.median(cal))
    why = []
    if waiting > t.latency_busy_wall_cpu:
        why.append(f"the calibration took {waiting:.2f}x its CPU time on the wall clock")
    if spread > t.latency_busy_spread:
        why.append(f"the calibration's spread (IQR / median) is {spread:.0%}")
    return "; ".join(why)


def compare_latency(name: str, observed: Field, baseline: Field, policy: Policy) -> Outcome:
    """Wall-clock samples, each paired with a matched calibration (harness/designs/latency.py),
    against the baseline record's measurement on the same hardware class and dtype
    (`stats.slowdown_test`: the paired median log ratios, within-run and between-run variance;
    decided by `stats.latency_call` at policy.alpha with `latency_tolerance`).

    skipped, not-comparable   another hardware class (another ISA level torch dispatches to on the same
                              CPU says so first) or dtype, or a record of an older method
    skipped, not-judged       the machine was too busy to judge (here or when the record was made), or
                              its calibration ran beyond `latency_calibration_drift` of the record's
                              time: never a pass, never a false regression (`--latency-strict` fails it)
    then `latency_outcome`: regression (slowdown), changed (speedup), pass (tolerated-drift: a change
    shown to lie inside the tolerance), skipped not-checked (nothing detected, but the smallest
    slowdown detected at power 0.8 exceeds `latency_tolerance`: never a pass; the detail states the
    figure), or pass. The CPU time rides along: a slowdown whose CPU time did not grow is a process
    that waits."""
    obs_env, base_env = policy.observed_env, policy.baseline_env
    if not obs_env or not base_env:
        return verdict(name, "latency", Status.SKIPPED, "no environment fingerprint to match hardware", "not-comparable")
    t = policy.thresholds
    entries, mine = latency_entries(baseline, base_env), latency_entries(observed, obs_env)
    # a run's field is its own machine's; two records (harness compare) are compared on a class both
    # hold, the newer side's own first (a record may lack its writer's class: dropped as unjudgeable)
    common = [h for h in mine if h in entries]
    hw = hardware_class(obs_env)
    hw = hw if hw in common else common[0] if common else hw
    if obs_env.get("dtype") != base_env.get("dtype") or hw not in common:
        return verdict(
            name, "latency", Status.SKIPPED,
            f"{hardware_difference(hw, sorted(entries))}latency is compared on the same hardware class and dtype "
            f"only: recorded on {sorted(entries)} "
            f"{base_env.get('dtype')}, this run {sorted(mine)} {obs_env.get('dtype')}",
            "not-comparable", {"hardware_new": sorted(mine), "hardware_recorded": sorted(entries)})
    new, old = mine[hw], entries[hw]
    if not all(k in old for k in LATENCY_KEYS):
        return verdict(name, "latency", Status.SKIPPED, "the record holds CPU-time samples of an older harness; "
                       "`harness regen` records wall-clock ones", "not-comparable")
    for side, entry in (("this run", new), ("the record", old)):
        why = busy(entry, t)
        if why:
            return verdict(name, "latency", Status.SKIPPED, f"not judged: the machine was busy in {side} ({why})",
                           "not-judged", {"busy": side, "reason": why})
    drift = float(np.median(new["calibration"])) / float(np.median(old["calibration"]))
    if not 1 / t.latency_calibration_drift <= drift <= t.latency_calibration_drift:
        why = (f"the calibration took x{drift:.2f} its recorded time: the machine is not in the state the record "
               f"was made in (beyond x{t.latency_calibration_drift:g} either way)")
        return verdict(name, "latency", Status.SKIPPED, f"not judged: {why}", "not-judged",
                       {"busy": "drift", "reason": why, "calibration_drift": drift})
    a = stats.paired_log_ratios(new["samples"], new["calibration"])
    b = stats.paired_log_ratios(old["samples"], old["calibration"])
    run_sd = t.run_sd(name)
    test = stats.slowdown_test(a, b, run_sd, policy.alpha)
    cpu_ratio = (float(np.median(new["cpu"])) / float(np.median(new["cpu_calibration"]))) / (
        float(np.median(old["cpu"])) / float(np.median(old["cpu_calibration"])))
    diff = {"run_sd": run_sd, "n_old": len(old["samples"]), "n_new": len(new["samples"]),
            "median_old": float(np.median(old["samples"])), "median_new": float(np.median(new["samples"])),
            "calibration_of": new.get("calibration_of", "")}
    return latency_outcome(name, test, policy, diff, "of the record (wall, against its calibration", cpu_ratio)


def latency_outcome(name: str, test: stats.Slowdown, policy: Policy, diff: dict[str, Any], what: str,
                    cpu_ratio: float | None = None) -> Outcome:
    """A latency test's outcome by `stats.latency_call` at policy.alpha and `latency_tolerance`
    (the record path's and the paired mode's, one rule):

    regression, slowdown        slower, and the interval cannot show it is within the tolerance
    changed, speedup            faster beyond 1 / (1 + tolerance) (information: a fix)
    pass, tolerated-drift       a change detected whose whole interval lies inside the tolerance
    skipped, not-checked        nothing detected, but the smallest slowdown detected with power 0.8
                                exceeds the tolerance: no pass without power (the figure in the detail)
    pass                        nothing detected, and a slowdown of the tolerance would have been
    The diff gains the ratio, its interval, both p-values, alpha, the detectable slowdown and speed-up."""
    tol, alpha = policy.thresholds.latency_tolerance, policy.alpha
    call = stats.latency_call(test, tol, alpha)
    diff = {"ratio": test.ratio, "ratio_ci": [test.low, test.high], "tolerance": tol, "p_slower": test.p_slower,
            "p_faster": test.p_faster, "alpha": alpha, "detectable_slowdown": test.detectable,
            "detectable_speedup": test.detectable_speedup, "sd": test.sd, **diff}
    cpu = ""
    if cpu_ratio is not None:
        diff["cpu_ratio"] = cpu_ratio
        cpu = f", CPU x{cpu_ratio:.3f}"
    text = (f"x{test.ratio:.3f} {what}; {1 - alpha:.5g} bounds x{test.low:.3f}-x{test.high:.3f}){cpu}; "
            f"tolerance {tol:.0%}; detects a slowdown >= {test.detectable:.1%} and a speed-up >= "
            f"{test.detectable_speedup:.1%} at power {stats.DESIGN_POWER:g} (p slower {test.p_slower:.3g}, "
            f"p faster {test.p_faster:.3g}, alpha {alpha:.3g})")
    if call == "slower":
        waits = " - the wall time grew but the CPU time did not: the process waits" if (
            cpu_ratio is not None and cpu_ratio < 1 + (test.ratio - 1) / 2) else ""
        return verdict(name, "latency", Status.REGRESSION, f"slower: {text}{waits}", "slowdown", diff, test.p_slower)
    if call == "faster":
        return verdict(name, "latency", Status.CHANGED, f"faster: {text}", "speedup", diff, test.p_slower)
    if call == "within":
        return verdict(name, "latency", Status.PASS, f"a change inside the tolerance: {text}", "tolerated-drift",
                       diff, test.p_slower)
    if call == "not-checked":
        return verdict(name, "latency", Status.SKIPPED, f"not checked: it detects only slowdowns >= "
                       f"{test.detectable:.1%} (> the {tol:.0%} tolerance): {text}", "not-checked", diff,
                       test.p_slower)
    return verdict(name, "latency", Status.PASS, text, "", diff, test.p_slower)


def block_ratios(new: Sequence[float], old: Sequence[float]) -> list[float]:
    """ABBA block log ratios from each side's per-call times in call order (two calls of each side a
    block): d_k = 1/2 [log(new_2k / old_2k) + log(new_2k+1 / old_2k+1)] (harness/designs/paired.py)."""
    n, o = np.asarray(new, float), np.asarray(old, float)
    return list(0.5 * (np.log(n[0::2] / o[0::2]) + np.log(n[1::2] / o[1::2])))


def compare_paired(name: str, new: dict[str, list[float]], old: dict[str, list[float]], policy: Policy) -> Outcome:
    """A paired A/B latency field (`harness check --against`, harness/designs/paired.py): two envs timed
    call by call in ABBA blocks in one time window, each side's per-call {"wall": [...], "cpu": [...]}
    seconds in call order. Each clock's block log ratios (`block_ratios`, new / old) are tested by
    `stats.paired_slowdown_test` (Yuen's trimmed mean, SE from the blocks, t with h - 1 df):

    - the CPU time (the worker's process time, one torch thread) is what a preempted call does not
      inflate: on the shared 2-core host at load 7.6 it detected 5.5 % on decode where the wall clock
      detected 10.7 %, 7.7 % on plain generate() where the wall detected 21.6 % (12 s each);
    - the wall clock is what a caller waits for: a release that sleeps or synchronises grows it alone.

    Two clocks x two directions: each one-sided test at policy.alpha / 4 (Bonferroni), so an unchanged
    library is a false alarm - either clock, either way - with probability <= policy.alpha (the run's
    per-test alpha over the paired fields). The outcome (`latency_outcome`, `latency_tolerance`):
    a regression when either clock calls it slower (the wall alone: "the process waits"), changed
    when the CPU time is faster; otherwise the CPU test's power decides - `not checked` when its
    detectable slowdown exceeds the tolerance, else pass; the wall clock's own figures ride along
    (`wall_*` in the diff: the wait it would have detected)."""
    level = policy.with_alpha(policy.alpha / 4)
    cpu_blocks, wall_blocks = block_ratios(new["cpu"], old["cpu"]), block_ratios(new["wall"], old["wall"])
    cpu = stats.paired_slowdown_test(cpu_blocks, level.alpha)
    wall = stats.paired_slowdown_test(wall_blocks, level.alpha)
    tol = policy.thresholds.latency_tolerance
    calls = {"cpu": stats.latency_call(cpu, tol, level.alpha), "wall": stats.latency_call(wall, tol, level.alpha)}
    diff: dict[str, Any] = {
        "test": "paired-abba-yuen", "clock": "cpu", "blocks": len(cpu_blocks), "df": cpu.df, "alpha_run": policy.alpha,
        "median_old": float(np.median(old["wall"])), "median_new": float(np.median(new["wall"])),
        "wall_ratio": wall.ratio, "wall_ratio_ci": [wall.low, wall.high], "wall_p_slower": wall.p_slower,
        "wall_detectable_slowdown": wall.detectable, "wall_call": calls["wall"], "cpu_call": calls["cpu"]}
    wall_text = (f"; wall x{wall.ratio:.3f} (bounds x{wall.low:.3f}-x{wall.high:.3f}, detects a wait >= "
                 f"{wall.detectable:.1%})")
    what = f"of the other env in CPU time (paired, {len(cpu_blocks)} ABBA blocks"
    if calls["wall"] == "slower" and calls["cpu"] != "slower":
        out = latency_outcome(name, wall, level, {**diff, "clock": "wall"}, f"of the other env on the wall clock "
                              f"(paired, {len(wall_blocks)} ABBA blocks")
        return replace(out, detail=f"{out.detail}; CPU x{cpu.ratio:.3f} - the wall time grew beyond what the CPU "
                                   "time did: the process waits")
    out = latency_outcome(name, cpu, level, diff, what)
    return replace(out, detail=out.detail + wall_text)


# ----------------------------------------------------------------------------------------------
# memory


LOW_PRECISION_KERNELS = ("bf16", "fp16")  # dtypes whose matmuls take the CPU's own oneDNN kernels


def compare_memory(name: str, observed: Field, baseline: Field, policy: Policy) -> Outcome:
    """Bytes torch allocated in one call (peak of live allocations, total), deterministic for one
    torch build: a regression when either grows beyond (1 + memory_tolerance), changed when either
    shrinks that much (less memory), pass otherwise. Across device types or dtypes it is not compared,
    nor in a low-precision dtype across hardware classes: bf16 / fp16 matmuls go through the CPU's own
    oneDNN kernels, whose workspaces differ (2026-12-02, the same torch 2.13.0 build in bf16: decode
    allocated 1,567,072 bytes on an AMD EPYC and 1,966,432 on an Intel Xeon with AMX, x1.25; every fp32
    field allocated the same bytes on both)."""
    obs_env, base_env = policy.observed_env or {}, policy.baseline_env or {}
    kind_new, kind_old = obs_env.get("device", {}).get("type"), base_env.get("device", {}).get("type")
    if kind_new != kind_old or obs_env.get("dtype") != base_env.get("dtype"):
        return verdict(name, "memory", Status.SKIPPED, f"memory is compared on one device type and dtype only "
                       f"(another dtype allocates other tensors): {kind_old} {base_env.get('dtype')} vs "
                       f"{kind_new} {obs_env.get('dtype')}", "not-comparable")
    if obs_env.get("dtype") in LOW_PRECISION_KERNELS and hardware_class(obs_env) != hardware_class(base_env):
        return verdict(name, "memory", Status.SKIPPED, f"{obs_env.get('dtype')} memory is compared on one hardware "
                       f"class only (its kernels are the CPU's own, their workspaces too): recorded on "
                       f"{hardware_class(base_env)}, this run {hardware_class(obs_env)}", "not-comparable")
    tol = policy.thresholds.memory_tolerance
    ratios = {k: observed.value[k] / baseline.value[k] for k in ("peak_bytes", "allocated_bytes")
              if baseline.value.get(k)}
    diff = {"old": baseline.value, "new": observed.value, "ratios": ratios, "tolerance": tol}
    text = ", ".join(f"{k.removesuffix('_bytes')} {baseline.value[k]:,} -> {observed.value[k]:,} bytes (x{r:.3f})"
                     for k, r in ratios.items())
    if any(r > 1 + tol for r in ratios.values()):
        return verdict(name, "memory", Status.REGRESSION, f"more memory: {text}; tolerance {tol:.0%}", "memory-growth", diff)
    if any(r < 1 / (1 + tol) for r in ratios.values()):
        return verdict(name, "memory", Status.CHANGED, f"less memory: {text}", "memory-saving", diff)
    return verdict(name, "memory", Status.PASS, text, "" if observed.value == baseline.value else "within-noise", diff)
