"""Faults that bias sampling, injected into the installed transformers (the catalogue's, harness/faults/),
are caught by the sampling suite's white-box fields - deterministically, from the case's few generate()
calls, in seconds - on the very case and field their `Catch` names. Each test prints the deviation's
TV and the CPU seconds the white box took (pytest -s)."""

from __future__ import annotations

import contextlib
import fnmatch
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from harness import cases
from harness.checking.core import CaseCheck, Rules
from harness.designs import sampling
from harness.faults import FAULTS, FaultError, inject
from harness.schema import Status
from harness.settings.config import Thresholds, load_config
from harness.settings.run import RunSettings
from harness.subjects.hf import Zoo
from run_size import default_run_alpha

ALPHA = default_run_alpha()  # alpha / m of a default run, m counted by collecting the suites
RUN = RunSettings.make(load_config(Path(__file__).resolve().parents[1]), {}, ci=False)
SAMPLING_FAULTS = [f for f in FAULTS if f.catch.suite == "sampling"]
SECONDS = 30.0  # CPU seconds the white box may take for one case under a fault (measured 0.3-2 s here)


@pytest.fixture(scope="module")
def zoo():
    return Zoo()


def catching_case(fault) -> cases.SamplingSpec:
    (case,) = [c for c in cases.sampling() if fnmatch.fnmatchcase(c.id, fault.catch.case)]
    return cases.SamplingSpec.of(case)


@pytest.mark.parametrize("fault", SAMPLING_FAULTS, ids=[f.name for f in SAMPLING_FAULTS])
def test_a_sampling_fault_is_caught_by_the_white_box_in_seconds(fault, zoo):
    from harness.subjects import hf

    spec = catching_case(fault)
    feature = hf.PATH_FEATURE.get(spec.path)
    if feature and not hf.capabilities()[feature]:
        pytest.skip(f"transformers {hf.version()} has no {feature}")
    zoo.load(spec.model)
    try:
        undo = inject(fault.name)
    except FaultError as exc:
        pytest.skip(str(exc))
    try:
        start = time.process_time()
        got = sampling.whitebox_run(zoo, spec, sampling.seed_of(spec))
        seconds = time.process_time() - start
    finally:
        undo()
    if got.error is not None:
        pytest.skip(f"{spec.id} does not run here: {got.error['message']}")
    check = CaseCheck("sampling", spec.id, Rules(ALPHA, Thresholds(), {}))
    check.check_all(got.obs)
    out = {o.field: o for o in check.outcomes()}
    (field,) = [name for name in out if fnmatch.fnmatchcase(name, fault.catch.field)]
    caught = out[field]
    print(f"{fault.name}: {spec.id} {field}: TV {caught.diff.get('tv')} ({seconds:.2f} s CPU)")
    assert (caught.status, caught.category.value) == (Status.REGRESSION, "deviation"), caught.detail
    assert seconds < SECONDS


# ----------------------------------------------------------------------------------------------
# the other direction: a release that draws its random numbers differently is not a regression


@contextlib.contextmanager
def one_extra_random_draw() -> Iterator[None]:
    """generate() consumes one extra random number from the global generator before sampling (as a
    release that reorders its draws would): every seeded stream changes, no distribution does."""
    from transformers.generation import utils

    original = utils.GenerationMixin.generate

    def generate(self, *args, **kwargs):
        torch.rand(1)
        return original(self, *args, **kwargs)

    utils.GenerationMixin.generate = generate
    try:
        yield
    finally:
        utils.GenerationMixin.generate = original


def test_a_changed_random_stream_is_rng_stream_not_a_regression():
    """The outputs suite's seeded case against its committed record: tokens differ, the sampled
    distribution fits -> `changed`, category rng-stream (tokens and the text that follows them)."""
    from harness.schema import Category
    from harness.store.env import env_key, fingerprint
    from harness.store.records import GoldenStore

    case = next(c for c in cases.outputs() if c.id == "llama-target.plain.dynamic.short-1.sample0")
    record = GoldenStore(load_config(Path(__file__).resolve().parents[1]).golden_dir).read(env_key(fingerprint()), "outputs", case.id)
    if record is None or "distribution" not in record.fields:
        pytest.skip(f"no committed record of {case.id} with a distribution field for this environment")
    fresh = Zoo()
    check = CaseCheck("outputs", case.id, Rules(ALPHA, Thresholds(), fingerprint()), baseline=record)
    with one_extra_random_draw():
        got = fresh.generate(case)
        obs = sampling.observe(fresh, cases.SamplingSpec(case.model, case.path, "default"), RUN, ALPHA,
                               field="distribution", whitebox=False)
    obs.add("tokens", [got.tokens], kind="tokens", margins=[got.margins], seeded_by="distribution")
    obs.add("text", fresh.load(case.model).tokenizer.decode(got.tokens), follows="tokens")
    check.check_all(obs)
    out = {o.field: o for o in check.outcomes()}
    assert got.tokens != record.fields["tokens"].value[0], "the extra draw should change the seeded stream"
    # the fit sees no misfit: a pass, or `not checked` where its N cannot rule out the smallest TV that matters
    fit = out["distribution"]
    assert fit.status is Status.PASS or (fit.status is Status.SKIPPED and fit.category is Category.NOT_CHECKED), fit.detail
    assert out["tokens"].status is Status.CHANGED and out["tokens"].category is Category.RNG_STREAM
    assert out["text"].category is Category.RNG_STREAM
