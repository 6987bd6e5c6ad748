"""Sampling at generation level: does `generate(do_sample=True)` on each path, with each sampling
setting, emit the distribution it should? (table: harness/cases/ `sampling`; what is drawn, how
many and the fields: harness/designs/sampling.py)
"""

import pytest

from harness import cases
from harness.designs import sampling


@pytest.mark.cases(table=cases.sampling)
def test_sampled_distribution(case, golden, zoo, run_settings):
    golden.check_all(sampling.observe_case(zoo, case, run_settings, golden.alpha))
