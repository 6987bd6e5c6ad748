"""The low-precision tensor tolerance: per element, from the dtype's rounding of the values compared.

A bf16 / fp16 forward rounds every activation to the dtype's grid, so two routes to the same logits
(a padded batch vs its rows alone, transformers vs the harness's engine, a cache vs none) differ by
rounding noise whose size follows the values, not a fixed fraction of the tensor's maximum. The
rule, per element i of a tensor whose two sides are a and b:

    |a_i - b_i| <= atol + c * u * (max(|a_i|, |b_i|) + s)        s = rms(b) over the whole tensor,
                                                                  each |b_j| capped at `typical_magnitude`

u is the unit roundoff (bf16 2^-8, fp16 2^-11), so u * |x| is half an ulp of x; s is the floor of an
element near zero, whose rounding error comes from the activations feeding it (their size is the
tensor's typical magnitude, its RMS), not from its own value - capped so that one extreme element
(1e30 beside 1 and 2) cannot make s, and so every element's allowance, huge. c = `Thresholds.tensor_rounding_ulps`,
measured on clean bf16 runs (see there). The old rule, ``rtol*|b| + 32 u max|b|`` (12.5 % of the
largest logit in bf16), let a left-padded row that attends to its pads through (max abs err 0.47 on
logits up to ~8): the new one allows ~c u (|x| + s) there.

A quantity the harness and the library both compute in fp32 whatever the run's dtype (RoPE inverse
frequencies, the YaRN attention factor, positions) is declared with extras {"dtype": "fp32"} on both
sides and so compared at fp32 tolerance (policy.dtype_of reads the field's own dtype first).
"""

from __future__ import annotations

import numpy as np

LOW_PRECISION = ("bf16", "fp16")
# A magnitude this large (half float32's largest) is a fill value - finfo(float32 / bfloat16).min of
# a masked logit or attention score -, not a size any other element's rounding follows.
FILL = 2.0 ** 127


def typical_magnitude(magnitudes: np.ndarray) -> float:
    """The largest finite magnitude once fill values (>= `FILL`) and the largest 1 % of the rest (at
    least one) are set aside: the scale a tolerance shared by a tensor's elements follows. Two
    implementations of one matmul-shaped computation round each output by about u * sqrt(d) * |h| |w|
    - the scale of the row's large values, not of the element itself (an fp32 logit of 0.17 beside
    logits of 20 moves by 2e-5 between eager and SDPA attention) - so the scale is the tensor's top
    magnitude; one huge element (1e30 beside 1 and 2) does not make it huge for every other, nor do
    masked logits at float32's minimum, however many."""
    kept = np.abs(np.asarray(magnitudes, dtype=float)).ravel()
    kept = kept[np.isfinite(kept) & (kept < FILL)]
    if kept.size < 2:
        return 0.0
    drop = max(1, kept.size // 100)
    return float(np.partition(kept, kept.size - drop)[: kept.size - drop].max())


def rounding_scale(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """max(|a_i|, |b_i|) + rms(b), each |b_j| in the rms capped at `typical_magnitude(b)` (fill values
    left out): the magnitude each element's rounding error follows (finite values)."""
    a, b = np.nan_to_num(np.abs(new), posinf=0.0, neginf=0.0), np.nan_to_num(np.abs(old), posinf=0.0, neginf=0.0)
    ordinary = b[b < FILL]
    capped = np.minimum(ordinary, typical_magnitude(ordinary)) if ordinary.size > 1 else ordinary
    rms = float(np.sqrt(np.mean(capped * capped))) if capped.size else 0.0
    return np.maximum(a, b) + rms


def rounding_allowance(old: np.ndarray, new: np.ndarray, unit_roundoff: float, ulps: float, atol: float) -> np.ndarray:
    """atol + ulps * u * (max(|a_i|, |b_i|) + rms(b)), per element."""
    return atol + ulps * unit_roundoff * rounding_scale(old, new)


def ulps_used(err: np.ndarray, old: np.ndarray, new: np.ndarray, unit_roundoff: float) -> float:
    """The largest err_i / (u * scale_i): the c a clean run needs (how the default was measured)."""
    if not err.size:
        return 0.0
    scale = unit_roundoff * np.maximum(rounding_scale(old, new), np.finfo(float).tiny)
    finite = np.where(np.isfinite(err), err, 0.0)
    return float((finite / scale).max())
