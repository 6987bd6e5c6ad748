"""What generate() produces, per path, against the golden record and the reference engine.

One case per (model, path, cache, prompt, decoding) of the zoo and of your own models
(harness/cases/ `outputs`); the fields are listed in harness/designs/outputs.py.
"""

import pytest

from harness import cases
from harness.designs import outputs


@pytest.mark.cases(table=cases.outputs)
def test_generate(case, golden, zoo, run_settings):
    golden.check_all(outputs.observe(zoo, case, run_settings, golden.alpha))
