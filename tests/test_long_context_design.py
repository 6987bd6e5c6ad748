"""The long_context suite's pure logic: the reference engine's scaled RoPE (harness/engine/model.py:
llama3's wavelength bands, YaRN's ramp and attention factor) against a direct, per-frequency
computation of the published formulas; the rope dict a config names (v5's `rope_parameters`, 4.x's
`rope_scaling`); the design's helpers (harness/designs/long_context.py); its case table; and that
its references catch a model whose RoPE is not scaled."""

from __future__ import annotations

import json
import math

import pytest
import torch

from harness import cases
from harness.checking.compare import compare_field
from harness.checking.policy import Policy
from harness.designs import long_context
from harness.engine.model import (
    Config,
    RopeScaling,
    attention_factor,
    plain_inv_freq,
    rope_angles,
    scaled_inv_freq,
    yarn_ramp,
)
from harness.schema import Field, Status
from harness.zoo.specs import CHECKOUT_ZOO, ROPE_FACTOR, ROPE_ORIGINAL_MAX


def llama3_direct(d: int, theta: float, factor: float, low: float, high: float, original: int) -> list[float]:
    """Meta's reference `apply_scaling` (llama-models, Llama 3.1), one frequency at a time, in float64."""
    out = []
    for i in range(0, d, 2):
        f = 1.0 / theta ** (i / d)
        wavelen = 2 * math.pi / f
        if wavelen < original / high:
            out.append(f)
        elif wavelen > original / low:
            out.append(f / factor)
        else:
            g = (original / wavelen - low) / (high - low)
            out.append((1 - g) * f / factor + g * f)
    return out


