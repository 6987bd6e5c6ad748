"""The backends suite's row (suites/test_backends.py): the model-level table, one case per checkpoint
(harness/cases/common.py `models`), run by its three tests."""

from __future__ import annotations

from harness.cases.common import models
from harness.cases.registry import Recipe, Suite

# a user model's case: three tests (the attention flags, eager vs SDPA, the checkpoint saved and reloaded), 80
# forwards each (the preflight counted four before this row existed)
SUITE = Suite("backends", (models,), api='from_pretrained(attn_implementation=...) and the attention backend', units=(3 * 80,),
              repro=Recipe(of=lambda c: "checkpoint" if c.name == c.model else None,
                           scripts=lambda case_id: "." not in case_id))
