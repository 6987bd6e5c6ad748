"""The bias suite's table (suites/test_bias.py): one verification step per ensemble weight x context."""

from __future__ import annotations

from dataclasses import dataclass

from harness.cases.common import (
    ASSISTANT,
    TARGET,
    _p,
)
from harness.cases.registry import Rule, Suite, Table
from harness.schema import Case
from harness.settings.run import RunSettings


@dataclass(frozen=True)
class Context:
    """The first `length` tokens of held-out prompt `prompt` (tokenized by the llama-target
    tokenizer, no special tokens added by it)."""

    prompt: str
    length: int


# found by harness/designs/one_step.py `search_contexts` (tests/test_bias_design.py re-runs it)
CONTEXTS = (Context("long-1", 70), Context("long-0", 80), Context("long-1", 80))
BIAS_WEIGHTS = (None, 0.3, 0.7)


def bias_case_id(w: float | None, ctx: int) -> str:
    return f"{'lossless' if w is None else f'w{w}'}.ctx{ctx}"


def zoo_bias(run: RunSettings | None = None) -> list[Case]:
    """One case per (w, context): "<lossless|w0.3|w0.7>.ctx<i>", each with its own seed."""
    return [Case(TARGET, "ensemble" if w is not None else "assisted", weight=w, assistant=ASSISTANT,
                 name=bias_case_id(w, i), params=_p(ctx=i, order=k))
            for k, (w, i) in enumerate((w, i) for w in BIAS_WEIGHTS for i in range(len(CONTEXTS)))]




bias = Table("bias", zoo_bias)

SUITE = Suite("bias", (bias,), api="the speculative verifier's acceptance and residual sampling", quick=Rule(lambda c: c.param("ctx") == 0,
                                          "the second and third contexts of each verifier"))
