"""Clocks and costs the timed subjects use.

- `wall()`: what a caller waits for - `time.perf_counter`, after the device's queued work is done
  (`torch.cuda.synchronize` on a GPU, `torch.mps.synchronize` on Apple silicon); the judged clock;
- `cpu()`: this process's CPU time, recorded beside the wall time as a diagnostic (wall grew but
  CPU did not: the process waits - a sleep, a lock, I/O, fewer threads);
- `busy_wait` / `sleep_for`: a slowdown that computes and one that only waits (the latency faults);
- `peak_memory(fn)`: bytes torch allocated during a call - the peak of live allocations and the
  total - from the profiler's allocation events (deterministic for one torch build, unlike RSS);
  on a GPU the CUDA allocator's max allocated;
- `rss_bytes`; Leviathan et al.'s theoretical speculative speedup.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

cpu = time.process_time


def synchronize(device: str = "cpu") -> None:
    """Wait for the device's queued work (no-op on the CPU)."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    elif device == "mps":
        import torch

        torch.mps.synchronize()


def wall(device: str = "cpu") -> float:
    """Seconds on the wall clock once the device's queued work is done."""
    synchronize(device)
    return time.perf_counter()


timer = cpu  # the clock `busy_wait` spins on


def busy_wait(seconds: float) -> None:
    """Spend `seconds` of CPU time spinning: a slowdown that computes."""
    until = timer() + seconds
    while timer() < until:
        pass


def sleep_for(seconds: float, overshoot: float = 0.0) -> None:
    """Wait `seconds` without computing (a slowdown that waits: a synchronisation, a lock, I/O).
    time.sleep wakes late (timer slack and wake-up: ~70 us on Linux by default, as long as a whole
    0.15 x 0.5 ms wait); `overshoot` (from `sleep_overshoot`) is asked for that much less, so the
    wait lasts `seconds` on average, never computing."""
    until = time.perf_counter() + seconds - overshoot
    while (left := until - time.perf_counter()) > 0:
        time.sleep(left)


def sleep_overshoot(trials: int = 31, seconds: float = 1e-4) -> float:
    """The median extra wall time of time.sleep(`seconds`) on this machine, now."""
    late = []
    for _ in range(trials):
        start = time.perf_counter()
        time.sleep(seconds)
        late.append(time.perf_counter() - start - seconds)
    return sorted(late)[trials // 2]


def peak_memory(fn: Callable[[], Any], device: str = "cpu") -> dict[str, int]:
    """{"peak_bytes": the largest total of live torch allocations during `fn()`, "allocated_bytes":
    everything it allocated}. CPU: from the profiler's allocation events, in order; CUDA: the
    allocator's max allocated over the call (and the bytes allocated, from its stats)."""
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        before = torch.cuda.memory_stats().get("allocated_bytes.all.allocated", 0)
        fn()
        torch.cuda.synchronize()
        return {"peak_bytes": int(torch.cuda.max_memory_allocated() - base),
                "allocated_bytes": int(torch.cuda.memory_stats().get("allocated_bytes.all.allocated", 0) - before)}
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    live = peak = total = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
        total += max(nbytes, 0)
    return {"peak_bytes": peak, "allocated_bytes": total}


def theoretical_speedup(a: float, g: float, c: float) -> float:
    """Leviathan et al. (2023), eq. 1 and thm. 3.8: with per-token acceptance rate `a`, draft
    length `g` and cost ratio c = t(draft step) / t(target step),
    E[tokens per target step] = (1 - a^(g+1)) / (1 - a), speedup = E / (g*c + 1)."""
    expected = (1 - a ** (g + 1)) / (1 - a) if a < 1 else g + 1
    return expected / (g * c + 1)


def rss_bytes() -> int:
    """This process's resident set size now (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def load_per_core() -> float:
    """The 1-minute load average per core (0 where unavailable): how busy the machine was."""
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (OSError, AttributeError):
        return 0.0
