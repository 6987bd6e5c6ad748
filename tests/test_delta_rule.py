"""The gated delta rule (harness/engine/delta_rule.py) from its definition, against transformers'
chunked kernel, and the rollback by snapshot that lets the engine decode speculatively on a
hybrid linear-attention model (qwen3_5-linear)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from harness.engine import cache as cache_mod
from harness.engine.decode import decode
from harness.engine.delta_rule import l2norm, recurrence
from harness.engine.drafters import AssistantDrafter
from harness.zoo import load, prompts

H, DK, DV = 2, 8, 4


def _inputs(t: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    q = l2norm(torch.randn(t, H, DK, generator=gen)) / DK ** 0.5
    k = l2norm(torch.randn(t, H, DK, generator=gen))
    v = torch.randn(t, H, DV, generator=gen)
    g = -F.softplus(torch.randn(t, H, generator=gen))
    beta = torch.sigmoid(torch.randn(t, H, generator=gen))
    return q, k, v, g, beta


def test_a_written_value_is_recalled_at_its_key():
    """No decay (g = 0), full write (beta = 1), empty memory: S = k v^T, so S^T k = v |k|^2 = v."""
    _, k, v, _, _ = _inputs(1)
    out, memories = recurrence(k, k, v, torch.zeros(1, H), torch.ones(1, H), torch.zeros(H, DK, DV))
    torch.testing.assert_close(out[0], v[0])
    torch.testing.assert_close(memories[0], k[0][:, :, None] * v[0][:, None, :])


def test_the_delta_rule_overwrites_rather_than_accumulates():
    """Writing v1 then v2 at the same key with beta = 1 leaves v2 there (a plain linear attention
    would return v1 + v2): the update first erases what the memory returns for k."""
    _, k, v, _, _ = _inputs(2)
    keys = torch.stack((k[0], k[0]))
    out, _ = recurrence(keys, keys, v, torch.zeros(2, H), torch.ones(2, H), torch.zeros(H, DK, DV))
    torch.testing.assert_close(out[1], v[1])


def test_recurrence_equals_transformers_chunked_kernel():
    """transformers' prefill kernel (torch_chunk_gated_delta_rule, 64-token chunks) computes the
    same outputs and final state as the token-by-token recurrence, across a chunk boundary."""
    qwen = pytest.importorskip("transformers.models.qwen3_5.modeling_qwen3_5")
    t = 70
    q, k, v, g, beta = _inputs(t, seed=1)
    ours, memories = recurrence(q, k, v, g, beta, torch.zeros(H, DK, DV))
    # transformers normalises and scales q, k itself: hand it the raw (normalised) q times sqrt(d_k)
    theirs, state = qwen.torch_chunk_gated_delta_rule(
        (q * DK ** 0.5)[None], k[None], v[None], g=g[None], beta=beta[None], output_final_state=True,
        use_qk_l2norm_in_kernel=False)
    torch.testing.assert_close(ours, theirs[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(memories[-1], state[0], rtol=1e-5, atol=1e-5)


def test_splitting_the_sequence_at_a_snapshot_changes_nothing():
    """Running tokens [0, t) then [t, T) from the snapshot after t equals one run: the state is all
    a later token needs, which is what rollback by snapshot relies on."""
    q, k, v, g, beta = _inputs(12, seed=2)
    whole, memories = recurrence(q, k, v, g, beta, torch.zeros(H, DK, DV))
    rest, _ = recurrence(q[5:], k[5:], v[5:], g[5:], beta[5:], memories[4])
    torch.testing.assert_close(rest, whole[5:])


def test_speculative_decoding_needs_the_snapshot(monkeypatch):
    """Sensitivity, on qwen3_5-linear with the llama assistant: assisted greedy equals plain greedy
    (the parity suite checks this on every prompt), and a rewind that keeps the recurrent state of
    the rejected drafts instead of restoring the snapshot changes the tokens - so those tests
    would catch a broken rollback."""
    target, assistant = load.load_reference("qwen3_5-linear"), load.load_reference("llama-assistant")
    ids = load.load_hf("qwen3_5-linear")[1](prompts.BY_ID["long-0"].text).input_ids
    plain = decode(target, ids, 24, eos_token_id=2)
    assisted = decode(target, ids, 24, drafter=AssistantDrafter(assistant), k=4, eos_token_id=2)
    assert assisted.tokens == plain.tokens
    accepted, drafted = assisted.acceptance
    assert 0 < accepted < drafted  # some drafts rejected: rewinds happened

    def rewind_keeping_state(self, n):  # the length moves back, the state does not
        self._seq_len -= int(n)

    monkeypatch.setattr(cache_mod.RecurrentCache, "rewind", rewind_keeping_state)
    broken = decode(target, ids, 24, drafter=AssistantDrafter(assistant), k=4, eos_token_id=2)
    assert broken.tokens != plain.tokens
