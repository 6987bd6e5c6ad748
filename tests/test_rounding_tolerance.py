"""The low-precision per-element tensor tolerance (harness/checking/rounding.py) and fp32 scalars in a
bf16 run: values built by code (torch's own bf16 rounding, ulps counted with torch.nextafter)."""

from __future__ import annotations

import math

import torch

from harness.checking.compare import Policy, compare_field
from harness.schema import Field, Status
from harness.settings.config import Thresholds
from harness.store.env import fingerprint

BF16 = fingerprint(dtype="bf16", threads=2)
# an in-run reference of a bf16 run: the same env on both sides, different code (the engine)
REFERENCE = Policy(observed_env=BF16, baseline_env=BF16, implementations_differ=True)


def logits(seed: int = 0, n: int = 64, scale: float = 8.0) -> torch.Tensor:
    """fp32 logits of a fixture-sized model's range (|x| up to ~scale)."""
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)) * (scale / 3)


def compare(new: torch.Tensor, old: torch.Tensor, policy: Policy = REFERENCE, dtype: str | None = None):
    extras = {"dtype": dtype} if dtype else {}
    return compare_field("f", Field("tensor", new.tolist(), dict(extras)), Field("tensor", old.tolist(), dict(extras)),
                         policy)


def ulps_away(x: torch.Tensor, k: int) -> torch.Tensor:
    """x (bf16) moved k representable bf16 values away from zero."""
    y = x.to(torch.bfloat16)
    for _ in range(k):
        y = torch.nextafter(y, torch.where(y >= 0, torch.tensor(float("inf")), torch.tensor(float("-inf"))).to(y.dtype))
    return y.float()


def test_a_bf16_rounded_tensor_passes_against_its_fp32_values():
    exact = logits()
    rounded = exact.to(torch.bfloat16).float()
    result = compare(rounded, exact)
    assert result.status is Status.PASS and result.diff["rule"] == "per-element rounding"
    assert result.diff["ulps_used"] <= 1.0  # rounding to nearest is at most half an ulp = u |x|


def test_a_tensor_a_few_ulps_off_passes():
    base = logits(1).to(torch.bfloat16).float()
    off = ulps_away(base, 4)
    assert (off != base).all()
    assert compare(off, base).status is Status.PASS


def test_a_real_error_fails_though_it_is_under_an_eighth_of_the_maximum():
    """A left-padded row attending to its pads moved logits by ~0.47 on a tensor up to ~8: far under the
    old 12.5 % of the maximum (1.0), far over bf16's rounding of those values."""
    base = logits(2).to(torch.bfloat16).float()
    wrong = base.clone()
    wrong[5] += 0.47
    old_allowance = 32 * 2.0**-8 * float(base.abs().max())
    assert 0.47 < old_allowance
    result = compare(wrong, base)
    assert result.status is Status.REGRESSION and result.diff["worst_index"] == [5]


def test_the_allowance_follows_each_element_not_the_maximum():
    """The same absolute error is rounding noise on a large logit and a change on a small one."""
    base = torch.tensor([0.01, 0.02, 0.05, 16.0, -16.0]).to(torch.bfloat16).float()
    k = Thresholds().tensor_rounding_ulps
    rms = float(base.pow(2).mean().sqrt())
    step = 0.9 * k * 2.0**-8 * (16.0 + rms)  # just inside the allowance of the 16.0 element
    on_large, on_small = base.clone(), base.clone()
    on_large[3] += step
    on_small[0] += step
    assert compare(on_large, base).status is Status.PASS
    assert compare(on_small, base).status is Status.REGRESSION


def test_a_scalar_declared_fp32_is_compared_at_fp32_tolerance_in_a_bf16_run():
    """YaRN's attention factor 0.1 ln 4 + 1 against 1.0 (the factor dropped) fails at fp32; the factor
    rounded once to fp32 passes; RoPE frequencies rounded to bf16 fail at fp32 and would pass bf16's rule."""
    factor = torch.tensor([0.1 * math.log(4.0) + 1.0], dtype=torch.float64)
    dropped = torch.tensor([1.0], dtype=torch.float64)
    assert compare(dropped, factor, dtype="fp32").status is Status.REGRESSION
    assert compare(factor.float().double(), factor, dtype="fp32").status is Status.PASS
    # frequencies of a RoPE table: an error of a bf16 ulp is a regression at fp32 tolerance
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16))
    bf16_rounded = inv_freq.to(torch.bfloat16).double()
    assert compare(bf16_rounded, inv_freq, dtype="fp32").status is Status.REGRESSION
    assert compare(bf16_rounded, inv_freq).status is Status.PASS  # what the bf16 rule would have let through


