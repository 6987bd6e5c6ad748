"""nox sessions of the version matrix: one `suites-<transformers version>` session per cell.

    nox -s suites-5.14.0                      # one cell: fresh venv, torch (CPU) + transformers 5.14.0 + this package
    HARNESS_MATRIX_VERSIONS="5.13.1 5.14.0" nox -l

Each session installs torch (pinned: HARNESS_TORCH, default the constraints' torch, CPU; the local
wheel when pip's find-links has it), the session's transformers and this package (its other
dependencies pinned by constraints.txt), then runs ``pytest suites --force-regen`` so the cell's
own env key is (re)recorded under HARNESS_GOLDEN_DIR (default: the project's golden_dir).
HARNESS_RESULTS, if set, is where the run's results.json goes (`harness matrix` reads the env
key from it). `harness matrix` (harness/cli/matrix.py) drives these sessions.
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
        command = ["pytest", "suites", "--force-regen", "-q", "-p", "no:cacheprovider"]
        if os.environ.get("HARNESS_GOLDEN_DIR"):
            command += ["--golden-dir", os.environ["HARNESS_GOLDEN_DIR"]]
        if os.environ.get("HARNESS_RESULTS"):
            command += ["--harness-results", os.environ["HARNESS_RESULTS"]]
        if os.environ.get("HARNESS_WORKERS"):
            command += ["-n", os.environ["HARNESS_WORKERS"]]
        session.run(*command, *session.posargs)

    suites.__doc__ = f"record the suites under transformers {version} (torch pinned, CPU)"
    return suites


for _version in VERSIONS:
    nox.session(name=f"suites-{_version}")(cell(_version))
