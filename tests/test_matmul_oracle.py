"""The kernels suite's matmul oracle (harness/engine/matmul.py): numpy's float64 product, and fp32's
rounding bound, which an fp32 linear meets and one computed on bf16-rounded inputs does not."""

import numpy as np
import torch

from harness.designs.kernels import matmul_inputs
from harness.engine import matmul


def test_the_float64_definition_is_x_times_w_transposed():
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    w = torch.tensor([[0.5, 0.0], [1.0, -1.0], [2.0, 1.0]])
    assert np.array_equal(matmul.linear(x, w), np.array([[0.5, -1.0, 4.0], [1.5, -1.0, 10.0]]))


def test_fp32_linear_meets_the_bound_and_a_bf16_rounded_one_misses_it_by_far():
    x, w = matmul_inputs()
    oracle, bound = matmul.linear(x, w), matmul.fp32_bound(x, w)
    with torch.no_grad():
        exact = torch.nn.functional.linear(x.double(), w.double()).float().double().numpy()  # rounded once
        bf32 = torch.nn.functional.linear(x.bfloat16().float(), w.bfloat16().float()).double().numpy()
    assert (np.abs(exact - oracle) <= bound).all()
    ratio = np.abs(bf32 - oracle) / bound
    assert (ratio > 1).mean() > 0.5 and ratio.max() > 10  # the fault's class: most elements, by a wide margin
