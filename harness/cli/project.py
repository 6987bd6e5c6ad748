"""The project a command runs in, and the pytest run behind `harness check` / `harness regen`:
finding the root (pyproject.toml with [tool.harness]), its settings and store, the up-front checks
(fixtures, env keys, records) and the pytest command line. Every user error is a `UsageError`
(one line, exit 2 in harness/cli/).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.schema import RecordError
from harness.settings.config import HarnessConfig, load_config
from harness.store.env import env_key
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
    settings: HarnessConfig
    store: GoldenStore
    reports_dir: Path


def open_project(args: argparse.Namespace) -> Project:
    root = find_root(args.root)
    settings = load_config(root)
    golden = Path(args.golden_dir).resolve() if getattr(args, "golden_dir", None) else settings.golden_dir
    reports = Path(args.reports_dir).resolve() if getattr(args, "reports_dir", None) else settings.reports_dir
    return Project(root, settings, GoldenStore(golden), reports)


def check_fixtures(settings: HarnessConfig, args: argparse.Namespace | None = None) -> None:
    """Fail before running anything: every checkpoint the suites will load (all of the manifest's,
    or those named in [tool.harness] models) is present with its manifest sha256, every
    extra_model_dirs entry exists, and the user's own models (`--model PATH [--assistant PATH]`,
    else [tool.harness.models.NAME]) pass harness/settings/models.py `resolve`."""
    from harness.fixtures.load import FixtureError, check_models

    try:
        check_models(settings.models_dir, settings.models)
    except FixtureError as exc:
        raise UsageError(f"missing or corrupt fixture: {exc}") from exc
    for extra in settings.extra_model_dirs:
        if not extra.is_dir():
            raise UsageError(f"missing model dir: {extra} does not exist ([tool.harness] extra_model_dirs); "
                             "fix the path or save a checkpoint there with save_pretrained()")
    check_user_models(settings, args)


def check_user_models(settings: HarnessConfig, args: argparse.Namespace | None) -> None:
    """The run's own checkpoints - `--model` (with `--assistant`), else the configured ones - are
    readable, safetensors, tokenizer-compatible and ask for paths they support (harness/settings/models.py)."""
    from harness.settings.models import ModelError, from_flags, resolve

    model, assistant = getattr(args, "model", None), getattr(args, "assistant", None)
    if assistant and not model:
        raise UsageError("--assistant needs --model PATH (the model it drafts for)")
    try:
        for user in (from_flags(model, assistant),) if model else settings.user_models:
            resolve(user)
    except ModelError as exc:
        raise UsageError(f"bad model: {exc}") from exc


def current_env_key(args: argparse.Namespace) -> str:
    """The env key this machine's runs are recorded under (imports torch: only when needed)."""
    from harness.store.env import fingerprint

    try:
        return env_key(fingerprint(dtype=args.dtype, attn_implementation=args.attn, device=args.device))
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


HARNESS_SUITES = Path(__file__).resolve().parents[1] / "suites"  # the harness checkout's own


def suites_dir(project: Project, args: argparse.Namespace) -> Path:
    """--suites, else <root>/suites, else (a project of your own, `harness init`) the harness's suites."""
    path = Path(args.suites).resolve() if args.suites else project.root / "suites"
    if not args.suites and not path.exists() and HARNESS_SUITES.is_dir():
        path = HARNESS_SUITES
    if not path.exists():
        raise UsageError(f"suites {path} do not exist; pass --suites PATH")
    return path


def pytest_command(project: Project, args: argparse.Namespace, results: Path, extra: Sequence[str]) -> list[str]:
    command = [sys.executable, "-m", "pytest", str(suites_dir(project, args)), "-p", "no:cacheprovider",
               "--rootdir", str(project.root), "--harness-results", str(results),
               "--golden-dir", str(project.store.root),
               "--harness-dtype", args.dtype, "--harness-device", args.device, "--harness-attn", args.attn]
    if args.threads:
        command += ["--harness-threads", str(args.threads)]
    if getattr(args, "model", None):
        command += ["--harness-model", str(Path(args.model).resolve())]
        if args.assistant:
            command += ["--harness-assistant", str(Path(args.assistant).resolve())]
    if args.workers is not None:
        command += ["-n", args.workers]
    if getattr(args, "deep", False):
        command.append("--harness-deep")
    if not args.verbose:
        command.append("-q")
    return command + list(extra)


