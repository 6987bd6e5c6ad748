"""Outcomes that must be earned: deterministic values compared exactly, capabilities observed
through the installed transformers, no field a suite reports without comparing it."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.checking.compare import compare_field
from harness.checking.policy import Policy
from harness.schema import Field, Status
from harness.settings.config import load_config
from harness.store.env import env_key, fingerprint
from harness.store.records import GoldenStore
from harness.subjects import hf

ALPHA_PER_TEST = 0.01 / 165  # a default run's per-test alpha


@pytest.fixture(scope="module")
def outputs_records():
    settings = load_config(Path(__file__).parents[1])
    store = GoldenStore(settings.golden_dir)
    key = env_key(fingerprint(dtype="fp32"))
    return [r for r in store.records(key) if r.suite == "outputs"]


def test_greedy_acceptance_is_compared_exactly(outputs_records):
    greedy = [r for r in outputs_records if r.case.endswith(".greedy") and "acceptance" in r.fields]
    assert greedy, "no greedy speculative records: the test lost its subject"
    assert {r.fields["acceptance"].kind for r in greedy} == {"exact"}
    # what a rate test would have let through at the run's alpha: 17/28 -> 3/28 (Fisher p ~ 2e-4)
    old, new = {"k": 17, "n": 28}, {"k": 3, "n": 28}
    assert compare_field("a", Field("rate", new), Field("rate", old), Policy(alpha=ALPHA_PER_TEST)).status is Status.PASS
    assert compare_field("a", Field("exact", new), Field("exact", old), Policy()).status is Status.REGRESSION


def test_per_step_acceptance_and_ensemble_bias_are_recorded_fields(outputs_records):
    greedy_spec = [r for r in outputs_records if r.case.endswith(".greedy") and ".plain." not in r.case
                   and "error" in r.fields and r.fields["error"].value is None]
    assert greedy_spec and all("acceptance_per_step" in r.fields for r in greedy_spec)
    ensemble = [r for r in greedy_spec if ".ensemble." in r.case]
    assert ensemble and all("divergence_from_plain" in r.fields for r in ensemble)


@pytest.fixture
def fresh_capabilities():
    hf.capabilities.cache_clear()
    yield hf.capabilities
    hf.capabilities.cache_clear()


def test_capabilities_are_observed_not_assumed(fresh_capabilities, monkeypatch):
    """A keyword the version accepts, never a class name: a candidate-generator class renamed leaves the
    feature (its path's behaviour decides, tests/test_path_behaviour.py); a cache kind dropped removes it."""
    from transformers.generation import candidate_generator, configuration_utils

    assert fresh_capabilities()["assistant_model"] and fresh_capabilities()["static_cache"]
    fresh_capabilities.cache_clear()
    monkeypatch.setattr(candidate_generator, "AssistantCandidateGeneratorRenamed",
                        candidate_generator.AssistedCandidateGenerator, raising=False)
    monkeypatch.delattr(candidate_generator, "AssistedCandidateGenerator")
    monkeypatch.setattr(configuration_utils, "ALL_CACHE_IMPLEMENTATIONS", ("dynamic",))
    seen = fresh_capabilities()
    assert seen["assistant_model"] is True and seen["static_cache"] is False
