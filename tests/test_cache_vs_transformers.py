"""Cross-check of harness/engine/cache.py with the installed transformers (the engine itself
never imports it): the visibility rule against masking_utils' mask functions, the config ->
layer kinds rule against the config classes + ``cache_utils.get_layer_types_and_kwargs``, and
the sliding / chunked caches against ``DynamicSlidingWindowLayer`` in a speculative decode
pattern (update k + 1 tokens, crop the rejected ones)."""

from __future__ import annotations

import random

import pytest
import torch

from harness.engine.cache import ChunkedCache, SlidingCache, cache_spec_of, visible

masking_utils = pytest.importorskip("transformers.masking_utils")
cache_utils = pytest.importorskip("transformers.cache_utils")
import transformers  # noqa: E402
from transformers import AutoConfig  # noqa: E402

get_layer_types_and_kwargs = getattr(cache_utils, "get_layer_types_and_kwargs", None)


def _their_mask_fn(kind, size):
    if kind == "full":
        return masking_utils.causal_mask_function
    if kind == "sliding":
        return masking_utils.sliding_window_causal_mask_function(size)
    return masking_utils.chunked_causal_mask_function(size, torch.tensor([0]))


@pytest.mark.parametrize("kind", ["full", "sliding", "chunked"])
def test_visible_equals_masking_utils(kind):
    for size in ([None] if kind == "full" else [1, 2, 3, 5]):
        fn = _their_mask_fn(kind, size)
        q, kv = torch.arange(14), torch.arange(14)
        theirs = torch.tensor([[bool(fn(0, 0, torch.tensor(i), torch.tensor(j))) for j in kv.tolist()]
                               for i in q.tolist()])
        assert torch.equal(visible(kind, q, kv, size), theirs), (kind, size)


def _version() -> tuple[int, int]:
    major, minor = transformers.__version__.split(".")[:2]
    return int(major), int(minor)


CONFIGS = [
    {"model_type": "mistral", "num_hidden_layers": 3},
    {"model_type": "mistral", "num_hidden_layers": 3, "sliding_window": None},
    {"model_type": "mistral", "num_hidden_layers": 2, "sliding_window": 8},
    {"model_type": "qwen2", "num_hidden_layers": 4, "sliding_window": 8, "max_window_layers": 2},
    {"model_type": "qwen2", "num_hidden_layers": 4, "sliding_window": 8, "max_window_layers": 2,
     "use_sliding_window": True},
    {"model_type": "qwen2", "num_hidden_layers": 3, "use_sliding_window": True, "max_window_layers": 0},
    {"model_type": "qwen3", "num_hidden_layers": 3, "sliding_window": 4, "max_window_layers": 1,
     "use_sliding_window": True},
    {"model_type": "llama4_text", "num_hidden_layers": 5, "attention_chunk_size": 8},
    {"model_type": "llama4_text", "num_hidden_layers": 5, "attention_chunk_size": None},
    {"model_type": "llama4_text", "num_hidden_layers": 4, "attention_chunk_size": 4,
     "no_rope_layers": [1, 0, 0, 1]},
    {"model_type": "llama4", "text_config": {"num_hidden_layers": 5, "attention_chunk_size": 16}},
    {"model_type": "gemma3_text", "num_hidden_layers": 3, "sliding_window": 4,
     "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]},
    {"model_type": "llama", "num_hidden_layers": 2},
]


@pytest.mark.skipif(get_layer_types_and_kwargs is None, reason="transformers < 5.14 has no get_layer_types_and_kwargs")
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(f"{v}" for v in c.values())[:60])
def test_layer_types_equal_transformers(cfg):
    if (cfg["model_type"] == "llama4_text" and cfg.get("attention_chunk_size", 0) is None
            and _version() < (5, 24)):
        pytest.xfail("5.13/5.14 Llama4TextConfig marks RoPE layers chunked even when attention_chunk_size "
                     "is None; the engine follows 5.24 (full attention)")
    kwargs = {k: v for k, v in cfg.items() if k != "model_type"}
    their_cfg = AutoConfig.for_model(cfg["model_type"], **kwargs).get_text_config(decoder=True)
    their_types, their_kwargs = get_layer_types_and_kwargs(their_cfg)
    if isinstance(their_kwargs, dict):  # 5.14: one kwargs dict for all layers
        their_kwargs = [their_kwargs if t != "full_attention" else {} for t in their_types]
    ours = cache_spec_of(cfg)
    assert ours["layer_types"] == list(their_types)
    for t, kw in zip(their_types, their_kwargs, strict=True):
        if t == "sliding_attention":
            assert kw["sliding_window"] == ours["sliding_window"]
        elif t == "chunked_attention":
            assert kw["sliding_window"] == ours["attention_chunk_size"]


@pytest.mark.parametrize("kind", ["sliding", "chunked"])
@pytest.mark.parametrize("size", [1, 3, 5])
def test_windowed_cache_sees_what_dynamic_sliding_window_layer_sees(kind, size):
    """Decode pattern: prefill, then (update k + 1 tokens, crop k - n) cycles. transformers'
    layer runs with activate_past_recording(), as _assisted_decoding does (5.24); its keys'
    positions are arange(kv_length) + kv_offset from get_mask_sizes() taken before the update.
    Before that method existed (5.13 / 5.14) the layer cannot be cropped once it has seen
    `sliding_window` tokens (ValueError in crop), so there only the updates are compared."""
    rng = random.Random(size * 7 + len(kind))
    max_k = 4
    theirs = cache_utils.DynamicSlidingWindowLayer(sliding_window=size)
    can_rewind = hasattr(theirs, "activate_past_recording")
    if can_rewind:
        theirs.activate_past_recording()
    elif size == 1:
        pytest.xfail("transformers bug: with sliding_window=1 the slice [-window + 1:] is [0:], so the layer "
                     "keeps and returns the whole history while get_mask_sizes() reports kv_length = T")
    ours = (SlidingCache if kind == "sliding" else ChunkedCache)(size, slack=max_k)
    fn = _their_mask_fn(kind, size)
    stamp = 0
    for step in range(25):
        T = rng.randint(1, 6) if step == 0 else rng.randint(1, max_k + 1)
        s = ours.seq_len
        stamps = torch.arange(stamp + 1, stamp + 1 + T, dtype=torch.float32)
        stamp += T
        k = stamps.view(1, 1, T, 1).expand(1, 2, T, 3).clone()
        _, kv_offset = theirs.get_mask_sizes(T)
        tk, _ = theirs.update(k, -k)
        their_pos = torch.arange(tk.shape[2]) + kv_offset
        ok, _, our_pos = ours.update(k[0], -k[0], torch.arange(s, s + T))
        for q in range(s, s + T):
            their_seen = {(int(p), float(tk[0, 0, j, 0])) for j, p in enumerate(their_pos.tolist())
                          if bool(fn(0, 0, torch.tensor(q), torch.tensor(p)))}
            m = visible(kind, torch.tensor([q]), our_pos, size)[0]
            our_seen = {(int(p), float(ok[0, j, 0])) for j, p in enumerate(our_pos.tolist()) if m[j]}
            assert our_seen == their_seen, (step, q)
        if step > 0 and can_rewind:  # verification: T - 1 drafts, n accepted, crop T - 1 - n
            n = rng.randint(0, T - 1)
            theirs.crop(-(T - 1 - n))
            ours.rewind(T - 1 - n)
        assert theirs.get_seq_length() == ours.seq_len
