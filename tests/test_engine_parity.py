"""The reference engine against the installed transformers on the zoo (fp32, CPU).

Logits within fp32 tolerance; greedy decoding token for token with every cache kind the
model's layer types use (dynamic and static; sliding / chunked layers are crossed by the long
prompts); speculative greedy paths equal plain greedy; MTP drafts equal transformers' drafts.

A model with attention soft-capping (Gemma 2) is compared with transformers' eager attention,
the implementation of its math: SDPA has no cap, and transformers 5.13 / 5.14 load Gemma 2 with
SDPA by default and drop the cap (logits off by ~0.05 on gemma2-softcap; 5.24 defaults to eager
and refuses SDPA). That default-backend difference is a finding the suites record per version
(backends: default_attn_implementation, eager_vs_sdpa; outputs: greedy vs the engine), not a
property of the engine.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache

import pytest
import torch

from harness.engine.cache import LINEAR
from harness.engine.decode import decode
from harness.engine.drafters import AssistantDrafter, MtpDrafter, PromptLookupDrafter
from harness.subjects import hf
from harness.zoo import load, prompts
from harness.zoo.specs import SPECS, WINDOW

DECODING = [s.name for s in SPECS if s.role in ("target", "mtp", "long-context")]
NEW_TOKENS = 40
EOS = 2


def math_attention(name: str) -> dict:
    """from_pretrained kwargs that select the attention implementing the model's math."""
    config = json.loads((load.MODELS_DIR / name / "config.json").read_text())
    return {"attn_implementation": "eager"} if config.get("attn_logit_softcapping") else {}


@cache
def models(name: str):
    model, tok = load.load_hf(name, **math_attention(name))
    return model, tok, load.load_reference(name)


def decoding_prompts(name: str):
    """Every held-out prompt; the 46-layer GLM trunks (~0.7 s a greedy generate) on one short and
    one long prompt, so the default test run stays fast - their logits are still checked on all."""
    deep = json.loads((load.MODELS_DIR / name / "config.json").read_text())["num_hidden_layers"] > 8
    return (prompts.BY_ID["short-0"], prompts.BY_ID["long-0"]) if deep else prompts.PROMPTS


def prompt_ids(tok, prompt) -> list[int]:
    return tok(prompt.text).input_ids


def test_long_prompts_cross_the_window():
    _, tok, _ = models("llama-target")
    for p in prompts.PROMPTS:
        n = len(prompt_ids(tok, p))
        assert (n > 3 * WINDOW) == (p.length == "long"), (p.id, n)


@pytest.mark.parametrize("name", DECODING)
def test_logits_match_transformers(name):
    model, tok, ref = models(name)
    for p in prompts.PROMPTS:
        ids = prompt_ids(tok, p)
        with torch.no_grad():
            expected = model(torch.tensor([ids])).logits[0]
        got = ref.forward(torch.tensor(ids), torch.arange(len(ids)), ref.new_caches()).logits
        torch.testing.assert_close(got, expected, rtol=1.3e-6, atol=2e-5, msg=lambda m: f"{name} {p.id}: {m}")  # noqa: B023


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("name", DECODING)
def test_greedy_equals_generate(name, cache):
    model, tok, ref = models(name)
    for p in decoding_prompts(name):
        ids = prompt_ids(tok, p)
        expected = hf.generate(model, torch.tensor([ids]), NEW_TOKENS, cache=cache)
        assert expected.error is None, expected.error
        got = decode(ref, ids, NEW_TOKENS, eos_token_id=EOS, static_max_len=256 if cache == "static" else None)
        assert got.tokens == expected.tokens, f"{name} {p.id} {cache}"


def test_window_is_exercised():
    """Sensitivity: ignoring the sliding window changes the long-prompt logits, so the parity
    tests above would catch a wrong window rule."""
    model, tok, ref = models("mistral-sliding")
    ids = prompt_ids(tok, prompts.BY_ID["long-0"])
    full = ref.forward(torch.tensor(ids), torch.arange(len(ids)), None)
    ref_full = type(ref)(dataclasses.replace(ref.cfg, layer_types=("full_attention",) * ref.cfg.num_layers), ref.w)
    ignored = ref_full.forward(torch.tensor(ids), torch.arange(len(ids)), None)
    assert (full.logits - ignored.logits).abs().max() > 1e-2


