"""The project a command runs in and the pytest run behind `harness check` / `harness regen`:
the root (pyproject.toml with [tool.harness]), its settings and store, the up-front checks
(settings, fixtures, env keys, records) and the pytest command line. Every user error is a
`UsageError` (one line, exit 2).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.checking.humane import relative_to
from harness.cli import child
from harness.cli.child import Guard
from harness.schema import RecordError, Results
from harness.settings.config import HarnessConfig, load_config, parse_config
from harness.settings.run import RunSettings, SettingsError
from harness.store.reading import InputError, read_toml
from harness.store.records import GoldenStore, UnknownEnvError, atomic_write_json

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
        if not pyproject.exists():
            continue
        try:
            if "harness" in read_toml(pyproject).get("tool", {}):
                return directory
        except InputError as exc:  # not UTF-8, not TOML, a FIFO, too large or deep: load_config names it
            if exc.problem.startswith("cannot be opened"):
                continue
            return directory
    raise UsageError(f"no pyproject.toml with [tool.harness] in {here} or above; run inside the project or pass --root")


@dataclass(frozen=True)
class Project:
    root: Path
    config: HarnessConfig
    store: GoldenStore  # --golden-dir / --records, else [tool.harness] golden_dir
    reports_dir: Path
    one_off: bool = False  # `--model PATH` where no project is: the current directory, the defaults


def open_project(args: argparse.Namespace) -> Project:
    """The project upward from the current directory (or --root). Where there is none, a one-off
    `--model PATH` run still works: in the current directory with the defaults (records in
    ./golden/records unless --records DIR, reports in ./reports) - `one_off_store` says so."""
    try:
        root = find_root(args.root)
        config = load_config(root)
        one_off = False
    except UsageError:
        if args.root or not getattr(args, "harness_model", None):
            raise
        root, one_off = Path.cwd().resolve(), True
        config = parse_config(root, {})
    golden = getattr(args, "harness_golden_dir", None)
    reports = getattr(args, "reports_dir", None)
    return Project(root, config, GoldenStore(Path(golden).resolve() if golden else config.golden_dir),
                   Path(reports).resolve() if reports else config.reports_dir, one_off)


def one_off_store(project: Project) -> None:
    """A one-off run says where its records go before anything is written, and creates the store."""
    if not project.one_off:
        return
    where = relative_to(project.root, project.store.root)
    print(f"harness: no pyproject.toml with [tool.harness] in {project.root} or above - a one-off run of --model: "
          f"records go to {where}/ (choose with --records DIR; `harness init --model PATH` makes a project)", flush=True)
    project.store.root.mkdir(parents=True, exist_ok=True)


CPU_ISAS = {"avx2": ("avx2", "AVX2", "AVX2"), "avx512": ("avx512", "AVX512_CORE", "AVX512"),
            "default": ("default", "SSE41", "SSE4_2")}  # ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS


def cpu_isa(level: str) -> str:
    """--cpu-isa: a level torch's dispatcher knows (argparse reports another, exit 2)."""
    if level.lower() not in CPU_ISAS:
        raise argparse.ArgumentTypeError(f"{level!r}: expected one of {', '.join(CPU_ISAS)}")
    return level.lower()


def apply_cpu_isa(level: str | None) -> None:
    """Set the ISA caps (harness/store/env.py ISA_CAPS) for the suites' processes, which inherit them
    and import torch after: the env key this process computes names the cap too."""
    if level:
        from harness.store.env import ISA_CAPS

        os.environ.update(zip(ISA_CAPS, CPU_ISAS[level], strict=True))


def run_settings(project: Project, args: argparse.Namespace) -> RunSettings:
    """The run's settings from the command line, validated (harness/settings/run.py)."""
    apply_cpu_isa(getattr(args, "cpu_isa", None))  # before the env key is computed and the suites start
    try:
        return RunSettings.from_cli(args, project.config).validate(front="cli")
    except SettingsError as exc:
        raise UsageError(str(exc)) from None


def require_store(project: Project, args: argparse.Namespace) -> None:
    """A golden directory that does not exist is a typo or a wrong checkout, never 'no records'."""
    if not project.store.root.is_dir():
        given = getattr(args, "harness_golden_dir", None)
        source = "--golden-dir / --records" if given else "[tool.harness] golden_dir"
        raise UsageError(f"{project.store.root} does not exist ({source}); fix the path, or create the directory "
                         "and record this env with `harness regen`")


def check_fixtures(config: HarnessConfig) -> None:
    """Fail before running anything: every checkpoint the suites will load (all of the manifest's,
    or those named in [tool.harness] models) is present with its manifest sha256, and every
    extra_model_dirs entry exists. (Your own models are checked by `RunSettings.validate`.)"""
    from harness.zoo.load import FixtureError, check_models

    try:
        check_models(config.models_dir, config.models)
    except FixtureError as exc:
        raise UsageError(f"missing or corrupt fixture: {exc}") from exc
    for extra in config.extra_model_dirs:
        if not extra.is_dir():
            raise UsageError(f"missing model dir: {extra} does not exist ([tool.harness] extra_model_dirs); "
                             "fix the path or save a checkpoint there with save_pretrained()")


