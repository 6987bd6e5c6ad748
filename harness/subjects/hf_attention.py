"""The attention function a loaded model dispatches to, captured during a forward and replayed
(suites/test_backends.py `attention_as_defined`).

While ``attention_calls(model, ids)`` runs one uncached forward, every call of the attention
interface the model's attention layers make is recorded - the modeling module's own
``eager_attention_forward`` (what attn_implementation="eager" runs) and every function the
``AttentionInterface`` maps an implementation to ("sdpa", ...) - with the function object that ran,
the layer's module, its q, k, v (after RoPE: what the function received) and the keywords the layer
passed (scaling, softcap, sliding_window, dropout, ...). Found by name, restored on exit; a hook that
finds nothing says so in `hooked` / `missing`.

`replay(call, q, k, v)` calls that same function again with the layer's own keywords on inputs the
caller chooses (no mask, dropout 0): the code that ran, on inputs where its definition is decisive.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Call:
    """One call of an attention function: the function object, the layer's module, q (B, H, T, D),
    k / v (B, Hkv, S, D) as it received them, and the rest of its arguments (the mask is not kept)."""

    fn: Callable[..., Any]
    module: Any
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    rest: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Calls:
    calls: list[Call] = field(default_factory=list)
    hooked: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


@contextlib.contextmanager
def recording(model: Any) -> Iterator[Calls]:
    """Record the attention-function calls made inside (see the module docstring)."""
    from transformers import modeling_utils

    out = Calls()

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(module, query, key, value, attention_mask=None, *rest, **kwargs):
            out.calls.append(Call(original, module, *(t.detach().clone() for t in (query, key, value)),
                                  tuple(rest), dict(kwargs)))
            return original(module, query, key, value, attention_mask, *rest, **kwargs)
        return recorded

    undo: list[Callable[[], None]] = []
    modeling = sys.modules.get(type(model).__module__)
    own = getattr(modeling, "eager_attention_forward", None)
    if callable(own):
        modeling.eager_attention_forward = wrap(own)
        undo.append(lambda: setattr(modeling, "eager_attention_forward", own))
        out.hooked.append(f"{modeling.__name__}.eager_attention_forward")
    else:
        out.missing.append(f"{type(model).__module__}.eager_attention_forward: not defined there")
    interface = getattr(modeling_utils, "AttentionInterface", None)
    mapping = getattr(interface, "_global_mapping", None)
    if isinstance(mapping, dict):
        saved = dict(mapping)
        mapping.update({name: wrap(fn) for name, fn in saved.items() if callable(fn)})
        undo.append(lambda: (mapping.clear(), mapping.update(saved)))
        out.hooked.append(f"AttentionInterface[{', '.join(sorted(saved))}]")
    else:
        out.missing.append("transformers.modeling_utils.AttentionInterface._global_mapping: not found")
    try:
        yield out
    finally:
        for step in reversed(undo):
            step()


def attention_calls(model: Any, ids: torch.Tensor) -> Calls:
    """The attention-function calls of one uncached forward of `ids`, in layer order."""
    with recording(model) as rec, torch.no_grad():
        model(ids, use_cache=False)
    return rec


def replay(call: Call, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The recorded function on (q, k, v) with the layer's own keywords, no mask, no dropout; its
    output (B, L, H, D) as the function returns it (before the layer's o_proj)."""
    kwargs = dict(call.kwargs)
    if "dropout" in kwargs:
        kwargs["dropout"] = 0.0
    with torch.no_grad():
        out = call.fn(call.module, q, k, v, None, *call.rest, **kwargs)
    return out[0] if isinstance(out, tuple) else out
