"""Field kinds and how each is compared: pure functions, no model loading, no I/O.

`compare_field(name, observed, baseline, policy)` dispatches on the field's kind to one
`compare_<kind>` function and returns a `schema.Outcome` for that field (status, one-line detail
with old vs new, `Category`, structured diff, and the p-value for the statistical kinds); the
checking core (harness/checking.py) fills in the suite, case and side it was compared against.

| kind         | value                                   | policy |
|--------------|-----------------------------------------|--------|
| exact        | any JSON                                | deepdiff, no tolerance; any difference is a regression |
| tokens       | ids (list, or list of rows); extras margins (top-2 logit margin per step) | exact; a first divergence at a step whose margin (either side's) is below the tie epsilon of the coarser dtype, between envs whose numerics differ, is a "tie-flip" (pass) |
| tensor       | nested list of floats; extras dtype     | torch.testing default rtol/atol of the coarser dtype; across different numerics plus k*u*max|b| |
| rate         | {"k": int, "n": int}                    | two-sided Fisher exact two-proportion test at alpha; against an exact probability {"p": x} (the engine's): two-sided binomial test |
| distribution | counts; extras expected (exact probabilities) | G-test of fit at alpha + TV upper confidence bound; without expected: two-sample G-test vs the baseline counts |
| latency      | {"samples": [...], "calibration": x}    | samples / median(calibration); one-sided Mann-Whitney shift beyond (1 + tolerance) at alpha; only on the same hardware class and dtype |
| capability   | bool, {feature: bool} or [features]     | added / removed -> changed (feature-added / feature-removed), never a regression |

Statistical kinds (`STATISTICAL_KINDS`) decide at `policy.alpha`; the plugin chooses that alpha
so the whole run keeps its family-wise false-alarm rate (see stats.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from deepdiff import DeepDiff

from harness import stats
from harness.config import Thresholds
from harness.env import hardware_class, numerics_differences
from harness.schema import STATISTICAL_KINDS, Category, Field, Outcome, Status

# torch.testing.assert_close defaults (rtol, atol) per dtype; tests/test_compare.py checks this
# table against torch itself.
TOLERANCES: dict[str, tuple[float, float]] = {
    "fp64": (1e-7, 1e-7),
    "fp32": (1.3e-6, 1e-5),
    "fp16": (1e-3, 1e-5),
    "bf16": (1.6e-2, 1e-5),
}
# unit roundoff u = 2^-(mantissa bits + 1)
UNIT_ROUNDOFF: dict[str, float] = {"fp64": 2.0**-53, "fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}


@dataclass(frozen=True)
class Policy:
    """Everything a comparison may depend on besides the two fields.

    implementations_differ: the two sides come from different code (transformers vs the reference
    engine), so their numerics differ even in one environment.
    """

    alpha: float = 0.01
    thresholds: Thresholds = field(default_factory=Thresholds)
    observed_env: dict[str, Any] | None = None
    baseline_env: dict[str, Any] | None = None
    implementations_differ: bool = False

    def numerics_differences(self) -> list[str]:
        """Why the two sides may round differently ([] = bit-identical numerics expected)."""
        diffs = numerics_differences(self.observed_env, self.baseline_env)
        return [*diffs, "implementation"] if self.implementations_differ else diffs

    def with_alpha(self, alpha: float) -> Policy:
        return replace(self, alpha=alpha)


def verdict(name: str, kind: str, status: Status, detail: str = "", category: Category | str = Category.NONE,
            diff: dict[str, Any] | None = None, p_value: float | None = None) -> Outcome:
    """The outcome of comparing one field (suite and case are filled in by the checking core)."""
    return Outcome("", "", name, kind, status, detail, category, dict(diff or {}), p_value=p_value)


def _short(value: Any, limit: int = 80) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _dtype_of(f: Field, env: dict[str, Any] | None) -> str:
    return str(f.extras.get("dtype") or (env or {}).get("dtype") or "fp32")


def _coarser(a: str, b: str) -> str:
    """The dtype with the larger unit roundoff (unknown names count as fp32)."""
    return max((a, b), key=lambda d: UNIT_ROUNDOFF.get(d, UNIT_ROUNDOFF["fp32"]))


# ----------------------------------------------------------------------------------------------
# exact


def compare_exact(name: str, observed: Field, baseline: Field, policy: Policy) -> Outcome:
    """Structural equality via deepdiff (no tolerance, types matter). Any difference -> regression."""
    diff = DeepDiff(baseline.value, observed.value, verbose_level=2)
    if not diff:
        return verdict(name, "exact", Status.PASS, "identical")
    lines = diff.pretty().splitlines()
    detail = "; ".join(lines[:3]) + (f" (+{len(lines) - 3} more)" if len(lines) > 3 else "")
    return verdict(
        name, "exact", Status.REGRESSION, detail, "real-change", {"deepdiff": json.loads(diff.to_json())}
    )


# ----------------------------------------------------------------------------------------------
# tokens


def _rows(value: Any) -> list[list[Any]]:
    if isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        return value
    return [value if isinstance(value, list) else [value]]


def _margin_rows(extras: dict[str, Any], rows: int) -> list[list[float] | None]:
    margins = extras.get("margins")
    if margins is None:
        return [None] * rows
    shaped = _rows(margins) if rows > 1 else [margins if isinstance(margins, list) else [margins]]
    return shaped + [None] * (rows - len(shaped))


def first_divergence(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """Index of the first differing position (or the shorter length if one is a prefix of the
    other); None when equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _margin_at(margins: list[float] | None, step: int) -> float | None:
    if margins is None or step >= len(margins) or margins[step] is None:
        return None
    return float(margins[step])


