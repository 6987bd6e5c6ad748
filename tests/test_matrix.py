"""`harness matrix` (harness/cli/matrix.py) with the nox sessions replaced by a fake runner, and the
noxfile's sessions listed by nox itself."""

import argparse
import functools
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli.matrix import matrix
from harness.cli.project import Project
from harness.schema import Field, Results
from harness.settings.config import HarnessConfig
from harness.store.records import GoldenStore, atomic_write_json

ROOT = Path(__file__).resolve().parents[1]


def key(version: str) -> str:
    return f"tf{version}-torch2.13.0-cpu-x86_64-fp32"


def fake_runner(cell, project, out, args, versions):
    """What a cell's nox session leaves behind: its records and results.json, or a failed pip log."""
    cell_dir = out / "cells" / cell.version
    if cell.version == "9.9.9":
        (cell_dir / "nox.log").write_text("nox > python -m pip install transformers==9.9.9\n"
                                          "ERROR: No matching distribution found for transformers==9.9.9\n"
                                          "nox > Session suites-9.9.9 failed.\n")
        return 1
    env = {"transformers": cell.version, "dtype": "fp32"}
    crash = cell.version == "5.24.0"
    for case in ("m.assisted.static", "m.prompt_lookup.static"):
        fields = {"error": Field("exact", {"type": "IndexError", "message": f"index {40 + len(case)} is out of bounds"}
                                 if crash else None)}
        if not crash:
            fields["tokens"] = Field("tokens", [1, 2, 3])
        project.store.update(key(cell.version), "outputs", case, env, fields)
    atomic_write_json(cell_dir / "results.json", Results(env, None, [], {"env_key": key(cell.version)}).to_json())
    return 0


@pytest.fixture
def project(tmp_path) -> Project:
    (tmp_path / "records").mkdir()
    settings = HarnessConfig(rootdir=tmp_path, golden_dir=tmp_path / "records", models_dir=tmp_path / "models",
                             reports_dir=tmp_path / "reports")
    return Project(tmp_path, settings, GoldenStore(tmp_path / "records"), tmp_path / "reports")


def test_a_cell_that_fails_to_install_is_reported_and_the_chain_skips_it(project, tmp_path, capsys):
    args = argparse.Namespace(transformers=["5.13.1", "9.9.9", "5.14.0", "5.24.0"], torch="2.13.0", workers="2",
                              out=str(tmp_path / "upgrades"))
    cells, links, out = matrix(project, args, runner=fake_runner)
    assert [c.status for c in cells] == ["recorded", "failed", "recorded", "recorded"]
    assert cells[1].reason == "ERROR: No matching distribution found for transformers==9.9.9"
    assert [link.directory for link in links] == ["5.13.1-to-5.14.0", "5.14.0-to-5.24.0"]
    assert [link.verdict for link in links] == ["pass", "regression"]
    assert links[1].headline.startswith("1 distinct finding (1 regression)")
    for link in links:
        assert {p.name for p in (out / link.directory).iterdir()} == {"index.html", "results.json", "summary.md"}
    summary = (out / "5.14.0-to-5.24.0" / "summary.md").read_text()
    assert "regression (broken) in `error` of 2 cases" in summary  # index 57 and 62: one finding
    index = (out / "index.html").read_text()
    assert "5.14.0-to-5.24.0/index.html" in index and "transformers==9.9.9" in index and "failed" in index
    progress = capsys.readouterr().out
    assert "matrix [2/4] transformers 9.9.9: failed" in progress and "  ERROR: No matching distribution" in progress and "matrix [4/4] transformers 5.24.0: recorded" in progress


def test_each_torch_version_keeps_its_own_virtualenvs(project, tmp_path):
    """nox names a venv by its session (suites-<transformers>): `--torch V` puts the cells under
    <envdir>/torch<V>/, so a torch bump never reinstalls torch into another torch's venv."""
    seen = []

    def runner(cell, project, out, args, versions):
        seen.append(args.envdir)
        return fake_runner(cell, project, out, args, versions)

    for torch, envdir in (("2.12.1", str(tmp_path / "venvs")), ("2.15.0", None)):
        args = argparse.Namespace(transformers=["5.24.0"], torch=torch, workers=None, envdir=envdir,
                                  out=str(tmp_path / torch))
        matrix(project, args, runner=runner)
    assert seen == [str(tmp_path / "venvs" / "torch2.12.1"), str(Path(".nox") / "torch2.15.0")]


