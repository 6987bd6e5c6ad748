"""Attention backends and checkpoint loading of the installed transformers, per model: backend flags,
eager vs SDPA, loading and resaving a checkpoint - with the attention implementation it loads with and
the SDPA calls of its prefill against the reference masks, beside the logits they compute (fields:
harness/designs/backends.py).
"""

import pytest

from harness import cases
from harness.designs import backends


@pytest.mark.cases(table=cases.models)
def test_attention_flags(case, golden, zoo, harness_env):
    golden.check_all(backends.flags(zoo, case, harness_env.device.split(":")[0]))


@pytest.mark.cases(table=cases.models)
def test_eager_vs_sdpa(case, golden, zoo):
    golden.check_all(backends.eager_vs_sdpa(zoo, case))


@pytest.mark.cases(table=cases.models)
def test_checkpoint(case, golden, zoo, tmp_path):
    golden.check_all(backends.checkpoint(zoo, case, tmp_path))
