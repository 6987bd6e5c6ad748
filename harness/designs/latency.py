"""Latency as users feel it: wall-clock samples of a subject, interleaved with a matched calibration.

A latency field (kind ``latency``, decided by harness/checking/compare_stats.py `compare_latency`)
holds, per sample pair i, the subject's wall seconds s_i and a calibration's c_i taken right
before or after it (the order alternates), plus both calls' CPU seconds and the machine's load:

    {"samples": [s_i], "calibration": [c_i], "cpu": [...], "cpu_calibration": [...],
     "load_per_core": x, "calibration_of": "..."}

The calibration is the reference engine (torch only, so it does not change when transformers does)
doing the same work on the same model - the same prompt's forward for a prefill, single-token
steps over a prefilled cache for decode, a greedy decode of as many tokens for generate() - so a
machine that is slower as a whole, or for a while (another job, a lower clock, a fuller cache),
moves both sides of every pair and cancels in l_i = log(s_i / c_i); what stays is the subject's
cost relative to the same computation done plainly. The wall clock is judged (a release that
waits - a synchronisation, a sleep, fewer threads - is slower for its callers); the CPU time rides
along, so a report can say "the wall time grew but the CPU time did not: the process waits". Each
sample is the fastest of `inner` back-to-back calls (a descheduling spike hits one call, not all).

Memory: the bytes torch allocated during one call (`timing.peak_memory`: the peak of live
allocations and the total), kind ``memory``, deterministic for a torch build.

The fields (table: harness/cases/ `latency`):
  <model>.prefill   prefill_{short,long}_{dynamic,static}: one forward over the prompt into a fresh cache;
                    memory_prefill_long_{dynamic,static}
  <model>.decode    decode_{dynamic,static}: per-token time of steady-state greedy decode (after 4
                    warm-up steps; each sample = 8 steps / 8); memory_decode_{dynamic,static}
  <model>.generate  generate_<path>: one greedy generate() call per path (llama-target: plain, assisted,
                    prompt_lookup, ensemble w=0.3, 24 tokens; glm4moe-mtp: plain, mtp, 8 tokens; a user
                    model: its paths but MTP); memory_generate_<path>. Extras per speculative path:
                    acceptance, tokens_per_forward, draft_tokens, cost_ratio, speedup (median plain /
                    median path, this run) and theoretical_speedup (Leviathan et al.)
  <model>.serving   the paths teams serve on (llama-target, 24 tokens):
                    generate_compiled    a compiled static-cache greedy generate() (aot_eager, every
                                         device) after the call that compiled it - the steady state (a
                                         version that recompiles on every call is slower here: #37908 /
                                         #46424's storms); paired with the engine's greedy decode.
                                         Extras: compile_seconds (the first, compiling call's wall time),
                                         compiles_first_call, compiles_while_timed (graphs compiled during
                                         the samples: 0 in the steady state), the knobs
                    generate_sequential  the batching prompts (3 requests) through generate() one after
                                         another, paired with the engine decoding them in turn. Extras,
                                         information: continuous batching's generate_batch of the same
                                         requests - continuous_seconds (median of CONTINUOUS_CALLS calls
                                         timed alone), tokens per second, speedup_over_generate. Not a
                                         judged field: paired with a calibration, generate_batch spreads
                                         the calibration beside it by 26-41 % on this CPU (its manager's
                                         start, paged cache and stop), which the busy rule rightly reads
                                         as a machine it cannot judge; its throughput is checked without
                                         a clock by the continuous suite's `served_together` (forwards)
                    compiled_error / continuous_error (exact, always): the first call's exception or None -
                    a version that cannot compile has generate_compiled `not checked` with it
A deep run takes DEEP_FACTOR x the samples; a user model under the budget plan
(harness/settings/budget.py) takes LATENCY_SAMPLES generate() samples a path, against the
generic calibration (llama-target's engine forward) instead of its own engine twin's decode.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.schema import Case, Observation
from harness.settings import budget
from harness.settings.run import RunSettings
from harness.subjects import hf, hf_compiled, hf_latency, timing

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

DEEP_FACTOR = 3  # a deep run takes this many times the samples
SERVING_SAMPLES = 10  # per serving field (compiled steady state, the requests in turn)
CONTINUOUS_CALLS = 5  # generate_batch calls timed alone (information: see `serving`)
SERVING_PROMPTS = ("short-0", "long-0", "short-1")  # the continuous suite's requests (20, 83 and 19 tokens)


def scaled(n: int, deep: bool = False) -> int:
    """`n` samples in a default run, DEEP_FACTOR x n in a deep one."""
    return DEEP_FACTOR * n if deep else n


@dataclass
class Timing:
    """One latency field's value: the subject's samples and the interleaved calibration's, on both clocks."""

    samples: list[float] = field(default_factory=list)
    calibration: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    cpu_calibration: list[float] = field(default_factory=list)
    calibration_of: str = ""

    def value(self) -> dict[str, Any]:
        return {"samples": self.samples, "calibration": self.calibration, "cpu": self.cpu,
                "cpu_calibration": self.cpu_calibration, "load_per_core": round(timing.load_per_core(), 3),
                "calibration_of": self.calibration_of}

    def ratio(self) -> float:
        """median(samples) / median(calibration): the subject's cost in calibration units."""
        return median(self.samples) / median(self.calibration)


