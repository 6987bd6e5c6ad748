"""The rerun after an upgrade compares with what you had (issue 56): a run whose env has no records
of its own compares with the nearest recorded env of the same device and dtype
(harness/store/baseline.py), says so in its first and last lines, and records the new env only when
that comparison holds nothing to decide - a regression or a change the upgrade brought is never
recorded silently, so the next rerun still sees it. `harness regen` accepts it; then a rerun is clean.

The projects are test_cli's throw-away ones (a toy suite reading value.json); the "older version"
is a record set under an older env key with the same device and dtype."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.store.baseline import nearest_recorded
from test_cli import Project, current, make_project  # noqa: F401 (current: a fixture)

TAIL = "cpu-x86_64-fp32"


@pytest.fixture
def project(tmp_path, current) -> Project:  # noqa: F811
    return make_project(tmp_path, current)


@pytest.mark.parametrize(("current_key", "recorded", "chosen"), [
    # one axis moved: the env with the other axis held
    ("tf5.24.0-torch2.13.0", ["tf5.14.0-torch2.13.0", "tf5.24.0-torch2.12.1", "tf4.57.6-torch2.13.0"],
     "tf5.24.0-torch2.12.1"),
    ("tf5.24.0-torch2.13.0", ["tf5.14.0-torch2.13.0", "tf5.13.1-torch2.13.0"], "tf5.14.0-torch2.13.0"),
    # version order, not string order: 5.9.0 < 5.14.0
    ("tf5.24.0-torch2.13.0", ["tf5.9.0-torch2.13.0", "tf5.14.0-torch2.13.0"], "tf5.14.0-torch2.13.0"),
    # both moved forward
    ("tf5.24.0-torch2.15.0", ["tf5.14.0-torch2.13.0"], "tf5.14.0-torch2.13.0"),
    # transformers forward, torch back: the nearest below in (transformers, torch) order
    ("tf5.24.0-torch2.12.1", ["tf5.14.0-torch2.13.0", "tf5.25.0-torch2.12.1"], "tf5.14.0-torch2.13.0"),
    # a downgrade: the nearest above
    ("tf5.13.1-torch2.13.0", ["tf5.24.0-torch2.13.0", "tf5.14.0-torch2.13.0"], "tf5.14.0-torch2.13.0"),
])
def test_the_nearest_recorded_env_is_chosen(current_key, recorded, chosen):
    got = nearest_recorded(f"{current_key}-{TAIL}", [f"{k}-{TAIL}" for k in recorded])
    assert got is not None and got.key == f"{chosen}-{TAIL}"
    assert ("downgrade" in got.why) == (current_key == "tf5.13.1-torch2.13.0")


def test_another_device_or_dtype_or_an_odd_key_is_never_chosen():
    key = f"tf5.24.0-torch2.13.0-{TAIL}"
    assert nearest_recorded(key, ["tf5.14.0-torch2.13.0-cpu-x86_64-bf16", "tf5.14.0-torch2.13.0-cuda-sm90-fp32",
                                  "tf5.14.0-torch2.13.0-cpu-aarch64-fp32", "my-records", "tfX-torchY-cpu-x86_64-fp32",
                                  key]) is None
    assert nearest_recorded("not-a-key", [key]) is None


OLD = "tf5.13.0-torch2.8.0-cpu-x86_64-fp32"  # test_cli's OTHER_KEY: older than any installed transformers


def older(project: Project) -> None:
    """Both cases recorded under the older env only - what the project had before the upgrade."""
    env = {**project.fp, "transformers": "5.13.0", "torch": "2.8.0"}
    for case in ("one", "two"):
        project.record(case, key=OLD, env=env)


def latest(project: Project) -> dict:
    return json.loads((project.run_dirs(project.key)[-1] / "results.json").read_text())


def test_a_regression_after_the_upgrade_fails_names_the_baseline_and_is_never_recorded(project, capfd):
    older(project)
    project.values(value=2)  # what the upgrade changed
    for _ in range(2):  # the rerun sees it again: nothing of the new env was recorded in between
        assert project.run("check") == 1
        out = capfd.readouterr().out
        lines = [line for line in out.splitlines() if line.strip()]
        assert lines[0].startswith(f"harness: compared with {OLD} (your last recorded env"), lines[0]
        assert lines[-1].startswith(f"harness: compared with {OLD}") and "`--baseline KEY` to choose" in lines[-1]
        assert "verdict: REGRESSION" in out
        assert f"records written: none (the comparison with {OLD} holds regressions" in out
        assert "`harness regen` records this env" in out
        assert project.store.record_paths(project.key) == []
        results = latest(project)
        assert results["meta"]["baseline_key"] == OLD and results["meta"]["upgrade_baseline"]["key"] == OLD
        assert results["meta"]["golden_dir"] == "records" and results["meta"]["writes"] == []
        run_dir = project.run_dirs(project.key)[-1]  # the report and summary.md say it too
        assert f"Compared with {OLD} (your last recorded env" in (run_dir / "summary.md").read_text()
        assert f"compared with {OLD} (your last recorded env" in (run_dir / "index.html").read_text()
        assert {(o["case"], o["field"]): o["status"] for o in results["outcomes"] if o["status"] != "pass"} == {
            ("one", "value"): "regression", ("two", "value"): "regression"}
    # accepted on purpose: regen records the new env, and the rerun compares with its own records
    assert project.run("regen", "--yes") == 0
    capfd.readouterr()
    assert {p.stem for p in project.store.record_paths(project.key)} == {"one", "two"}
    assert project.run("check") == 0
    out = capfd.readouterr().out
    assert "compared with" not in out and "verdict: pass" in out
    assert latest(project)["meta"]["baseline_key"] == project.key and "upgrade_baseline" not in latest(project)["meta"]


def test_nothing_to_decide_records_the_new_env_and_the_rerun_uses_it(project, capfd):
    older(project)
    assert project.run("check") == 0
    out = capfd.readouterr().out
    assert out.splitlines()[0].startswith(f"harness: compared with {OLD}")
    assert "verdict: pass" in out and "records written: wrote 4 field(s) in 2 record(s) under records/" in out
    assert {p.stem for p in project.store.record_paths(project.key)} == {"one", "two"}
    assert sorted(p.name for p in project.store.root.iterdir() if not p.name.startswith(".")) == sorted(
        [OLD, project.key])  # the scratch copy of the baseline is not left in the store
    assert project.run("check") == 0
    out = capfd.readouterr().out
    assert "compared with" not in out and "records written: none" in out


def test_a_change_to_accept_is_not_recorded_either(project, capfd):
    older(project)
    project.values(features=("a", "b"))  # a capability added: changed within policy, for regen to accept
    assert project.run("check") == 0
    out = capfd.readouterr().out
    assert "verdict: changed" in out and f"the comparison with {OLD} holds changes to accept" in out
    assert project.store.record_paths(project.key) == []


def test_strict_compares_with_the_older_env_and_fails_what_it_lacks(project, capfd):
    """CI: strict, read-only - the older env's records gate; a case it lacks fails."""
    env = {**project.fp, "transformers": "5.13.0", "torch": "2.8.0"}
    project.record("one", key=OLD, env=env)
    assert project.run("check", "--strict") == 1
    out = capfd.readouterr().out
    assert out.splitlines()[0].startswith(f"harness: compared with {OLD}")
    status = {(o["case"], o["field"]): o["status"] for o in latest(project)["outcomes"]}
    assert status[("one", "value")] == "pass" and status[("two", "value")] == "regression"
    assert project.store.record_paths(project.key) == []


def test_baseline_still_chooses_and_own_records_win(project, capfd):
    older(project)
    project.record("one")
    project.record("two")
    project.values(value=2)
    assert project.run("check") == 1  # its own records, not the older env's
    assert "compared with" not in capfd.readouterr().out and latest(project)["meta"]["baseline_key"] == project.key
    assert project.run("check", "--baseline", OLD) == 1
    assert "compared with" not in capfd.readouterr().out and latest(project)["meta"]["baseline_key"] == OLD


def test_pytest_on_the_suites_compares_with_the_older_env_and_writes_nothing(project):
    """The plugin's own path (`pytest suites`), serial and under xdist (the controller's choice is
    handed to the workers)."""
    older(project)
    project.values(value=2)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    for workers in ([], ["-n", "2"]):
        done = subprocess.run([sys.executable, "-m", "pytest", "suites", "-q", "-p", "no:cacheprovider",
                               "--rootdir", str(project.root), *workers], cwd=project.root, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"baseline {OLD} (your last recorded env" in done.stdout
        assert "records written: none (this env has no records of its own and was compared with" in done.stdout
        assert "2 failed" in done.stdout
        assert project.store.record_paths(project.key) == []