def test_fp32_across_numerics_keeps_the_magnitude_rule():
    fp32 = fingerprint(dtype="fp32", threads=2)
    policy = Policy(observed_env=fp32, baseline_env=fp32, implementations_differ=True)
    base = logits(3)
    result = compare(base + 1e-6, base, policy)
    assert result.status is Status.PASS and "rule" not in result.diff


# ----------------------------------------------------------------------------------------------
# a model's rounding witness (harness/engine/witness.py) scales the low-precision allowances


def test_the_witness_scale_is_one_for_the_zoos_rounding_and_grows_past_it():
    t = Thresholds()
    assert t.witness_scale(None) == 1.0 and t.witness_scale(float("nan")) == 1.0
    assert t.witness_scale(5.2) == 1.0  # the zoo's largest (gemma2-softcap): as measured
    assert t.witness_scale(11.44) == 2 * 11.44 / t.tensor_rounding_ulps  # the 1.1B Llama's
    assert t.for_witness(5.2) is t
    wide = t.for_witness(11.44)
    assert wide.tensor_rounding_ulps == 2 * 11.44 and wide.tie_rounding_ulps == t.tie_rounding_ulps * 2 * 11.44 / 12
    assert wide.tie_eps_bf16 == t.tie_eps_bf16  # the fixed cap of the tie rule never widens
    assert t.for_witness(1e6).tensor_rounding_ulps == 64.0  # never wider than a configuration may set


def test_a_deep_models_clean_bf16_routes_pass_with_its_witness_and_a_real_error_still_fails():
    """The 1.1B Llama's eager vs SDPA logits were 16.5 u apart (c = 12: a false regression on a user's
    first run); its engine witness is 11.4. With it the rounding passes; a wrong logit still fails."""
    base = logits(3).to(torch.bfloat16).float()
    rms = float(base.pow(2).mean().sqrt())
    scale = 2.0**-8 * (base.abs() + rms)
    off = base + 16.5 * scale * torch.sign(torch.randn(base.shape, generator=torch.Generator().manual_seed(4)))
    assert compare(off, base).status is Status.REGRESSION
    deep = Policy(observed_env=BF16, baseline_env=BF16, implementations_differ=True, witness=11.44,
                  thresholds=Thresholds().for_witness(11.44))
    passed = compare(off, base, deep)
    assert passed.status is Status.PASS and passed.diff["rounding_witness"] == 11.44
    wrong, small = base.clone(), int(base.abs().argmin())
    wrong[small] += 0.47  # the left-padding class: 2x the widened allowance of a logit near 0
    failed = compare(wrong, base, deep)
    assert failed.status is Status.REGRESSION and "rounding witness 11.4" in failed.detail


def test_the_witness_is_zero_for_the_same_logits_and_counts_a_bf16_forward_in_its_units():
    from harness.engine.witness import rounding_witness

    exact = logits(5).reshape(4, 16).double()
    assert rounding_witness(exact, exact, 2.0**-8) == 0.0
    rounded = exact.to(torch.bfloat16).double()
    assert 0 < rounding_witness(rounded, exact, 2.0**-8) <= 1.0  # rounding to nearest: at most half an ulp


def test_the_zoo_models_witness_is_measured_on_the_engine_in_the_runs_low_precision_dtype_only():
    """Every zoo model but the 46-layer GLM trunks rounds within what the constants were measured on
    (f = 1: the zoo's records and faults are judged as before); fp32 and a tokenizer have none."""
    from harness.subjects.engine import rounding_witness
    from harness.subjects.hf import Zoo

    bf16 = Zoo(dtype="bf16")
    for name in ("llama-target", "gemma2-softcap", "qwen3_5-linear"):
        w = rounding_witness(bf16, name)
        assert w is not None and 1.0 < w and Thresholds().witness_scale(w) == 1.0, (name, w)
    assert Thresholds().witness_scale(rounding_witness(bf16, "glm4moe-mtp-dense")) > 1.0  # 46 layers
    assert rounding_witness(bf16, "tok-spm") is None and rounding_witness(bf16, "torch") is None
    assert rounding_witness(Zoo(dtype="fp32"), "llama-target") is None
