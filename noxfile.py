"""nox sessions of the version matrix: one `suites-<transformers version>` session per cell.

    nox -s suites-5.14.0                      # one cell: fresh venv, torch (CPU) + transformers 5.14.0 + this package
    HARNESS_MATRIX_VERSIONS="5.13.1 5.14.0" nox -l

Each session installs torch (pinned: HARNESS_TORCH, default the constraints' torch, CPU; the local
wheel when pip's find-links has it), the session's transformers and this package (its other
dependencies pinned by constraints.txt), then runs ``pytest suites --force-regen`` so the cell's
own env key is (re)recorded under HARNESS_GOLDEN_DIR (default: the project's golden_dir).
HARNESS_RESULTS, if set, is where the run's results.json goes (`harness matrix` reads the env
key from it). `harness matrix` (harness/cli/matrix.py) drives these sessions.

`harness bisect` (harness/cli/bisect.py) drives the same sessions to check one case instead of
recording: HARNESS_BASELINE=KEY runs ``pytest suites --baseline KEY`` (nothing is written: a foreign
baseline) instead of ``--force-regen``, and HARNESS_RUNS=N runs it N times in the one venv (run i > 1
writes ``<results>.run<i>.json``), so a case whose outcome differs between two runs shows; the case
filter comes as the session's posargs (``nox -s suites-5.20.0 -- --harness-case contracts:CASE``). A
failing check is a result here, not a broken session (pytest's exit 1 is accepted).
"""

from __future__ import annotations

import os
from pathlib import Path

import nox

ROOT = Path(__file__).parent
DEFAULT_VERSIONS = "5.13.1 5.14.0 5.24.0"
VERSIONS = os.environ.get("HARNESS_MATRIX_VERSIONS", DEFAULT_VERSIONS).split()
PINNED_ELSEWHERE = ("torch", "transformers")  # the cell's own versions, not constraints.txt's
# resolved for the cell's transformers (5.13.1 needs huggingface-hub<2 and tokenizers<=0.23.0)
FOLLOW_TRANSFORMERS = ("tokenizers", "huggingface_hub", "huggingface-hub", "hf-xet")

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True  # a cached cell reinstalls nothing it already has


def constraint(name: str) -> str:
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.split("==")[0].strip().lower() == name:
            return line.split("==")[1].strip()
    raise ValueError(f"constraints.txt pins no {name}")


def cell_constraints(tmp: Path, torch: str, transformers: str) -> Path:
    """constraints.txt with the cell's torch and transformers, and without the pins that must follow
    its transformers (without this, installing the package would upgrade transformers to satisfy them)."""
    dropped = PINNED_ELSEWHERE + FOLLOW_TRANSFORMERS
    lines = [line for line in (ROOT / "constraints.txt").read_text().splitlines()
             if line.split("==")[0].strip().lower() not in dropped]
    path = tmp / "constraints-cell.txt"
    path.write_text("\n".join([*lines, f"torch=={torch}", f"transformers=={transformers}"]) + "\n")
    return path


def run_results(results: str, run: int) -> str:
    """Where run `run` of a session writes its results.json: HARNESS_RESULTS for the first,
    ``results.run2.json`` beside it for the second, ..."""
    if not results or run == 1:
        return results
    path = Path(results)
    return str(path.with_name(f"{path.stem}.run{run}{path.suffix}"))


def cell(version: str):
    def suites(session: nox.Session) -> None:
        torch = os.environ.get("HARNESS_TORCH") or constraint("torch")
        # next to the venv, not session.create_tmp(): that would set TMPDIR under .nox/ for the suites
        constraints = str(cell_constraints(Path(session.virtualenv.location), torch, version))
        session.install(f"torch=={torch}")  # CPU wheel: pip's find-links here; PIP_EXTRA_INDEX_URL in CI
        session.install(f"transformers=={version}", "-c", constraints)
        session.install("-e", ".[dev]", "-c", constraints)
        session.run("python", "-c", "import torch, transformers; print('cell: torch', torch.__version__, "
                    "'transformers', transformers.__version__)")
        baseline = os.environ.get("HARNESS_BASELINE")
        mode = ["--baseline", baseline] if baseline else ["--force-regen"]
        command = ["pytest", "suites", *mode, "-q", "-p", "no:cacheprovider"]
        if os.environ.get("HARNESS_GOLDEN_DIR"):
            command += ["--golden-dir", os.environ["HARNESS_GOLDEN_DIR"]]
        if os.environ.get("HARNESS_WORKERS"):
            command += ["-n", os.environ["HARNESS_WORKERS"]]
        for run in range(1, int(os.environ.get("HARNESS_RUNS") or 1) + 1):
            results = run_results(os.environ.get("HARNESS_RESULTS", ""), run)
            where = ["--harness-results", results] if results else []
            session.run(*command, *where, *session.posargs, success_codes=[0, 1] if baseline else [0])

    suites.__doc__ = f"record the suites under transformers {version} (torch pinned, CPU)"
    return suites


for _version in VERSIONS:
    nox.session(name=f"suites-{_version}")(cell(_version))
