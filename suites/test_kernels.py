"""torch's own attention kernels, what a torch bump moves and no transformers change would: per SDPA
backend and dtype, GQA / zero-stride broadcast k / v / causal / fully masked rows against the float64
definition, and a NaN query row's treatment; fp32 matmul under each precision flag against the float64
definition and fp32's rounding bound (tables: harness/cases/kernels.py `kernels`, `kernel_matmuls`; fields:
harness/designs/kernels.py).
"""

import pytest

from harness import cases
from harness.designs import kernels


@pytest.mark.cases(table=cases.kernels)
def test_sdpa_kernels(case, golden, harness_env):
    golden.check_all(kernels.sdpa_kernels(case, harness_env.device))


@pytest.mark.cases(table=cases.kernel_matmuls)
def test_matmul_precision(case, golden, harness_env):
    golden.check_all(kernels.matmul_precision(case, harness_env.device))
