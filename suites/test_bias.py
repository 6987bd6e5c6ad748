"""Distribution bias of one verification step: the installed verifier (transformers'
`_speculative_sampling`) drawn N times at contexts where drafts are often rejected, against exact
probabilities from the reference engine (table: harness/cases/ `bias`; design and fields:
harness/designs/one_step.py).
"""

import pytest

from harness import cases
from harness.designs import one_step


@pytest.mark.cases(table=cases.bias)
def test_one_step_distribution(case, golden, zoo, run_settings):
    golden.check_all(one_step.observe_case(zoo, case, golden.alpha, run_settings.config.thresholds.tv_max,
                                           run_settings.seed_salt))