def median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if not n:
        raise ValueError("median of no samples")
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def best_of(fn: Callable[..., Any], inner: int, setup: Callable[[], Any] | None = None,
            device: str = "cpu") -> tuple[float, float]:
    """(wall, CPU) seconds of the fastest (on the wall clock) of `inner` calls of fn(setup()) (setup
    untimed, per call) or fn()."""
    best = (float("inf"), 0.0)
    for _ in range(inner):
        arg = setup() if setup is not None else None
        start, cpu = timing.wall(device), timing.cpu()
        fn(arg) if setup is not None else fn()
        took = (timing.wall(device) - start, timing.cpu() - cpu)
        best = min(best, took)
    return best


def interleaved(subject: Callable[..., Any], calibration: hf_latency.Calibration, n: int, *, inner: int = 1,
                cal_inner: int = 1, warmup: int = 2, setup: Callable[[], Any] | None = None,
                device: str = "cpu") -> Timing:
    """`n` samples of `subject` (each the best of `inner` calls; with `setup`, subject(setup()) and
    setup untimed) paired with `n` of the calibration (best of `cal_inner`), the pair's order
    alternating, after `warmup` untimed rounds of both. The garbage collector is off while timing
    (as pytest-benchmark does by default: a collection would land on whichever call triggers it)."""
    for _ in range(warmup):
        calibration.run()
        subject(setup()) if setup is not None else subject()
    out = Timing(calibration_of=calibration.describes)
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for i in range(n):
            if i % 2:  # alternate which goes first, so neither always runs right after the other
                s = best_of(subject, inner, setup, device)
                c = best_of(calibration.run, cal_inner, None, device)
            else:
                c = best_of(calibration.run, cal_inner, None, device)
                s = best_of(subject, inner, setup, device)
            out.samples.append(s[0])
            out.cpu.append(s[1])
            out.calibration.append(c[0])
            out.cpu_calibration.append(c[1])
    finally:
        if enabled:
            gc.enable()
    return out


# ----------------------------------------------------------------------------------------------
# the suite's observations


def _timed(obs: Observation, name: str, t: Timing, **extras: Any) -> None:
    obs.add(name, t.value(), kind="latency", ratio_to_calibration=t.ratio(), **extras)


def _memory(obs: Observation, name: str, fn: Callable[[], Any], device: str) -> None:
    obs.add(name, timing.peak_memory(fn, device), kind="memory")


def prefill(zoo: Zoo, case: Case, run: RunSettings) -> Observation:
    obs = Observation()
    model = zoo.load(case.model).model
    for prompt in ("short", "long"):
        ids = zoo.prompt_ids(case.model, f"{prompt}-0")
        cal = hf_latency.prefill_calibration(zoo, case.model, ids)
        for kind in ("dynamic", "static"):
            call = hf_latency.prefill(model, ids, kind)
            t = interleaved(call, cal, scaled(25, run.deep), inner=3, cal_inner=3, device=zoo.device)
            _timed(obs, f"prefill_{prompt}_{kind}", t, tokens=int(ids.shape[1]))
            if prompt == "long":
                _memory(obs, f"memory_prefill_{prompt}_{kind}", call, zoo.device)
    return obs


def decode(zoo: Zoo, case: Case, run: RunSettings) -> Observation:
    obs = Observation()
    model = zoo.load(case.model).model
    ids = zoo.prompt_ids(case.model, "short-0")
    cal = hf_latency.decode_calibration(zoo, case.model, ids)
    for kind in ("dynamic", "static"):
        setup, steps = hf_latency.decode_setup(model, ids, kind), hf_latency.decode_steps(model)
        t = interleaved(steps, cal, scaled(20, run.deep), inner=2, cal_inner=2, setup=setup, device=zoo.device)
        t.samples = [s / hf_latency.DECODE_STEPS for s in t.samples]
        t.calibration = [c / hf_latency.DECODE_STEPS for c in t.calibration]
        _timed(obs, f"decode_{kind}", t, steps_per_sample=hf_latency.DECODE_STEPS)
        state = setup()
        _memory(obs, f"memory_decode_{kind}", lambda s=state, run_steps=steps: run_steps(s), zoo.device)
    return obs