def compare_tokens(name: str, observed: Field, baseline: Field, policy: Policy) -> Outcome:
    """Greedy ids must match exactly. At the first divergence (step i) of a row:

    tie-flip (pass) iff  min(margin_obs[i], margin_base[i]) < eps(coarser dtype)  and the envs'
    numerics differ (hardware, dtype, threads, torch, attention, or implementation);
    otherwise a regression ("real-change"). After a divergence the rest of the row is conditioned
    on a different prefix and is not compared.
    """
    obs_rows, base_rows = _rows(observed.value), _rows(baseline.value)
    if len(obs_rows) != len(base_rows):
        return verdict(
            name, "tokens", Status.REGRESSION,
            f"batch size changed: old {len(base_rows)} rows vs new {len(obs_rows)}", "real-change",
            {"rows_old": len(base_rows), "rows_new": len(obs_rows)},
        )
    obs_margins = _margin_rows(observed.extras, len(obs_rows))
    base_margins = _margin_rows(baseline.extras, len(base_rows))
    dtype = _coarser(_dtype_of(observed, policy.observed_env), _dtype_of(baseline, policy.baseline_env))
    eps = policy.thresholds.tie_eps(dtype) if dtype in UNIT_ROUNDOFF else policy.thresholds.tie_eps_fp32
    differs = policy.numerics_differences()
    divergences = []
    for row, (new, old) in enumerate(zip(obs_rows, base_rows, strict=True)):
        step = first_divergence(new, old)
        if step is None:
            continue
        m_new, m_old = _margin_at(obs_margins[row], step), _margin_at(base_margins[row], step)
        known = [m for m in (m_new, m_old) if m is not None]
        margin = min(known) if known else None
        tie = margin is not None and margin < eps and bool(differs)
        divergences.append({
            "row": row, "step": step, "old": old[step:step + 4], "new": new[step:step + 4],
            "margin_new": m_new, "margin_old": m_old, "margin": margin, "tie_eps": eps, "dtype": dtype,
            "tie_flip": tie,
        })
    if not divergences:
        return verdict(name, "tokens", Status.PASS, "identical")
    diff = {"divergences": divergences, "numerics_differ": differs}
    real = [d for d in divergences if not d["tie_flip"]]
    first = (real or divergences)[0]
    where = f"row {first['row']} step {first['step']}" if len(obs_rows) > 1 else f"step {first['step']}"
    change = f"old {first['old']} vs new {first['new']}"
    if real:
        if not differs:
            why = "same numerics on both sides, so no near-tie can flip"
        elif first["margin"] is None:
            why = "no margins recorded to call it a tie"
        else:
            why = f"margin {first['margin']:.3g} >= tie eps {eps:g} for {dtype}"
        detail = f"tokens differ from {where}: {change} ({why})"
        return verdict(name, "tokens", Status.REGRESSION, detail, "real-change", diff)
    detail = (
        f"tie-flip at {where}: {change}, margin {first['margin']:.3g} < tie eps {eps:g} for {dtype} "
        f"(numerics differ in {', '.join(differs)})"
    )
    return verdict(name, "tokens", Status.PASS, detail, "tie-flip", diff)


