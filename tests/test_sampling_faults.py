"""Faults that bias sampling, injected into the installed transformers, are caught by the sampling
suite's distribution check (not by exact token comparison): each runs the suite's own case
(harness/designs/sampling.py `observe`) at the level of a default run and must make `joint_vs_exact` a
regression. Each test prints N, the p-value and the measured TV (pytest -s)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from harness import cases
from harness.checking.core import CaseCheck, Rules
from harness.designs import sampling
from harness.schema import Outcome, Status
from harness.settings.config import Thresholds, load_config
from harness.settings.run import RunSettings
from harness.subjects.hf import Zoo
from run_size import default_run_alpha

ALPHA = default_run_alpha()  # alpha / m of a default run, m counted by collecting the suites


RUN = RunSettings.make(load_config(Path(__file__).resolve().parents[1]), {}, ci=False)


@pytest.fixture(scope="module")
def zoo():
    return Zoo()


# ----------------------------------------------------------------------------------------------
# the faults


@contextlib.contextmanager
def catalogued(name: str) -> Iterator[None]:
    """A fault of the catalogue (harness/faults/), applied for the block."""
    from harness import faults

    undo = faults.inject(name)
    try:
        yield
    finally:
        undo()


def temperature_twice():
    """(a) the target's temperature applied twice: z / T / T."""
    return catalogued("temperature-applied-twice")


def top_p_one_fewer():
    """(b) top-p keeps one token fewer than it should."""
    return catalogued("top-p-one-fewer")


@contextlib.contextmanager
def acceptance_wrong_position() -> Iterator[None]:
    """(d) the acceptance test reads the target's p of the next draft position (p_{i+1}(x_i) / q_i(x_i))."""
    from transformers.generation import utils

    original = utils._speculative_sampling

    def shifted(candidate_input_ids, candidate_logits, candidate_length, new_logits, *args, **kwargs):
        wrong = torch.cat([new_logits[:, 1:candidate_length + 1], new_logits[:, candidate_length:]], dim=1)
        return original(candidate_input_ids, candidate_logits, candidate_length, wrong, *args, **kwargs)

    utils._speculative_sampling = shifted
    try:
        yield
    finally:
        utils._speculative_sampling = original


@contextlib.contextmanager
def mtp_draft_off_by_one() -> Iterator[None]:
    """(c) the MTP drafter samples its draft from the distribution one position back (the MTP
    layer's prediction at the second-to-last position) while reporting the right position's
    logits as q to the verifier."""
    from transformers import modeling_layers as ml
    from transformers.generation import candidate_generator as cg

    stash: dict[str, object] = {}
    original_layer, original_get = ml.MtpModel.forward_layer, cg.MTPCandidateGenerator.get_candidates

    def forward_layer(self, *args, **kwargs):
        stash["hidden"], stash["mtp"] = original_layer(self, *args, **kwargs), self
        return stash["hidden"]

    def get_candidates(self, input_ids, *args, **kwargs):
        ids, logits = original_get(self, input_ids, *args, **kwargs)
        hidden = stash.pop("hidden", None)
        if hidden is not None and hidden.shape[1] >= 2 and ids.shape[1] > input_ids.shape[1]:
            wrong = stash["mtp"]._project_to_logits(hidden[:, -2:-1])[:, -1].float()
            if self.logits_processor is not None:
                wrong = self.logits_processor(input_ids, wrong)
            ids = ids.clone()
            ids[:, input_ids.shape[1]] = torch.multinomial(torch.softmax(wrong, dim=-1), 1)[:, 0]
        return ids, logits

    ml.MtpModel.forward_layer, cg.MTPCandidateGenerator.get_candidates = forward_layer, get_candidates
    try:
        yield
    finally:
        ml.MtpModel.forward_layer, cg.MTPCandidateGenerator.get_candidates = original_layer, original_get


FAULTS = [
    ("temperature_twice", temperature_twice, cases.SamplingSpec("llama-target", "plain", "temperature")),
    ("top_p_one_fewer", top_p_one_fewer, cases.SamplingSpec("llama-target", "plain", "top_p")),
    ("acceptance_wrong_position", acceptance_wrong_position, cases.SamplingSpec("llama-target", "assisted", "default")),
    ("mtp_draft_off_by_one", mtp_draft_off_by_one, cases.SamplingSpec(cases.SAMPLING_MTP_MODEL, "mtp", "default")),
]


def _run(zoo: Zoo, spec: cases.SamplingSpec) -> dict[str, Outcome]:
    check = CaseCheck("sampling", spec.id, Rules(ALPHA, Thresholds(), {}))
    zoo._memo.clear()  # never reuse a clean run's draws
    check.check_all(sampling.observe(zoo, spec, RUN, ALPHA))
    return {o.field: o for o in check.outcomes()}


@pytest.mark.parametrize(("name", "fault", "spec"), FAULTS, ids=[f[0] for f in FAULTS])
def test_a_sampling_fault_is_caught_by_the_distribution_check(name, fault, spec, zoo):
    from harness.subjects import hf

    if spec.path == "mtp" and not hf.capabilities()["use_mtp"]:
        pytest.skip(f"transformers {hf.version()} has no use_mtp")
    with fault():
        out = _run(zoo, spec)
    fit = out["joint_vs_exact"]
    print(f"{name}: {spec.id}: N = {fit.diff['n']}, p = {fit.diff['p_value']:.3g}, TV = {fit.diff['tv']:.3f}")
    assert fit.status is Status.REGRESSION, fit.detail


@pytest.mark.slow  # the default run's suites/test_sampling.py runs these very cases clean (same design)
def test_the_same_cases_are_clean_without_a_fault(zoo):
    from harness.subjects import hf

    for _, _, spec in FAULTS:
        if spec.path == "mtp" and not hf.capabilities()["use_mtp"]:
            continue
        fit = _run(zoo, spec)["joint_vs_exact"]
        assert fit.status is Status.PASS, f"{spec.id}: {fit.detail}"


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
                               field="distribution")
    obs.add("tokens", [got.tokens], kind="tokens", margins=[got.margins], seeded_by="distribution")
    obs.add("text", fresh.load(case.model).tokenizer.decode(got.tokens), follows="tokens")
    check.check_all(obs)
    out = {o.field: o for o in check.outcomes()}
    assert got.tokens != record.fields["tokens"].value[0], "the extra draw should change the seeded stream"
    assert out["distribution"].status is Status.PASS, out["distribution"].detail
    assert out["tokens"].status is Status.CHANGED and out["tokens"].category is Category.RNG_STREAM
    assert out["text"].category is Category.RNG_STREAM
