"""Int8 weight-only quantization, per output row, from its definition - the oracle of the quantized
suite (harness/designs/quantized.py): what a quantized checkpoint's int8 data and scales must be, and
the weights they stand for, computed without the quantization library.

Symmetric affine int8 over the range [-128, 127] (torchao's `MappingType.SYMMETRIC`, zero point 0),
one scale per output row r of a weight W [out, in]:

    s_r   = max_c |W_rc| / ((127 - (-128)) / 2) = max_c |W_rc| / 127.5
    q_rc  = clamp(round(W_rc / s_r), -128, 127)
    W'_rc = q_rc * s_r                           (the dequantized weight)
    |W_rc - W'_rc| <= s_r / 2                    (round to nearest: half a step at most)

`dequantized(q, s)` is W'; `violations(w, q, s, u)` counts the elements and rows that break the rule
(a scale not the row's absmax over 127.5, an element further than half a step from its weight, an
int8 value outside the range). W is the weight as the model was loaded before quantizing - the
checkpoint's, rounded to the load dtype - and the scale is computed in that dtype: it is compared at a
relative max(1e-5, 2u) (u the load dtype's unit roundoff: bf16 2^-8 - measured 0.0039 on llama-target's
bf16 rows, so 2u), an element at (1 + 1e-4) half steps (float32's own rounding of w / s).

The engine then runs the model with W' in place of each quantized W (harness/engine/model.py
`Model` over a weights mapping): its logits are what a correct int8 weight-only kernel must compute,
up to float32 rounding (the kernel multiplies by s_r after the matmul, the engine before it).
"""

from __future__ import annotations

import torch

QMIN, QMAX = -128, 127
HALF_RANGE = (QMAX - QMIN) / 2  # 127.5
SCALE_RTOL = 1e-5
STEP_SLACK = 1e-4


def dequantized(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """W' = q * s, one scale per row, in float32."""
    return q.to(torch.float32) * scale.to(torch.float32).reshape(-1, 1)


def violations(w: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, unit_roundoff: float = 0.0) -> dict[str, int]:
    """How many rows' scales are not absmax / 127.5, how many elements lie beyond half a step from
    their weight, how many int8 values lie outside [-128, 127] (each 0 for a correct quantization);
    `w` as loaded (in the load dtype), `unit_roundoff` that dtype's (0 in fp32)."""
    w, s = w.to(torch.float32), scale.to(torch.float32).reshape(-1)
    want = w.abs().amax(dim=1) / HALF_RANGE
    rtol = max(SCALE_RTOL, 2 * unit_roundoff)
    bad_scale = int(((s - want).abs() > rtol * want.abs().clamp_min(torch.finfo(torch.float32).tiny)).sum())
    step = (w - dequantized(q, s)).abs() / (s.reshape(-1, 1) / 2).clamp_min(torch.finfo(torch.float32).tiny)
    beyond = int((step > 1 + STEP_SLACK).sum())
    out_of_range = int(((q.to(torch.int32) < QMIN) | (q.to(torch.int32) > QMAX)).sum())
    return {"scale_not_absmax": bad_scale, "beyond_half_step": beyond, "out_of_range": out_of_range}


# the scheme's promise: which weights it quantizes, into what, and what that saves

KEPT = ("lm_head",)  # the output head stays in full precision (transformers' quantizers keep the output
# embeddings: `get_modules_to_not_convert`); the input embeddings are no linear layer
ROW_OVERHEAD = 8  # bytes a quantized row may add at most: its scale and a zero point, float32 each


def promised(checkpoint: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    """The modules whose weight int8 weight-only quantization promises to quantize, read from the
    checkpoint itself: every linear projection - each 2-D `<module>.weight` that is neither an
    embedding table nor a kept module - with its shape [out, in]."""
    return {key[:-len(".weight")]: tuple(w.shape) for key, w in checkpoint.items()
            if key.endswith(".weight") and w.ndim == 2 and "embed" not in key
            and not any(key.startswith(k + ".") for k in KEPT)}


def promised_bytes(full: int, shapes: dict[str, tuple[int, ...]], element_size: int) -> int:
    """The most bytes the model may hold once the promised weights are int8: the full-precision model's
    `full` bytes, less (element_size - 1) per promised element, plus ROW_OVERHEAD per promised row."""
    elements = sum(out * inp for out, inp in shapes.values())
    rows = sum(out for out, _ in shapes.values())
    return full - elements * (element_size - 1) + rows * ROW_OVERHEAD