def current_env_key(run: RunSettings) -> str:
    """The env key this machine's runs are recorded under (imports torch only off the CPU)."""
    from harness.store.env import key_of

    try:
        return key_of(dtype=run.dtype, device=run.device)
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


_PACKAGE = Path(__file__).resolve().parents[1]
# the suites this harness ships: the installed package `harness.suites` (pyproject.toml maps it to
# suites/), else the checkout's suites/ (a clone, `pip install -e .`)
HARNESS_SUITES = next((p for p in (_PACKAGE / "suites", _PACKAGE.parent / "suites") if p.is_dir()), _PACKAGE / "suites")


def default_suites(project: Project) -> Path:
    """<root>/suites, else (a project of your own, `harness init`) the suites that ship with the
    harness (`HARNESS_SUITES`)."""
    path = project.root / "suites"
    return HARNESS_SUITES if not path.exists() and HARNESS_SUITES.is_dir() else path


def suites_dir(project: Project, args: argparse.Namespace) -> Path:
    """--suites, else `default_suites`."""
    path = Path(args.suites).resolve() if args.suites else default_suites(project)
    if not path.exists():
        raise UsageError(f"suites {path} do not exist; pass --suites PATH")
    return path


def narrowed_suites(project: Project, args: argparse.Namespace) -> bool:
    """--suites names part of the suites (a file, or another directory than the default): a regen of
    it sees only part of the records and must not remove the rest."""
    return bool(args.suites) and suites_dir(project, args) != default_suites(project).resolve()


# what `harness check` / `regen` add to pytest: no cache folder and no pytest-benchmark storage
# (`.benchmarks/`) in your project, and the golden summary printed once, by the command itself
# and the mark of a run it started (`harness_front`: the plugin then refuses what it owns in addopts)
QUIET_PYTEST = ("-p", "no:cacheprovider", "-p", "no:benchmark", "-o", "harness_terminal_summary=false",
                "-o", "harness_front=cli")


def one_suite(project: Project, args: argparse.Namespace, run: RunSettings) -> str | None:
    """The suite name when --suites names one file of the default suites (and no case selection is
    set already): the run then collects every suite and narrows to that one's cases with
    --harness-case, so its per-test alpha - and every statistical field's N - is the whole run's and
    the records it writes equal a full run's (collected alone, 112 outputs tests sized the
    distribution fields for alpha / 128 instead of alpha / 512: another N, other counts)."""
    if not args.suites or run.cases:
        return None
    path = suites_dir(project, args)
    if path.is_file() and path.parent == default_suites(project).resolve() and path.stem.startswith("test_"):
        return path.stem.removeprefix("test_")
    return None


# pytest options whose next argument is their value (so a path there is the option's, not a target)
_VALUED = frozenset({"-k", "-m", "-p", "-o", "-W", "-c", "--deselect", "--ignore", "--ignore-glob", "--rootdir",
                     "--basetemp", "--junitxml", "--junit-xml", "--maxfail", "--durations", "--tb", "--log-level",
                     "--confcutdir", "--override-ini", "--log-file", "--result-log", "-n", "--dist"})


def check_extra(extra: Sequence[str]) -> None:
    """Refuse a path or node id given after --: the command already names the suites to pytest
    (`--suites`, else all of them), so pytest would collect both and run every suite - and a regen
    would re-record them all - while the user meant one. The refusal names the flag that narrows."""
    previous = None
    for token in extra:
        if not token.startswith("-") and previous not in _VALUED and Path(token.split("::")[0]).exists():
            path = token.split("::")[0]
            raise UsageError(
                f"{token!r} after --: a path there is added to the whole suites run (pytest collects both, so "
                f"every suite would run); name it with --suites {path} (its cases at the whole run's alpha), "
                "or select cases with -- -k EXPR")
        previous = token


def check_pytest_paths(project: Project, run: RunSettings, extra: Sequence[str]) -> None:
    """Refuse pytest options - after --, or in PYTEST_ADDOPTS - that point pytest's temp, cache or
    output at the golden store, the models or the reports (harness/settings/run.py
    `clobbering_option`; the plugin checks what pytest parsed, ini addopts included). pytest runs in
    the project's root: a relative path is from there."""
    import shlex

    from harness.settings.run import clobbering_option, kept_paths

    try:
        addopts = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:
        addopts = []  # refused by the owned-options check (harness/cli/__init__.py)
    for where, items in (("after --", extra), ("in PYTEST_ADDOPTS", addopts)):
        problem = clobbering_option(items, kept_paths(project.config, run.golden_dir), project.root, project.root)
        if problem:
            raise UsageError(f"{problem} ({where})")


