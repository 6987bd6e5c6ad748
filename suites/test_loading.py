"""The load contract of the installed transformers: what `from_pretrained(path)` resolves with no
arguments for each checkpoint - parameter dtype, attention implementation, the generation config
and the file it came from, the cache a plain generate() builds - and which source wins for a
generation setting and for the length (table: harness/cases/ `loading`; fields:
harness/designs/loading.py).
"""

import pytest

from harness import cases
from harness.designs import loading


@pytest.mark.cases(table=cases.loading)
def test_load_contract(case, golden, zoo, tmp_path):
    golden.check_all(loading.observe_load(zoo, case, tmp_path))
