"""The continuous suite's table (suites/test_continuous.py): several requests served at once by
generate_batch (greedy with an early eos, sampled, logits processors, num_beams, the request manager)."""

from __future__ import annotations

from harness.cases.batching import BATCH_PROMPTS, _batch_prompts
from harness.cases.common import (
    TARGET,
    _p,
)
from harness.cases.registry import Suite, Table
from harness.schema import Case
from harness.settings.run import RunSettings

CONTINUOUS_CHECKS = ("greedy", "sample", "processors", "beam", "requests")
CONTINUOUS_TOKENS = 12  # few steps: each case is one generate_batch of three requests (~0.2 s)
# the sampled case's draws are tested as draws (continuous.py draws_as_engine): 3 x 32 of them, so that a
# sampler stuck on the mode fails at a full run's per-test alpha in bf16 too, where near-ties make the
# engine's mode another token now and then (3 x 12 did not: 34 of 36 modes, p > 2e-5)
CONTINUOUS_SAMPLE_TOKENS = 32


def continuous_case(model: str, check: str, prompts: tuple[str, ...]) -> Case:
    """`<model>.cb.<check>`: the prompts as requests of one generate_batch (harness/designs/continuous.py
    says what each check runs), CONTINUOUS_TOKENS new tokens each (the sampled case's
    CONTINUOUS_SAMPLE_TOKENS)."""
    sampled = check in ("sample", "requests")  # requests: the manager, one request sampled (continuous_requests.py)
    return Case(model, prompt=prompts[0], decoding="sample" if sampled else "greedy",
                seed=0 if sampled else None, name=f"{model}.cb.{check}",
                new_tokens=CONTINUOUS_SAMPLE_TOKENS if check == "sample" else CONTINUOUS_TOKENS,
                params=_p(check=check, prompts=prompts))


def zoo_continuous(run: RunSettings | None = None) -> list[Case]:
    """Every check on llama-target's batching prompts (each user model's: greedy on its first prompts)."""
    return [continuous_case(TARGET, c, BATCH_PROMPTS) for c in CONTINUOUS_CHECKS]




continuous = Table("continuous", zoo_continuous, user=lambda m: [continuous_case(m.name, "greedy", _batch_prompts(m))])

# a user model's greedy case: its prompts served together, then each alone through the engine (the batching
# suite's work on the same prompts)
SUITE = Suite("continuous", (continuous,), api='continuous batching (generate_batch)', units=(75,))
