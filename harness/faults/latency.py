"""Catalogue faults of latency and memory (suites/test_latency.py).

Each `Fault` row names what it breaks, the `Catch` that must report it and the upstream bug it
is modelled on; harness/faults/catalogue.py joins every family's `FAULTS`."""

from __future__ import annotations

from harness.faults.patches import Catch, ExtraAllocation, Fault, SlowForward

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
)
