"""The installed transformers' KV caches and attention calls, as plain data.

Everything version-specific is probed with inspect / hasattr, never with version numbers:
- `cache_keyword` / `forward`: one forward pass through an explicit cache, whatever the installed
  version calls the keyword (``cache=`` in 5.24, ``past_key_values=`` before);
- `new_caches`: DynamicCache(config=) and StaticCache(config=, max_cache_len=), or the error;
- per-layer introspection: classes, `get_seq_length()`, slots held, windows, bytes;
- `prefill_and_decode`, `fresh_run` and `crop_run`: the runs the caches suite observes;
- `record_sdpa`: every torch SDPA call's arguments, for the mask the attention integration passes.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

import torch

from harness.subjects import observe


def cache_keyword(model) -> str:
    """The keyword the installed forward() takes the cache by."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def forward(model, ids: torch.Tensor, cache) -> torch.Tensor:
    """Logits [T, V] of one forward pass that appends `ids` to `cache`."""
    with torch.no_grad():
        out = model(ids, use_cache=True, **{cache_keyword(model): cache})
    return out.logits[0].float()


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    """Logits [T, V] of the whole sequence, no cache."""
    with torch.no_grad():
        return model(ids, use_cache=False).logits[0].float()


# A real vocabulary (32k-256k) makes [T, V] logits tens of MB of JSON and ~1 GB of Python floats:
# above VOCAB_LIMIT a field keeps the top TOP_K of the vocabulary (the fixture zoo's 512 stay whole).
VOCAB_LIMIT = 4096
TOP_K = 256


def top_values(rows: torch.Tensor) -> list[list[float]]:
    """[T, V] -> the rows as a golden record keeps them: whole up to VOCAB_LIMIT, else each row's
    TOP_K largest values in descending order (sorting is 1-Lipschitz in the max norm, so drift
    stays drift and a tie's reordering is no change; which ids they are shows in the tokens)."""
    rows = torch.as_tensor(rows, dtype=torch.float32)
    if rows.shape[-1] <= VOCAB_LIMIT:
        return rows.tolist()
    return torch.topk(rows, TOP_K, dim=-1).values.tolist()


def narrowed(observed: torch.Tensor, expected: torch.Tensor) -> tuple[list, list]:
    """Two [T, V] logit tensors compared in one run, as lists: whole up to VOCAB_LIMIT, else both
    gathered at the same TOP_K vocabulary columns (the expected side's highest logits, over all
    rows), so the comparison stays aligned and tractable."""
    observed, expected = observed.float(), expected.float()
    if expected.shape[-1] <= VOCAB_LIMIT:
        return observed.tolist(), expected.tolist()
    columns = torch.topk(expected.reshape(-1, expected.shape[-1]).amax(0), TOP_K).indices
    return observed[..., columns].tolist(), expected[..., columns].tolist()


def new_caches(model, max_cache_len: int) -> tuple[Any, dict | None, Any, dict | None]:
    """(DynamicCache, its error, StaticCache, its error) built from the model's config."""
    from transformers import DynamicCache, StaticCache

    dynamic, dyn_err = observe(lambda: DynamicCache(config=model.config))
    static, st_err = observe(lambda: StaticCache(config=model.config, max_cache_len=max_cache_len))
    return dynamic, dyn_err, static, st_err


# the preallocated, fixed-shape caches of 4.x that do not say "Static" in their name (5.x folds them into StaticCache)
STATIC_CLASSES = ("HybridCache", "HybridChunkedCache", "SlidingWindowCache", "OffloadedHybridCache")


def cache_family(name: str | None) -> str | None:
    """The family of a cache class by its name: "static" (preallocated, fixed shape: StaticCache,
    OffloadedStaticCache, 4.x's HybridCache / SlidingWindowCache...), "dynamic" (DynamicCache and its
    kin), else the name itself; None for no cache returned. A class renamed within its family (4.57's
    HybridCache, 5.x's StaticCache) is no change."""
    if not name:
        return None
    if "Static" in name or name in STATIC_CLASSES:
        return "static"
    return "dynamic" if name.startswith("Dynamic") else name


def dynamic_layer_classes(model) -> list[str]:
    """Layer classes of a DynamicCache for the model ([] when it cannot be built)."""
    cache, _ = observe(lambda: new_caches(model, 1)[0])
    return layer_classes(cache) if cache is not None else []


def layer_classes(cache) -> list[str]:
    return [type(layer).__name__ for layer in cache.layers]


