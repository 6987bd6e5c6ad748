"""The low-precision tensor tolerance: per element, from the dtype's rounding of the values compared.

A bf16 / fp16 forward rounds every activation to the dtype's grid, so two routes to the same logits
(a padded batch vs its rows alone, transformers vs the harness's engine, a cache vs none) differ by
rounding noise whose size follows the values, not a fixed fraction of the tensor's maximum. The
rule, per element i of a tensor whose two sides are a and b:

    |a_i - b_i| <= atol + c * u * (max(|a_i|, |b_i|) + s)        s = rms(b) over the whole tensor

u is the unit roundoff (bf16 2^-8, fp16 2^-11), so u * |x| is half an ulp of x; s is the floor of an
element near zero, whose rounding error comes from the activations feeding it (their size is the
tensor's typical magnitude, its RMS), not from its own value. c = `Thresholds.tensor_rounding_ulps`,
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


def rounding_scale(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """max(|a_i|, |b_i|) + rms(b): the magnitude each element's rounding error follows (finite values)."""
    a, b = np.nan_to_num(np.abs(new), posinf=0.0, neginf=0.0), np.nan_to_num(np.abs(old), posinf=0.0, neginf=0.0)
    rms = float(np.sqrt(np.mean(b * b))) if b.size else 0.0
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
