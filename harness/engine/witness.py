"""The rounding witness: how far a model's own logits move when its forward runs in a low-precision
dtype, measured on the harness's engine - the same forward in that dtype and in fp32 - never on the
library under test.

The low-precision allowances of the checking core (the per-element rule's c, harness/checking/
rounding.py; the tie rule's k, compare.py `tie_eps_at`) were measured on the fixture zoo: shallow,
narrow models whose bf16 forward moves their logits by at most w = 5.2 of the rule's unit (llama-target
4.0, gemma2-softcap 5.2; the 46-layer GLM trunks excepted). Rounding grows with depth and width, and
a real-size model's moves further: measured 2026-12-04 on seeded random-init Llamas in bf16 (long-0,
the 256 columns a reference compares; torch 2.13.0 CPU, transformers 5.24.0):

    hidden x layers    witness w   library sdpa vs fp32   library eager vs fp32   eager vs sdpa
    256 x 2              2.2            2.2                    3.1                   3.0
    1024 x 16            4.9-5.3        5.4-5.6                5.1-5.3               6.1
    2048 x 4             8.7            8.1                    8.5                   7.9
    2048 x 16 (1.1B)    11.4-13.2      13.5-14.5              13.0-15.3             16.0-16.5
    2048 x 24           16.4           15.8                   18.3                  20.0

The library's own bf16 rounding tracks the engine's witness (0.93-1.3 w), and two bf16 routes of the
library differ by at most 1.45 w; the 1.1B model's clean eager-vs-SDPA logits (16.5) exceeded the
zoo's c = 12 and failed a user's first run. So each low-precision case of a model is judged with its
allowances scaled by the witness of its model (harness/settings/config.py `Thresholds.for_witness`):

    w = max_i |lo_i - hi_i| / (u * (max(|lo_i|, |hi_i|) + rms(hi)))
    f = max(1, K * w / c)            c -> f c,  k -> f k           (K = witness_factor, 2)

lo, hi: the engine's logits in the dtype and in fp32 over one held-out prompt of real text (random
token ids are off the model's distribution and read 2-5x larger on trained models), at the columns
the references compare. A library bug moves logits beyond rounding and cannot widen the witness: the
witness never runs the library.
"""

from __future__ import annotations

import torch

UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def rounding_witness(low: torch.Tensor, full: torch.Tensor, unit_roundoff: float) -> float:
    """max_i |lo_i - hi_i| / (u (max(|lo_i|, |hi_i|) + rms(hi))) over two [T, V] logit tensors."""
    lo, hi = low.double(), full.double()
    rms = hi.pow(2).mean().sqrt()
    scale = unit_roundoff * (torch.maximum(lo.abs(), hi.abs()) + rms)
    return float(((lo - hi).abs() / scale.clamp_min(torch.finfo(torch.float64).tiny)).max())