@pytest.mark.skipif(shutil.which("nox") is None and not (Path(sys.executable).parent / "nox").exists(),
                    reason="nox is not installed (pip install -e '.[dev]')")
def test_noxfile_has_one_suites_session_per_version():
    env = {"HARNESS_MATRIX_VERSIONS": "5.13.1 5.24.0", "PATH": str(Path(sys.executable).parent)}
    listed = subprocess.run([sys.executable, "-m", "nox", "-l", "--json"], cwd=ROOT, env=env, capture_output=True,
                            text=True, check=True).stdout
    names = [s["session"] for s in json.loads(listed)]
    assert names == ["suites-5.13.1", "suites-5.24.0"]


class FakeSession:
    """What a noxfile session calls: its installs and runs, recorded."""

    def __init__(self, location: Path, posargs):
        self.virtualenv = argparse.Namespace(location=str(location))
        self.posargs, self.installs, self.runs = list(posargs), [], []

    def install(self, *args):
        self.installs.append(args)

    def run(self, *args, **kwargs):
        self.runs.append((args, kwargs))


@functools.cache
def noxfile():  # once: a second load would register its sessions again
    spec = importlib.util.spec_from_file_location("noxfile_under_test", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(importlib.util.find_spec("nox") is None, reason="nox is not installed (pip install -e '.[dev]')")
@pytest.mark.parametrize("baseline", ["", "tf5.13.1-torch2.13.0-cpu-x86_64-fp32"])
def test_a_cell_records_or_with_a_baseline_checks_the_case_n_times(tmp_path, monkeypatch, baseline):
    monkeypatch.setenv("HARNESS_BASELINE", baseline)
    monkeypatch.setenv("HARNESS_RUNS", "2")
    monkeypatch.setenv("HARNESS_RESULTS", str(tmp_path / "cells" / "5.20.0" / "results.json"))
    session = FakeSession(tmp_path, ["--harness-case", "contracts:generate-return-dict"])
    noxfile().cell("5.20.0")(session)
    pytests = [(args, kw) for args, kw in session.runs if args[0] == "pytest"]
    assert [args[args.index("--harness-results") + 1] for args, _ in pytests] == [
        str(tmp_path / "cells" / "5.20.0" / name) for name in ("results.json", "results.run2.json")]
    for args, kwargs in pytests:
        assert args[-2:] == ("--harness-case", "contracts:generate-return-dict")
        if baseline:  # a check: nothing recorded, a failing check is the result (pytest exit 1)
            assert "--force-regen" not in args and args[args.index("--baseline") + 1] == baseline
            assert kwargs["success_codes"] == [0, 1]
        else:
            assert "--force-regen" in args and "--baseline" not in args and kwargs["success_codes"] == [0]
    assert session.installs[1][0] == "transformers==5.20.0"


def test_pair_seconds_pairs_each_links_cells_by_their_recorded_interpreters(project, tmp_path, monkeypatch):
    """--pair-seconds: each link's b cell (new) paired against its a cell (old), by the interpreters
    their results.json record; a cell without one is said, not paired; the index links the report."""
    import harness.cli.paired as paired_cli

    calls = []

    def runner(cell, project, out, args, versions):
        rc = fake_runner(cell, project, out, args, versions)
        path = out / "cells" / cell.version / "results.json"
        if rc == 0 and cell.version != "5.24.0":
            data = json.loads(path.read_text())
            data["meta"]["interpreter"] = sys.executable
            atomic_write_json(path, data)
        return rc

    def pair_envs(project, new, old, fields, users, seconds, threads, out):
        calls.append((new, old, [f.key for f in fields], seconds, out.relative_to(tmp_path)))
        (out / "index.html").parent.mkdir(parents=True)
        (out / "index.html").write_text("paired")
        return 1

    monkeypatch.setattr(paired_cli, "pair_envs", pair_envs)
    args = argparse.Namespace(transformers=["5.13.1", "5.14.0", "5.24.0"], torch=None, workers=None,
                              out=str(tmp_path / "m"), pair_seconds="30", pair_fields="decode_dynamic")
    cells, links, out = matrix(project, args, runner=runner)
    assert [c.interpreter for c in cells] == [sys.executable, sys.executable, ""]
    assert calls == [(sys.executable, sys.executable, ["llama-target.decode/decode_dynamic"], 30.0,
                      Path("m/5.13.1-to-5.14.0/paired"))]
    assert [link.paired for link in links] == ["regression (1)", "not paired: no interpreter recorded for 5.24.0"]
    assert "5.13.1-to-5.14.0/paired/index.html" in (out / "index.html").read_text()
