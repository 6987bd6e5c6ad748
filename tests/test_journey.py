"""A new user's own-model journey, from the built wheel (issue 28's done-when), as CI runs it.

The wheel is the product, so this builds it from the checkout (`pip wheel . --no-deps`: the same
genharness wheel `pip wheel .` writes, without copying every dependency's wheel), installs it
non-editable into a fresh venv with `pip install dist/genharness-*.whl -c constraints.txt`, and then,
in an empty directory holding only a checkpoint of the user's (a tiny random Qwen3,
tests/user_checkpoints.py), runs the README's own-model commands as a person would:

1. `harness init --model ./models/my-llama`: a relative path is written, a .gitignore, golden/records/;
2. `harness check -- -k my-model`: exit 0, records written; one zoo case runs too once the project asks
   for the zoo (`zoo = true`; the zoo loads from the install);
3. a weight of the checkpoint scaled by 1.05: exit 1, and the first finding - terminal, summary.md,
   HTML - names the changed checkpoint (model.safetensors sha256 old -> new) with the differences
   under it (then the checkpoint is restored: step 5 runs clean against its records);
4. Ctrl-C mid-run: the records untouched; exit 130 and no empty report folder;
5. the README's upgrade workflow, as written, in a second project of the same model (issue 56): the
   version run today installed with the pins that follow transformers dropped (5.14.0) and recorded,
   the candidate upgrade installed (5.24.0, constraints.txt's), a bare `harness check`: exit 1, its
   first and last lines naming the env it compared with (tf5.14.0-..., the last recorded), the
   regression 5.24.0 really brings named (prompt lookup with a static cache raises IndexError in
   index_copy_), and no 5.24.0 record written; `harness regen --yes` accepts it and the rerun is clean
   (nothing new, nothing written);
6. the CI workflow `harness init --ci github` writes, its jobs run step by step on that project
   (tests/workflow_steps.py): red on the upgrade before it is accepted, green after.

The commands are the README's, as written (tests/test_readme.py checks that each one appears here).
Marked `journey` (deselected by default: about 4 minutes, and it installs packages - PyPI or pip's
cache); `.ci/run` runs `pytest -m journey tests/test_journey.py -s`. Each step's wall time is
printed (the -s output) and kept in the `journey` fixture.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.checking.findings import group_findings
from harness.report import load_results
from test_fail_closed import _as_a_terminal_starts_it
from user_checkpoints import perturb, qwen3
from workflow_steps import workflow_gates

pytestmark = pytest.mark.journey

REPO = Path(__file__).resolve().parents[1]
KEY = "tf5.24.0-torch2.13.0-cpu-x86_64-fp32"  # the env constraints.txt pins, on any x86_64 CPU
WEIGHT = "model.layers.0.mlp.down_proj.weight"
TODAY = "tf5.14.0-torch2.13.0-cpu-x86_64-fp32"  # the env the README's upgrade workflow records first
MODEL = "models/my-llama"  # the README's `harness init --model ./models/my-llama`


@dataclass
class Step:
    command: str
    rc: int
    out: str
    seconds: float
    results: Path | None = None  # the run's results.json


@dataclass(frozen=True)
class Interrupted:
    before: dict[str, str]  # records_digest before the interrupted run
    after: dict[str, str]
    new_report_dirs: set[Path]


@dataclass
class Journey:
    venv: Path
    project: Path
    times: dict[str, float] = field(default_factory=dict)
    steps: dict[str, Step] = field(default_factory=dict)
    interrupted: Interrupted | None = None
    gates: dict[str, dict] = field(default_factory=dict)  # workflow_gates' answer per CI run

    def gate(self, name: str, tmp: Path) -> None:
        """The workflow's cell and chain jobs, run step by step on the upgrade project (tests/workflow_steps.py):
        the workflow is written by the venv's `harness init --ci github` on first use, its matrix the
        installed versions."""
        start = time.perf_counter()
        self.gates[name] = workflow_gates(self.venv, self.upgrade, tmp, label=name.replace(" ", "-"), verbose=False)
        self.times[name] = round(time.perf_counter() - start, 1)

    @property
    def upgrade(self) -> Path:
        """The second project: the README's upgrade workflow."""
        return self.project.parent / "upgrade"

    def env(self) -> dict[str, str]:
        """A user's shell: the venv first on PATH, no checkout on PYTHONPATH, not a CI run (CI is strict)."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CI", "VIRTUAL_ENV", "PYTHONHOME",
                                                       "PYTEST_XDIST_AUTO_NUM_WORKERS")}
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.venv)
        return env

    def run(self, name: str, command: str, timeout: int = 600, cwd: Path | None = None) -> Step:
        start = time.perf_counter()
        proc = subprocess.run(command, shell=True, cwd=cwd or self.project, env=self.env(), capture_output=True, text=True,
                              timeout=timeout, executable="/bin/bash")
        step = Step(command, proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - start)
        self.steps[name] = step
        self.times[name] = round(step.seconds, 1)
        print(f"journey: {name}: `{command}` -> exit {step.rc} in {step.seconds:.1f} s", flush=True)
        return step

    def interrupt(self, name: str, command: str, after_s: float = 4.0) -> Step:
        """Start `command` in its own process group, wait until pytest runs plus `after_s`, then send
        SIGINT to the group - what Ctrl-C in a terminal does. The command starts as a terminal starts
        it, SIGINT at its default: a CI step run as a background job of a non-interactive shell
        (`cmd &`) inherits SIGINT ignored (POSIX), and the harness, like any program, keeps that."""
        start = time.perf_counter()
        proc = subprocess.Popen(command, shell=True, cwd=self.project, env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True, executable="/bin/bash",
                                preexec_fn=_as_a_terminal_starts_it)
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("harness: running"):
                break
        time.sleep(after_s)
        os.killpg(proc.pid, signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
        step = Step(command, proc.returncode, "".join(lines) + rest, time.perf_counter() - start)
        self.steps[name] = step
        self.times[name] = round(step.seconds, 1)
        print(f"journey: {name}: `{command}` + SIGINT -> exit {step.rc} in {step.seconds:.1f} s", flush=True)
        return step

    def latest_results(self, key: str = KEY, project: Path | None = None) -> Path:
        runs = sorted(((project or self.project) / "reports" / key).iterdir())
        return runs[-1] / "results.json"


def records_digest(root: Path) -> dict[str, str]:
    """sha256 of every record file (dot files - locks - left out)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.json")) if not any(part.startswith(".") for part in p.relative_to(root).parts)}


