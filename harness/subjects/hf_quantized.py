"""The installed transformers' quantized loading as a subject: `from_pretrained(...,
quantization_config=TorchAoConfig(int8 weight-only))` on the CPU - torchao's per-row int8 weights,
dequantized inside each linear layer's matmul - and what the loaded model holds.

torchao is an optional extra of the harness (`pip install 'genharness[serving]'`, its version pinned
in constraints.txt): without it `require()` raises `MissingExtra`, and the case is reported skipped
(unsupported) with that install line, never an error.

- `load(directory, dtype)` -> (model, error): the quantized load (the quantization config built from
  torchao's `Int8WeightOnlyConfig`; a transformers that wants the older string form gets it);
- `quantized_weights(model)` -> {module: (int8 data, scales, class)}: every weight the load replaced
  by a quantized tensor (read from its data attributes, `qdata` and `scale`);
- `weight_bytes(model)`: the bytes the model's parameters and buffers hold (a quantized weight's int8
  data and scales, not its nominal dtype).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch

from harness.schema import MissingExtra
from harness.subjects import observe

INSTALL = "pip install 'genharness[serving]' -c constraints.txt"
SCHEME = "int8 weight-only, per row (torchao Int8WeightOnlyConfig)"


def torchao_version() -> str | None:
    if importlib.util.find_spec("torchao") is None:
        return None
    from importlib.metadata import version

    return version("torchao")


def require() -> str:
    """torchao's version; `MissingExtra` (the case skipped, with the install line) without it."""
    found = torchao_version()
    if found is None:
        raise MissingExtra(f"the quantized path needs torchao, an optional extra of the harness: {INSTALL}")
    return found


def quantization_config() -> Any:
    from transformers import TorchAoConfig

    try:
        from torchao.quantization import Int8WeightOnlyConfig
    except ImportError:  # an older torchao: the string form
        return TorchAoConfig("int8_weight_only")
    return TorchAoConfig(quant_type=Int8WeightOnlyConfig())


def load(directory: Path, dtype: torch.dtype) -> tuple[Any, dict[str, str] | None]:
    """The checkpoint loaded quantized (eval, CPU), or the library's error."""
    from transformers import AutoModelForCausalLM

    def call() -> Any:
        return AutoModelForCausalLM.from_pretrained(str(directory), quantization_config=quantization_config(),
                                                    dtype=dtype, trust_remote_code=False, use_safetensors=True).eval()
    return observe(call)


def quantized_weights(model: Any) -> dict[str, tuple[torch.Tensor, torch.Tensor, str]]:
    """Module name -> (int8 data [out, in], scales [out], the weight's class) of every quantized weight."""
    out = {}
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        data, scale = getattr(weight, "qdata", None), getattr(weight, "scale", None)
        if isinstance(data, torch.Tensor) and isinstance(scale, torch.Tensor):
            out[name] = (data.detach(), scale.detach().reshape(-1), type(weight).__name__)
    return out


def weight_bytes(model: Any) -> int:
    """Bytes of the model's parameters and buffers (a quantized tensor counted by its data tensors)."""
    total = 0
    for tensor in [*model.parameters(), *model.buffers()]:
        parts = [getattr(tensor, n) for n in ("qdata", "scale", "zero_point") if isinstance(getattr(tensor, n, None), torch.Tensor)]
        total += sum(p.numel() * p.element_size() for p in parts) if parts else tensor.numel() * tensor.element_size()
    return int(total)
