"""A decoding path is supported when its call runs as that path (harness/subjects/hf.py `requires`,
`path_runs`: a candidate generator was consulted), never because a class of that name exists:

- a candidate-generator class renamed (what a refactor does) is no skip: the path still runs;
- the assisted path silently decoding without its assistant (catalogue fault
  `assistant-falls-back-to-plain`) is `supports_assistant_model` False, extras ignored - a regression
  on a first run (no baseline), and `path-lost` against a baseline where it ran;
- a path that ran in the baseline and does not run now is a regression by default, whatever the reason;
  a capability that is not a path keeps its `feature-removed` change.
"""

from __future__ import annotations

import pytest

from harness import faults
from harness.checking.compare import compare_field
from harness.checking.policy import Policy
from harness.schema import Case, Field, Observation, Status
from harness.subjects import hf

ASSISTED = Case("llama-target", "assisted", prompt="short-0", assistant="llama-assistant", draft_tokens=3,
                new_tokens=6)


@pytest.fixture(scope="module")
def zoo():
    return hf.Zoo()


def call(zoo, case: Case) -> hf.Generated:
    """The case's call now (the loaded models kept, no call cached from before)."""
    zoo._generated.pop(case, None)
    return zoo.generate(case)


def decided(zoo, case: Case) -> tuple[bool, Observation]:
    obs = Observation()
    return hf.requires(obs, hf.PATH_FEATURE[case.path], probe=lambda: call(zoo, case)), obs


def test_a_renamed_candidate_generator_class_is_no_skip(zoo, monkeypatch):
    import transformers.generation.utils  # noqa: F401  (generate() bound its classes when it was imported)
    from transformers.generation import candidate_generator as cg

    zoo.load(ASSISTED.model), zoo.load(ASSISTED.assistant)
    hf.capabilities.cache_clear()
    monkeypatch.setattr(cg, "AssistedCandidateGeneratorV2", cg.AssistedCandidateGenerator, raising=False)
    monkeypatch.delattr(cg, "AssistedCandidateGenerator")
    try:
        runs, obs = decided(zoo, ASSISTED)
    finally:
        hf.capabilities.cache_clear()
    assert runs and not obs.stopped
    assert obs.fields["supports_assistant_model"] == Field("capability", True)  # the record's value is unchanged


def test_the_assisted_path_falling_back_to_plain_decoding_is_caught_without_a_baseline(zoo):
    undo = faults.get("assistant-falls-back-to-plain").apply()
    try:
        runs, obs = decided(zoo, ASSISTED)
        fallen = call(zoo, ASSISTED)
    finally:
        undo()
    plain_tokens = call(zoo, ASSISTED.plain()).tokens
    assert not runs and obs.stopped
    assert fallen.error is None and fallen.drafts == [] and fallen.tokens == plain_tokens  # nothing else shows it
    f = obs.fields["supports_assistant_model"]
    first_run = compare_field("supports_assistant_model", f, None, Policy())
    assert (first_run.status, first_run.category) == (Status.REGRESSION, "feature-ignored"), first_run.detail
    against = compare_field("supports_assistant_model", f, Field("capability", True), Policy())
    assert against.status is Status.REGRESSION
    ok, clean = decided(zoo, ASSISTED)  # undone: the path runs again
    assert ok and clean.fields["supports_assistant_model"].value is True


@pytest.mark.parametrize("why", ["transformers x does not accept assistant_model", "generate() raised"])
def test_a_path_that_ran_in_the_baseline_and_does_not_run_now_is_a_regression(why):
    lost = Field("capability", False, {"path": "assistant_model", "why": why})
    got = compare_field("supports_assistant_model", lost, Field("capability", True), Policy())
    assert (got.status, got.category) == (Status.REGRESSION, "path-lost") and why in got.detail
    first_run = compare_field("supports_assistant_model", lost, None, Policy())
    assert first_run.status is Status.NEW  # refused outright on a first run: the caller sees the error
    feature = compare_field("supports_static_cache", Field("capability", False), Field("capability", True), Policy())
    assert (feature.status, feature.category) == (Status.CHANGED, "feature-removed")


def test_path_runs_reads_the_call_not_its_tokens():
    """The signature is a candidate generator consulted - drafted tokens or none (prompt lookup that
    found no n-gram still consulted its generator); a call that raised is the error field's business."""
    assert hf.path_runs(hf.Generated(tokens=[5, 6], drafts=[[]])) == ""
    assert hf.path_runs(hf.Generated(error={"type": "ValueError", "message": "m"})) == ""
    assert "without consulting" in hf.path_runs(hf.Generated(tokens=[5, 6], drafts=[]))