def checkout_copy(target: Path) -> Path:
    """The checkout's files (tracked, and untracked ones git does not ignore) - no build/ leftovers."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def journey(tmp_path_factory: pytest.TempPathFactory) -> Journey:
    root = tmp_path_factory.mktemp("journey")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    trip = Journey(venv, root / "project")
    trip.project.mkdir()
    source = checkout_copy(root / "src")
    # the README's install line, as written, in (a copy of) the checkout
    built = trip.run("wheel build", "pip wheel . -w dist --no-deps", cwd=source)
    assert built.rc == 0, built.out[-3000:]
    installed = trip.run("wheel install", "pip install dist/genharness-*.whl -c constraints.txt", cwd=source)
    assert installed.rc == 0, installed.out[-3000:]
    model = qwen3(trip.project / MODEL)  # "your model": a save_pretrained directory in the project
    original = (model / "model.safetensors").read_bytes()

    trip.run("init", "harness init --model ./models/my-llama")
    trip.run("check 1", "harness check -- -k my-model")
    trip.steps["check 1"].results = trip.latest_results()
    # a project of your own runs only your models unless it asks for the zoo (`zoo = true`)
    pyproject = trip.project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("[tool.harness]\n", "[tool.harness]\nzoo = true\n", 1))
    trip.run("zoo case", "harness check -- -k llama-target.plain.dynamic.short-0.greedy")
    perturb(model, WEIGHT, 1.05)
    trip.run("perturbed", "harness check -- -k my-model")
    trip.steps["perturbed"].results = trip.latest_results()
    (model / "model.safetensors").write_bytes(original)  # restored: the upgrade check below must be clean
    before = records_digest(trip.project / "golden" / "records")
    reports_before = set((trip.project / "reports" / KEY).iterdir())
    trip.interrupt("ctrl-c", "harness check -- -k my-model")
    trip.interrupted = Interrupted(before, records_digest(trip.project / "golden" / "records"),
                                   set((trip.project / "reports" / KEY).iterdir()) - reports_before)
    # the README's upgrade workflow, as written, in a second project of the same (restored) model
    up = trip.upgrade
    shutil.copytree(model, up / MODEL)
    shutil.copy(REPO / "constraints.txt", up / "constraints.txt")
    trip.run("upgrade init", "harness init --model ./models/my-llama", cwd=up)
    trip.run("other pins", "grep -vE '^(transformers|tokenizers|huggingface_hub|hf-xet)==' constraints.txt > other.txt",
             cwd=up)
    trip.run("install today's", "pip install transformers==5.14.0 -c other.txt", cwd=up)
    trip.run("record today's", "harness check", cwd=up)
    trip.run("install the upgrade", "pip install transformers==5.24.0 -c constraints.txt", cwd=up)
    trip.gate("CI before accepting", root / "ci")  # the workflow `harness init --ci github` writes, on the upgrade
    trip.run("upgrade rerun", "harness check", cwd=up)
    trip.steps["upgrade rerun"].results = trip.latest_results(KEY, up)
    trip.run("accept", "harness regen --yes", cwd=up)
    trip.run("clean rerun", "harness check", cwd=up)
    trip.steps["clean rerun"].results = trip.latest_results(KEY, up)
    trip.gate("CI after accepting", root / "ci")
    trip.run("compare", f"harness compare {TODAY} {KEY}", cwd=up)
    print("journey times (s): " + json.dumps(trip.times), flush=True)
    return trip


def test_the_wheel_carries_the_suites_and_the_zoo(journey: Journey) -> None:
    probe = ("import harness.cli.project as p, harness.zoo.specs as z; "
             "print(p.HARNESS_SUITES); print(z.MODELS_DIR)")
    out = subprocess.run([str(journey.venv / "bin" / "python"), "-c", probe], cwd=journey.project, env=journey.env(),
                         capture_output=True, text=True, check=True).stdout.split()
    site = str(journey.venv / "lib")
    assert out[0].startswith(site) and out[0].endswith("harness/suites"), out
    assert out[1].startswith(site) and out[1].endswith("harness/zoo/models"), out
    assert journey.steps["zoo case"].rc == 0, journey.steps["zoo case"].out[-3000:]  # a zoo model loads from the install


def test_init_writes_relative_paths_and_a_gitignore(journey: Journey) -> None:
    step = journey.steps["init"]
    assert step.rc == 0, step.out
    text = (journey.project / "pyproject.toml").read_text()
    assert f'path = "{MODEL}"' in text and str(journey.project) not in text and "\nmodels_dir" not in text
    ignored = (journey.project / ".gitignore").read_text().split()
    assert "reports/" in ignored and ".pytest_cache/" in ignored
    assert (journey.project / "golden" / "records").is_dir()


def test_the_first_check_records_and_passes(journey: Journey) -> None:
    first = journey.steps["check 1"]
    assert first.rc == 0 and "verdict: pass" in first.out, first.out[-3000:]
    assert "records written: wrote" in first.out
    assert first.results is not None
    results = json.loads(first.results.read_text())
    assert results["env"]["threads"] == 1  # the env key does not depend on where you run
    assert first.out.count("fields compared, by status") == 1  # the summary is printed once
    leftovers = {p.name for p in journey.project.iterdir()} & {".benchmarks", ".pytest_cache", ".hypothesis"}
    assert leftovers == set()


def test_a_changed_weight_fails_and_the_first_finding_names_the_checkpoint(journey: Journey) -> None:
    step = journey.steps["perturbed"]
    assert step.rc == 1 and "verdict: REGRESSION" in step.out, step.out[-3000:]
    first = next(line.strip() for line in step.out.splitlines() if line.strip().startswith("1. "))
    assert first.startswith("1. the checkpoint of my-model changed (model.safetensors sha256 "), first
    assert "1.1. regression" in step.out  # the differences follow, grouped under it
    results_path = step.results
    assert results_path is not None
    findings = group_findings(load_results(results_path).outcomes)
    assert findings[0].category == "checkpoint-changed" and findings[0].under
    assert all(o.case.startswith("my-model") for f in findings[0].under for o in f.outcomes)
    html = (results_path.parent / "index.html").read_text()
    assert "the checkpoint of my-model changed (model.safetensors sha256" in html
    assert "1. the checkpoint of my-model changed (model.safetensors sha256" in (results_path.parent / "summary.md").read_text()


def test_ctrl_c_leaves_the_records_untouched(journey: Journey) -> None:
    assert journey.interrupted is not None and journey.interrupted.before
    assert journey.interrupted.after == journey.interrupted.before


def test_ctrl_c_exits_130_and_leaves_no_empty_report_folder(journey: Journey) -> None:
    step = journey.steps["ctrl-c"]
    assert journey.interrupted is not None
    assert step.rc == 130, step.out[-2000:]
    assert all(any(d.iterdir()) for d in journey.interrupted.new_report_dirs), journey.interrupted.new_report_dirs


def test_the_upgrade_rerun_compares_with_what_you_had_and_records_no_regression(journey: Journey) -> None:
    for name in ("upgrade init", "other pins", "install today's", "install the upgrade"):
        assert journey.steps[name].rc == 0, (name, journey.steps[name].out[-3000:])
    today = journey.steps["record today's"]
    assert today.rc == 0 and "verdict: pass" in today.out and "records written: wrote" in today.out, today.out[-3000:]
    rerun = journey.steps["upgrade rerun"]
    lines = [line for line in rerun.out.splitlines() if line.strip()]
    said = f"harness: compared with {TODAY} (your last recorded env"
    assert lines[0].startswith(said) and lines[-1].startswith(f"harness: compared with {TODAY}"), rerun.out[-3000:]
    assert rerun.rc == 1 and "verdict: REGRESSION" in rerun.out, rerun.out[-3000:]
    assert f"records written: none (the comparison with {TODAY} holds regressions" in rerun.out
    assert rerun.results is not None
    results = json.loads(rerun.results.read_text())
    assert results["env"]["transformers"] == "5.24.0" and results["meta"]["baseline_key"] == TODAY
    regressions = {(o["suite"], o["case"], o["field"]): o["detail"] for o in results["outcomes"]
                   if o["status"] == "regression"}
    # 5.24.0's prompt lookup overruns a static cache (index_copy_ out of bounds); 5.14.0's generates
    crash = ("outputs", "my-model.prompt_lookup.static.short-0.greedy", "error")
    assert crash in regressions and "IndexError" in regressions[crash], regressions
    assert f"{crash[1]}" in rerun.out  # named in the terminal, not only in the report


def test_nothing_of_the_upgrade_is_recorded_until_accepted_and_then_the_rerun_is_clean(journey: Journey) -> None:
    accept, clean = journey.steps["accept"], journey.steps["clean rerun"]
    assert accept.rc == 0 and f"under {journey.upgrade / 'golden' / 'records' / KEY}" in accept.out, accept.out[-3000:]
    assert clean.rc == 0 and "verdict: pass" in clean.out and "compared with" not in clean.out, clean.out[-3000:]
    assert clean.results is not None
    results = json.loads(clean.results.read_text())
    assert results["meta"]["baseline_key"] == KEY
    # nothing written but a latency field regen left unrecorded (a busy machine judges no latency)
    written = {(w["path"].split("/")[1], change) for w in results["meta"]["writes"] for change in w["fields"].values()}
    assert written <= {("latency", "new")}, written
    assert any(o["field"] == "checkpoint" and o["status"] == "pass" for o in results["outcomes"])
    assert "pass" in {o["status"] for o in results["outcomes"]}  # (info rows are information beside the checks)
    # clean: nothing changed, missing or regressed (a latency field regen's busy machine left unrecorded may be new)
    assert {o["status"] for o in results["outcomes"] if o["suite"] != "latency"} <= {"pass", "skipped", "info"}
    assert {o["status"] for o in results["outcomes"]} <= {"pass", "skipped", "info", "new"}
    recorded = sorted(p.name for p in (journey.upgrade / "golden" / "records").iterdir() if not p.name.startswith("."))
    assert recorded == [TODAY, KEY]
    compare = journey.steps["compare"]
    assert compare.rc == 1 and "distinct findings" in compare.out, compare.out[-3000:]  # the accepted regression, on record


def test_the_ci_workflow_fails_on_the_upgrade_until_it_is_accepted(journey: Journey) -> None:
    """The workflow `harness init --ci github` writes, its cell and chain jobs run step by step on the
    upgrade project: strict against the committed records (5.14.0's only), the cell's check exits 1
    on the regression, its report is uploaded, and both jobs fail; once `harness regen` has recorded
    5.24.0 the same jobs pass, and the comment names the env each compared with."""
    red, green = journey.gates["CI before accepting"], journey.gates["CI after accepting"]
    assert red["exit_code"] == 1 and red["baseline"] == TODAY and red["env_key"] == KEY, red["cell"].log()
    assert red["cell_conclusion"] == "failure" and red["chain_conclusion"] == "failure", red["chain"].log()
    assert "Verdict: **regression**" in red["summary"] and "prompt_lookup.static.short-0.greedy" in red["summary"], red["summary"]
    assert green["baseline"] == KEY, green["cell"].log()
    if green["exit_code"] == 1 and green["regressed"] == ["not-judged"]:
        # a strict cell fails a latency field it could not judge (this shared machine was busy: the
        # calibration's spread) - the gate working as designed, not a regression the upgrade left; a
        # user re-runs the job. Every other category still fails the test.
        print("journey: CI after accepting: red only for latency not judged on a busy machine", flush=True)
        assert green["cell_conclusion"] == "failure" and green["chain_conclusion"] == "failure", green["chain"].log()
    else:
        assert green["exit_code"] == 0, (green["regressed"], green["cell"].log())
        assert green["cell_conclusion"] == "success" and green["chain_conclusion"] == "success", green["chain"].log()
    recorded = sorted(p.name for p in (journey.upgrade / "golden" / "records").iterdir() if not p.name.startswith("."))
    assert recorded == [TODAY, KEY]  # CI is read-only: the red run recorded nothing
