"""The batching suite's table (suites/test_batching.py): each prompt alone vs inside a padded batch."""

from __future__ import annotations

from harness.cases.common import (
    ASSISTANT,
    TARGET,
    _p,
    draft_tokens_of,
    named,
)
from harness.cases.registry import Rule, Suite, Table
from harness.cases.stopping import STOP_TOKENS
from harness.schema import Case
from harness.settings.models import UserModel
from harness.settings.run import RunSettings

BATCH_PROMPTS = ("short-0", "long-0", "short-1")  # 20, 83 and 19 tokens: two rows left-padded by ~60
BATCH_CHECKS = ("greedy", "sample", "right-padded", "tokenizer-padded", "assisted", "prompt_lookup")
# padding meets sliding windows (every layer) and soft-capped eager attention: plain greedy only
BATCH_ALSO = ("mistral-sliding", "gemma2-softcap")


def _batch_prompts(model: UserModel) -> tuple[str, ...]:
    ids = [p.id for p in model.prompts] or list(BATCH_PROMPTS)
    return tuple(ids[:len(BATCH_PROMPTS)])


def batch_case(model: str, check: str, prompts: tuple[str, ...], assistant: str | None = None) -> Case:
    """`<model>.batch.<check>`: the prompts in one padded batch (harness/designs/batching.py says
    what each check runs), STOP_TOKENS new tokens."""
    path = check if check in ("assisted", "prompt_lookup") else "plain"
    return Case(model, path, "dynamic", prompts[0], "sample" if check == "sample" else "greedy",
                seed=0 if check == "sample" else None, draft_tokens=draft_tokens_of(path),
                assistant=assistant if path == "assisted" else None, new_tokens=STOP_TOKENS,
                name=f"{model}.batch.{check}", params=_p(check=check, prompts=prompts))


def zoo_batching(run: RunSettings | None = None) -> list[Case]:
    """Every check on llama-target (assisted by llama-assistant), plain greedy on `BATCH_ALSO` (each
    user model's: its greedy, right-padded and speculative checks on its first prompts)."""
    cases = [batch_case(TARGET, c, BATCH_PROMPTS, ASSISTANT) for c in BATCH_CHECKS]
    return cases + [batch_case(m, "greedy", BATCH_PROMPTS) for m in BATCH_ALSO]


def _user_batch_cases(model: UserModel) -> list[Case]:
    checks = ["greedy", "right-padded", "tokenizer-padded"] + [p for p in ("assisted", "prompt_lookup") if p in model.paths]
    return [batch_case(model.name, c, _batch_prompts(model), model.assistant_name) for c in checks]




batching = Table("batching", zoo_batching, user=_user_batch_cases, plan=Rule(
    named("batch.greedy"), "right padding and the speculative batches repeat the padded masks"))

SUITE = Suite("batching", (batching,), api='batched generate() (padding, attention_mask)', units=(75,))
