"""The installed transformers' KV caches per model - layer dispatch, lengths and memory, rollback -
against the reference dispatcher and caches and the golden record (fields: harness/designs/caches.py).
"""

import pytest

from harness import cases
from harness.designs import caches


@pytest.mark.cases(table=cases.models)
def test_layer_dispatch(case, golden, zoo):
    golden.check_all(caches.dispatch(zoo, case))


@pytest.mark.cases(table=cases.models)
def test_lengths_and_bytes(case, golden, zoo):
    golden.check_all(caches.lengths(zoo, case))


@pytest.mark.cases(table=cases.models)
def test_rollback(case, golden, zoo):
    golden.check_all(caches.rollback(zoo, case))
