"""The kernels suite's oracle (harness/engine/attention.py) on hand-checked cases, and the design's
bound (harness/designs/kernels.py `beyond_bound`)."""

from __future__ import annotations

import math

import torch

from harness.designs.kernels import beyond_bound
from harness.engine.attention import attention


def test_one_visible_key_returns_its_value_and_equal_scores_average():
    q, k, v = torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4), torch.randn(1, 1, 3, 4)
    out = attention(q, k, v, causal=True)
    assert torch.equal(out[0, 0, 0], v[0, 0, 0].double())  # row 0 sees key 0 only
    flat = attention(torch.zeros(1, 1, 2, 4), k, v)  # q = 0: every score 0, softmax uniform
    assert torch.allclose(flat[0, 0, 1], v[0, 0].double().mean(0))


def test_softmax_weights_by_hand():
    q = torch.tensor([[[[1.0, 0.0]]]])
    k = torch.tensor([[[[1.0, 0.0], [0.0, 0.0]]]])
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0]]]])
    w = math.exp(1 / math.sqrt(2)) / (math.exp(1 / math.sqrt(2)) + 1)
    assert torch.allclose(attention(q, k, v)[0, 0, 0], torch.tensor([w, 1 - w], dtype=torch.float64))


def test_grouped_heads_are_interleaved_a_fully_masked_row_is_zero_and_nan_propagates():
    q = torch.zeros(1, 4, 1, 2)
    k = torch.zeros(1, 2, 1, 2)
    v = torch.tensor([10.0, 20.0]).view(1, 2, 1, 1).expand(1, 2, 1, 2)
    out = attention(q, k, v)
    assert out[0, :, 0, 0].tolist() == [10.0, 10.0, 20.0, 20.0]  # query heads 0, 1 -> kv 0; 2, 3 -> kv 1
    mask = torch.tensor([[False]])
    assert attention(q, k, v, mask=mask).abs().sum() == 0
    nan_q = q.clone()
    nan_q[0, 1, 0, 0] = float("nan")
    got = attention(nan_q, k, v)
    assert got[0, 1].isnan().all() and not got[0, [0, 2, 3]].isnan().any()


def test_the_bound_counts_errors_and_nan_that_differs():
    oracle = torch.ones(2, 3, dtype=torch.float64)
    assert beyond_bound(oracle.float(), oracle, "fp32")[0] == {"beyond_bound": 0, "elements": 6}
    off = oracle.float().clone()
    off[0, 0] += 1e-3  # a bf16-sized error under fp32
    off[1, 2] = float("nan")
    assert beyond_bound(off, oracle, "fp32")[0]["beyond_bound"] == 2
    assert beyond_bound(oracle.bfloat16() + 0.01, oracle, "bf16")[0]["beyond_bound"] == 0  # within 8 bf16 ulps
