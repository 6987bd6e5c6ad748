"""Noise-aware timing: a subject's samples interleaved with an in-run calibration workload.

A latency field (kind ``latency``, compared by `compare_stats.compare_latency`) holds
``{"samples": [s, ...], "calibration": [s, ...]}``: the subject's wall times and, taken in the
same process and interleaved with them one for one, the times of a fixed reference workload (the
reference engine's forward on the same model: torch only, so it does not change when transformers
does). The comparer divides the samples by median(calibration), so a machine that is slower as a
whole (another job on the other core, a lower clock) moves both and cancels; what is left is the
subject's cost in units of the calibration workload.

The timer is the process's CPU time (`time.process_time`, see `timer`). Each sample is the best of `inner` back-to-back calls
(the minimum is the least-disturbed estimate of a short call's cost; a descheduling spike hits
one call, not all of them).

Also here: Leviathan et al.'s theoretical speculative speedup and the CPU resident-set size.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.settings.config import deep_mode

# CPU time of this process (what pytest-benchmark times with under
# `--benchmark-timer time.process_time`): on a shared machine wall time also measures how long the
# scheduler kept the process off a core - a 10 ms decode loop is descheduled far more often than a
# 1 ms calibration call, so wall-time ratios drift by 50 % with the machine's load. The suites run
# torch on one intra-op thread, so the process's CPU time is the work done.
timer = time.process_time

DEEP_ENV = "HARNESS_LATENCY_DEEP"  # "1": the longer, more precise mode (more samples)


def deep() -> bool:
    """The opt-in precise mode (env HARNESS_LATENCY_DEEP=1, or HARNESS_DEEP=1 / --harness-deep for
    every deep mode): 3x the samples of a default run."""
    return os.environ.get(DEEP_ENV, "") not in ("", "0") or deep_mode()


def scaled(n: int) -> int:
    """`n` samples in a default run, 3n in deep mode."""
    return 3 * n if deep() else n


@dataclass
class Timing:
    """One latency field's value: the subject's samples and the interleaved calibration (seconds)."""

    samples: list[float] = field(default_factory=list)
    calibration: list[float] = field(default_factory=list)

    def value(self) -> dict[str, Any]:
        return {"samples": self.samples, "calibration": self.calibration}

    def ratio(self) -> float:
        """median(samples) / median(calibration): the subject's cost in calibration units."""
        return median(self.samples) / median(self.calibration)


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if not n:
        raise ValueError("median of no samples")
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def best_of(fn: Callable[[], Any], inner: int, setup: Callable[[], Any] | None = None) -> float:
    """The least time of `inner` calls of fn(arg) (arg = setup(), untimed, per call)."""
    best = float("inf")
    for _ in range(inner):
        arg = setup() if setup is not None else None
        start = timer()
        fn(arg) if setup is not None else fn()
        best = min(best, timer() - start)
    return best


def interleaved(subject: Callable[..., Any], calibration: Callable[[], Any], n: int, *, inner: int = 1,
                cal_inner: int = 1, warmup: int = 2, setup: Callable[[], Any] | None = None) -> Timing:
    """`n` samples of `subject` (each the best of `inner` calls; with `setup`, subject(setup())
    and setup untimed) alternating with `n` of `calibration` (best of `cal_inner`), after `warmup`
    untimed rounds of both. The garbage collector is off while timing (as pytest-benchmark does
    by default: a collection would land on whichever call triggers it)."""
    for _ in range(warmup):
        calibration()
        subject(setup()) if setup is not None else subject()
    out = Timing()
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for i in range(n):
            # alternate which goes first, so neither always runs right after the other
            if i % 2:
                out.samples.append(best_of(subject, inner, setup))
                out.calibration.append(best_of(calibration, cal_inner))
            else:
                out.calibration.append(best_of(calibration, cal_inner))
                out.samples.append(best_of(subject, inner, setup))
    finally:
        if enabled:
            gc.enable()
    return out


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
