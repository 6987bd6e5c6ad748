"""Clocks and costs the timed subjects use: the timer, a CPU spin that stands in for a slower
forward, the process's resident memory, and Leviathan et al.'s theoretical speculative speedup.
"""

from __future__ import annotations

import os
import time

# CPU time of this process (what pytest-benchmark times with under
# `--benchmark-timer time.process_time`): on a shared machine wall time also measures how long the
# scheduler kept the process off a core - a 10 ms decode loop is descheduled far more often than a
# 1 ms calibration call, so wall-time ratios drift by 50 % with the machine's load. The suites run
# torch on one intra-op thread, so the process's CPU time is the work done.
timer = time.process_time


def busy_wait(seconds: float) -> None:
    """Spend `seconds` of CPU time (the harness's timer) spinning: a slowdown, not a sleep."""
    until = timer() + seconds
    while timer() < until:
        pass


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
