"""The sampling suite's white box (harness/subjects/hf_whitebox.py, harness/designs/whitebox.py): every
sampled decision of a real generate() observed and exact to float tolerance on a clean run, failing
closed when a hook finds nothing, ties at a filter's cut taken as the version broke them, and a flat
user model's black-box fit `not checkable` rather than a pass."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

from harness import cases
from harness.checking.core import CaseCheck, Rules
from harness.designs import sampling, whitebox
from harness.schema import Status
from harness.settings.config import Thresholds, load_config
from harness.settings.run import RunSettings
from harness.subjects import hf, hf_whitebox
from harness.subjects.hf import Zoo
from run_size import default_run_alpha

ALPHA = default_run_alpha()
RUN = RunSettings.make(load_config(Path(__file__).resolve().parents[1]), {}, ci=False)


@pytest.fixture(scope="module")
def zoo():
    return Zoo()


def outcomes(obs, case: str = "c") -> dict:
    check = CaseCheck("sampling", case, Rules(ALPHA, Thresholds(), {}))
    check.check_all(obs)
    return {o.field: o for o in check.outcomes()}


@pytest.mark.parametrize(("path", "setting", "weight", "fields"), [
    ("plain", "combined", None, ("exact_emitted",)),
    ("prompt_lookup", "default", None, ("exact_emitted",)),
    ("assisted", "default", None, whitebox.FIELDS),
    ("ensemble", "min_p", 0.3, whitebox.FIELDS),
])
def test_a_clean_path_is_exact_to_float_tolerance_at_every_observed_decision(zoo, path, setting, weight, fields):
    if weight is not None and not hf.capabilities()["assistant_ensemble_weight"]:
        pytest.skip(f"transformers {hf.version()} has no assistant_ensemble_weight")
    spec = cases.SamplingSpec(cases.TARGET, path, setting, weight)
    got = sampling.whitebox_run(zoo, spec, sampling.seed_of(spec))
    assert got.error is None and tuple(got.obs.fields) == fields and not got.obs.notes
    for name, f in got.obs.fields.items():
        assert f.kind == "deviation" and f.value["positions"] > 0, name
        assert f.value["tv"] <= whitebox.TOLERANCE == f.extras["detectable_tv"] <= 0.02, (name, f.value)
        assert f.extras["observed"] and f.extras["exact"] and f.extras["hooks_missing"] == []


def test_the_ensemble_x_temperature_bias_is_measured_with_its_mechanism(zoo):
    """The assistant of 5.x applies the target's warpers, then its own again: at T = 1.5 it samples at
    T^2, and v = w p + (1 - w) q mixes that q. The white box measures the emitted bias against the
    intended process from one case, and names the mechanism."""
    if not hf.capabilities()["assistant_ensemble_weight"]:
        pytest.skip(f"transformers {hf.version()} has no assistant_ensemble_weight")
    spec = cases.SamplingSpec(cases.TARGET, "ensemble", "temperature", 0.3)
    got = sampling.whitebox_run(zoo, spec, sampling.seed_of(spec))
    emitted = got.obs.fields["exact_emitted"]
    assert emitted.value["tv"] > 0.1
    assert any("TemperatureLogitsWarper" in m and "are not the target's" in m for m in emitted.extras["mechanism"])
    assert all(got.obs.fields[f].value["tv"] <= whitebox.TOLERANCE for f in whitebox.FIELDS[:-1])


def test_a_verifier_the_hooks_cannot_find_is_skipped_with_the_reason_and_the_black_box_still_runs(zoo, monkeypatch):
    monkeypatch.setattr(hf_whitebox, "Recorder", functools.partial(hf_whitebox.Recorder, hook_verifier=False))
    spec = cases.SamplingSpec(cases.TARGET, "assisted", "default")
    zoo._memo.clear()
    out = outcomes(sampling.observe(zoo, spec, RUN, ALPHA))
    for name in ("exact_target", "exact_emitted"):
        assert (out[name].status, out[name].category.value) == (Status.SKIPPED, "not-checkable")
        assert "the verifier was not observed" in out[name].detail and hf_whitebox.VERIFIER in out[name].detail
    # seen through the primitives alone: the uniforms' input and the last multinomial's
    assert out["exact_acceptance"].status is Status.NEW and out["exact_residual"].status is Status.NEW
    # the black box still ran its fit: no misfit, `not checked` at tv_max with N this small (never a pass)
    assert out["joint"].kind == "distribution" and out["joint"].diff["test"] == "g-test-fit"
    assert (out["joint"].status, out["joint"].category.value) == (Status.SKIPPED, "not-checked")
    zoo._memo.clear()


def test_no_exact_side_without_the_logits_processor_hook(zoo, monkeypatch):
    patch = hf_whitebox.Recorder._patch

    def without_processor_calls(self, owner, name, label, make):
        if label == "LogitsProcessorList.__call__":
            self.missing.append(f"{label}: not found in the installed transformers")
            return
        patch(self, owner, name, label, make)

    monkeypatch.setattr(hf_whitebox.Recorder, "_patch", without_processor_calls)
    spec = cases.SamplingSpec(cases.TARGET, "plain", "default")
    got = sampling.whitebox_run(zoo, spec, 1)
    (note,) = got.obs.notes.values()
    assert note.status == "skipped" and "no exact side: LogitsProcessorList.__call__" in note.detail


def test_a_tie_at_a_filters_cut_is_taken_as_the_version_broke_it():
    groups = torch.tensor([0, 1, 2, 2, 3])  # tokens 2 and 3 tie
    exact = torch.tensor([0.5, 0.3, 0.2, 0.0, 0.0], dtype=torch.float64)
    swapped = torch.tensor([0.5, 0.3, 0.0, 0.2, 0.0], dtype=torch.float64)
    assert torch.equal(whitebox.adopt_ties(exact, swapped, groups), swapped)
    extra = torch.tensor([0.4, 0.2, 0.2, 0.2, 0.0], dtype=torch.float64)  # both tied tokens kept: not a swap
    assert torch.equal(whitebox.adopt_ties(exact, extra, groups), exact)
    untied = torch.tensor([0.5, 0.3, 0.0, 0.0, 0.2], dtype=torch.float64)  # token 4 ties with nobody
    assert torch.equal(whitebox.adopt_ties(exact, untied, groups), exact)


def test_a_flat_user_model_is_not_checkable_by_the_black_box_but_exact_in_the_white_box(tmp_path):
    """A random, untrained user model: every 2-token tuple is below the lumping mass, every draw lands in
    the one lumped bin - the fit cannot distinguish anything, so it is `not checkable`, never a pass. The
    white box needs no reference engine (the version's own logits, the engine's processors): exact."""
    from harness.settings.models import UserModel, resolve
    from user_checkpoints import qwen3

    ckpt = qwen3(tmp_path / "flat", spread=None)
    user = resolve(UserModel("flat", ckpt, "--model", paths=("plain",)))
    flat = Zoo(user=[user])
    (spec,) = [s for s in cases.user_sampling(user) if s.setting == "combined"]  # 18 near-equal tokens kept
    out = outcomes(sampling.observe(flat, spec, RUN, ALPHA), spec.id)
    assert (out["joint"].status, out["joint"].category.value) == (Status.SKIPPED, "not-checkable")
    assert "one bin" in out["joint"].detail
    assert out["exact_emitted"].status is Status.NEW and out["exact_emitted"].diff["tv"] <= whitebox.TOLERANCE
    assert out["joint_bias_vs_target"].status is Status.INFO
