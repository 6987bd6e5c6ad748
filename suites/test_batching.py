"""Batch invariance, per version: each prompt generated alone vs inside a left-padded batch of
prompts of clearly different lengths (greedy, seeded sampling, the speculative paths - refused for
a batch - and right padding, recorded as data), with the attention mask and position ids that
reached the model (table: harness/cases/ `batching`; fields: harness/designs/batching.py).
"""

import pytest

from harness import cases
from harness.designs import batching


@pytest.mark.cases(table=cases.batching)
def test_batching(case, golden, zoo):
    golden.check_all(batching.observe(zoo, case))
