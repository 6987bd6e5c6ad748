"""Layer-typed KV caches for the reference engine (batch size 1, torch only).

One small interface, `LayerCache`; one visibility rule, `visible`. A cache stores keys/values
for absolute positions; the attention mask is always computed by the caller from positions
with `visible(kind, q_pos, k_pos, size)`, so what a cache *holds* and what a query *sees* are
decided in separate places and can be tested separately.

Kinds (transformers' ``layer_types`` names are accepted as aliases):

- ``full``    (``full_attention``):    every earlier position.
- ``sliding`` (``sliding_attention``): the last ``window`` positions, the query's own included.
- ``chunked`` (``chunked_attention``): earlier positions of the query's own chunk of ``chunk``.

Caches: `FullCache` (growing), `StaticCache` (preallocated, full attention), `SlidingCache`,
`ChunkedCache` and their preallocated variants `StaticSlidingCache`, `StaticChunkedCache`; and
for linear-attention layers (``linear_attention``), which keep a fixed-size recurrent state
instead of keys and values, `RecurrentCache`: it rewinds by snapshot.
Windowed caches evict what no future query can see, keeping ``slack`` extra entries so that
a rejected draft of up to ``slack`` tokens can be rewound.

`layer_types_of(config)` infers per-layer kinds from a config.json dict and `build_caches`
dispatches kinds to cache classes, making the decision transformers makes in
``cache_utils.get_layer_types_and_kwargs`` (written independently, not imported).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

__all__ = [
    "CacheOverflowError",
    "CacheRewindError",
    "KINDS",
    "normalize_kind",
    "visible",
    "LayerCache",
    "FullCache",
    "StaticCache",
    "SlidingCache",
    "ChunkedCache",
    "StaticSlidingCache",
    "StaticChunkedCache",
    "RecurrentCache",
    "LINEAR",
    "has_linear_attention",
    "layer_types_of",
    "cache_spec_of",
    "build_caches",
]

KINDS = ("full", "sliding", "chunked")
LINEAR = "linear_attention"  # a recurrent layer: no keys/values, no visibility rule
_ALIASES = {
    "full": "full",
    "full_attention": "full",
    "sliding": "sliding",
    "sliding_attention": "sliding",
    "chunked": "chunked",
    "chunked_attention": "chunked",
}


class CacheOverflowError(RuntimeError):
    """A static cache was asked to hold more tokens than its ``max_len``."""


class CacheRewindError(RuntimeError):
    """A rewind asked for entries the cache no longer holds (evicted, or never written)."""


def normalize_kind(kind: str) -> str:
    """'full' | 'sliding' | 'chunked' from a kind or a transformers layer type name."""
    try:
        return _ALIASES[kind]
    except KeyError:
        raise ValueError(
            f"unknown attention kind {kind!r}; the reference engine supports {sorted(_ALIASES)}"
        ) from None


# --------------------------------------------------------------------------------------------
# the visibility rule


def visible(kind: str, q_pos: torch.Tensor, k_pos: torch.Tensor, size: int | None = None) -> torch.Tensor:
    """THE visibility rule: ``mask[i, j]`` is True when query position ``q_pos[i]`` may attend
    to key position ``k_pos[j]`` (absolute positions, batch 1, no padding). Returns BoolTensor[Tq, Tk].

        full:              k <= q
        sliding(window):   k <= q  and  k > q - window      i.e. q - window < k <= q
                           (the query plus the window - 1 positions before it)
        chunked(chunk):    k <= q  and  k // chunk == q // chunk

    These are transformers 5.24.0 masking_utils: ``causal_mask_function`` (line 74,
    ``kv_idx <= q_idx``), ``sliding_window_overlay`` (line 90, ``kv_idx > q_idx - sliding_window``)
    and ``chunked_overlay`` (line 102, ``(kv_idx - left_padding) // chunk_size == (q_idx -
    left_padding) // chunk_size`` with left_padding = 0 here), each and-ed with the causal mask.
    Same conventions in 5.13.1 and 5.14.0.
    """
    kind = normalize_kind(kind)
    q = torch.as_tensor(q_pos, dtype=torch.long).reshape(-1, 1)
    k = torch.as_tensor(k_pos, dtype=torch.long).reshape(1, -1)
    mask = k <= q
    if kind == "full":
        return mask
    if size is None or int(size) < 1:
        raise ValueError(f"{kind} attention needs a positive size (window / chunk), got {size!r}")
    if kind == "sliding":
        return mask & (k > q - size)
    return mask & (torch.div(k, size, rounding_mode="floor") == torch.div(q, size, rounding_mode="floor"))


def _first_needed(kind: str, size: int | None, s: int) -> int:
    """Smallest position a query at position ``s`` can see (what must still be held)."""
    if kind == "full":
        return 0
    if kind == "sliding":
        return max(0, s - size + 1)
    return (s // size) * size


# --------------------------------------------------------------------------------------------
# caches


class LayerCache:
    """KV cache of one attention layer, batch 1. Tensors are ``[heads, T, head_dim]``.

    Positions must be appended contiguously: an update's positions are
    ``seq_len, seq_len + 1, ..., seq_len + T - 1``.

    Eviction (windowed kinds): after an update reaching length s, entries at positions below
    ``first_needed(max(0, s - slack))`` are dropped, where first_needed(t) is the smallest
    position a query at t can see (full: 0, sliding: t - window + 1, chunked: t // chunk * chunk).
    Rewind guarantee: ``rewind(n)`` succeeds whenever the new length is at least
    ``high_water - slack``, high_water being the largest length ever reached; a speculative
    decode loop that rewinds at most ``slack`` of the tokens it just appended and never below
    the committed length always satisfies this. A rewind that needs evicted entries raises
    `CacheRewindError` and leaves the cache unchanged.
    """

    kind: str = "full"

    def __init__(self, size: int | None = None, slack: int = 0, max_len: int | None = None):
        if slack < 0:
            raise ValueError(f"slack must be >= 0, got {slack}")
        if self.kind != "full" and (size is None or int(size) < 1):
            raise ValueError(f"{type(self).__name__} needs a positive {self._size_name}, got {size!r}")
        if max_len is not None and int(max_len) < 1:
            raise ValueError(f"{type(self).__name__} needs max_len >= 1, got {max_len!r}")
        self.size = None if size is None else int(size)
        self.slack = int(slack)
        self.max_len = None if max_len is None else int(max_len)
        self._seq_len = 0
        self._start = 0  # absolute position of the first held entry
        self._k: torch.Tensor | None = None  # dynamic: [H, held, D]; static: preallocated buffer
        self._v: torch.Tensor | None = None
        self._n = 0  # held entries

    _size_name = "size"

    # -- storage (dynamic by default; static subclasses preallocate) --------------------------
    def _capacity(self) -> int | None:
        return None

    def _held_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._k[:, : self._n], self._v[:, : self._n]

    def _store(self, k: torch.Tensor, v: torch.Tensor) -> None:
        cap = self._capacity()
        n = k.shape[1]
        if cap is None:
            self._k, self._v = k.clone(), v.clone()
        else:
            if self._k is None:
                self._k = k.new_zeros((k.shape[0], cap, k.shape[2]))
                self._v = v.new_zeros((v.shape[0], cap, v.shape[2]))
            assert n <= cap, "eviction rule keeps at most the capacity"  # guaranteed by construction
            self._k[:, :n].copy_(k)
            self._v[:, :n].copy_(v)
        self._n = n

    def _truncate(self, n: int) -> None:
        if self._capacity() is None and self._k is not None:
            self._k, self._v = self._k[:, :n].clone(), self._v[:, :n].clone()
        self._n = n

    # -- interface ---------------------------------------------------------------------------
    def update(
        self, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Append k, v ([heads, T, head_dim]) for absolute ``positions`` ([T]); return ALL keys,
        values and their absolute positions the new queries may need to see (held + new),
        BEFORE any eviction for this call. The caller masks them with `visible()`."""
        if k.dim() != 3 or v.dim() != 3 or k.shape[:2] != v.shape[:2]:
            raise ValueError(f"k, v must be [heads, T, head_dim] with equal heads and T, got "
                             f"{tuple(k.shape)} and {tuple(v.shape)}")
        T = k.shape[1]
        s = self._seq_len
        pos = torch.as_tensor(positions, dtype=torch.long).reshape(-1)
        expected = torch.arange(s, s + T)
        if pos.shape != expected.shape or not torch.equal(pos, expected):
            raise ValueError(f"{type(self).__name__}.update: positions must continue the cache "
                             f"contiguously ({s}..{s + T - 1}), got {pos.tolist()}")
        if self.max_len is not None and s + T > self.max_len:
            raise CacheOverflowError(
                f"{type(self).__name__}(max_len={self.max_len}) cannot hold {s + T} tokens "
                f"({s} cached + {T} new); build it with max_len >= {s + T}"
            )
        if self._k is not None and (k.dtype != self._k.dtype or k.device != self._k.device
                                    or k.shape[0] != self._k.shape[0] or k.shape[2] != self._k.shape[2]
                                    or v.shape[2] != self._v.shape[2]):
            raise ValueError(f"{type(self).__name__}.update: k/v shape, dtype or device changed: "
                             f"{tuple(k.shape)} {k.dtype} vs held {tuple(self._k.shape)} {self._k.dtype}")
        if self._k is None or self._n == 0:
            full_k, full_v = k, v
        else:
            held_k, held_v = self._held_kv()
            full_k, full_v = torch.cat([held_k, k], dim=1), torch.cat([held_v, v], dim=1)
        full_pos = torch.arange(self._start, s + T)
        # evict what no query at length >= (s + T) - slack can see
        self._seq_len = s + T
        new_start = max(self._start, _first_needed(self.kind, self.size, max(0, s + T - self.slack)))
        self._store(full_k[:, new_start - self._start :], full_v[:, new_start - self._start :])
        self._start = new_start
        return full_k, full_v, full_pos

    def rewind(self, n: int) -> None:
        """Drop the newest ``n`` tokens (after a rejected draft)."""
        n = int(n)
        if n < 0 or n > self._seq_len:
            raise CacheRewindError(f"{type(self).__name__}: cannot rewind {n} tokens of {self._seq_len}")
        if n == 0:
            return
        new_len = self._seq_len - n
        need = _first_needed(self.kind, self.size, new_len)
        if self._start > need:
            raise CacheRewindError(
                f"{type(self).__name__}({self._size_name}={self.size}, slack={self.slack}): cannot rewind {n} "
                f"tokens to length {new_len}: a query at position {new_len} needs positions >= {need}, but "
                f"positions < {self._start} were evicted; build the cache with a larger slack"
            )
        self._truncate(new_len - self._start)
        self._seq_len = new_len

    @property
    def seq_len(self) -> int:
        """Logical tokens seen (after rewinds): the position of the next token."""
        return self._seq_len

    @property
    def held(self) -> int:
        """Entries physically held (valid entries; a static buffer may have more slots)."""
        return self._n

    @property
    def positions(self) -> torch.Tensor:
        """Absolute positions of the held entries."""
        return torch.arange(self._start, self._start + self._n)

    def nbytes(self) -> int:
        """Bytes of key/value storage (held entries; a static cache's whole preallocated buffer)."""
        if self._k is None:
            return 0
        return self._k.nbytes + self._v.nbytes

    def mask(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """`visible` with this cache's kind and size."""
        return visible(self.kind, q_pos, k_pos, self.size)

    def __repr__(self) -> str:
        extra = f", {self._size_name}={self.size}" if self.size is not None else ""
        extra += f", max_len={self.max_len}" if self.max_len is not None else ""
        return f"{type(self).__name__}(seq_len={self._seq_len}, held={self._n}{extra}, slack={self.slack})"


class FullCache(LayerCache):
    """Full attention, growing storage (transformers' DynamicLayer). ``slack`` is irrelevant:
    nothing is evicted, any rewind up to ``seq_len`` works."""

    kind = "full"

    def __init__(self, slack: int = 0):
        super().__init__(None, slack)


class StaticCache(LayerCache):
    """Full attention in a buffer preallocated at the first update ([heads, max_len, head_dim],
    transformers' StaticLayer). An update beyond ``max_len`` raises `CacheOverflowError`.
    Returns ``buffer[:, :seq_len]``-sized keys (held + new); transformers returns the whole
    buffer and masks the unwritten tail, which `visible` would hide too (future positions).
    Rewind only moves the length back; stale slots are overwritten by the next update."""

    kind = "full"

    def __init__(self, max_len: int, slack: int = 0):
        super().__init__(None, slack, max_len)

    def _capacity(self) -> int:
        return self.max_len


class SlidingCache(LayerCache):
    """Sliding-window attention, growing storage that keeps at most ``window - 1 + slack``
    entries after each update (transformers' DynamicSlidingWindowLayer keeps ``window - 1``,
    or everything until ``crop`` when ``record_past`` is on)."""

    kind = "sliding"
    _size_name = "window"

    def __init__(self, window: int, slack: int = 0):
        super().__init__(window, slack)

    @property
    def window(self) -> int:
        return self.size


class ChunkedCache(LayerCache):
    """Chunked attention: keeps the entries of the chunk that position ``seq_len - slack`` falls
    in, through the newest (at most ``chunk - 1 + slack``). transformers instead reuses its
    sliding-window layer with window = chunk (keeps ``chunk - 1``, a superset of what is needed)."""

    kind = "chunked"
    _size_name = "chunk"

    def __init__(self, chunk: int, slack: int = 0):
        super().__init__(chunk, slack)

    @property
    def chunk(self) -> int:
        return self.size


class StaticSlidingCache(SlidingCache):
    """`SlidingCache` in a buffer preallocated with ``min(max_len, window - 1 + slack)`` slots
    (transformers' StaticSlidingWindowLayer preallocates ``min(max_len, window)``). Like
    `StaticCache` it raises `CacheOverflowError` beyond ``max_len`` (transformers' sliding
    layer would roll on; its full layers would fail)."""

    def __init__(self, max_len: int, window: int, slack: int = 0):
        LayerCache.__init__(self, window, slack, max_len)

    def _capacity(self) -> int:
        return min(self.max_len, self.size - 1 + self.slack)


class StaticChunkedCache(ChunkedCache):
    """`ChunkedCache` in a buffer preallocated with ``min(max_len, chunk - 1 + slack)`` slots."""

    def __init__(self, max_len: int, chunk: int, slack: int = 0):
        LayerCache.__init__(self, chunk, slack, max_len)

    def _capacity(self) -> int:
        return min(self.max_len, self.size - 1 + self.slack)


class RecurrentCache:
    """The state of one linear-attention layer (delta_rule.RecurrentState: conv inputs and the
    [d_k, d_v] memory per head), batch 1, with rollback by snapshot.

    A recurrent state folds every token into one fixed-size tensor, so it cannot drop its newest
    tokens the way a KV cache truncates: transformers' LinearAttentionLayer has no crop, and
    its assisted decoding refuses such models. The layer instead hands over the state after
    *each* token it processes (`update`); the cache keeps the newest ``slack + 1`` of them, so
    ``rewind(n)`` for n <= slack is restoring the snapshot taken n tokens ago - exact, with no
    recomputation. Rewinding to length 0 restores the initial (empty) state; anything further
    back than the snapshots held raises `CacheRewindError` and leaves the cache unchanged.
    Cost: slack + 1 states per layer instead of one (`nbytes` counts them all).
    """

    kind = LINEAR

    def __init__(self, slack: int = 0):
        if slack < 0:
            raise ValueError(f"slack must be >= 0, got {slack}")
        self.slack = int(slack)
        self._seq_len = 0
        self._snapshots: list = []  # state after token seq_len - len + 1 ... seq_len (newest last)

    @property
    def state(self):
        """The state after the newest token, or None before the first."""
        return self._snapshots[-1] if self._snapshots else None

    def update(self, states: Sequence) -> None:
        """Append the states after each of len(states) new tokens (oldest first)."""
        if not states:
            raise ValueError("RecurrentCache.update: no states")
        self._snapshots = (self._snapshots + list(states))[-(self.slack + 1):]
        self._seq_len += len(states)

    def rewind(self, n: int) -> None:
        """Drop the newest ``n`` tokens: restore the snapshot from n tokens ago."""
        n = int(n)
        if n < 0 or n > self._seq_len:
            raise CacheRewindError(f"RecurrentCache: cannot rewind {n} tokens of {self._seq_len}")
        if n == 0:
            return
        if n == self._seq_len:
            self._snapshots, self._seq_len = [], 0
            return
        if n >= len(self._snapshots):
            raise CacheRewindError(
                f"RecurrentCache(slack={self.slack}): cannot rewind {n} tokens: only the states after the "
                f"newest {len(self._snapshots)} tokens are kept; build the cache with a larger slack")
        del self._snapshots[-n:]
        self._seq_len -= n

    @property
    def seq_len(self) -> int:
        return self._seq_len

    @property
    def held(self) -> int:
        """Snapshots held (the live state is the newest)."""
        return len(self._snapshots)

    def nbytes(self) -> int:
        """Bytes of every snapshot held (live state included)."""
        return sum(s.nbytes() for s in self._snapshots)

    def __repr__(self) -> str:
        return f"RecurrentCache(seq_len={self._seq_len}, snapshots={self.held}, slack={self.slack})"


# --------------------------------------------------------------------------------------------
# config -> layer kinds -> caches

_QWEN_SLIDING = {"qwen2", "qwen3"}  # use_sliding_window + max_window_layers rule
_LLAMA4 = {"llama4", "llama4_text"}  # no_rope_layers + attention_chunk_size rule
# families whose config.json keys mean something else, so the generic rule would be wrong
_NOT_SUPPORTED_KEYS = ("use_sliding_window", "max_window_layers", "no_rope_layers", "kv_sharing_modes",
                       "num_kv_shared_layers", "per_layer_config")


def _text_config(config: Mapping) -> Mapping:
    """The decoder's text config; a nested one without model_type inherits "<outer>_text"."""
    tc = config.get("text_config")
    if not isinstance(tc, Mapping):
        return config
    if "model_type" not in tc and config.get("model_type"):
        tc = {**tc, "model_type": f"{config['model_type']}_text"}
    return tc


def has_linear_attention(config: Mapping) -> bool:
    """The config.json dict declares linear-attention (recurrent-state) layers: a stateful model,
    on which transformers refuses speculative decoding."""
    return LINEAR in (_text_config(config).get("layer_types") or ())


def cache_spec_of(config: Mapping) -> dict:
    """``{"layer_types", "sliding_window", "attention_chunk_size"}`` as transformers 5.24.0
    would see them after building the config class from this config.json dict (the keyword
    arguments of `build_caches`). See `layer_types_of` for the rule."""
    c = _text_config(config)
    mt = c.get("model_type")
    n = c.get("num_hidden_layers")
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"config: 'num_hidden_layers' must be a positive int, got {n!r}")
    sliding_window = c.get("sliding_window")
    chunk = c.get("attention_chunk_size")
    layer_types = c.get("layer_types")

    if mt in _QWEN_SLIDING:
        # Qwen2Config.__post_init__: sliding_window only when use_sliding_window (default False);
        # layers i >= max_window_layers (default 28) slide.
        sliding_window = c.get("sliding_window", 4096) if c.get("use_sliding_window", False) else None
        if layer_types is None:
            mwl = c.get("max_window_layers", 28)
            layer_types = ["sliding_attention" if sliding_window is not None and i >= mwl else "full_attention"
                           for i in range(n)]
    elif mt in _LLAMA4:
        # Llama4TextConfig.__post_init__: no_rope_layers default [int((i + 1) % interval != 0)];
        # RoPE layers (1) are chunked when attention_chunk_size (default 8192) is set.
        chunk = c.get("attention_chunk_size", 8192)
        if layer_types is None:
            interval = c.get("no_rope_layer_interval", 4)
            no_rope = c.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
            layer_types = ["chunked_attention" if r and chunk is not None else "full_attention" for r in no_rope]
    elif mt == "mistral":
        sliding_window = c.get("sliding_window", 4096)  # MistralConfig default
    elif layer_types is None:
        bad = [key for key in _NOT_SUPPORTED_KEYS if c.get(key) is not None]
        if bad:
            raise ValueError(
                f"config: model_type {mt!r} sets {bad}, whose meaning is family-specific; "
                "give 'layer_types' explicitly or add the family's rule to harness/engine/cache.py"
            )
    if layer_types is None:
        # cache_utils.get_layer_types_and_kwargs, per layer of a homogeneous config
        kind = ("sliding_attention" if sliding_window is not None
                else "chunked_attention" if chunk is not None else "full_attention")
        layer_types = [kind] * n
    return {"layer_types": list(layer_types), "sliding_window": sliding_window, "attention_chunk_size": chunk}


def layer_types_of(config: Mapping) -> list[str]:
    """Per-layer attention kinds (transformers names) of a config.json dict, as transformers
    5.24.0 decides them. The rule, in order (on ``text_config`` when there is one):

    1. ``layer_types`` when given (and not null).
    2. qwen2 / qwen3: layer i is ``sliding_attention`` iff ``use_sliding_window`` (default False)
       and ``sliding_window`` is set and ``i >= max_window_layers`` (default 28); else full
       (models/qwen2/configuration_qwen2.py:83-93).
    3. llama4 / llama4_text: layer i is ``chunked_attention`` iff ``no_rope_layers[i]`` (default
       ``(i + 1) % no_rope_layer_interval != 0``, interval 4) and ``attention_chunk_size``
       (default 8192) is not null (models/llama4/configuration_llama4.py:169-191). 5.13/5.14
       omit the ``attention_chunk_size is not None`` condition.
    4. Otherwise (Mistral: ``sliding_window`` default 4096, no layer_types): every layer is
       ``sliding_attention`` if ``sliding_window`` is set, else ``chunked_attention`` if
       ``attention_chunk_size`` is set, else ``full_attention``
       (cache_utils.py:1967-1977, ``get_layer_types_and_kwargs``).

    Configs of other families carrying family-specific keys (``use_sliding_window``,
    ``no_rope_layers``, KV sharing, ...) without ``layer_types`` raise ValueError.
    """
    return cache_spec_of(config)["layer_types"]


def build_caches(
    layer_types: Sequence[str],
    sliding_window: int | None,
    attention_chunk_size: int | None,
    static_max_len: int | None = None,
    slack: int = 0,
) -> list[LayerCache | RecurrentCache]:
    """One cache per layer, as transformers 5.24.0 ``DynamicCache(config=...)`` /
    ``StaticCache(config=..., max_cache_len=...)`` dispatch (cache_utils.py:1469-1500, 1959-2006):

        full_attention     -> FullCache             | StaticCache(max_len)
        sliding_attention  -> SlidingCache(window)  | StaticSlidingCache(max_len, window)
        chunked_attention  -> ChunkedCache(chunk)   | StaticChunkedCache(max_len, chunk)

    window = ``sliding_window``, chunk = ``attention_chunk_size`` (transformers passes the chunk
    size as the sliding layer's window). The static variants are used when ``static_max_len``
    is given. ``slack`` is the longest rewind the windowed caches must support (the largest
    draft length).

        linear_attention   -> RecurrentCache(slack)  (a fixed-size state: static or not alike)

    Other layer types ("moe"/"mlp" dummies, ...) raise.
    """
    caches: list[LayerCache | RecurrentCache] = []
    for i, lt in enumerate(layer_types):
        if lt == LINEAR:
            caches.append(RecurrentCache(slack))
            continue
        try:
            kind = normalize_kind(lt)
        except ValueError as e:
            raise ValueError(f"layer {i}: {e}") from None
        if kind == "full":
            caches.append(FullCache(slack) if static_max_len is None else StaticCache(static_max_len, slack))
        elif kind == "sliding":
            if sliding_window is None:
                raise ValueError(f"layer {i} is {lt!r} but sliding_window is None")
            caches.append(SlidingCache(sliding_window, slack) if static_max_len is None
                          else StaticSlidingCache(static_max_len, sliding_window, slack))
        else:
            if attention_chunk_size is None:
                raise ValueError(f"layer {i} is {lt!r} but attention_chunk_size is None")
            caches.append(ChunkedCache(attention_chunk_size, slack) if static_max_len is None
                          else StaticChunkedCache(static_max_len, attention_chunk_size, slack))
    return caches