def yarn_direct(d: int, theta: float, factor: float, original: int, fast: float, slow: float) -> list[float]:
    """YaRN's NTK-by-parts (the paper's reference code: integer ramp bounds), one frequency at a time."""
    def dim(n: float) -> float:
        return d * math.log(original / (n * 2 * math.pi)) / (2 * math.log(theta))

    lo, hi = max(math.floor(dim(fast)), 0), min(math.ceil(dim(slow)), d - 1)
    hi = hi + 0.001 if lo == hi else hi
    out = []
    for j in range(d // 2):
        f = 1.0 / theta ** (2 * j / d)
        ramp = min(max((j - lo) / (hi - lo), 0.0), 1.0)
        out.append(f * (1 - ramp) + f / factor * ramp)
    return out


LLAMA3 = [  # (head dim, theta, factor, low_freq_factor, high_freq_factor, original_max)
    (16, 10000.0, 4.0, 1.0, 4.0, 32),  # the zoo's llama-rope-llama3
    (128, 500000.0, 8.0, 1.0, 4.0, 8192),  # Llama 3.1 8B
    (64, 500000.0, 32.0, 1.0, 4.0, 8192),  # Llama 3.2 1B
    (16, 10000.0, 2.0, 2.0, 8.0, 64),
]


@pytest.mark.parametrize("d, theta, factor, low, high, original", LLAMA3)
def test_llama3_frequencies_equal_the_reference_formula(d, theta, factor, low, high, original):
    s = RopeScaling("llama3", factor, original, low_freq_factor=low, high_freq_factor=high)
    got = scaled_inv_freq(d, theta, s).double()
    want = torch.tensor(llama3_direct(d, theta, factor, low, high, original), dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    assert attention_factor(s) == 1.0


def test_llama3_on_the_fixture_keeps_one_frequency_smooths_one_and_divides_six():
    s = RopeScaling("llama3", ROPE_FACTOR, ROPE_ORIGINAL_MAX)
    ratio = (plain_inv_freq(16, 10000.0) / scaled_inv_freq(16, 10000.0, s)).tolist()
    assert ratio[0] == 1.0 and 1.0 < ratio[1] < ROPE_FACTOR
    assert ratio[2:] == pytest.approx([ROPE_FACTOR] * 6)


YARN = [  # (head dim, theta, factor, original_max, beta_fast, beta_slow)
    (16, 10000.0, 4.0, 32, 32.0, 1.0),  # the zoo's llama-rope-yarn
    (128, 1000000.0, 4.0, 32768, 32.0, 1.0),  # Qwen2.5's long-context recipe
    (64, 10000.0, 16.0, 4096, 16.0, 2.0),
]


@pytest.mark.parametrize("d, theta, factor, original, fast, slow", YARN)
def test_yarn_frequencies_equal_the_reference_formula(d, theta, factor, original, fast, slow):
    s = RopeScaling("yarn", factor, original, beta_fast=fast, beta_slow=slow)
    got = scaled_inv_freq(d, theta, s).double()
    want = torch.tensor(yarn_direct(d, theta, factor, original, fast, slow), dtype=torch.float64)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    ramp = yarn_ramp(d, theta, s)
    assert ramp.min() >= 0 and ramp.max() <= 1 and bool((ramp[1:] >= ramp[:-1]).all())


@pytest.mark.parametrize("factor, explicit, want", [
    (4.0, None, 0.1 * math.log(4.0) + 1.0), (1.0, None, 1.0), (0.5, None, 1.0), (4.0, 1.25, 1.25)])
def test_yarn_attention_factor_scales_cos_and_sin(factor, explicit, want):
    s = RopeScaling("yarn", factor, 32, attention_factor=explicit)
    assert attention_factor(s) == pytest.approx(want)
    cos, sin = rope_angles(torch.arange(5), 16, 10000.0, s)
    assert torch.allclose(cos ** 2 + sin ** 2, torch.full_like(cos, want ** 2))


@pytest.mark.parametrize("params, max_pos, want", [
    ({"rope_type": "default", "rope_theta": 1e4}, 512, None),
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 131072,
     RopeScaling("llama3", 8.0, 8192)),
    ({"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 131072,
     RopeScaling("llama3", 8.0, 8192)),  # 4.x's key
    ({"rope_type": "llama3", "factor": 2.0}, 512, RopeScaling("llama3", 2.0, 512)),  # original defaults to max
    ({"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 32}, 128,
     RopeScaling("yarn", 4.0, 32)),  # DeepSeek-V3: factor = max / original
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "beta_fast": None}, 128,
     RopeScaling("yarn", 4.0, 32)),
])
def test_the_scaling_a_rope_dict_asks_for(params, max_pos, want):
    assert RopeScaling.from_params(params, max_pos) == want


def test_unsupported_rope_is_refused_not_run_as_plain():
    base = json.loads((CHECKOUT_ZOO / "llama-target" / "config.json").read_text())
    for rope in ({"rope_type": "longrope", "rope_theta": 1e4},
                 {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "mscale": 1.0,
                  "mscale_all_dim": 1.0, "rope_theta": 1e4}):
        with pytest.raises(ValueError):
            Config.from_dict({**base, "rope_parameters": rope})


@pytest.mark.parametrize("name", cases.ROPE_MODELS)
@pytest.mark.parametrize("type_key", ["rope_type", "type"])
def test_the_legacy_key_reads_as_the_same_config(name, type_key):
    config = json.loads((CHECKOUT_ZOO / name / "config.json").read_text())
    legacy = long_context.legacy_config(config, type_key)
    assert "rope_parameters" not in legacy and legacy["rope_theta"] == config["rope_parameters"]["rope_theta"]
    assert legacy["rope_scaling"][type_key] == config["rope_parameters"]["rope_type"]
    assert Config.from_dict(legacy) == Config.from_dict(config)
    assert Config.from_dict(config).rope_scaling is not None


def test_step_positions_and_comparable_steps():
    assert long_context.step_positions(83, 3) == [82, 83, 84]
    assert long_context.agreeing_steps([1, 2, 3], [1, 2, 3]) == 3
    assert long_context.agreeing_steps([1, 2, 3], [1, 5, 3]) == 2  # the step where they part is still comparable
    assert long_context.until_eos([5, 2, 0, 0], [2]) == 2 and long_context.until_eos([5, 6], [2]) == 2
    a = torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    assert long_context.argmax_changes(a, torch.tensor([[0.0, 1.0], [0.0, 1.0], [1.0, 0.0]])) == [1, 2]


def test_the_table_names_each_case_once_and_runs_past_the_pretraining_length():
    from harness.zoo.prompts import BY_ID  # noqa: F401  (the prompts exist)

    table = cases.long_context()
    ids = [c.id for c in table]
    assert len(ids) == len(set(ids))
    assert {c.param("check") for c in table} == {"far", "legacy-key", "batch"}
    assert all(f"{m}.far" in ids for m in cases.ROPE_MODELS)
    assert not any(c.model in cases.ROPE_MODELS for c in cases.models() + cases.loading())


def test_the_references_catch_a_model_whose_rope_is_not_scaled():
    """What `rope-type-from-legacy-key` and `llama3-rope-returns-unscaled` leave a model with: plain
    frequencies. The engine's reference field judges them a regression, and the scaled ones a pass."""
    cfg = Config.from_dict(json.loads((CHECKOUT_ZOO / "llama-rope-llama3" / "config.json").read_text()))
    expected = Field("tensor", scaled_inv_freq(cfg.rotary_dim, cfg.rope_theta, cfg.rope_scaling).tolist())
    policy = Policy(implementations_differ=True)
    plain = Field("tensor", plain_inv_freq(cfg.rotary_dim, cfg.rope_theta).tolist())
    assert compare_field("inv_freq_vs_engine", plain, expected, policy).status == Status.REGRESSION
    assert compare_field("inv_freq_vs_engine", expected, expected, policy).status == Status.PASS


@pytest.mark.parametrize("rope, gap", [
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192, "rope_theta": 5e5}, ""),
    ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "rope_theta": 1e4}, ""),
    ({"rope_type": "longrope", "rope_theta": 1e4}, "longrope"),
    ({"rope_type": "llama3", "rope_theta": 1e4}, "needs factor"),
])
def test_a_user_model_with_scaled_rope_has_the_engine_as_its_oracle(tmp_path, rope, gap):
    from pathlib import Path

    from harness.settings.models import UserModel
    from harness.subjects.hf import Zoo

    config = json.loads((CHECKOUT_ZOO / "llama-target" / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "rope_parameters": rope}))
    zoo = Zoo(user=[UserModel("mine", Path(tmp_path), "--model")])
    assert (gap in zoo.oracle.gap("mine")) if gap else zoo.oracle.gap("mine") == ""
