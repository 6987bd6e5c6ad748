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

The latency suite's fields (suites/test_latency.py; the table is harness/cases.py `latency`), each kind
`latency`, compared on the same hardware class only, a slowdown beyond `latency_tolerance` at the
run's per-test alpha (harness/checking/compare_stats.py):

  <model>.prefill   prefill_{short,long}_{dynamic,static}: one forward over the prompt into a fresh
                    cache (extras: rss_delta_bytes of prefill + 16 decode steps per cache)
  <model>.decode    decode_{dynamic,static}: per-token time of steady-state greedy decode (after 4
                    warm-up steps; each sample = 8 steps / 8)
  <model>.generate  generate_<path>: one greedy generate() call per path of the case (llama-target:
                    plain, assisted, prompt_lookup, ensemble w=0.3, 24 tokens; glm4moe-mtp: plain, mtp,
                    8 tokens; a user model: its paths but MTP, 24 tokens, 6 samples). Extras per
                    speculative path: acceptance (per token), tokens_per_forward, draft_tokens,
                    cost_ratio, speedup (median plain / median path, this run) and
                    theoretical_speedup (Leviathan et al.)
A deep run takes DEEP_FACTOR x the samples.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness.schema import Case, Observation
from harness.settings.run import RunSettings
from harness.subjects import hf, hf_latency
from harness.subjects.timing import timer

DEEP_FACTOR = 3  # a deep run takes this many times the samples


def scaled(n: int, deep: bool = False) -> int:
    """`n` samples in a default run, DEEP_FACTOR x n in a deep one."""
    return DEEP_FACTOR * n if deep else n


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


# ----------------------------------------------------------------------------------------------
# the suite's observations


def _timed(obs: Observation, name: str, timing: Timing, **extras: Any) -> None:
    obs.add(name, timing.value(), kind="latency", ratio_to_calibration=timing.ratio(), **extras)


def prefill(zoo: Any, case: Case, run: RunSettings) -> Observation:
    obs = Observation()
    model = zoo.load(case.model).model
    cal = hf_latency.calibration(zoo)
    for prompt in ("short", "long"):
        ids = zoo.prompt_ids(case.model, f"{prompt}-0")
        for kind in ("dynamic", "static"):
            timing = interleaved(hf_latency.prefill(model, ids, kind), cal, scaled(25, run.deep), inner=3, cal_inner=3)
            extras = {"rss_delta_bytes": hf_latency.rss_delta(model, ids, kind)} if prompt == "long" else {}
            _timed(obs, f"prefill_{prompt}_{kind}", timing, tokens=int(ids.shape[1]), **extras)
    return obs


def decode(zoo: Any, case: Case, run: RunSettings) -> Observation:
    obs = Observation()
    model = zoo.load(case.model).model
    cal = hf_latency.calibration(zoo)
    ids = zoo.prompt_ids(case.model, "short-0")
    for kind in ("dynamic", "static"):
        timing = interleaved(hf_latency.decode_steps(model), cal, scaled(20, run.deep), inner=2,
                             cal_inner=3, setup=hf_latency.decode_setup(model, ids, kind))
        timing.samples = [s / hf_latency.DECODE_STEPS for s in timing.samples]
        _timed(obs, f"decode_{kind}", timing, steps_per_sample=hf_latency.DECODE_STEPS)
    return obs


def generate(zoo: Any, case: Case, run: RunSettings) -> Observation:
    obs = Observation()
    cal = hf_latency.calibration(zoo)
    ids = zoo.prompt_ids(case.model, "short-0")
    n = scaled(15 if case.model == "llama-target" else 6, run.deep)
    plain: Timing | None = None
    for path in case.param("paths"):
        feature = hf.PATH_FEATURE.get(path)
        if feature is not None:
            supported = hf.capabilities()[feature]
            obs.add(f"supports_{feature}", supported, kind="capability")
            if not supported:
                obs.skipped(f"generate_{path}", "latency", f"transformers {hf.version()} does not support {feature}")
                continue
        call = hf_latency.generate_path(zoo, case.model, path, ids, case.new_tokens, case.draft_tokens,
                                        weight=case.param("weight") if path == "ensemble" else None,
                                        assistant=case.assistant if path in ("assisted", "ensemble") else None)
        got = call()
        if got.error is not None:
            obs.add(f"generate_{path}_error", got.error)
            continue
        timing = interleaved(call, cal, n, cal_inner=5, warmup=1)
        extras: dict[str, Any] = {"new_tokens": len(got.tokens), "target_forwards": got.target_forwards}
        if path == "plain":
            plain = timing
        elif plain is not None:
            c = hf_latency.cost_ratio(zoo, case.model, path, case.assistant)
            extras.update(hf_latency.speculative_stats(got, case.draft_tokens, c, median(plain.samples),
                                                       median(timing.samples)))
        _timed(obs, f"generate_{path}", timing, **extras)
    return obs


OBSERVE = {"prefill": prefill, "decode": decode, "generate": generate}


def observe(zoo: Any, case: Case, run: RunSettings) -> Observation:
    """The case's timings: `<model>.prefill`, `<model>.decode` or `<model>.generate`."""
    return OBSERVE[case.id.rsplit(".", 1)[1]](zoo, case, run)
