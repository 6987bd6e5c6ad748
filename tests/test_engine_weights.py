"""The reference engine keeps a checkpoint's weights as loaded: `model.w` holds exactly the
tensor names of model.safetensors before and after running, and the fused projections it
builds from them are cached beside those names, once per weight set."""

from __future__ import annotations

import pytest
import torch
from safetensors import safe_open

from harness.engine.decode import decode
from harness.engine.drafters import MtpDrafter
from harness.engine.model import Weights
from harness.zoo import load

IDS = [1, 17, 42, 99, 7, 256, 3, 88, 120, 5]
QKV = ("q_proj", "k_proj", "v_proj")


def checkpoint_names(model) -> set[str]:
    with safe_open(model.path / "model.safetensors", "pt") as f:
        return set(f.keys())


@pytest.mark.parametrize("name", ["llama-target", "glm4moe-mtp", "mellum-mtp"])
def test_running_leaves_the_checkpoint_names_alone(name):
    model = load.load_reference(name)
    names = checkpoint_names(model)
    assert set(model.w) == names
    model.forward(torch.tensor(IDS), torch.arange(len(IDS)), model.new_caches())
    if model.cfg.num_mtp_layers:  # the MTP layer runs block() on the target's weights (GLM: a MoE MLP)
        decode(model, IDS, 4, drafter=MtpDrafter(model), k=1)
    assert set(model.w) == names


def test_fused_projections_are_built_once_per_weight_set():
    model = load.load_reference("llama-target")
    prefix = f"{model.prefix}layers.0.self_attn."
    model.forward(torch.tensor(IDS), torch.arange(len(IDS)), None)
    weight, bias = model.w.fused(prefix, QKV)
    model.forward(torch.tensor(IDS), torch.arange(len(IDS)), None)
    assert model.w.fused(prefix, QKV)[0] is weight
    assert bias is None  # llama: no q/k/v biases
    assert type(model)(model.cfg, model.w).w.fused(prefix, QKV)[0] is weight  # same weights, same cache
    assert torch.equal(weight, torch.cat([model.w[prefix + n + ".weight"] for n in QKV]))


def test_a_missing_bias_is_fused_as_zeros_in_the_weights_dtype():
    w = Weights({"a.weight": torch.ones(2, 3, dtype=torch.bfloat16), "a.bias": torch.ones(2, dtype=torch.bfloat16),
                 "b.weight": torch.ones(1, 3, dtype=torch.bfloat16)})
    weight, bias = w.fused("", ("a", "b"))
    assert weight.shape == (3, 3) and bias.dtype == torch.bfloat16
    assert bias.tolist() == [1.0, 1.0, 0.0]
