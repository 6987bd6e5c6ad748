"""Every command of the README's shell blocks runs as written: each is listed here with what runs
it - CI's script (`.ci/run`), the own-model journey from the wheel (tests/test_journey.py, which
must hold the command's exact text), or the test that runs the same command on a small project -
and the ones that need neither a network nor minutes run here, as written.

A README command that is not listed fails `test_every_readme_command_is_covered`: add it with the
test that runs it (or make it one this file runs)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"```bash\n(.*?)```", re.S)
JOURNEY = "tests/test_journey.py"
CI = ".ci/run"
HERE = "tests/test_readme.py"

# command (a README line without its comment) -> where it runs
COVERED: dict[str, tuple[str, ...]] = {
    'pip install -e . -c constraints.txt && harness check': (CI,),
    'pip install -e ".[dev]" -c constraints.txt && pytest -n 2': (CI,),
    'pip wheel . -w dist --no-deps && pip install dist/genharness-*.whl -c constraints.txt': (JOURNEY,),
    'harness init --model ./models/my-llama': (JOURNEY,),
    'harness check -- -k my-model': (JOURNEY,),
    'harness check': (JOURNEY, "tests/test_upgrade_baseline.py::test_a_regression_after_the_upgrade_fails_names_the_baseline_and_is_never_recorded"),
    "grep -vE '^(transformers|tokenizers|huggingface_hub|hf-xet)==' constraints.txt > other.txt": (JOURNEY,),
    'pip install transformers==5.14.0 -c other.txt': (JOURNEY,),
    'pip install transformers==5.24.0 -c constraints.txt': (HERE, JOURNEY),
    'harness regen --yes': (JOURNEY, "tests/test_cli.py::test_regen_yes_prints_and_writes_only_the_current_env"),
    'harness compare tf5.14.0-torch2.13.0-cpu-x86_64-fp32 tf5.24.0-torch2.13.0-cpu-x86_64-fp32': (HERE,),
    'harness init --ci github --transformers 5.14.0 5.24.0': ("tests/test_ci.py::test_init_ci_writes_the_workflow_once",),
    'harness init --ci gitlab --transformers 5.14.0 5.24.0':
        ("tests/test_ci_gitlab.py::test_init_ci_gitlab_writes_the_pipeline_once",),
    'harness repro 2 --results docs/upgrades/5.14.0-to-5.24.0/results.json': (HERE,),
    'harness check --dtype bf16 --baseline tf5.24.0-torch2.13.0-cpu-x86_64-fp32':
        ("tests/test_numerics_axis.py::test_the_zoo_loads_in_the_runs_dtype",
         "tests/test_cli.py::test_check_baseline_and_strict_reach_the_run"),
}


def readme_commands() -> list[str]:
    """Each command line of the README's ```bash blocks, without its trailing comment."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    out = []
    for block in BLOCK.findall(text):
        for line in block.splitlines():
            command = re.split(r"\s+#", line, maxsplit=1)[0].strip()
            if command and not command.startswith("#"):
                out.append(command)
    return out


def test_every_readme_command_is_covered():
    commands = readme_commands()
    assert commands, "no ```bash block found in README.md"
    assert sorted(set(commands) - set(COVERED)) == [], "README commands no test runs: list them in COVERED"
    assert sorted(set(COVERED) - set(commands)) == [], "COVERED lists commands the README no longer has"


@pytest.mark.parametrize("command", sorted(COVERED))
def test_the_listed_runner_exists_and_holds_the_command(command):
    for where in COVERED[command]:
        path, _, test = where.partition("::")
        text = (REPO / path).read_text(encoding="utf-8")
        if test:
            assert re.search(rf"^def {re.escape(test)}\(", text, re.M), f"{where} does not exist"
        elif path == CI:  # .ci/run spells pip quietly (-q); every part of the command is there
            for part in command.split(" && "):
                assert part.replace("pip install ", "pip install -q ") in text or part in text, (part, path)
        elif path == JOURNEY:  # each part of a `a && b` line as written (the journey times them apart)
            for part in command.split(" && "):
                assert part in text, f"{JOURNEY} does not run `{part}` as written"


def harness(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_compare_runs_as_written(tmp_path):
    """`harness compare A B` on the committed records (its report under a temporary --reports-dir)."""
    command = 'harness compare tf5.14.0-torch2.13.0-cpu-x86_64-fp32 tf5.24.0-torch2.13.0-cpu-x86_64-fp32'
    proc = harness(*command.split()[1:], "--reports-dir", str(tmp_path), cwd=REPO)
    assert proc.returncode in (0, 1), proc.stderr  # 1: the committed upgrade has regressions
    assert "distinct findings" in proc.stdout and list(tmp_path.glob("compare-*/*/summary.md"))


def test_repro_runs_as_written(tmp_path):
    """`harness repro 2 --results <the committed report>` writes the script and issue of that finding (its
    script under a temporary --out; nothing is run: no --run / --python)."""
    command = 'harness repro 2 --results docs/upgrades/5.14.0-to-5.24.0/results.json'
    proc = harness(*command.split()[1:], "--out", str(tmp_path), cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "repro.py").is_file() and (tmp_path / "issue.md").is_file() and "not run" in proc.stdout


def test_installing_the_pinned_transformers_runs_as_written():
    """The candidate-upgrade line resolves against constraints.txt (in an environment that has the pinned
    version already - CI's, the dev venvs - it changes nothing and needs no network)."""
    import transformers

    if transformers.__version__ != "5.24.0":
        pytest.skip(f"transformers {transformers.__version__} installed: the line would change this environment")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "transformers==5.24.0", "-c", "constraints.txt"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ResolutionImpossible" not in proc.stderr, proc.stderr[-2000:]