def held(layer) -> int:
    """Key slots the layer physically holds (a static layer: its whole buffer)."""
    keys = getattr(layer, "keys", None)
    return int(keys.shape[-2]) if isinstance(keys, torch.Tensor) and keys.dim() >= 2 else 0


def seq_length(layer) -> int | None:
    """get_seq_length(); None for a layer with no sequence dimension (a linear-attention layer
    keeps a fixed-size recurrent state and has no get_seq_length)."""
    get = getattr(layer, "get_seq_length", None)
    return int(get()) if get is not None else None


def window(layer) -> int | None:
    w = getattr(layer, "sliding_window", None)
    return int(w) if w is not None else None


def capacity(layer) -> int | None:
    """Slots a static layer preallocates (5.24 stores min(max_cache_len, window) for sliding layers)."""
    n = getattr(layer, "max_cache_len", None)
    return int(n) if n is not None else None


def _named_states(layer) -> dict[str, list[torch.Tensor]]:
    """A linear-attention layer's conv and recurrent states by name (a tensor each before 5.24; a
    dict of them per state index since); {} for an attention layer."""
    out: dict[str, list[torch.Tensor]] = {}
    for name in ("conv_states", "recurrent_states"):
        if hasattr(layer, name):
            value = getattr(layer, name)
            out[name] = [t for t in (value.values() if isinstance(value, dict) else [value])
                         if isinstance(t, torch.Tensor)]
    return out


def _kv(layer) -> list[torch.Tensor]:
    """What the layer holds: keys and values, and a linear-attention layer's states."""
    kv = [getattr(layer, "keys", None), getattr(layer, "values", None)]
    return [t for t in kv if isinstance(t, torch.Tensor)] + [t for ts in _named_states(layer).values() for t in ts]


def state_shapes(cache) -> list[dict[str, list[list[int]]] | None]:
    """Per layer: the shapes of a linear-attention layer's conv / recurrent states (None for an
    attention layer)."""
    return [{name: [list(t.shape) for t in ts] for name, ts in states.items()} or None
            for states in map(_named_states, cache.layers)]


def per_class(cache, size) -> dict[str, int]:
    out: dict[str, int] = {}
    for layer in cache.layers:
        out[type(layer).__name__] = out.get(type(layer).__name__, 0) + sum(size(t) for t in _kv(layer))
    return dict(sorted(out.items()))


def elements_by_class(cache) -> dict[str, int]:
    """Key+value elements held per layer class (what the layout holds, whatever the dtype)."""
    return per_class(cache, torch.Tensor.numel)


def bytes_by_class(cache) -> dict[str, int]:
    """Key+value bytes held per layer class (elements x the run's element size)."""
    return per_class(cache, lambda t: t.nbytes)


def lengths(cache) -> dict[str, list[int]]:
    return {"seq_len": [seq_length(x) for x in cache.layers], "held": [held(x) for x in cache.layers]}


def prefill_and_decode(model, ids: torch.Tensor, cache, steps: int) -> tuple[list[torch.Tensor], dict[str, list[int]]]:
    """Prefill + `steps` greedy decode steps; the last logits of each step, and the per-layer
    lengths right after the prefill."""
    out = forward(model, ids, cache)
    after_prefill = lengths(cache)
    outs = [out[-1]]
    for _ in range(steps):
        nxt = outs[-1].argmax().view(1, 1)
        outs.append(forward(model, nxt, cache)[-1])
    return outs, after_prefill


def layer_states(cache) -> list[dict[str, torch.Tensor]]:
    """Per layer, a copy of a linear-attention layer's (first) state tensors by name ({} for attention)."""
    return [{name: ts[0].detach().clone() for name, ts in _named_states(layer).items() if ts} for layer in cache.layers]


def restored_states(after_crop: list[dict[str, torch.Tensor]], before_draft: list[dict[str, torch.Tensor]]
                    ) -> dict[str, bool]:
    """{"layer <i> <state>": restored} for every linear-attention layer's states: whether the state
    after the crop equals (same shape, within 1e-6) the one a fresh run had before the draft."""
    out: dict[str, bool] = {}
    for i, (got, want) in enumerate(zip(after_crop, before_draft, strict=True)):
        for name, w in want.items():
            out[f"layer {i} {name}"] = name in got and got[name].shape == w.shape and bool(
                torch.allclose(got[name].float(), w.float(), rtol=1e-6, atol=1e-6))
    return out


