"""Unit tests of harness/engine/cache.py: the visibility rule, each cache's bookkeeping, the
config -> layer kinds rule and the dispatcher. Random sequences are in test_cache_machines.py."""

from __future__ import annotations

import pytest
import torch

from harness.engine.cache import (
    CacheOverflowError,
    CacheRewindError,
    ChunkedCache,
    FullCache,
    RecurrentCache,
    SlidingCache,
    StaticCache,
    StaticChunkedCache,
    StaticSlidingCache,
    build_caches,
    cache_spec_of,
    layer_types_of,
    visible,
)

H, D = 2, 3


def kv(start: int, T: int):
    """Keys/values whose content is their absolute position (k = pos, v = -pos)."""
    pos = torch.arange(start, start + T, dtype=torch.float32)
    k = pos.view(1, T, 1).expand(H, T, D).clone()
    return k, -k, torch.arange(start, start + T)


def append(cache, T):
    return cache.update(*kv(cache.seq_len, T))


def seen(cache_or_kind, size, q: int, k_pos) -> list[int]:
    m = visible(cache_or_kind, torch.tensor([q]), k_pos, size)[0]
    return [int(x) for x in k_pos[m]]


# ----------------------------------------------------------------------------- visibility


def test_visible_full_is_causal():
    assert seen("full", None, 3, torch.arange(6)) == [0, 1, 2, 3]


def test_visible_sliding_window_counts_the_query_itself():
    window = 3  # q - window < k <= q: the query plus window - 1 earlier positions
    assert seen("sliding", window, 5, torch.arange(8)) == list(range(5 - window + 1, 6))
    assert seen("sliding_attention", window, 1, torch.arange(8)) == [0, 1]


def test_visible_chunked_stays_inside_the_query_chunk():
    chunk = 4
    assert seen("chunked", chunk, 5, torch.arange(10)) == [4, 5]  # chunk [4, 8)
    assert seen("chunked", chunk, 3, torch.arange(10)) == [0, 1, 2, 3]  # last of chunk [0, 4)
    assert seen("chunked_attention", chunk, 8, torch.arange(10)) == [8]  # first of chunk [8, 12)


def test_visible_shape_and_errors():
    m = visible("full", torch.arange(2, 5), torch.arange(5))
    assert m.shape == (3, 5) and m.dtype == torch.bool
    with pytest.raises(ValueError, match="unknown attention kind 'linear_attention'"):
        visible("linear_attention", torch.arange(1), torch.arange(1))
    with pytest.raises(ValueError, match="positive size"):
        visible("sliding", torch.arange(1), torch.arange(1), None)


# ---------------------------------------------------------------------------------- caches


def test_full_cache_returns_held_plus_new_and_rewinds():
    c = FullCache()
    k, v, pos = append(c, 3)
    assert pos.tolist() == [0, 1, 2] and c.seq_len == 3 and c.held == 3
    k, v, pos = append(c, 2)
    assert pos.tolist() == [0, 1, 2, 3, 4]
    assert k[0, :, 0].tolist() == pos.tolist() and v[1, :, 2].tolist() == (-pos).tolist()
    c.rewind(2)
    assert c.seq_len == 3 and c.held == 3 and c.positions.tolist() == [0, 1, 2]
    assert c.nbytes() == 2 * H * 3 * D * 4  # keys + values, float32


def test_update_requires_contiguous_positions():
    c = FullCache()
    append(c, 2)
    k, v, _ = kv(2, 1)
    with pytest.raises(ValueError, match=r"contiguously \(2..2\), got \[3\]"):
        c.update(k, v, torch.tensor([3]))


def test_rewind_more_than_seen_is_an_error():
    c = FullCache()
    append(c, 2)
    with pytest.raises(CacheRewindError, match="cannot rewind 3 tokens of 2"):
        c.rewind(3)


def test_static_cache_overflow_names_max_len_and_needed_length():
    c = StaticCache(max_len=5)
    append(c, 4)
    assert c.nbytes() == 2 * H * 5 * D * 4  # preallocated
    with pytest.raises(CacheOverflowError, match=r"max_len=5\).*cannot hold 6 tokens"):
        append(c, 2)
    assert c.seq_len == 4  # nothing changed
    append(c, 1)
    assert c.seq_len == 5


