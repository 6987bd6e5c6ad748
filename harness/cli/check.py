"""`harness check`: run the suites against the golden records of the baseline env (default: this
env's own) in a pytest subprocess (its output is the progress display), then write
``<reports_dir>/<env-key>/<timestamp>/{results.json,index.html,junit.xml}`` and print the verdict."""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.cli.child import guarded
from harness.cli.common import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, error, finish, running_parser
from harness.cli.project import (
    UsageError,
    check_extra,
    check_fixtures,
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

FLAGS = ("baseline", "budget", "record", "strict", "latency_strict", "fault", "dtype", "device", "attn", "threads", "model",
         "assistant", "deep", "seed_salt", "no_cache")


def cmd_check(args: argparse.Namespace, extra: Sequence[str]) -> int:
    project = open_project(args)
    check_extra(extra)
    check_workers(args.workers)
    check_fixtures(project.config)
    run = run_settings(project, args)  # a refused --model stops here, before a one-off store is made
    one_off_store(project)
    require_store(project, args)
    key = current_env_key(run)
    if run.baseline:
        source = "--baseline" if args.harness_baseline else f"{project.root / 'pyproject.toml'}: [tool.harness] baseline"
        validate_env_key(project.store, run.baseline, source, key)
    preflight_records(project.store, run.baseline or key)
    run_dir = timestamped_dir(project.reports_dir / key)
    run_dir.mkdir(parents=True)
    run = run.with_(golden_dir=project.store.root, results=run_dir / "results.json")
    try:  # killed: no half-written report folder is left (harness/cli/child.py)
        with guarded([run_dir]) as guard:
            rc, results = run_phases(project, run, args, extra, guard)
    except KeyboardInterrupt:  # Ctrl-C: the finished tests' partial report (verdict ERROR), then exit 130
        report_partial(run.results, run_dir)
        raise
    except BaseException:
        remove_run_dir(run_dir)
        raise
    if results is None:
        remove_run_dir(run_dir)
        problem = pytest_problem(rc)
        if problem:
            raise UsageError(problem)
        if rc == 1:
            error("tests failed and no results.json was written (no test used the `golden` fixture?)")
            return EXIT_REGRESSION
        return not_checked(rc)
    return finish(results, run_dir, rc, results_json=False)


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
        finish(results, run_dir, 0, results_json=True)
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
    p.set_defaults(func=cmd_check, passthrough=True)
