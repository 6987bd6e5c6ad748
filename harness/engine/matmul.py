"""A linear layer's matmul as its definition, in float64, and the rounding error fp32 arithmetic
may add to it: the oracle of the kernels suite's matmul case (harness/designs/kernels.py), which
judges torch's fp32 `linear` under its precision flags.

    y[i, o] = sum_k x[i, k] w[o, k]                          (torch.nn.functional.linear, no bias)
    |fl(y) - y| <= gamma_K * (|x| |w|^T)[i, o]   gamma_K = K u / (1 - K u),  u = 2^-24 (fp32)

The bound (Higham, Accuracy and Stability of Numerical Algorithms, 3.5) holds for any order of
summation, blocked or fused-multiply-add kernels included; an fp32 matmul whose inputs were rounded
to bf16 on the way (oneDNN's bf32 `fpmath_mode`, what `set_float32_matmul_precision("medium")` allows)
errs by about 2^-8 (|x| |w|^T), ~20x beyond it at K = 256.

Computed with numpy's float64 matmul on the fp32 inputs (each upcast exactly) - numpy's own BLAS,
not torch: a bug in torch's matmul dispatch cannot move the oracle.
"""

from __future__ import annotations

import numpy as np
import torch

FP32_UNIT_ROUNDOFF = 2.0 ** -24


def _f64(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().double().numpy()


def linear(x: torch.Tensor, w: torch.Tensor) -> np.ndarray:
    """x @ w.T in float64 (numpy), from the fp32 values exactly."""
    return _f64(x) @ _f64(w).T


def fp32_bound(x: torch.Tensor, w: torch.Tensor) -> np.ndarray:
    """Per output element, the most fp32 rounding can move x @ w.T: gamma_K (|x| |w|^T)."""
    K = x.shape[-1]
    gamma = K * FP32_UNIT_ROUNDOFF / (1 - K * FP32_UNIT_ROUNDOFF)
    return gamma * (np.abs(_f64(x)) @ np.abs(_f64(w)).T)