# ----------------------------------------------------------------------------------------------
# tensor


def tensor_tolerance(dtype: str) -> tuple[float, float]:
    """torch.testing.assert_close's default (rtol, atol) for a canonical dtype name."""
    return TOLERANCES.get(dtype, TOLERANCES["fp32"])


def compare_tensor(name: str, observed: Field, baseline: Field, policy: Policy) -> Outcome:
    """Elementwise ``|new - old| <= atol + rtol*|old|`` with torch.testing's defaults for the
    coarser of the two dtypes; when the envs' numerics differ, plus ``k * u(dtype) * max|old|``
    (k = thresholds.tensor_cross_env_ulps), because low-precision errors scale with the tensor's
    magnitude. NaN matches NaN and an infinity matches the same infinity. Reports max abs / rel error and where."""
    try:
        new = np.asarray(observed.value, dtype=float)
        old = np.asarray(baseline.value, dtype=float)
    except (TypeError, ValueError) as exc:
        return verdict(name, "tensor", Status.REGRESSION, f"not a numeric tensor: {exc}", "real-change")
    if new.shape != old.shape:
        return verdict(
            name, "tensor", Status.REGRESSION, f"shape changed: old {list(old.shape)} vs new {list(new.shape)}",
            "real-change", {"shape_old": list(old.shape), "shape_new": list(new.shape)},
        )
    dtype = _coarser(_dtype_of(observed, policy.observed_env), _dtype_of(baseline, policy.baseline_env))
    rtol, atol = tensor_tolerance(dtype)
    differs = policy.numerics_differences()
    finite = np.abs(old[np.isfinite(old)])
    scale = float(finite.max()) if finite.size else 0.0
    extra = policy.thresholds.tensor_cross_env_ulps * UNIT_ROUNDOFF.get(dtype, UNIT_ROUNDOFF["fp32"]) * scale
    extra = extra if differs else 0.0
    same = (new == old) | (np.isnan(new) & np.isnan(old))  # equal infinities (masked logits) match
    with np.errstate(invalid="ignore"):
        err = np.where(same, 0.0, np.abs(new - old))
    err = np.where(np.isnan(err), np.inf, err)
    allowed = atol + rtol * np.abs(np.nan_to_num(old)) + extra
    bad = err > allowed
    max_abs = float(err.max()) if err.size else 0.0
    rel = err / np.maximum(np.abs(np.nan_to_num(old)), np.finfo(float).tiny)
    max_rel = float(rel.max()) if rel.size else 0.0
    diff: dict[str, Any] = {
        "dtype": dtype, "rtol": rtol, "atol": atol, "cross_env_extra": extra, "max_abs_err": max_abs,
        "max_rel_err": max_rel, "mismatched": int(bad.sum()), "total": int(err.size),
    }
    if not bad.any():
        category = Category.NONE if max_abs == 0 else Category.TOLERATED_DRIFT
        detail = "identical" if max_abs == 0 else f"within tolerance ({dtype}): max abs err {max_abs:.3g}"
        return verdict(name, "tensor", Status.PASS, detail, category, diff)
    index = np.unravel_index(int(np.argmax(np.where(bad, err - allowed, -np.inf))), err.shape)
    diff["worst_index"] = [int(i) for i in index]
    detail = (
        f"{int(bad.sum())}/{err.size} elements beyond tolerance ({dtype}, rtol {rtol:g}, atol {atol:g}): "
        f"at {list(diff['worst_index'])} old {old[index]:.6g} vs new {new[index]:.6g}; "
        f"max abs err {max_abs:.3g}, max rel err {max_rel:.3g}"
    )
    return verdict(name, "tensor", Status.REGRESSION, detail, "real-change", diff)


