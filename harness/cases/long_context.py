"""The long_context suite's table (suites/test_long_context.py): the rope-scaled fixtures past
original_max_position_embeddings, each also from a 4.x config, and mistral-sliding past its window in
a left-padded batch (zoo only: a real model's pretraining length is far past a cheap run)."""

from __future__ import annotations

from harness.cases.common import (
    LONG_CONTEXT,
    _p,
)
from harness.cases.registry import Suite, Table
from harness.schema import Case
from harness.settings.run import RunSettings
from harness.zoo.specs import SPECS

LONG_PROMPT = "long-0"  # 83 tokens: past the rope fixtures' original_max_position_embeddings (32) at once
LONG_TOKENS = 20  # prompt + new tokens reach position 102, past 3 x 32
ROPE_MODELS = tuple(s.name for s in SPECS if s.role == LONG_CONTEXT)
# the 4.x config.json each rope model is also loaded from: Llama 3.1's (`rope_scaling` with `rope_type`) and the
# form Qwen2.5's long-context recipe publishes for yarn (`rope_scaling` with `type`)
LEGACY_TYPE_KEYS = ("rope_type", "type")
SLIDING_MODEL = "mistral-sliding"
SLIDING_PROMPTS = ("long-0", "long-1")  # two lengths, both past the window: the shorter row is left-padded
SLIDING_TOKENS = 12
SLIDING_CUT = 48  # the second row's prompt tokens: three windows, 35 fewer than the first row's


def zoo_long_context(run: RunSettings | None = None) -> list[Case]:
    """`<rope model>.far` and `<rope model>.legacy-key` (its config.json under 4.x's `rope_scaling`) per
    rope-scaled fixture, `mistral-sliding.batch-past-window` (harness/designs/long_context.py)."""
    far = [Case(m, prompt=LONG_PROMPT, new_tokens=LONG_TOKENS, name=f"{m}.far", params=_p(check="far"))
           for m in ROPE_MODELS]
    legacy = [Case(m, prompt=LONG_PROMPT, new_tokens=LONG_TOKENS, name=f"{m}.legacy-key",
                   params=_p(check="legacy-key", type_key=key)) for m, key in zip(ROPE_MODELS, LEGACY_TYPE_KEYS, strict=True)]
    batch = Case(SLIDING_MODEL, prompt=SLIDING_PROMPTS[0], new_tokens=SLIDING_TOKENS,
                 name=f"{SLIDING_MODEL}.batch-past-window", params=_p(check="batch", prompts=SLIDING_PROMPTS, cut=SLIDING_CUT))
    return [*far, *legacy, batch]




long_context = Table("long_context", zoo_long_context)

SUITE = Suite("long_context", (long_context,), api='RoPE scaling and sliding windows past their length')