def fresh_run(model, ids: torch.Tensor, draft_len: int, follow: int
              ) -> tuple[torch.Tensor, list[int], list[int], list[dict[str, torch.Tensor]]]:
    """(fresh logits, fed tokens, a wrong draft, linear-attention states after the prompt). Fresh:
    prompt, then the correct token and `follow` greedy steps, one forward each. The draft: the
    `draft_len` lowest-scored tokens after the prompt (never the correct one)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    last = forward(model, ids, cache)[-1]
    before_draft = layer_states(cache)
    feed = [int(last.argmax())]
    fresh = []
    for _ in range(follow + 1):
        fresh.append(forward(model, ids.new_tensor([[feed[-1]]]), cache)[-1])
        feed.append(int(fresh[-1].argmax()))
    draft = [t for t in torch.argsort(last).tolist() if t != feed[0]][:draft_len]
    return torch.stack(fresh), feed[: follow + 1], draft, before_draft


def recording_call(model, draft_len: int) -> dict[str, dict[str, int]]:
    """How this version's own speculative decoding switches on past recording, per layer class that
    takes arguments for it: 5.25's linear-attention layers keep `recurrent_states_to_keep` recurrent
    states (its candidate generators pass the number of drafted tokens); {} where every layer takes
    none (5.24: windowed layers record with no argument)."""
    import inspect

    from transformers import DynamicCache

    out: dict[str, dict[str, int]] = {}
    for layer in DynamicCache(config=model.config).layers:
        method = getattr(layer, "activate_past_recording", None)
        if method is not None and "recurrent_states_to_keep" in inspect.signature(method).parameters:
            out[type(layer).__name__] = {"recurrent_states_to_keep": draft_len}
    return out


def crop_run(model, ids: torch.Tensor, draft: list[int], feed: list[int], call: dict[str, dict[str, int]] | None = None
             ) -> tuple[torch.Tensor, dict, list[dict[str, torch.Tensor]]]:
    """(logits, lengths after crop, linear-attention states after crop): prompt, the wrong draft in
    one forward, crop it, then `feed` one token per forward - the logits a rollback must make equal
    to `fresh_run`'s. `call`: the arguments of each layer class's activate_past_recording
    (`recording_call`; none: the call of the releases before 5.25)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    for layer in cache.layers:
        if hasattr(layer, "activate_past_recording"):  # 5.24: windowed layers record to be croppable
            layer.activate_past_recording(**(call or {}).get(type(layer).__name__, {}))
    forward(model, ids, cache)
    forward(model, ids.new_tensor([draft]), cache)
    cache.crop(-len(draft))
    state = {"seq_len_after_crop": [seq_length(x) for x in cache.layers],
             "held_after_crop": [held(x) for x in cache.layers]}
    after_crop = layer_states(cache)
    return torch.stack([forward(model, ids.new_tensor([[t]]), cache)[-1] for t in feed]), state, after_crop


@contextlib.contextmanager
def record_sdpa(sink: list[dict]) -> Iterator[list[dict]]:
    """Wrap torch.nn.functional.scaled_dot_product_attention; append each call's arguments."""
    functional = torch.nn.functional
    original = functional.scaled_dot_product_attention

    def wrapper(*args, **kwargs):
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")
        bound = dict(zip(names, args, strict=False)) | kwargs
        sink.append({"q": bound["query"].shape, "k": bound["key"].shape, "attn_mask": bound.get("attn_mask"),
                     "is_causal": bool(bound.get("is_causal", False)), "enable_gqa": bound.get("enable_gqa")})
        return original(*args, **kwargs)

    functional.scaled_dot_product_attention = wrapper
    try:
        yield sink
    finally:
        functional.scaled_dot_product_attention = original


def prefill_sdpa_calls(model, ids: torch.Tensor, cache_kind: str, max_cache_len: int) -> tuple[list[dict], dict | None]:
    """The SDPA calls of one prefill through a fresh Dynamic or Static cache, and the error."""
    from transformers import DynamicCache, StaticCache

    def make():
        if cache_kind == "static":
            return StaticCache(config=model.config, max_cache_len=max_cache_len)
        return DynamicCache(config=model.config)

    calls: list[dict] = []
    with record_sdpa(calls):
        _, err = observe(lambda: forward(model, ids, make()))
    return calls, err


def attn_implementation(model) -> str | None:
    return getattr(model.config, "_attn_implementation", None)
