"""Compiled static-cache decoding, per version: generate() with cache_implementation="static" and a
CompileConfig that compiles on every device - its tokens against the reference engine's decode (and,
secondarily, the same call eager), whether it compiled at all, and what it recompiles for a call that
fits the cache an earlier call made (table: harness/cases/ `compiled`; fields: harness/designs/compiled.py).
"""

import pytest

from harness import cases
from harness.designs import compiled


@pytest.mark.cases(table=cases.compiled)
def test_compiled(case, golden, zoo):
    golden.check_all(compiled.observe(zoo, case))
