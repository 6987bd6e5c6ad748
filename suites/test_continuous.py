"""Continuous batching, per version: several requests of different lengths served at once by
`generate_batch` (greedy with one request stopping early at an eos, sampled, logits processors it
keeps or drops, num_beams it does not have), each request against the reference engine's decode of
it alone and, secondarily, generate() of it alone (table: harness/cases/ `continuous`; fields:
harness/designs/continuous.py).
"""

import pytest

from harness import cases
from harness.designs import continuous


@pytest.mark.cases(table=cases.continuous)
def test_continuous(case, golden, zoo, run_settings):
    golden.check_all(continuous.observe(zoo, case, run_settings.config.thresholds, golden.alpha))