# ----------------------------------------------------------------------------------------------
# rate


def _rate(f: Field, side: str) -> tuple[int, int]:
    value = f.value
    if not isinstance(value, dict) or "k" not in value or "n" not in value:
        raise ValueError(f"{side} rate must be {{'k': int, 'n': int}}, got {value!r}")
    return int(value["k"]), int(value["n"])


def compare_rate(name: str, observed: Field, baseline: Field, policy: Policy) -> Outcome:
    """Acceptance-style counts k/n vs the baseline's: two-sided Fisher exact test
    (`stats.two_proportion_test`) at policy.alpha. Against an exact probability (baseline value
    ``{"p": x}``, e.g. the engine's acceptance probability): two-sided binomial test of k out of n
    at p = x (`stats.binomial_test`). False-alarm rate <= alpha (both tests are exact)."""
    k1, n1 = _rate(observed, "observed")
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


EXPECTED_TV = 1e-6  # TV between two records' exact distributions that is only rounding


def _expected_change(observed: Field, baseline: Field, policy: Policy) -> dict[str, Any] | None:
    """TV between the observed and the baseline's exact expected probabilities, and what is allowed."""
    old = baseline.extras.get("expected")
    if old is None:
        return None
    try:
        tv = stats.tv_distance(*_aligned(observed.extras["expected"], old)[:2])
    except ValueError:
        tv = 1.0  # a different support is a different distribution
    allowed = EXPECTED_TV
    if policy.numerics_differences():
        dtype = _coarser(_dtype_of(observed, policy.observed_env), _dtype_of(baseline, policy.baseline_env))
        allowed = max(EXPECTED_TV, policy.thresholds.tensor_cross_env_ulps * UNIT_ROUNDOFF.get(dtype, 2.0**-24))
    return {"expected_tv_vs_baseline": tv, "expected_tv_allowed": allowed}


def compare_distribution(name: str, observed: Field, baseline: Field, policy: Policy) -> Outcome:
    """Sampled counts vs the exact expected probabilities (extras["expected"], from the engine):
    G-test of fit at policy.alpha (`stats.g_test`: G statistic, exact-size Monte Carlo p-value;
    p = 0 if a draw hit a zero-probability value),
    plus TV(p^, p) and its upper (1 - alpha) confidence bound (`stats.tv_upper_bound`). A pass
    whose bound exceeds thresholds.tv_max is marked "underpowered" with the n that would suffice.
    The expected probabilities are exact math, so they must also agree with the baseline's:
    ``TV(expected_new, expected_old) <= EXPECTED_TV`` (1e-6: rounding) in one environment, or
    ``<= max(1e-6, k * u(coarser dtype))`` across different numerics (as for tensors); beyond
    that the exact distribution itself changed: a regression ("expected-changed") until regenerated.
    Without expected probabilities: two-sample test of the counts against the baseline's
    (`stats.g_test_two_sample`)."""
    alpha = policy.alpha
    expected = observed.extras.get("expected")
    if expected is not None:
        counts, probs, keys = _aligned(observed.value, expected)
        test = stats.g_test(counts, probs, alpha=alpha)
        n = int(counts.sum())
        tv_hat = stats.tv_distance(counts, probs) if n else 0.0
        tv_ucb = stats.tv_upper_bound(counts, probs, delta=alpha)
        diff: dict[str, Any] = {
            "test": "g-test-fit", "statistic": test.statistic if math.isfinite(test.statistic) else None,
            "df": test.df, "p_value": test.p_value, "p_asymptotic": test.p_asymptotic, "resamples": test.resamples,
            "alpha": alpha, "n": n, "tv": tv_hat, "tv_upper": tv_ucb,
            "impossible_draws": test.impossible, "support": keys,
        }
        expected_change = _expected_change(observed, baseline, policy)
        if expected_change is not None:
            diff.update(expected_change)
        text = f"n={n}, G p = {test.p_value:.3g} (alpha {alpha:.3g}), TV {tv_hat:.4f} <= {tv_ucb:.4f}"
        if test.p_value < alpha:
            why = f"{test.impossible} draws of zero-probability values" if test.impossible else "counts do not fit the expected probabilities"
            return verdict(name, "distribution", Status.REGRESSION, f"{why}: {text}", "distribution-mismatch", diff, test.p_value)
        if expected_change is not None and expected_change["expected_tv_vs_baseline"] > expected_change["expected_tv_allowed"]:
            detail = (f"exact distribution changed: TV(old expected, new expected) = "
                      f"{expected_change['expected_tv_vs_baseline']:.3g} > {expected_change['expected_tv_allowed']:.3g}; {text}")
            return verdict(name, "distribution", Status.REGRESSION, detail, "expected-changed", diff, test.p_value)
        tv_max = policy.thresholds.tv_max
        if tv_ucb > tv_max and tv_max > 0:
            need = stats.samples_needed(tv_max, power=0.8, alpha=alpha, k=max(test.bins, 2))
            diff["samples_needed"] = need
            return verdict(
                name, "distribution", Status.PASS,
                f"fits, but cannot rule out TV > {tv_max:g} (need n >= {need} for 80% power): {text}",
                "underpowered", diff, test.p_value,
            )
        return verdict(name, "distribution", Status.PASS, f"fits: {text}", "", diff, test.p_value)
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


