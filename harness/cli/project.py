"""The project a command runs in and the pytest run behind `harness check` / `harness regen`:
the root (pyproject.toml with [tool.harness]), its settings and store, the up-front checks
(settings, fixtures, env keys, records) and the pytest command line. Every user error is a
`UsageError` (one line, exit 2).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.cli import child
from harness.cli.child import Guard
from harness.schema import RecordError
from harness.settings.config import HarnessConfig, load_config
from harness.settings.run import RunSettings, SettingsError
from harness.store.records import GoldenStore, UnknownEnvError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib

PYTEST_FAILURES = {2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected"}


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit 2."""


# ----------------------------------------------------------------------------------------------
# project, settings, store


def find_root(explicit: str | None) -> Path:
    """--root, else the nearest directory upward from cwd whose pyproject.toml has [tool.harness]."""
    if explicit:
        root = Path(explicit).resolve()
        if not root.is_dir():
            raise UsageError(f"--root {explicit}: not a directory")
        return root
    here = Path.cwd().resolve()
    for directory in (here, *here.parents):
        pyproject = directory / "pyproject.toml"
        if not pyproject.is_file():
            continue
        try:
            with pyproject.open("rb") as handle:
                if "harness" in tomllib.load(handle).get("tool", {}):
                    return directory
        except tomllib.TOMLDecodeError:  # load_config will name the problem
            return directory
        except OSError:
            continue
    raise UsageError(f"no pyproject.toml with [tool.harness] in {here} or above; run inside the project or pass --root")


@dataclass(frozen=True)
class Project:
    root: Path
    config: HarnessConfig
    store: GoldenStore  # --golden-dir, else [tool.harness] golden_dir
    reports_dir: Path


def open_project(args: argparse.Namespace) -> Project:
    root = find_root(args.root)
    config = load_config(root)
    golden = getattr(args, "harness_golden_dir", None)
    reports = getattr(args, "reports_dir", None)
    return Project(root, config, GoldenStore(Path(golden).resolve() if golden else config.golden_dir),
                   Path(reports).resolve() if reports else config.reports_dir)


def run_settings(project: Project, args: argparse.Namespace) -> RunSettings:
    """The run's settings from the command line, validated (harness/settings/run.py)."""
    try:
        return RunSettings.from_cli(args, project.config).validate(front="cli")
    except SettingsError as exc:
        raise UsageError(str(exc)) from None


def require_store(project: Project, args: argparse.Namespace) -> None:
    """A golden directory that does not exist is a typo or a wrong checkout, never 'no records'."""
    if not project.store.root.is_dir():
        source = "--golden-dir" if getattr(args, "harness_golden_dir", None) else "[tool.harness] golden_dir"
        raise UsageError(f"{project.store.root} does not exist ({source}); fix the path, or create the directory "
                         "and record this env with `harness regen`")


def check_fixtures(config: HarnessConfig) -> None:
    """Fail before running anything: every checkpoint the suites will load (all of the manifest's,
    or those named in [tool.harness] models) is present with its manifest sha256, and every
    extra_model_dirs entry exists. (Your own models are checked by `RunSettings.validate`.)"""
    from harness.fixtures.load import FixtureError, check_models

    try:
        check_models(config.models_dir, config.models)
    except FixtureError as exc:
        raise UsageError(f"missing or corrupt fixture: {exc}") from exc
    for extra in config.extra_model_dirs:
        if not extra.is_dir():
            raise UsageError(f"missing model dir: {extra} does not exist ([tool.harness] extra_model_dirs); "
                             "fix the path or save a checkpoint there with save_pretrained()")


def current_env_key(run: RunSettings) -> str:
    """The env key this machine's runs are recorded under (imports torch: only when needed)."""
    from harness.store.env import env_key, fingerprint

    try:
        return env_key(fingerprint(dtype=run.dtype, attn_implementation=run.attn, device=run.device,
                                   threads=run.threads))
    except ValueError as exc:
        raise UsageError(f"--dtype/--device: {exc}") from exc


def validate_env_key(store: GoldenStore, key: str, source: str, current: str | None = None) -> None:
    try:
        store.require_env(key, source, current)
    except UnknownEnvError as exc:
        raise UsageError(str(exc)) from exc


def preflight_records(store: GoldenStore, key: str) -> None:
    """Fail before running anything when a record of the baseline env cannot be read."""
    try:
        store.env_records(key)
    except RecordError as exc:
        raise UsageError(f"corrupt golden record {exc}; fix or delete the file "
                         "(or, if it is the current env's, rewrite it with `harness regen`)") from exc


# ----------------------------------------------------------------------------------------------
# running pytest


def check_workers(value: str | None) -> None:
    if value is None:
        return
    if not (value.isdigit() or value in ("auto", "logical")):
        raise UsageError(f"-n {value!r}: expected a number of workers, 'auto' or 'logical'")
    if importlib.util.find_spec("xdist") is None:
        raise UsageError("-n needs pytest-xdist; install it (pip install pytest-xdist) or drop -n")


HARNESS_SUITES = Path(__file__).resolve().parents[2] / "suites"  # the harness checkout's own


def suites_dir(project: Project, args: argparse.Namespace) -> Path:
    """--suites, else <root>/suites, else (a project of your own, `harness init`) the harness's suites."""
    path = Path(args.suites).resolve() if args.suites else project.root / "suites"
    if not args.suites and not path.exists() and HARNESS_SUITES.is_dir():
        path = HARNESS_SUITES
    if not path.exists():
        raise UsageError(f"suites {path} do not exist; pass --suites PATH")
    return path


def pytest_command(project: Project, run: RunSettings, args: argparse.Namespace, extra: Sequence[str]) -> list[str]:
    command = [sys.executable, "-m", "pytest", str(suites_dir(project, args)), "-p", "no:cacheprovider",
               "--rootdir", str(project.root), *run.to_pytest_args()]
    if args.workers is not None:
        command += ["-n", args.workers]
    if not args.verbose:
        command.append("-q")
    return command + list(extra)


def run_pytest(command: list[str], cwd: Path, guard: Guard | None = None) -> int:
    """Run pytest with the terminal's output attached (its output is the progress display), as a
    child that dies with this process (harness/cli/child.py)."""
    print("harness: running " + " ".join(command[2:]), flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    return child.run(command, cwd, guard)


def pytest_problem(rc: int) -> str | None:
    """A message for pytest exit codes that mean the run itself did not work (-> exit 2)."""
    if rc in (0, 1):
        return None
    if rc == 5:
        return "pytest collected no tests (exit 5): check --suites and the PYTEST ARGS after --"
    what = PYTEST_FAILURES.get(rc, "killed or crashed" if rc < 0 else "unexpected exit code")
    return f"pytest stopped with exit code {rc} ({what}); see its output above"
