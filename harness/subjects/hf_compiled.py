"""The installed transformers' compiled static-cache decoding as a subject: `model.generate(...,
cache_implementation="static", compile_config=CompileConfig(...))`, the path generate() takes when it
auto-compiles the model's forward for the decode steps (on CUDA / XPU by default; on the CPU only with
the config's `_compile_all_devices`, a class attribute every version from 4.57 reads).

- `compile_config(backend)` -> (the CompileConfig, the knobs as data): the backend is torch's own
  (`aot_eager`: dynamo's graph capture and AOTAutograd's functionalization, no code generation -
  seconds on a CPU; `inductor`: the generated C++ kernels - tens of seconds), by name, so that a
  failure to compile the library's forward is the library's (no harness frame below the call);
- `run(model, ids, new_tokens, config)` -> `Compiled`: the call's new tokens, the top-2 margins and
  scales of its own scores, its exception as data, how many graphs dynamo compiled during it
  (`graphs_compiled`: its `unique_graphs` counter), how many of those were recompiles of code it
  had compiled already (`recompiles_so_far`: its `guard_failures`), and how many of the model's
  forwards ran eager (`EagerForwards`).

A compiled forward is state the library keeps on the model (`_compiled_call`, `_last_compile_config`:
harness/subjects/hf_state.py restores the model before the next test) and torch keeps in dynamo's
caches: `reset()` clears those before a case and after it, so a case's compile counts are its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.engine.decode import top2_margin, top2_scale
from harness.subjects import error_of, is_subject_error

BACKENDS = ("aot_eager", "inductor")


@dataclass
class Compiled:
    tokens: list[int] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)
    compiles: int = 0  # graphs torch compiled during the call
    recompiles: int | None = None  # guards of cached graphs that failed during the call (0: no recompile); None: not counted
    eager_forwards: int = 0  # the model's forwards that ran eager (Python executed), of `forwards` in all
    forwards: int = 0
    seconds: float = 0.0  # the call's wall time (a first call's includes compiling)
    error: dict[str, str] | None = None


def compile_config(backend: str) -> tuple[Any, dict[str, Any]]:
    """A CompileConfig for torch's `backend` that compiles on every device, and its knobs as data."""
    from transformers import CompileConfig

    config = CompileConfig(backend=backend, mode=None, fullgraph=False, dynamic=False)
    config._compile_all_devices = True  # a class attribute, not an argument, in 4.57 - 5.24
    knobs = {"backend": backend, "mode": None, "fullgraph": False, "dynamic": False, "_compile_all_devices": True,
             "cache_implementation": "static"}
    return config, knobs


def graphs_compiled() -> int:
    """How many graphs dynamo has compiled in this process (its `unique_graphs` counter): one per
    compile or recompile, whichever backend it hands them to."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def recompiles_so_far() -> int | None:
    """How many cached graphs' guards have failed in this process (dynamo's `guard_failures`: each
    recompile adds the failed guard of every graph it checked first), so 0 while every call reuses a
    graph and at least one per recompile of code compiled already - never for the first compile of
    it. None where this torch keeps no such table."""
    try:
        from torch._dynamo.utils import guard_failures
    except ImportError:
        return None
    return sum(len(reasons) for reasons in guard_failures.values())


class EagerForwards:
    """Counts the model's forwards, and those that ran eager, during a call: a forward pre-hook whose
    count is behind `torch.compiler.is_compiling()` - dynamo traces the hook with it True, so the
    compiled graph holds no increment and a compiled step never counts as eager; the hook's Python
    runs (and counts) only where the forward runs as Python. `forwards` is the total, taken from the
    call's scores (one forward a new token; the prefill's is the first)."""

    def __init__(self, model: Any) -> None:
        self.model, self.count, self.handle = model, 0, None

    def _hook(self, module: Any, args: Any) -> None:
        if not torch.compiler.is_compiling():
            self.count += 1

    def __enter__(self) -> EagerForwards:
        self.handle = self.model.register_forward_pre_hook(self._hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.handle is not None:
            self.handle.remove()


def reset() -> None:
    """Dynamo's caches emptied: the next compiled call compiles afresh."""
    torch._dynamo.reset()


def run(model: Any, input_ids: torch.Tensor, max_new_tokens: int, config: Any | None) -> Compiled:
    """One greedy static-cache generate() call, compiled per `config` (None: the same call eager)."""
    out = Compiled()
    kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=False, cache_implementation="static",
                                  return_dict_in_generate=True, output_scores=True,
                                  pad_token_id=model.config.pad_token_id)
    if config is not None:
        kwargs["compile_config"] = config
    before, recompiled = graphs_compiled(), recompiles_so_far()
    start = time.perf_counter()
    try:
        with torch.no_grad(), EagerForwards(model) as eager:
            result = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
    except Exception as exc:
        if not is_subject_error(exc):
            raise
        out.error = error_of(exc)
        out.compiles = graphs_compiled() - before
        return out
    out.seconds = time.perf_counter() - start
    out.compiles = graphs_compiled() - before
    now = recompiles_so_far()
    out.recompiles = None if now is None or recompiled is None else now - recompiled
    out.eager_forwards, out.forwards = eager.count, len(result.scores)
    out.tokens = result.sequences[0, input_ids.shape[1]:].tolist()
    out.margins = [top2_margin(s[0]) for s in result.scores]
    out.scales = [top2_scale(s[0]) for s in result.scores]
    return out