# ----------------------------------------------------------------------------------------------
# latency


def _normalised_samples(f: Field, side: str) -> np.ndarray:
    value = f.value
    if not isinstance(value, dict) or "samples" not in value:
        raise ValueError(f"{side} latency must be {{'samples': [...], 'calibration': x}}, got {_short(value)}")
    samples = np.asarray(value["samples"], dtype=float)
    calibration = value.get("calibration")
    if calibration is None:
        return samples
    cal = float(np.median(np.asarray(calibration, dtype=float)))
    if not cal > 0:
        raise ValueError(f"{side} latency calibration must be > 0, got {calibration!r}")
    return samples / cal


def compare_latency(name: str, observed: Field, baseline: Field, policy: Policy) -> Outcome:
    """Timing samples divided by the in-run calibration (median), compared only when both envs have
    the same hardware class (`env.hardware_class`) and dtype, else skipped with the reason.

    regression ("slowdown") iff the one-sided Mann-Whitney test says new > old * (1 + tol) at
    policy.alpha; changed ("speedup") iff new * (1 + tol) < old at alpha; pass otherwise. A shift
    within the tolerance or buried in noise never fails (false-alarm rate <= alpha at the
    tolerance boundary, lower inside it)."""
    obs_env, base_env = policy.observed_env, policy.baseline_env
    if not obs_env or not base_env:
        return verdict(name, "latency", Status.SKIPPED, "no environment fingerprint to match hardware", "not-comparable")
    hw_new, hw_old = hardware_class(obs_env), hardware_class(base_env)
    if hw_new != hw_old or obs_env.get("dtype") != base_env.get("dtype"):
        return verdict(
            name, "latency", Status.SKIPPED,
            f"latency is compared on the same hardware class and dtype only: old {hw_old} {base_env.get('dtype')} "
            f"vs new {hw_new} {obs_env.get('dtype')}",
            "not-comparable", {"hardware_old": hw_old, "hardware_new": hw_new},
        )
    new = _normalised_samples(observed, "observed")
    old = _normalised_samples(baseline, "baseline")
    tol = policy.thresholds.latency_tolerance
    test = stats.latency_shift_test(new, old, tol)
    diff = {"ratio": test.ratio, "tolerance": tol, "p_slower": test.p_slower, "p_faster": test.p_faster,
            "alpha": policy.alpha, "n_old": int(old.size), "n_new": int(new.size),
            "median_old": float(np.median(old)), "median_new": float(np.median(new))}
    text = (f"old median {np.median(old):.4g} vs new {np.median(new):.4g} (x{test.ratio:.3f}; tolerance "
            f"{tol:.0%}; p slower {test.p_slower:.3g}, p faster {test.p_faster:.3g}, alpha {policy.alpha:.3g})")
    if test.p_slower < policy.alpha:
        return verdict(name, "latency", Status.REGRESSION, f"slower: {text}", "slowdown", diff, test.p_slower)
    if test.p_faster < policy.alpha:
        return verdict(name, "latency", Status.CHANGED, f"faster: {text}", "speedup", diff, test.p_slower)
    return verdict(name, "latency", Status.PASS, text, "", diff, test.p_slower)