def run_pytest(command: list[str], cwd: Path) -> int:
    """Run pytest with the terminal attached (its output is the progress display)."""
    print("harness: running " + " ".join(command[2:]), flush=True)
    sys.stdout.flush()
    sys.stderr.flush()
    return subprocess.run(command, cwd=cwd, check=False).returncode


def pytest_problem(rc: int) -> str | None:
    """A message for pytest exit codes that mean the run itself did not work (-> exit 2)."""
    if rc in (0, 1):
        return None
    if rc == 5:
        return "pytest collected no tests (exit 5): check --suites and the PYTEST ARGS after --"
    what = PYTEST_FAILURES.get(rc, "killed or crashed" if rc < 0 else "unexpected exit code")
    return f"pytest stopped with exit code {rc} ({what}); see its output above"


# ----------------------------------------------------------------------------------------------
# harness init


def starter_block(name: str, model: str | None, assistant: str | None, models_dir: Path) -> str:
    """The commented `[tool.harness]` block `harness init` writes (TOML; strings JSON-quoted)."""
    import json

    def q(value: str) -> str:
        return json.dumps(value)

    path = q(str(Path(model).resolve())) if model else q("/path/to/your/model")
    helper = f"assistant = {q(str(Path(assistant).resolve()))}" if assistant else \
        '# assistant = "/path/to/a/smaller/model"'
    return f"""
[tool.harness]
# written by `harness init`: every key is described in genharness's README, "Configuration"
golden_dir = "golden/records"  # your golden records, <env-key>/<suite>/<case>.json: commit them
models_dir = {q(str(models_dir))}  # the harness's fixture zoo (hash-checked)
reports_dir = "reports"        # HTML reports (git-ignore it)
# baseline = ""                # env key to compare against ("" = this environment's own records)

[tool.harness.models.{name}]
path = {path}  # a save_pretrained directory (safetensors only; never unpickled)
{helper}  # same tokenizer; enables the assisted / ensemble cases
# dtype = "bf16"               # the dtype you serve in (default: the run's, --dtype, fp32)
# prompts = "prompts.jsonl"    # your prompts, one {{"id": "...", "text": "..."}} a line (default: two built-in)
# paths = ["plain", "assisted", "prompt_lookup", "mtp", "ensemble"]  # default: every path it supports
"""


def init_project(directory: Path, name: str, model: str | None, assistant: str | None) -> tuple[Path, Path]:
    """Append the starter block to directory/pyproject.toml (created if absent) and create its
    golden_dir; a pyproject.toml that has [tool.harness] already is left alone (UsageError)."""
    from harness.fixtures.zoo import MODELS_DIR
    from harness.settings.models import NAME

    if not NAME.match(name):
        raise UsageError(f"--name {name!r}: use letters, digits, '-' and '_' (it prefixes case ids and record files)")
    if assistant and not model:
        raise UsageError("--assistant needs --model PATH (the model it drafts for)")
    pyproject = directory / "pyproject.toml"
    text = pyproject.read_text(encoding="utf-8") if pyproject.is_file() else ""
    try:
        has = "harness" in tomllib.loads(text).get("tool", {})
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{pyproject}: not valid TOML ({exc}); fix it before `harness init`") from exc
    if has:
        raise UsageError(f"{pyproject} already has [tool.harness]; edit it (README, 'Configuration') "
                         "instead of running init again")
    block = starter_block(name, model, assistant, MODELS_DIR)
    pyproject.write_text(text + ("\n" if text and not text.endswith("\n") else "") + block.lstrip("\n" if not text else ""),
                         encoding="utf-8")
    golden = directory / "golden" / "records"
    golden.mkdir(parents=True, exist_ok=True)
    return pyproject, golden
