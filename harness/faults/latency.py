"""Catalogue faults of latency and memory (suites/test_latency.py).

Each `Fault` row names what it breaks, the `Catch` that must report it and the upstream bug it
is modelled on; harness/faults/catalogue.py joins every family's `FAULTS`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.faults.patches import Catch, ExtraAllocation, Fault, SlowForward, Wrap
from harness.faults.targets import GEN


def _recompile_every_compiled_call(generate: Callable[..., Any]) -> Callable[..., Any]:
    """generate() with a compile_config empties dynamo's caches first: every call compiles again."""
    import functools

    @functools.wraps(generate)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("compile_config") is not None:
            import torch

            torch._dynamo.reset()
        return generate(self, *args, **kwargs)
    return wrapped


FAULTS: tuple[Fault, ...] = (
    # latency -------------------------------------------------------------------------------------
    Fault("slower-forward-15", "latency",
          "every forward of a generating model is 15 % slower, computing (CPU busy wait after it returns)",
          Catch("latency", "llama-target.*", "*"),
          (SlowForward(0.15),),
          notes="a release that computes more per forward (an extra copy, a slower kernel choice); "
                "benchmarks/latency_power.py measures its detection in full runs"),
    Fault("waiting-forward-15", "latency",
          "every forward of a generating model takes 15 % longer, waiting (a sleep after it returns: a "
          "synchronisation, a lock, I/O) - the CPU time does not grow",
          Catch("latency", "llama-target.*", "*"),
          (SlowForward(0.15, waits=True),),
          notes="modelled on host-device synchronisations in the generation loop (transformers #43089: 3.25 GPU "
                "syncs per generated token); a wait is invisible to a CPU-time clock"),
    Fault("forward-allocates-30pct-more", "latency",
          "every forward of a generating model keeps, until it returns, a buffer of 30 % of each op's output "
          "(a debugging copy or an upcast left in): on these tiny models peak memory grows several-fold",
          Catch("latency", "llama-target.*", "memory_*"),
          (ExtraAllocation(0.30),),
          notes="modelled on transformers #34796 (4.45.0 copied the entire logits at generate()'s first step "
                "instead of the last position's) and PR #33902 (logits.float() doubling peak inference memory); "
                "deterministic: one call shows it"),
    # the compiled path's latency ------------------------------------------------------------------
    Fault("compiled-call-recompiles", "latency",
          "every compiled generate() call recompiles its decode step (dynamo's caches emptied at each call): "
          "the tokens are right, the steady state never comes",
          Catch("latency", "llama-target.serving", "generate_compiled"),
          (Wrap(GEN, "GenerationMixin.generate", _recompile_every_compiled_call),),
          notes="modelled on transformers #37908 (DynamicCache recompile storms under torch.compile) and #46424 "
                "(max_cache_len ignored, the static cache reallocated and recompiled per call: 27 s vs 2.7 s)"),
)
