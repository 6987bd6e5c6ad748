"""What generate() produces, per path, against the golden record and the reference engine.

One test, parametrized by the case table (harness/fixtures/cases.py). Per case it records:
  error         exact   the exception transformers raised (type, first line) or None
  tokens        tokens  greedy/sampled ids with per-step top-2 margins
  text          exact   decoded text
  first_logits  tensor  scores of the first generated step
  target_forwards exact number of target forward passes
  acceptance    rate    accepted / drafted tokens (speculative paths)
and against the reference engine (our own decode loop):
  lossless greedy paths equal plain greedy token for token;
  greedy paths (plain, lossless, ensemble-greedy) equal the engine's tokens;
  ensemble greedy is reported against plain greedy as a bias (where it first differs).
A path the installed version does not support records its capability and skips with the reason.
"""

from __future__ import annotations

from functools import cache

import pytest
import torch
from _common import loaded, reference_model

from harness.compare import first_divergence
from harness.engine.decode import decode
from harness.engine.drafters import AssistantDrafter, MtpDrafter, PromptLookupDrafter
from harness.fixtures import prompts
from harness.fixtures.cases import Case, output_cases
from harness.subjects import hf

EOS = 2
STATIC_MAX_LEN = 256
FEATURE = {"mtp": "use_mtp", "ensemble": "assistant_ensemble_weight", "prompt_lookup": "prompt_lookup"}


def subject(name: str):
    """(model, tokenizer) as the installed transformers loads it, once per worker."""
    return loaded(name).model, loaded(name).tokenizer


def prompt_ids(case: Case) -> list[int]:
    _, tok = subject(case.model)
    return tok(prompts.BY_ID[case.prompt].text).input_ids


@cache
def run_subject(case: Case) -> hf.Generated:
    model, _ = subject(case.model)
    assistant = subject(case.assistant)[0] if case.assistant else None
    return hf.generate(
        model, torch.tensor([prompt_ids(case)]), case.new_tokens, assistant=assistant,
        prompt_lookup=case.draft_tokens if case.path == "prompt_lookup" else None, use_mtp=case.path == "mtp",
        ensemble_weight=case.weight, draft_tokens=case.draft_tokens, do_sample=case.decoding == "sample",
        seed=case.seed, cache=case.cache, first_logit_steps=1,
    )


def run_reference(case: Case):
    target = reference_model(case.model)
    drafter = None
    if case.path in ("assisted", "ensemble"):
        drafter = AssistantDrafter(reference_model(case.assistant))
    elif case.path == "prompt_lookup":
        drafter = PromptLookupDrafter(eos_token_id=EOS)
    elif case.path == "mtp":
        drafter = MtpDrafter(target)
    mode = "ensemble_greedy" if case.weight is not None else "greedy"
    return decode(target, prompt_ids(case), case.new_tokens, drafter=drafter, k=case.draft_tokens or 1, mode=mode,
                  w=case.weight, static_max_len=STATIC_MAX_LEN if case.cache == "static" else None,
                  eos_token_id=EOS)


def acceptance_trace(drafts: list[list[int]], tokens: list[int]) -> tuple[list[int], list[int]]:
    """Accepted and drafted counts per step, from the drafts and the emitted tokens: each step
    emits its accepted drafts plus one target token."""
    accepted, drafted, pos = [], [], 0
    for draft in drafts:
        ok = next((i for i, (a, b) in enumerate(zip(draft, tokens[pos:], strict=False)) if a != b), min(len(draft), len(tokens) - pos))
        accepted.append(ok)
        drafted.append(len(draft))
        pos += ok + 1
    return accepted, drafted


@pytest.mark.parametrize("case", output_cases(), ids=lambda c: c.id)
def test_generate(case: Case, golden):
    feature = FEATURE.get(case.path)
    if feature is not None:
        supported = hf.capabilities()[feature]
        golden.check(f"supports_{feature}", supported, kind="capability")
        if not supported:
            pytest.skip(f"transformers {hf.version()} does not support {feature}")
    got = run_subject(case)
    golden.check("error", got.error)
    if got.error is not None:
        return
    _, tok = subject(case.model)
    golden.check("tokens", [got.tokens], kind="tokens", margins=[got.margins])
    golden.check("text", tok.decode(got.tokens))
    golden.check("first_logits", got.first_logits, kind="tensor")
    golden.check("target_forwards", got.target_forwards)
    if case.path != "plain":
        accepted, drafted = acceptance_trace(got.drafts, got.tokens)
        golden.check("acceptance", {"k": sum(accepted), "n": sum(drafted)}, kind="rate")
        golden.outcome("acceptance_per_step", "pass", kind="rate", against="baseline",
                       detail=f"{sum(accepted)}/{sum(drafted)} drafted tokens accepted over {len(drafted)} steps",
                       diff={"accepted_per_step": accepted, "drafted_per_step": drafted})
    if case.decoding != "greedy":
        return
    plain = run_subject(case.plain()) if case.path != "plain" else None
    if plain is not None and plain.error is not None:
        golden.outcome("equals_plain_greedy" if case.lossless else "bias_vs_plain_greedy", "skipped", kind="tokens",
                       category="not-applicable",
                       detail=f"plain greedy raised {plain.error['type']}: {plain.error['message']}")
        plain = None
    if case.lossless and plain is not None:
        golden.reference("equals_plain_greedy", [got.tokens], [plain.tokens], kind="tokens",
                         observed_extras={"margins": [got.margins]}, expected_extras={"margins": [plain.margins]})
    ours = run_reference(case)
    golden.reference("equals_reference_engine", [got.tokens], [ours.tokens], kind="tokens",
                     observed_extras={"margins": [got.margins]}, expected_extras={"margins": [ours.margins]})
    if case.path == "ensemble" and plain is not None:
        step = first_divergence(got.tokens, plain.tokens)
        detail = ("equals plain greedy" if step is None else
                  f"differs from plain greedy from step {step} (w={case.weight}); expected: the ensemble verifier is biased")
        golden.outcome("bias_vs_plain_greedy", "pass", kind="tokens", category="bias", detail=detail,
                       diff={"first_divergence_step": step, "w": case.weight,
                             "plain_text": tok.decode(plain.tokens), "ensemble_text": tok.decode(got.tokens)})
