"""Catalogue faults of torch's SDPA and matmul kernels (suites/test_kernels.py), injected into torch -
not transformers: each wraps `torch.nn.functional.scaled_dot_product_attention` or
`torch.nn.functional.linear`, which the kernels suite calls by attribute
(harness/subjects/torch_sdpa.py, torch_matmul.py). Each `Fault` row names what it breaks,
the `Catch` that must report it and the upstream bug it is modelled on; harness/faults/catalogue.py
joins every family's `FAULTS`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from harness.faults.patches import Catch, Fault, Wrap

FUNCTIONAL = "torch.nn.functional"  # where SDPA and linear live


def _gqa_tiles_kv_heads(sdpa: Callable[..., Any]) -> Callable[..., Any]:
    """enable_gqa repeats the key / value heads as a tile (h0 h1 h0 h1) instead of interleaved
    (h0 h0 h1 h1): query head h reads kv head h % Hkv instead of h // (H / Hkv)."""
    @functools.wraps(sdpa)
    def scaled_dot_product_attention(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("enable_gqa") and key.shape[-3] != query.shape[-3]:
            group = query.shape[-3] // key.shape[-3]
            key, value = key.repeat(1, group, 1, 1), value.repeat(1, group, 1, 1)
            kwargs = {**kwargs, "enable_gqa": False}
        return sdpa(query, key, value, *args, **kwargs)
    return scaled_dot_product_attention


def _fp32_in_bf16(sdpa: Callable[..., Any]) -> Callable[..., Any]:
    """fp32 attention computed in bf16 (a reduced-precision matmul path taken under fp32) and cast back."""
    import torch

    @functools.wraps(sdpa)
    def scaled_dot_product_attention(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        if query.dtype == torch.float32:
            low = [t.to(torch.bfloat16) for t in (query, key, value)]
            return sdpa(*low, *args, **kwargs).to(torch.float32)
        return sdpa(query, key, value, *args, **kwargs)
    return scaled_dot_product_attention


def _nan_rows_to_zero(sdpa: Callable[..., Any]) -> Callable[..., Any]:
    """a query row holding a NaN gives a zero output row instead of NaN."""
    import torch

    @functools.wraps(sdpa)
    def scaled_dot_product_attention(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        out = sdpa(query, key, value, *args, **kwargs)
        nan_rows = torch.isnan(query).any(dim=-1, keepdim=True)
        return torch.where(nan_rows, torch.zeros_like(out), out)
    return scaled_dot_product_attention


def _masked_rows_nan(sdpa: Callable[..., Any]) -> Callable[..., Any]:
    """a query row that a boolean mask lets see no key gives NaN (softmax of all -inf) instead of 0."""
    import torch

    @functools.wraps(sdpa)
    def scaled_dot_product_attention(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        out = sdpa(query, key, value, *args, **kwargs)
        mask = kwargs.get("attn_mask", args[0] if args else None)
        if isinstance(mask, torch.Tensor) and mask.dtype == torch.bool:
            empty = (~mask).all(dim=-1, keepdim=True)
            out = torch.where(empty, torch.full_like(out, float("nan")), out)
        return out
    return scaled_dot_product_attention


def _linear_in_bf16(linear: Callable[..., Any]) -> Callable[..., Any]:
    """fp32 linear computes with its inputs rounded to bf16 whatever the matmul precision flag says
    (oneDNN's bf32 fpmath mode left on under "highest")."""
    import torch

    @functools.wraps(linear)
    def linear_bf32(x: Any, weight: Any, *args: Any, **kwargs: Any) -> Any:
        if x.dtype == torch.float32 and weight.dtype == torch.float32:
            rounded = [t.to(torch.bfloat16).to(torch.float32) for t in (x, weight)]
            return linear(*rounded, *args, **kwargs)
        return linear(x, weight, *args, **kwargs)
    return linear_bf32


FAULTS: tuple[Fault, ...] = (
    Fault("sdpa-gqa-tiles-kv-heads", "kernels",
          "SDPA with enable_gqa maps query head h to key / value head h % Hkv (the kv heads tiled, not "
          "interleaved): every grouped-query model attends with the wrong heads",
          Catch("kernels", "sdpa.flash.fp32", "gqa_vs_engine"),
          (Wrap(FUNCTIONAL, "scaled_dot_product_attention", _gqa_tiles_kv_heads),),
          notes="modelled on onnx/onnx #7274 (the ONNX Attention op's GQA expanded k / v with Tile - "
                "[head0, head1, head0, head1] - where torch uses repeat_interleave); the float64 definition "
                "(harness/engine/attention.py) is the oracle: caught on an empty store"),
    Fault("sdpa-fp32-in-bf16", "kernels",
          "fp32 SDPA computes in bf16 and casts back: a reduced-precision path taken under fp32 (errors "
          "~1e-3 where fp32 rounding gives ~1e-7)",
          Catch("kernels", "sdpa.math.fp32", "*_vs_engine"),
          (Wrap(FUNCTIONAL, "scaled_dot_product_attention", _fp32_in_bf16),),
          notes="modelled on pytorch #183809 (bf16 SDPA output changed on Arm CPUs between 2.11 and 2.12: a "
                "kernel's precision moving under a torch bump); "
                "caught on an empty store by the fp32 bound of 64 ulps of the output's scale"),
    Fault("sdpa-nan-query-to-zero", "kernels",
          "the math SDPA backend returns a zero row for a query row holding a NaN, where it propagated the NaN",
          Catch("kernels", "sdpa.math.*", "nan_rows"),
          (Wrap(FUNCTIONAL, "scaled_dot_product_attention", _nan_rows_to_zero),),
          notes="pytorch #141128 re-created on the math backend: CPU SDPA returned a NaN matrix for NaN input "
                "in 2.4 and zeros in 2.5 (the flash kernel still does on 2.13); recorded behaviour, no oracle "
                "decides it - caught against the record only"),
    Fault("sdpa-masked-row-nan", "kernels",
          "SDPA returns NaN for a query row the boolean mask lets see no key (a padding row), where it returns 0",
          Catch("kernels", "sdpa.*.fp32", "masked_vs_engine"),
          (Wrap(FUNCTIONAL, "scaled_dot_product_attention", _masked_rows_nan),),
          notes="modelled on pytorch #103963 (SDPA produces NaNs for a boolean attn_mask with zero rows) and "
                "transformers #38690 (NaN logits after the mask refactor: the NaN of padding rows spread through "
                "later layers); the oracle's fully masked row is 0: caught on an empty store"),
    Fault("matmul-highest-in-bf16", "kernels",
          "fp32 linear rounds its inputs to bf16 under set_float32_matmul_precision('highest'): the flag that "
          "promises full fp32 leaves the reduced-precision path on",
          Catch("kernels", "matmul.fp32", "highest_vs_engine"),
          (Wrap(FUNCTIONAL, "linear", _linear_in_bf16),),
          notes="pytorch #130919 re-created: on AArch64 CPUs with BF16, 'highest' did not disable mkldnn_matmul's "
                "bf16 down-conversion (fpmath_mode set whenever the input was fp32); the float64 definition and "
                "fp32's rounding bound (harness/engine/matmul.py) are the oracle: caught on an empty store"),
)