def test_static_cache_rewind_then_overwrite():
    c = StaticCache(max_len=8)
    append(c, 5)
    c.rewind(3)
    k, _, pos = c.update(torch.full((H, 2, D), 100.0), torch.zeros(H, 2, D), torch.tensor([2, 3]))
    assert pos.tolist() == [0, 1, 2, 3]
    assert k[0, :, 0].tolist() == [0.0, 1.0, 100.0, 100.0]  # stale slots 2, 3 overwritten


def test_sliding_cache_keeps_window_minus_one_plus_slack():
    window, slack = 4, 2
    c = SlidingCache(window, slack)
    for T in (3, 1, 4, 2, 1):
        k, _, pos = append(c, T)
        assert k.shape[1] == pos.shape[0]  # held + new, before eviction
        assert c.held <= window - 1 + slack
    assert c.positions.tolist() == list(range(c.seq_len - (window - 1 + slack), c.seq_len))


def test_sliding_cache_rewind_within_slack_then_too_far():
    window, slack = 3, 2
    c = SlidingCache(window, slack)
    append(c, 10)  # keeps positions 10 - (window - 1 + slack) .. 9 = 6..9
    assert c.positions.tolist() == [6, 7, 8, 9]
    c.rewind(slack)  # length 8: a query at 8 needs 6, 7
    _, _, pos = append(c, 1)
    assert seen("sliding", window, 8, pos) == [6, 7, 8]
    with pytest.raises(CacheRewindError, match=r"needs positions >= 3.*positions < 6 were evicted"):
        c.rewind(4)  # length 5: a query at 5 needs 3, 4 (evicted)
    assert c.seq_len == 9 and c.positions.tolist() == [6, 7, 8]  # unchanged by the failed rewind


def test_chunked_cache_keeps_only_what_the_chunk_needs():
    chunk = 4
    c = ChunkedCache(chunk, slack=0)
    append(c, 6)  # next query at 6 is in chunk [4, 8): needs 4, 5
    assert c.positions.tolist() == [4, 5]
    append(c, 2)  # next query at 8 starts a new chunk: needs nothing
    assert c.held == 0
    c2 = ChunkedCache(chunk, slack=3)
    append(c2, 9)  # a rewind to 9 - 3 = 6 needs chunk [4, 8) from 4
    assert c2.positions.tolist() == [4, 5, 6, 7, 8]
    c2.rewind(3)
    _, _, pos = append(c2, 1)
    assert seen("chunked", chunk, 6, pos) == [4, 5, 6]


@pytest.mark.parametrize("make", [lambda: StaticSlidingCache(20, 4, 1), lambda: StaticChunkedCache(20, 4, 1)])
def test_static_windowed_caches_preallocate_window_minus_one_plus_slack(make):
    c = make()
    append(c, 7)
    assert c.nbytes() == 2 * H * (4 - 1 + 1) * D * 4
    append(c, 13)
    with pytest.raises(CacheOverflowError, match="max_len=20"):
        append(c, 1)


# -------------------------------------------------------------------- config -> kinds -> caches


def test_layer_types_explicit_wins():
    cfg = {"model_type": "gemma3_text", "num_hidden_layers": 3, "sliding_window": 8,
           "layer_types": ["sliding_attention", "sliding_attention", "full_attention"]}
    assert layer_types_of(cfg) == cfg["layer_types"]


def test_layer_types_generic_rule():
    base = {"model_type": "llama", "num_hidden_layers": 2}
    assert layer_types_of(base) == ["full_attention"] * 2
    assert layer_types_of({**base, "sliding_window": 16}) == ["sliding_attention"] * 2
    assert layer_types_of({**base, "attention_chunk_size": 16}) == ["chunked_attention"] * 2
    # sliding wins over chunked, as in get_layer_types_and_kwargs
    assert layer_types_of({**base, "sliding_window": 16, "attention_chunk_size": 8}) == ["sliding_attention"] * 2


def test_layer_types_mistral_defaults_to_sliding_4096():
    spec = cache_spec_of({"model_type": "mistral", "num_hidden_layers": 2})
    assert spec["layer_types"] == ["sliding_attention"] * 2 and spec["sliding_window"] == 4096
    assert layer_types_of({"model_type": "mistral", "num_hidden_layers": 2, "sliding_window": None}) == [
        "full_attention"] * 2


