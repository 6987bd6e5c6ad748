"""The quantized suite's oracle (harness/engine/quantize.py): int8 weight-only per row, from its
definition, on weights made here - a quantization done by the definition passes, each way of
breaking it is counted."""

from __future__ import annotations

import torch

from harness.engine.quantize import HALF_RANGE, dequantized, violations

CLEAN = {"scale_not_absmax": 0, "beyond_half_step": 0, "out_of_range": 0}


def by_definition(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    scale = w.abs().amax(dim=1) / HALF_RANGE
    return torch.clamp(torch.round(w / scale[:, None]), -128, 127).to(torch.int8), scale


def weights(seed: int = 0) -> torch.Tensor:
    return torch.randn(16, 32, generator=torch.Generator().manual_seed(seed)) * 0.05


def test_a_quantization_by_the_definition_passes_and_stands_for_its_weight_within_half_a_step():
    w = weights()
    q, s = by_definition(w)
    assert violations(w, q, s) == CLEAN
    assert ((w - dequantized(q, s)).abs() <= s[:, None] / 2 * (1 + 1e-4)).all()


def test_a_scale_off_an_int8_value_off_and_a_value_out_of_range_are_each_counted():
    w = weights(1)
    q, s = by_definition(w)
    assert violations(w, q, s * 1.01)["scale_not_absmax"] == 16
    shifted = q.clone()
    shifted[3, 5] += 1 if shifted[3, 5] < 127 else -1
    assert violations(w, shifted, s) == {**CLEAN, "beyond_half_step": 1}
    wide = q.to(torch.int32)
    wide[0, 0] = 200
    assert violations(w, wide, s)["out_of_range"] == 1


def test_in_bf16_the_scale_is_held_to_bf16s_rounding_and_no_further():
    w = weights(2).to(torch.bfloat16)
    q, s = by_definition(w.float())
    rounded = s.to(torch.bfloat16).float()  # a scale computed in the load dtype
    q = torch.clamp(torch.round(w.float() / rounded[:, None]), -128, 127).to(torch.int8)
    assert violations(w, q, rounded)["scale_not_absmax"] > 0  # fp32's 1e-5 sees bf16's rounding
    assert violations(w, q, rounded, 2.0 ** -8) == CLEAN
    assert violations(w, q, rounded * 1.01, 2.0 ** -8)["scale_not_absmax"] == 16  # 1 % is beyond bf16's 2u


def test_the_promise_is_every_projection_of_the_file_but_embeddings_and_the_head():
    """quantized_as_promised's expected side, read from the checkpoint: a load that quantizes nothing
    or skips the MLP is told from one that keeps only the head, whatever the loaded pipeline says."""
    from harness.engine.quantize import promised, promised_bytes

    file = {"model.embed_tokens.weight": torch.zeros(32, 8), "lm_head.weight": torch.zeros(32, 8),
            "model.layers.0.input_layernorm.weight": torch.zeros(8),
            "model.layers.0.self_attn.q_proj.weight": torch.zeros(8, 8),
            "model.layers.0.mlp.up_proj.weight": torch.zeros(16, 8), "model.layers.0.mlp.up_proj.bias": torch.zeros(16)}
    shapes = promised(file)
    assert shapes == {"model.layers.0.self_attn.q_proj": (8, 8), "model.layers.0.mlp.up_proj": (16, 8)}
    full = sum(t.numel() * 4 for t in file.values())
    bound = promised_bytes(full, shapes, 4)
    int8 = full - (64 + 128) * 3 + (8 + 16) * 5  # int8 data, a float32 scale and an int8 zero point per row
    assert int8 <= bound < full and full - 64 * 3 + 8 * 5 > bound  # nothing or only attention quantized: over it