@pytest.mark.parametrize("cap", ["attn_softcap", "final_softcap"])
def test_softcaps_are_exercised(cap):
    """Sensitivity: dropping either soft-cap of gemma2-softcap moves its logits far beyond the
    parity tolerance, so the parity tests above would catch a missing or misplaced cap."""
    _, tok, ref = models("gemma2-softcap")
    ids = prompt_ids(tok, prompts.BY_ID["long-0"])
    capped = ref.forward(torch.tensor(ids), torch.arange(len(ids)), None)
    uncapped = type(ref)(dataclasses.replace(ref.cfg, **{cap: None}), ref.w).forward(
        torch.tensor(ids), torch.arange(len(ids)), None)
    assert (capped.logits - uncapped.logits).abs().max() > 1e-2


def test_rope_theta_per_kind_and_qk_norm_are_exercised():
    """Sensitivity: on mellum-mtp, one RoPE theta for every layer kind, or no q/k norm, changes the
    logits, so the parity tests above would catch either rule being wrong."""
    import dataclasses

    _, tok, ref = models("mellum-mtp")
    ids = torch.tensor(prompt_ids(tok, prompts.BY_ID["long-0"]))
    base = ref.forward(ids, torch.arange(len(ids)), None).logits
    for change in (dict(rope_theta_by_kind=()), dict(qk_norm=False)):
        other = type(ref)(dataclasses.replace(ref.cfg, **change), ref.w)
        assert (other.forward(ids, torch.arange(len(ids)), None).logits - base).abs().max() > 1e-2, change


def _paths(name: str, ref):
    yield "prompt_lookup", lambda: PromptLookupDrafter(eos_token_id=EOS), 4
    if name == "llama-target" or LINEAR in ref.cfg.layer_types:  # the hybrid: rollback by snapshot
        assistant = load.load_reference("llama-assistant")
        yield "assistant", lambda: AssistantDrafter(assistant), 4
    if ref.cfg.num_mtp_layers:
        yield "mtp", lambda: MtpDrafter(ref), 1


@pytest.mark.parametrize("name", DECODING)
def test_speculative_greedy_equals_plain_greedy(name):
    _, tok, ref = models(name)
    for p in (prompts.BY_ID["short-0"], prompts.BY_ID["long-0"]):
        ids = prompt_ids(tok, p)
        plain = decode(ref, ids, NEW_TOKENS, eos_token_id=EOS)
        for path, drafter, k in _paths(name, ref):
            for static in (None, 256):
                got = decode(ref, ids, NEW_TOKENS, drafter=drafter(), k=k, eos_token_id=EOS, static_max_len=static)
                assert got.tokens == plain.tokens, f"{name} {p.id} {path} static={static}"
                assert got.target_forwards <= plain.target_forwards


MTP_MODELS = [s.name for s in SPECS if s.role == "mtp"]


@pytest.mark.parametrize("name", MTP_MODELS)
def test_mtp_drafts_equal_transformers_drafts(name):
    """Where the installed transformers runs the model's MTP layer at all: a version that cannot
    load a checkpoint layout (5.14 and the dense-first trunk: it builds a dense MTP layer and the
    checkpoint's is MoE) is skipped here with its error; the contracts suite records it
    (mtp-checkpoint-*) and the outputs suite records the error per case."""
    if not hf.capabilities()["use_mtp"]:
        pytest.skip(f"transformers {hf.version()} has no use_mtp")
    model, tok, ref = models(name)
    for p in decoding_prompts(name):
        ids = prompt_ids(tok, p)
        theirs = hf.generate(model, torch.tensor([ids]), NEW_TOKENS, use_mtp=True)
        if theirs.error is not None and name != "glm4moe-mtp":
            pytest.skip(f"transformers {hf.version()} cannot run {name}'s MTP layer: {theirs.error}")
        assert theirs.error is None, theirs.error
        ours = decode(ref, ids, NEW_TOKENS, drafter=MtpDrafter(ref), k=1, eos_token_id=EOS)
        assert ours.tokens == theirs.tokens
        mine, hf_drafts = [list(s.draft) for s in ours.steps if s.draft], [d for d in theirs.drafts if d]
        # transformers' MTP generator also drafts on the last step (its output is then cut to
        # max_new_tokens); the engine drafts only while a drafted token can still be emitted
        assert hf_drafts[: len(mine)] == mine, p.id
        assert len(hf_drafts) - len(mine) <= 1, p.id
