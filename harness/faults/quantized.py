"""Catalogue faults of quantized weights: torchao's int8 weight-only linear on the CPU
(suites/test_quantized.py: the logits and tokens against the reference engine running the weights
the int8 data and scales stand for).

Each `Fault` row names what it breaks, the `Catch` that must report it and the upstream bug it is
modelled on; harness/faults/catalogue.py joins every family's `FAULTS`. The fault is injected where
a quantized weight meets its matmul (torch.nn.functional.linear, which dispatches to torchao's
implementation for its tensor subclass); a run without torchao skips the case (the serving extra)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.faults.patches import Catch, Fault, Wrap, edit

QUANTIZER = "transformers.quantizers.quantizer_torchao"


def _neighbour_row_scale(linear: Callable[..., Any]) -> Callable[..., Any]:
    """An int8 weight's output column r scaled by row r+1's scale (the last by the first's): an
    off-by-one in the scales' index, the int8 data and the scales themselves untouched."""
    import functools
    import importlib.util

    import torch

    if importlib.util.find_spec("torchao") is not None:
        # torchao registers its linear under the function object it finds at import: the original one,
        # imported before this wrapper takes the name
        import torchao.quantization  # noqa: F401

    @functools.wraps(linear)
    def wrapped(input: Any, weight: Any, bias: Any = None) -> Any:
        out = linear(input, weight, bias)
        scale = getattr(weight, "scale", None)
        if bias is not None or not isinstance(scale, torch.Tensor) or getattr(weight, "qdata", None) is None:
            return out
        s = scale.detach().float().reshape(-1)
        return out * (torch.roll(s, -1) / s).to(out.dtype)
    return wrapped


FAULTS: tuple[Fault, ...] = (
    Fault("int8-load-quantizes-nothing", "quantization",
          "the torchao quantizer's filter accepts no parameter: the load asked for int8 weight-only returns the "
          "model in full precision, without a word - the same tokens, none of the memory saved",
          Catch("quantized", "llama-target.quantized.*", "quantized_as_promised"),
          (edit(QUANTIZER, "TorchAoHfQuantizer.param_needs_quantization",
                ('return isinstance(module, tuple(_QUANTIZABLE)) and tensor_name == "weight"', "return False")),),
          notes="the class of pytorch/pytorch #33433 (quantize_dynamic on GPT-2: \"nothing is changed in the "
                "quantized_model, as I getting the same model size\") and huggingface/optimum-quanto #347 (\"Weights "
                "Still in FP32 after Quantization\"): every numeric reference holds - the dequantized engine of no "
                "quantized weight is the full model -, only the scheme's promise of what is quantized fails"),
    Fault("int8-mlp-left-full-precision", "quantization",
          "the torchao quantizer's filter leaves the MLP projections in full precision (a module filter too "
          "narrow): attention is int8, two thirds of the weights are not",
          Catch("quantized", "llama-target.quantized.*", "quantized_as_promised"),
          (edit(QUANTIZER, "TorchAoHfQuantizer.param_needs_quantization",
                ('return isinstance(module, tuple(_QUANTIZABLE)) and tensor_name == "weight"',
                 'return isinstance(module, tuple(_QUANTIZABLE)) and tensor_name == "weight" and ".mlp." not in '
                 'param_name')),),
          notes="the class of pytorch/pytorch #33433 and huggingface/optimum-quanto #347 in part: a filter (transformers' "
                "modules_to_not_convert, torchao's filter_fn) that skips modules it should quantize; the quantized "
                "modules' own data and the logits hold"),
    Fault("int8-scale-of-neighbour-row", "quantization",
          "torchao's int8 weight-only linear scales each output column by the next row's scale (an off-by-one "
          "in the scales' index): every logit off, the int8 data and the scales themselves still right",
          Catch("quantized", "llama-target.quantized.*", "logits_as_dequantized"),
          (Wrap("torch.nn.functional", "linear", _neighbour_row_scale),),
          notes="the class of pytorch/ao #1662 (\"int8_weight_only via quantize_() results in NaN values across "
                "multiple CPU architectures\": the CPU weight-only path computing something other than the scheme's "
                "dequantized matmul) - a kernel whose scale handling is not the one the scheme states; the "
                "checkpoint's weights, the int8 data and the scales pass their own check (quantized_as_scheme), only "
                "the matmul's output is off, in every dtype"),
    Fault("int8-load-raises", "quantization",
          "the quantized load raises before the weights load (the quantizer calls a helper its module defines only "
          "when an optional package is installed): no quantized model at all",
          Catch("quantized", "llama-target.quantized.*", "loaded_as_promised"),
          (edit(QUANTIZER, "TorchAoHfQuantizer._process_model_before_weight_loading",
                ("self.modules_to_not_convert = self.get_modules_to_not_convert(",
                 "self.modules_to_not_convert = find_tied_parameters(model) or self.get_modules_to_not_convert(")),),
          notes="transformers 4.57's own failure here without accelerate (modeling_utils' `find_tied_parameters`, "
                "defined by integrations/accelerate.py only when accelerate is installed; the class of transformers "
                "#22360) raised on 5.24, where no declared known failure covers it: the case was skipped and a first "
                "run exited 0 (issue 58 item 10)"),
)