def test_layer_types_qwen2_max_window_layers():
    cfg = {"model_type": "qwen2", "num_hidden_layers": 4, "sliding_window": 8, "max_window_layers": 2}
    assert layer_types_of(cfg) == ["full_attention"] * 4  # use_sliding_window defaults to False
    spec = cache_spec_of({**cfg, "use_sliding_window": True})
    assert spec["layer_types"] == ["full_attention", "full_attention", "sliding_attention", "sliding_attention"]
    assert spec["sliding_window"] == 8


def test_layer_types_llama4_no_rope_layers():
    text = {"model_type": "llama4_text", "num_hidden_layers": 5, "attention_chunk_size": 8}
    # default no_rope_layers: int((i + 1) % 4 != 0) -> every 4th layer is NoPE (full attention)
    assert layer_types_of({"model_type": "llama4", "text_config": text}) == [
        "chunked_attention", "chunked_attention", "chunked_attention", "full_attention", "chunked_attention"]
    assert layer_types_of({**text, "attention_chunk_size": None}) == ["full_attention"] * 5
    assert layer_types_of({**text, "no_rope_layers": [0, 1, 0, 1, 1]}) == [
        "full_attention", "chunked_attention", "full_attention", "chunked_attention", "chunked_attention"]


def test_layer_types_unknown_family_with_family_keys_is_an_error():
    with pytest.raises(ValueError, match=r"'qwen2_moe' sets \['use_sliding_window'"):
        layer_types_of({"model_type": "qwen2_moe", "num_hidden_layers": 2, "use_sliding_window": True})
    with pytest.raises(ValueError, match="num_hidden_layers"):
        layer_types_of({"model_type": "llama"})


def test_build_caches_dispatch():
    types = ["full_attention", "sliding_attention", "chunked_attention"]
    dyn = build_caches(types, sliding_window=4, attention_chunk_size=8, slack=2)
    assert [type(c) for c in dyn] == [FullCache, SlidingCache, ChunkedCache]
    assert (dyn[1].window, dyn[2].chunk, dyn[1].slack) == (4, 8, 2)
    st = build_caches(types, 4, 8, static_max_len=32)
    assert [type(c) for c in st] == [StaticCache, StaticSlidingCache, StaticChunkedCache]
    assert all(c.max_len == 32 for c in st)


def test_build_caches_errors_name_the_layer():
    with pytest.raises(ValueError, match="layer 1 is 'sliding_attention' but sliding_window is None"):
        build_caches(["full_attention", "sliding_attention"], None, None)
    with pytest.raises(ValueError, match="layer 0: unknown attention kind 'moe'"):
        build_caches(["moe"], None, None)


# ------------------------------------------------------------------- recurrent (linear attention)


def _states(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))  # any object stands for a state: the cache never looks inside


def test_build_caches_gives_linear_layers_a_recurrent_cache_static_or_not():
    types = ["linear_attention", "full_attention"]
    for static in (None, 32):
        caches = build_caches(types, None, None, static_max_len=static, slack=3)
        assert isinstance(caches[0], RecurrentCache) and caches[0].slack == 3


def test_recurrent_cache_keeps_slack_plus_one_snapshots_and_rewinds_to_them():
    c = RecurrentCache(slack=2)
    assert c.state is None and c.seq_len == 0
    c.update(_states(5))  # states after tokens 1..5
    assert (c.seq_len, c.held, c.state) == (5, 3, 4)
    c.rewind(2)
    assert (c.seq_len, c.state) == (3, 2)
    c.update(_states(2, start=10))
    assert (c.seq_len, c.state) == (5, 11)


def test_recurrent_cache_rewind_beyond_the_snapshots_fails_and_changes_nothing():
    c = RecurrentCache(slack=1)
    c.update(_states(6))
    with pytest.raises(CacheRewindError, match="only the states after the newest 2 tokens are kept"):
        c.rewind(2)
    assert (c.seq_len, c.state) == (6, 5)
    with pytest.raises(CacheRewindError, match="cannot rewind 7 tokens of 6"):
        c.rewind(7)


def test_recurrent_cache_rewind_to_empty_restores_the_initial_state():
    c = RecurrentCache(slack=0)
    c.update(_states(3))
    c.rewind(3)
    assert (c.seq_len, c.held, c.state) == (0, 0, None)
    with pytest.raises(ValueError, match="no states"):
        c.update([])
