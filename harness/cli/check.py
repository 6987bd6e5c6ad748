"""`harness check`: run the suites against the golden records of the baseline env in a pytest
subprocess (its output is the progress display), then write
``<reports_dir>/<env-key>/<timestamp>/{results.json,index.html,junit.xml}`` and print the verdict.

The baseline: `--baseline KEY` (or [tool.harness] baseline); else this env's own records; else - the
rerun after an upgrade, this env has none yet - the env you recorded before it (harness/store/
baseline.py), said in the first and the last line. Such a run records the new env only when that
comparison holds nothing to decide (verdict pass): it writes into a scratch copy of the baseline's
records, and the new env's set is moved into the store in one transaction at the end, or dropped.
A regression, a crash or a change the upgrade brought is never recorded as golden without a
`harness regen` (or `--record`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.checking.humane import relative_to
from harness.cli.child import guarded
from harness.cli.common import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, error, finish, running_parser
from harness.cli.project import (
    Project,
    UsageError,
    check_extra,
    check_fixtures,
    check_pytest_paths,
    check_workers,
    current_env_key,
    one_off_store,
    open_project,
    preflight_records,
    pytest_problem,
    require_store,
    run_phases,
    run_settings,
    validate_env_key,
)
from harness.report.terminal import timestamped_dir
from harness.schema import Results
from harness.store.baseline import Chosen, nearest_recorded
from harness.store.records import GoldenStore

FLAGS = ("baseline", "budget", "record", "strict", "latency_strict", "fault", "dtype", "device", "attn", "threads", "model",
         "assistant", "deep", "seed_salt", "no_cache")


def cmd_check(args: argparse.Namespace, extra: Sequence[str]) -> int:
    project = open_project(args)
    if getattr(args, "against", None):  # paired A/B latency against another env's interpreter
        from harness.cli.paired import cmd_paired

        check_extra(extra)
        return cmd_paired(project, args)
    check_extra(extra)
    check_workers(args.workers)
    check_fixtures(project.config)
    run = run_settings(project, args)  # a refused --model stops here, before a one-off store is made
    check_pytest_paths(project, run, extra)
    one_off_store(project)
    require_store(project, args)
    key = current_env_key(run)
    if run.baseline:
        source = "--baseline" if args.harness_baseline else f"{project.root / 'pyproject.toml'}: [tool.harness] baseline"
        validate_env_key(project.store, run.baseline, source, key)
    upgrade = upgrade_baseline(project.store, key) if not run.baseline else None
    preflight_records(project.store, run.baseline or (upgrade.key if upgrade else key))
    if upgrade is not None:
        print(f"harness: compared with {upgrade.key} ({upgrade.why}): {key} has no records of its own; "
              "`--baseline KEY` to choose", flush=True)
    run_dir = timestamped_dir(project.reports_dir / key)
    run_dir.mkdir(parents=True)
    run = run.with_(golden_dir=project.store.root, results=run_dir / "results.json")
    deferred = upgrade is not None and not run.read_only and not run.record
    with tempfile.TemporaryDirectory(prefix="harness-check-") as tmp:
        scratch = GoldenStore(Path(tmp) / "records")
        if upgrade is not None:
            run = run.with_(baseline=upgrade.key)
        if deferred:  # this env's records go to a scratch copy of the baseline's, kept only if nothing is to decide
            shutil.copytree(project.store.root / upgrade.key, scratch.root / upgrade.key,
                            ignore=shutil.ignore_patterns(".*"))
            run = run.with_(golden_dir=scratch.root, record=True)
        try:  # killed: no half-written report folder is left (harness/cli/child.py)
            with guarded([run_dir, Path(tmp)]) as guard:
                rc, results = run_phases(project, run, args, extra, guard)
        except KeyboardInterrupt:  # Ctrl-C: the finished tests' partial report (verdict ERROR), then exit 130
            report_partial(run.results, run_dir)
            raise
        except BaseException:
            remove_run_dir(run_dir)
            raise
        if results is not None and upgrade is not None:
            results.meta["upgrade_baseline"] = {"key": upgrade.key, "why": upgrade.why}
            if deferred:
                keep_or_drop(project, results, rc, scratch, key, upgrade)
    if results is None:
        remove_run_dir(run_dir)
        problem = pytest_problem(rc)
        if problem:
            raise UsageError(problem)
        if rc == 1:
            error("tests failed and no results.json was written (no test used the `golden` fixture?)")
            return EXIT_REGRESSION
        return not_checked(rc)
    code = finish(results, run_dir, rc, results_json=upgrade is not None, owned=True)  # meta gained the baseline and the write
    if upgrade is not None:
        print(f"harness: compared with {upgrade.key} ({upgrade.why}); `--baseline KEY` to choose")
    return code


def upgrade_baseline(store: GoldenStore, key: str) -> Chosen | None:
    """The env a run with no baseline named compares with when `key` has no records of its own
    (harness/store/baseline.py); None when it has some, or nothing of its device and dtype is recorded."""
    if not store.root.is_dir() or store.record_paths(key):
        return None
    return nearest_recorded(key, store.env_keys())


def keep_or_drop(project: Project, results: Results, rc: int, scratch: GoldenStore, key: str, upgrade: Chosen) -> None:
    """The new env's records of an upgrade rerun: moved into the store (one transaction) when the
    comparison with `upgrade` holds nothing to decide - verdict pass -, else dropped, and said why."""
    meta = results.meta
    meta["golden_dir"] = relative_to(project.root, project.store.root)
    verdict = results.verdict if rc in (0, 1) else "error"  # rc 1 with nothing regressed: a test failed
    if verdict == "pass" and rc == 0:
        records = list(scratch.records(key))
        try:
            project.store.replace_records(key, records)
        except OSError as exc:
            meta["writes"] = []
            meta["write_errors"] = [f"cannot write the records of {key} under {project.store.root}: "
                                    f"{exc.strerror or exc}"]
            return
        meta["write_rule"] = (f"this env's records are written: its comparison with {upgrade.key} holds nothing "
                              "to decide")
        return
    what = {"regression": "regressions", "changed": "changes to accept"}.get(verdict, "a run that did not complete "
                                                                                  "or a failing test")
    meta["writes"] = []
    meta["write_rule"] = (f"not written - the comparison with {upgrade.key} holds {what}: a new env is recorded only "
                          "when nothing is to decide; review the report, then `harness regen` records this env "
                          "(or fix and rerun)")


def report_partial(results_path: Path, run_dir: Path) -> None:
    """After Ctrl-C: the report of the tests that finished (results.json marked `interrupted`, by the
    plugin or `run_phases`), its verdict ERROR - never a pass; no report folder when none finished.
    A second Ctrl-C while it renders leaves no half-written folder."""
    from harness.report import load_results

    try:
        results = load_results(results_path) if results_path.exists() else None
        if results is None or not results.outcomes or not results.meta.get("interrupted"):
            remove_run_dir(run_dir)
            return
        print("\nharness: stopped - reporting the tests that finished", flush=True)
        finish(results, run_dir, 0, results_json=True, owned=True)
    except Exception as exc:  # the partial report is a courtesy: the interrupt still exits 130
        remove_run_dir(run_dir)
        error(f"stopped; the partial report could not be written: {exc}")
    except BaseException:
        remove_run_dir(run_dir)
        raise


def not_checked(rc: int) -> int:
    """A run that wrote no results compared nothing (no golden test ran: --collect-only and the other
    modes that run no test, or suites without the `golden` fixture): `not checked`, never a pass -
    exit 2 under CI, where a check must check."""
    print("harness: not checked: no golden test ran (a pytest mode that runs no test, such as --collect-only, "
          "or no test used the `golden` fixture); nothing to report", flush=True)
    if os.environ.get("CI"):
        error("not checked: the run compared nothing (CI: a check must check)")
        return EXIT_USAGE
    return EXIT_OK


def remove_run_dir(run_dir: Path) -> None:
    """A run that left no results leaves no report folder (nor an empty env folder above it)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    with contextlib.suppress(OSError):
        if not any(run_dir.parent.iterdir()):
            run_dir.parent.rmdir()


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("check", parents=[common, running_parser(*FLAGS)],
                       help="run the suites against the golden records",
                       description="Run the suites against golden records; extra pytest args go after --.")
    p.add_argument("--against", metavar="PYTHON",
                   help="paired latency instead of the suites: time this env and PYTHON's (an interpreter or a venv) "
                        "call by call in ABBA blocks on this host (docs/checks.md, latency paired mode)")
    p.add_argument("--pair-seconds", type=float, default=180.0, metavar="S",
                   help="with --against: seconds of pairing, shared by the fields (default 180)")
    p.add_argument("--pair-fields", metavar="NAMES",
                   help="with --against: only the paired fields whose case/field contains one of these (comma-separated)")
    p.set_defaults(func=cmd_check, passthrough=True)
