"""Quantized weights on the CPU, per version: the checkpoint loaded with torchao's int8 weight-only
quantization - which modules it quantized, the int8 data and scales against the scheme's definition
on the checkpoint's own weights, the logits and tokens against the reference engine running the
dequantized weights, the bytes it holds (table: harness/cases/ `quantized`; fields:
harness/designs/quantized.py). torchao is an optional extra: without it the case is skipped
(unsupported) with the install line.
"""

import pytest

from harness import cases
from harness.designs import quantized


@pytest.mark.cases(table=cases.quantized)
def test_quantized(case, golden, zoo):
    golden.check_all(quantized.observe(zoo, case))