def generate(zoo: Zoo, case: Case, run: RunSettings) -> Observation:
    obs = Observation()
    ids = zoo.prompt_ids(case.model, "short-0")
    owner = zoo.checkpoints.user.get(case.model)
    budgeted = owner is not None and owner.plan.budgeted
    # the budget plan times against the generic calibration: the model's own engine twin would cost a
    # decode of the model per sample
    cal = hf_latency.generic_calibration(zoo) if budgeted else hf_latency.generate_calibration(
        zoo, case.model, ids, case.new_tokens)
    n = scaled(15 if case.model == "llama-target" else budget.LATENCY_SAMPLES if budgeted else 8, run.deep)
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
        t = interleaved(call, cal, n, cal_inner=2, warmup=1, device=zoo.device)
        extras: dict[str, Any] = {"new_tokens": len(got.tokens), "target_forwards": got.target_forwards}
        if path == "plain":
            plain = t
        elif plain is not None:
            c = hf_latency.cost_ratio(zoo, case.model, path, case.assistant)
            extras.update(hf_latency.speculative_stats(got, case.draft_tokens, c, median(plain.samples),
                                                       median(t.samples)))
        _timed(obs, f"generate_{path}", t, **extras)
        _memory(obs, f"memory_generate_{path}", call, zoo.device)
    return obs


def serving(zoo: Zoo, case: Case, run: RunSettings) -> Observation:
    """The serving paths, timed: compiled static-cache generate() in its steady state, and the batching
    prompts through generate() one after another beside continuous batching's wall time (information)."""
    obs = Observation()
    model = zoo.load(case.model).model
    ids = zoo.prompt_ids(case.model, "short-0")
    n = scaled(SERVING_SAMPLES, run.deep)
    hf_compiled.reset()  # this case's compiles are its own
    try:
        _compiled(obs, zoo, case, model, ids, hf_latency.generate_calibration(zoo, case.model, ids, case.new_tokens), n)
    finally:
        hf_compiled.reset()
    prompts = [zoo.prompt_ids(case.model, p)[0].tolist() for p in SERVING_PROMPTS]
    cal = hf_latency.requests_calibration(zoo, case.model, prompts, case.new_tokens)
    # timed before generate_batch runs at all: a failed manager (5.13 / 5.14) may leave work behind
    sequential = interleaved(hf_latency.sequential_generate(model, prompts, case.new_tokens, zoo.device), cal, n,
                             warmup=1, device=zoo.device)
    batch = hf_latency.continuous_batch(model, prompts, case.new_tokens)
    served = batch()
    failed = served.error or next(({"type": "request", "message": e} for e in served.request_errors if e), None)
    obs.add("continuous_error", failed)
    extras: dict[str, Any] = {"requests": len(prompts)}
    if failed is None:
        walls = [best_of(batch, 1, device=zoo.device)[0] for _ in range(CONTINUOUS_CALLS)]
        tokens = sum(len(r) for r in served.rows)
        extras.update(continuous_seconds=median(walls), continuous_tokens=tokens,
                      continuous_tokens_per_second=tokens / median(walls),
                      continuous_speedup_over_generate=median(sequential.samples) / median(walls))
    _timed(obs, "generate_sequential", sequential, **extras)
    return obs


def _compiled(obs: Observation, zoo: Zoo, case: Case, model: Any, ids: Any, cal: hf_latency.Calibration,
              n: int) -> None:
    call = hf_latency.compiled_generate(model, ids, case.new_tokens)
    first = call()  # compiles
    obs.add("compiled_error", first.error)
    if first.error is not None:
        obs.skipped("generate_compiled", "latency", f"the compiled call failed: {first.error['type']}: "
                    f"{first.error['message']}", category="not-checked")
        return
    before = hf_compiled.graphs_compiled()
    t = interleaved(call, cal, n, warmup=1, device=zoo.device)
    _, knobs = hf_compiled.compile_config(hf_latency.COMPILE_BACKEND)
    _timed(obs, "generate_compiled", t, new_tokens=len(first.tokens), compile_seconds=first.seconds,
           compiles_first_call=first.compiles, compiles_while_timed=hf_compiled.graphs_compiled() - before, setup=knobs)


OBSERVE = {"prefill": prefill, "decode": decode, "generate": generate, "serving": serving}


def observe(zoo: Zoo, case: Case, run: RunSettings) -> Observation:
    """The case's timings: `<model>.prefill`, `<model>.decode`, `<model>.generate` or `<model>.serving`."""
    return OBSERVE[case.id.rsplit(".", 1)[1]](zoo, case, run)