# ----------------------------------------------------------------------------------------------
# capability


def _features(value: Any, name: str) -> set[str] | None:
    if isinstance(value, bool):
        return {name} if value else set()
    if isinstance(value, dict) and all(isinstance(v, bool) for v in value.values()):
        return {k for k, v in value.items() if v}
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return set(value)
    return None


def compare_capability(name: str, observed: Field, baseline: Field, policy: Policy) -> Outcome:
    """Feature sets (True flags, or listed names): added / removed -> changed with category
    feature-added / feature-removed (removed wins when both); never a regression."""
    new, old = _features(observed.value, name), _features(baseline.value, name)
    if new is None or old is None:
        diff = DeepDiff(baseline.value, observed.value, verbose_level=2)
        if not diff:
            return verdict(name, "capability", Status.PASS, "unchanged")
        return verdict(name, "capability", Status.CHANGED, "; ".join(diff.pretty().splitlines()[:3]),
                          "capability-changed", {"deepdiff": json.loads(diff.to_json())})
    added, removed = sorted(new - old), sorted(old - new)
    if not added and not removed:
        return verdict(name, "capability", Status.PASS, "unchanged")
    parts = ([f"added {', '.join(added)}"] if added else []) + ([f"removed {', '.join(removed)}"] if removed else [])
    category = "feature-removed" if removed else "feature-added"
    return verdict(name, "capability", Status.CHANGED, "; ".join(parts), category, {"added": added, "removed": removed})


# ----------------------------------------------------------------------------------------------
# dispatch

COMPARATORS: dict[str, Callable[[str, Field, Field, Policy], Outcome]] = {
    "exact": compare_exact,
    "tokens": compare_tokens,
    "tensor": compare_tensor,
    "rate": compare_rate,
    "distribution": compare_distribution,
    "latency": compare_latency,
    "capability": compare_capability,
}


def compare_field(name: str, observed: Field, baseline: Field | None, policy: Policy | None = None) -> Outcome:
    """Compare one observed field with its baseline (a golden record's field, or the reference
    engine's). No baseline -> new; a different kind -> changed ("kind-changed"); a malformed value
    -> regression ("invalid-value") with the reason, never an exception."""
    policy = policy or Policy()
    if baseline is None:
        return verdict(name, observed.kind, Status.NEW, "no baseline record", "", {"new": _short(observed.value)})
    if baseline.kind != observed.kind:
        return verdict(name, observed.kind, Status.CHANGED,
                          f"kind changed: old {baseline.kind} vs new {observed.kind}", "kind-changed",
                          {"kind_old": baseline.kind, "kind_new": observed.kind})
    try:
        return COMPARATORS[observed.kind](name, observed, baseline, policy)
    except (ValueError, TypeError, KeyError) as exc:
        return verdict(name, observed.kind, Status.REGRESSION, f"cannot compare: {exc}", "invalid-value")


def decide_with_holm(checks: Sequence[tuple[Outcome, Field, Field | None, Policy]], alpha: float) -> list[Outcome]:
    """Re-decide the statistical comparisons among `checks` (comparison, observed, baseline, policy)
    with Holm's procedure at `alpha`: a check is rejected iff its Holm-adjusted p <= alpha, i.e. it
    is decided at alpha * p / p~. Non-statistical comparisons are returned unchanged, in order."""
    out = [check[0] for check in checks]
    stat = [i for i, c in enumerate(out) if c.kind in STATISTICAL_KINDS and c.p_value is not None]
    if len(stat) < 2:
        return out
    for i, p_adj in zip(stat, stats.holm_adjust([out[i].p_value for i in stat]), strict=True):
        comparison, observed, baseline, policy = checks[i]
        p = comparison.p_value
        if p_adj <= p or p == 0:
            continue
        redone = compare_field(comparison.field, observed, baseline, policy.with_alpha(alpha * p / p_adj))
        out[i] = replace(redone, diff={**redone.diff, "holm_adjusted_p": p_adj, "alpha": alpha})
    return out
