"""Scaled dot-product attention as its definition, in float64: the oracle of the kernels suite
(harness/designs/kernels.py), which judges torch's own SDPA kernels (math, flash, ...) at fp32 / bf16.

    out[b, h, i] = sum_j p_ij v[b, g(h), j]      p_i = softmax_j(s_ij)
    s_ij = q[b, h, i] . k[b, g(h), j] * scale   (scale = 1 / sqrt(D) unless given), -inf where j is
                                                  not visible to i; with a soft-cap c (Gemma 2)
                                                  c * tanh(s_ij / c) before the mask
    g(h) = h // (H / Hkv)                         grouped-query attention: query head h reads key /
                                                  value head g(h) - consecutive query heads share one
                                                  (torch's enable_gqa, repeat_interleave, transformers'
                                                  repeat_kv; tiling them instead is onnx #7274's bug)
    visible: j <= i under `causal` (top-left aligned, as torch's is_causal); a boolean mask's True
             (attend) entries; an additive float mask is added to s
    a row that sees nothing is 0 (0/0 taken as "no contribution": torch's math backend since 2.5 -
             `_safe_softmax` - and the ONNX Attention operator)
    a NaN a row attends to (in q, or in a visible k / v) makes that row NaN: IEEE arithmetic, nothing
             hidden

Computed with torch's float64 matmul and softmax on the inputs as given (a bf16 input is upcast
exactly), never with scaled_dot_product_attention: the kernels judged are torch's fp32 / bf16 SDPA
kernels, the oracle is other code (a bug in torch's fp64 matmul itself would move both).
"""

from __future__ import annotations

import math

import torch


def attention_scores(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """s = q k^T * scale in float64, each query head against its key head g(h) (before any cap or mask)."""
    q, k = q.to(torch.float64), k.to(torch.float64)
    return q @ k.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3).transpose(-1, -2) * scale


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
              causal: bool = False, scale: float | None = None, softcap: float | None = None) -> torch.Tensor:
    """q (..., H, L, D), k / v (..., Hkv, S, D) with H a multiple of Hkv (broadcast / expanded k / v
    are read as their values); returns (..., H, L, D) in float64. `softcap` (Gemma 2's
    attn_logit_softcapping): s_ij <- softcap * tanh(s_ij / softcap) before the mask."""
    q, k, v = (t.to(torch.float64) for t in (q, k, v))
    heads, kv_heads = q.shape[-3], k.shape[-3]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads are not a multiple of {kv_heads} key / value heads")
    group = heads // kv_heads
    k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    scores = q @ k.transpose(-1, -2) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    visible = torch.ones(scores.shape[-2:], dtype=torch.bool)
    if causal:
        visible = torch.tril(visible)
    if mask is not None and mask.dtype == torch.bool:
        visible = visible & mask
    elif mask is not None:
        scores = scores + mask.to(torch.float64)
    scores = scores.masked_fill(~visible, float("-inf"))
    empty = torch.isneginf(scores).all(dim=-1, keepdim=True)
    weights = torch.where(empty, torch.zeros_like(scores), torch.softmax(scores, dim=-1))
    return weights @ v
