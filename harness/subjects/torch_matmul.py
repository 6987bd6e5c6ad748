"""torch's fp32 `linear` as the subject (the kernels suite's matmul case): one call under one value
of `torch.set_float32_matmul_precision`, the flag put back afterwards; its output out, nothing judged.

The call goes through the attribute `torch.nn.functional.linear` at call time (what every
nn.Linear of a model calls), so a catalogue fault that wraps it is the one called.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def matmul_precision(flag: str) -> Iterator[None]:
    """`torch.set_float32_matmul_precision(flag)` for the block, the previous value restored."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(flag)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def linear(x: torch.Tensor, w: torch.Tensor, flag: str) -> torch.Tensor:
    """torch.nn.functional.linear(x, w) under matmul precision `flag`."""
    with matmul_precision(flag), torch.no_grad():
        return torch.nn.functional.linear(x, w)
