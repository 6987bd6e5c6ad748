"""How fast the installed transformers prefills, decodes and generates, against the golden record
of the same hardware class (table: harness/cases/ `latency`; timing and fields:
harness/designs/latency.py).
"""

import pytest

from harness import cases
from harness.designs import latency

pytestmark = pytest.mark.timing  # measured in a phase of its own: no other test runs meanwhile


@pytest.mark.cases(table=cases.latency)
def test_latency(case, golden, zoo, run_settings):
    golden.check_all(latency.observe(zoo, case, run_settings))
