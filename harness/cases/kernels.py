"""The kernels suite's tables (suites/test_kernels.py): torch's own SDPA kernels per backend and dtype,
and its fp32 matmul under each precision flag - no model, no transformers (the torch axis)."""

from __future__ import annotations

from harness.cases.common import _p
from harness.cases.registry import Suite, Table
from harness.schema import Case
from harness.settings.run import RunSettings

KERNEL_DTYPES = ("fp32", "bf16")
SDPA_BACKENDS = ("math", "flash", "efficient", "cudnn")  # torch.nn.attention.SDPBackend members, by short name
CPU_SDPA_BACKENDS = ("math", "flash")  # the kernels torch has on a CPU (sdp_utils_cpp: flash, then math)


def _kernels(run: RunSettings | None = None) -> list[Case]:
    """`sdpa.<backend>.<dtype>`: torch's SDPA kernels, one case per backend the run's device has
    (a CPU: math, flash; CUDA: efficient and cudnn too) and dtype (fp32, bf16 - whatever the run's)."""
    device = (run.device if run else "cpu").split(":", 1)[0]
    backends = CPU_SDPA_BACKENDS if device == "cpu" else SDPA_BACKENDS
    return [Case("torch", name=f"sdpa.{b}.{d}", params=_p(backend=b, dtype=d)) for b in backends for d in KERNEL_DTYPES]


def _kernel_matmuls(run: RunSettings | None = None) -> list[Case]:
    """`matmul.fp32`: torch's fp32 linear under each matmul precision flag (the kernels suite)."""
    return [Case("torch", name="matmul.fp32", params=_p(op="linear", dtype="fp32"))]


kernels = Table("kernels", _kernels)
kernel_matmuls = Table("kernel_matmuls", _kernel_matmuls)

SUITE = Suite("kernels", (kernels, kernel_matmuls), api='torch kernels (SDPA backends, matmul precision)')
