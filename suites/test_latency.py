"""How fast the installed transformers prefills, decodes and generates, against the golden record.

Every field is kind `latency`: ``{"samples": [...], "calibration": [...]}`` in seconds, the
subject's samples interleaved one for one with a fixed calibration workload (the reference
engine's forward of llama-target over the short prompt, `hf_latency.calibration`), so the
comparison is of samples / median(calibration), on the same hardware class only, a slowdown
beyond `latency_tolerance` at the run's per-test alpha (harness/checking/compare_stats.py). Fields:

  llama-target.prefill   prefill_{short,long}_{dynamic,static}: one forward over the prompt into a
                         fresh cache (extras: rss_delta_bytes of prefill + 16 decode steps per cache)
  llama-target.decode    decode_{dynamic,static}: per-token time of steady-state greedy decode
                         (after 4 warm-up steps; each sample = 8 steps / 8)
  <model>.generate       generate_<path>: one greedy generate() call; llama-target: plain,
                         assisted, prompt_lookup, ensemble (w=0.3), 24 tokens; glm4moe-mtp: plain,
                         mtp, 8 tokens; a user model: its paths but MTP, 24 tokens, 6 samples. Extras per speculative path: acceptance (per token),
                         tokens_per_forward, draft_tokens, cost_ratio, speedup (median plain /
                         median path, this run) and theoretical_speedup (Leviathan et al.)

HARNESS_LATENCY_DEEP=1: 3x the samples (the precise mode). HARNESS_LATENCY_SLOWDOWN=0.15: every
forward of the case's target model costs 15 % more (busy wait) - how the suite's power is checked.
"""

from __future__ import annotations

import os

import pytest

from harness.designs import latency
from harness.fixtures.cases import latency_cases
from harness.schema import Case
from harness.subjects import hf, hf_latency

SLOWDOWN_ENV = "HARNESS_LATENCY_SLOWDOWN"
FEATURE = {"mtp": "use_mtp", "ensemble": "assistant_ensemble_weight", "prompt_lookup": "prompt_lookup",
           "assisted": "assistant_model"}


@pytest.fixture
def target(case: Case, zoo):
    """The case's model, slowed by HARNESS_LATENCY_SLOWDOWN (a fraction; unset: as it is)."""
    model = zoo.load(case.model).model
    with hf_latency.slowed(model, float(os.environ.get(SLOWDOWN_ENV) or 0)):
        yield model


def _check(golden, name: str, timing: latency.Timing, **extras):
    return golden.check(name, timing.value(), kind="latency", ratio_to_calibration=timing.ratio(), **extras)


@pytest.mark.parametrize("case", [c for c in latency_cases() if c.name.endswith(".prefill")], ids=lambda c: c.id)
def test_prefill(case: Case, golden, zoo, target):
    cal = hf_latency.calibration(zoo)
    for prompt in ("short", "long"):
        ids = zoo.prompt_ids(case.model, f"{prompt}-0")
        for kind in ("dynamic", "static"):
            timing = latency.interleaved(hf_latency.prefill(target, ids, kind), cal, latency.scaled(25), inner=3,
                                         cal_inner=3)
            extras = {"rss_delta_bytes": hf_latency.rss_delta(target, ids, kind)} if prompt == "long" else {}
            _check(golden, f"prefill_{prompt}_{kind}", timing, tokens=int(ids.shape[1]), **extras)


@pytest.mark.parametrize("case", [c for c in latency_cases() if c.name.endswith(".decode")], ids=lambda c: c.id)
def test_decode(case: Case, golden, zoo, target):
    cal = hf_latency.calibration(zoo)
    ids = zoo.prompt_ids(case.model, "short-0")
    for kind in ("dynamic", "static"):
        timing = latency.interleaved(hf_latency.decode_steps(target), cal, latency.scaled(20), inner=2,
                                     cal_inner=3, setup=hf_latency.decode_setup(target, ids, kind))
        timing.samples = [s / hf_latency.DECODE_STEPS for s in timing.samples]
        _check(golden, f"decode_{kind}", timing, steps_per_sample=hf_latency.DECODE_STEPS)


def generate_cases(user) -> list[Case]:
    """The zoo's generate() cases and one per user model (its paths; harness/fixtures/cases.py)."""
    return [c for c in latency_cases(user) if c.name.endswith(".generate")]


@pytest.mark.cases(table=generate_cases)
def test_generate(case: Case, golden, zoo, target):
    cal = hf_latency.calibration(zoo)
    ids = zoo.prompt_ids(case.model, "short-0")
    n = latency.scaled(15 if case.model == "llama-target" else 6)
    plain: latency.Timing | None = None
    for path in case.param("paths"):
        feature = FEATURE.get(path)
        if feature is not None:
            supported = hf.capabilities()[feature]
            golden.check(f"supports_{feature}", supported, kind="capability")
            if not supported:
                golden.outcome(f"generate_{path}", "skipped", kind="latency", category="not-applicable",
                               detail=f"transformers {hf.version()} does not support {feature}")
                continue
        run = hf_latency.generate_path(zoo, case.model, path, ids, case.new_tokens, case.draft_tokens,
                                       weight=case.param("weight") if path == "ensemble" else None,
                                       assistant=case.assistant if path in ("assisted", "ensemble") else None)
        got = run()
        if got.error is not None:
            golden.check(f"generate_{path}_error", got.error)
            continue
        timing = latency.interleaved(run, cal, n, cal_inner=5, warmup=1)
        extras = {"new_tokens": len(got.tokens), "target_forwards": got.target_forwards}
        if path == "plain":
            plain = timing
        elif plain is not None:
            c = hf_latency.cost_ratio(zoo, case.model, path, case.assistant)
            extras.update(hf_latency.speculative_stats(got, case.draft_tokens, c, latency.median(plain.samples),
                                                       latency.median(timing.samples)))
        _check(golden, f"generate_{path}", timing, **extras)
