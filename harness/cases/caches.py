"""The caches suite's row (suites/test_caches.py): the model-level table, one case per checkpoint
(harness/cases/common.py `models`), run by its three tests."""

from __future__ import annotations

from harness.cases.common import models
from harness.cases.registry import Suite

# a user model's case: three tests (the layer dispatch, lengths and bytes, rollback), 60 forwards each
SUITE = Suite("caches", (models,), api='the cache classes (update, crop / rollback)', units=(3 * 60,))