def pytest_command(project: Project, run: RunSettings, args: argparse.Namespace, extra: Sequence[str],
                   workers: str | None = None) -> list[str]:
    suite = one_suite(project, args, run)
    if suite:
        run = run.with_(cases=(f"{suite}:*",))
    target = default_suites(project).resolve() if suite else suites_dir(project, args)
    command = [sys.executable, "-m", "pytest", str(target), *QUIET_PYTEST,
               "--rootdir", str(project.root), *pytest_config_file(project, target), *run.to_pytest_args()]
    if workers is not None:
        command += ["-n", workers]
    if not args.verbose:
        command.append("-q")
    return command + list(extra)


def pytest_config_file(project: Project, target: Path) -> list[str]:
    """`-c FILE`: the pytest configuration a plain `pytest <suites>` in the project's root reads (its
    pytest.ini, pyproject.toml [tool.pytest.ini_options], tox.ini, setup.cfg - pytest's own search),
    named explicitly. Without it pytest derives the file from the common ancestor of every path on
    the command line, and a path outside the project - regen's scratch store, an upgrade check's -
    made that '/', where no configuration is found: the run ignored the project's markers, addopts,
    python_files... ([] where pytest finds no file either)."""
    try:
        from _pytest.config.findpaths import locate_config

        _, inipath, _, *_ = locate_config(project.root, [Path(target)])
    except Exception:  # pytest's private search moved: the project's own files, in pytest's order
        inipath = next((project.root / n for n in ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
                        if (project.root / n).is_file()), None)
    return ["-c", str(inipath)] if inipath is not None else []


def default_workers(value: str | None) -> str | None:
    """-n as given; without it, one xdist worker per core (`auto`) when pytest-xdist is installed
    and the machine has more than one core, else a serial run (None). pytest-xdist's own knob for
    `auto`, PYTEST_XDIST_AUTO_NUM_WORKERS, is honoured: 0 or 1 means a serial run (one worker would
    only add a process; the harness's own tests set it, since they already run on every core)."""
    if value is not None:
        return value
    auto = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").strip()
    if importlib.util.find_spec("xdist") is None or (os.cpu_count() or 1) < 2 or (auto.isdigit() and int(auto) <= 1):
        return None
    return "auto"


def run_phases(project: Project, run: RunSettings, args: argparse.Namespace, extra: Sequence[str],
               guard: Guard | None = None) -> tuple[int, Results | None]:
    """The suites, in two phases when they run on several workers: every test but the timing ones
    on the workers, then the timing ones (the latency suite) alone in one process, so no worker
    disturbs what they measure; both decide at the whole run's per-test alpha (the phase narrows
    what runs, not m); the timing phase is not started when the parallel one says it left no timing
    test (its results' `timing_left`). Returns pytest's exit code for the whole (the worst phase's) and the run's
    results (None when no phase wrote any). A phase that collects nothing (exit 5: e.g. `-- -k`
    selecting no timing test) is no error while the other phase ran tests."""
    from harness.cli import plan
    from harness.report import load_results

    try:  # the preflight: each user model's plan, memory and time; -n capped by memory (harness/cli/plan.py)
        workers = plan.workers(run, default_workers(args.workers), explicit=args.workers is not None)
    except plan.PlanError as exc:
        raise UsageError(str(exc)) from None
    if workers in (None, "0", "1"):
        rc = run_pytest(pytest_command(project, run, args, extra, workers), project.root, guard)
        return rc, load_results(run.results) if run.results.exists() else None
    parts, codes, names = [], [], []
    for phase, n in (("parallel", workers), ("timing", None)):
        if phase == "timing" and parts and parts[-1].meta.get("timing_left") == 0:
            break  # the parallel phase's selection (-k, --suite, a case) left no timing test: no second session
        results = run.results.with_name(f"results-{phase}.json")
        try:
            rc = run_pytest(pytest_command(project, run.with_(phase=phase, results=results), args, extra, n),
                            project.root, guard)
        except KeyboardInterrupt:  # stopped: what finished so far, as one partial results.json (cmd_check reports it)
            if results.exists():
                parts.append(load_results(results))
                names.append(phase)
                results.unlink()
            keep_partial(run.results, parts, names, phase)
            raise
        codes.append(rc)
        if results.exists():
            parts.append(load_results(results))
            names.append(phase)
            results.unlink()
    ran = [c for c in codes if c != 5]
    rc = 5 if not ran else max(ran, key=lambda c: (c not in (0, 1), c))
    if not parts:
        return rc, None
    combined = Results.combine(parts, names)
    atomic_write_json(run.results, combined.to_json())
    return rc, combined


def keep_partial(path: Path, parts: list[Results], names: list[str], phase: str) -> None:
    """A stopped run's finished tests as one results.json at `path`, marked interrupted (its verdict
    is then 'error', never a pass); nothing when no test had finished."""
    names = [n for p, n in zip(parts, names, strict=True) if p.outcomes]
    parts = [p for p in parts if p.outcomes]
    if not parts:
        return
    combined = Results.combine(parts, names) if len(parts) > 1 else parts[0]
    combined.meta.setdefault("interrupted", f"stopped by an interrupt during the {phase} phase: the results are "
                                            "partial (what did not run is neither checked nor missing)")
    atomic_write_json(path, combined.to_json())


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
