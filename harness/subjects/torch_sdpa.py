"""torch's scaled_dot_product_attention as the subject (the kernels suite): one call with one
backend forced (`torch.nn.attention.sdpa_kernel`), its output or its error out, nothing judged.

Here torch itself is the library under test, so a RuntimeError the call raises ("No viable backend
..." where a backend refuses the inputs, e.g. the memory-efficient kernel on a CPU) is the subject's
answer, recorded as an exact field - not a harness error. The call goes through the attribute
`torch.nn.functional.scaled_dot_product_attention` at call time, so a catalogue fault that wraps it
is the one called.
"""

from __future__ import annotations

from typing import Any

import torch

from harness.subjects import error_of


def backend(name: str) -> Any:
    from torch.nn.attention import SDPBackend

    return {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "cudnn": SDPBackend.CUDNN_ATTENTION}[name]


def sdpa(name: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
         **kwargs: Any) -> tuple[torch.Tensor | None, dict[str, str] | None]:
    """(output, None) with only backend `name` allowed, or (None, error) when torch refused or failed."""
    from torch.nn.attention import sdpa_kernel

    try:
        with sdpa_kernel([backend(name)]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs), None
    except RuntimeError as exc:
        return None, error_of(exc)
