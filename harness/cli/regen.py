"""`harness regen`: regenerate only the current env's records - run the suites into a scratch
store, show what would be added, removed and changed (a field counts as changed only when its
kind's own rule says so), ask (CI: --yes), then swap the new set in as one transaction."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.checking.humane import shorten
from harness.checking.regen import RecordChange, apply_regen, diff_records
from harness.cli.child import guarded
from harness.cli.common import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, running_parser
from harness.cli.project import (
    UsageError,
    check_extra,
    check_fixtures,
    check_pytest_paths,
    check_workers,
    current_env_key,
    narrowed_suites,
    open_project,
    pytest_problem,
    require_store,
    run_phases,
    run_settings,
)
from harness.schema import Record, RecordError
from harness.settings import real
from harness.store.records import GoldenStore

FLAGS = ("dtype", "device", "attn", "threads", "model", "assistant", "deep", "no_cache", "budget")


def confirm(question: str) -> bool:
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def regen_write_error(exc: OSError, target: Path, outcome: str) -> str:
    """One line for an OS error (read-only store, full disk, lock not taken) while writing records."""
    where = f"{exc.filename}: " if exc.filename and str(exc.filename) != str(target) else ""
    return f"cannot write records under {target}: {where}{exc.strerror or exc}; {outcome}"


def print_regen_changes(key: str, changes: list[RecordChange], unchanged: int) -> None:
    by = {c: sum(1 for x in changes if x.change == c) for c in ("added", "changed", "removed", "extended")}
    extended = (f", {by['extended']} gain this machine's latency measurement (nothing recorded changes)"
                if by["extended"] else "")
    elsewhere = sum(1 for x in changes if x.machine)
    if elsewhere:
        extended += (f"; {elsewhere} of the {by['changed']} changed were recorded on another machine (named beside "
                     f"each: a difference of its kernels' rounding - in bf16 a tie-break or a draw - is that machine's, "
                     f"not a change of the library)")
    print(f"\nregen {key}: {by['added']} record(s) added, {by['changed']} changed, {by['removed']} removed, "
          f"{unchanged} unchanged{extended}")
    for c in changes:
        mark = {"added": "+", "removed": "-", "changed": "~", "extended": "+"}[c.change]
        notes = [c.note] * bool(c.note) + [f"recorded on another machine: {c.machine}"] * bool(c.machine)
        print(f"  {mark} {c.name}" + (f"  [{'; '.join(notes)}]" if notes else ""))
        for f in c.added:
            print(f"      + {f} (added)")
        for f in c.removed:
            print(f"      - {f} (removed)")
        for f, summary in c.changed:
            print(f"      ~ {f} (changed): {shorten(summary, 160)}")
        for f in c.extended:
            print(f"      + {f} (this machine's hardware class added)" if f not in c.new_measurements else
                  f"      + {f} (a judgeable measurement where the record held none: earlier runs were too busy)")


def cmd_regen(args: argparse.Namespace, extra: Sequence[str]) -> int:
    if not (args.yes or args.dry_run or sys.stdin.isatty()):
        raise UsageError("regen asks before writing records but stdin is not a terminal; "
                         "pass --yes to write without asking (CI), or --dry-run to only show the changes")
    project = open_project(args)
    check_extra(extra)
    require_store(project, args)
    check_workers(args.workers)
    check_fixtures(project.config)
    run = run_settings(project, args)
    check_pytest_paths(project, run, extra)
    key = current_env_key(run)
    target = project.store.root / key
    if not args.dry_run:  # a store that cannot be written fails now, not after the suites ran
        try:
            project.store.check_writable(key)
        except OSError as exc:
            raise UsageError(regen_write_error(exc, target, "nothing was run")) from exc
    with tempfile.TemporaryDirectory(prefix="harness-regen-") as tmp, guarded([Path(tmp)]) as guard:
        scratch = GoldenStore(Path(tmp) / "records")
        scratch.root.mkdir()
        results_path = Path(tmp) / "results.json"
        run = run.with_(golden_dir=scratch.root, results=results_path, regen=True, baseline=key, strict=False)
        rc, results = run_phases(project, run, args, extra, guard)
        problem = pytest_problem(rc)
        if problem:
            raise UsageError(problem + "; nothing was written")
        meta = results.meta if results is not None else {}
        ran = meta.get("env_key", key)
        if ran != key:
            raise UsageError(f"the suites ran as env {ran!r}, expected {key!r}; nothing was written")
        new = scratch.env_records(key)
        old: dict[tuple[str, str], Record | RecordError] = {}
        # a case skipped for an optional extra this venv lacks (MissingExtra: torchao) was recorded where it
        # was installed: its record is neither compared nor removed
        unobservable = {tuple(x.split("/", 1)) for x in meta.get("not_observable", [])}
        if meta.get("real_model_off"):  # the real model was not part of this run (off, --model, your own models)
            unobservable |= {(p.parent.name, p.stem) for p in project.store.record_paths(key) if real.owns(p.stem)}
        # a test skipped (skip / skipif / xfail(run=False)) or xfailed before it finished wrote nothing: its
        # records stay as they are
        not_run = {tuple(x.split("/", 1)) for x in meta.get("not_run", [])} - unobservable
        kept: list[str] = []
        skipped: list[str] = []
        for path in project.store.record_paths(key):
            if (path.parent.name, path.stem) in unobservable | not_run:
                (kept if (path.parent.name, path.stem) in unobservable else skipped).append(
                    f"{path.parent.name}/{path.stem}")
                continue
            try:
                old[(path.parent.name, path.stem)] = project.store.read_file(path)
            except RecordError as exc:
                old[(path.parent.name, path.stem)] = exc
        # complete: every test observed what it observes - failing tests whose failure is their golden
        # verdict (a library bug the version really has) are complete; one that broke is not
        broken = meta.get("broken_tests", []) if rc == 1 else []
        run_errors = [*meta.get("collection_errors", []), *meta.get("write_errors", [])]
        complete = ((rc == 0 or (rc == 1 and results_path.exists() and not broken)) and not run_errors
                    and not extra and not run.one_off and not narrowed_suites(project, args))
        from harness.checking.policy import Policy

        policy = Policy(alpha=project.config.alpha, thresholds=project.config.thresholds)
        changes = diff_records(old, new, complete, policy)
        print_regen_changes(key, changes, len(set(old) & set(new)) - sum(c.change in ("changed", "extended") for c in changes))
        if kept:
            owned = [k for k in kept if real.owns(k.split("/", 1)[1])] if meta.get("real_model_off") else []
            extra = sorted(k for k in kept if k not in owned)
            if extra:
                print(f"kept as recorded: {', '.join(extra)} (an optional extra this environment lacks; "
                      "regen where it is installed)")
            if owned:
                print(f"kept as recorded: the real model's {len(owned)} record(s) (it was not part of this run: "
                      "[tool.harness] real_model, HARNESS_REAL, --model or your own models)")
        if skipped:
            print(f"kept as recorded: {', '.join(sorted(skipped))} (the test was skipped or xfailed before it "
                  "finished: nothing of it was observed)")
        if not complete:
            why = (f"{len(broken)} test(s) broke before observing everything ({broken[0]}{', ...' if len(broken) > 1 else ''})"
                   if broken else f"the run broke: {run_errors[0]}" if run_errors else
                   "no results were written" if not results_path.exists() else
                   "--model runs one checkpoint's cases" if run.one_off else
                   f"--suites {args.suites} is part of the suites" if narrowed_suites(project, args) else
                   "pytest arguments select part of the suites")
            print(f"\npartial run: {why}; records and fields it did not produce are kept, nothing is removed")
        if not changes:
            print(f"\n{target}: records are up to date; nothing to write")
        elif args.dry_run:
            print(f"\n--dry-run: nothing written to {target}")
        elif args.yes or confirm(f"\nwrite these changes to {target}?"):
            try:
                apply_regen(project.store, key, changes)
            except OSError as exc:
                raise UsageError(regen_write_error(exc, target, "the records were left as they were")) from exc
            print(f"\nwrote {sum(c.record is not None for c in changes)} record(s), "
                  f"removed {sum(c.record is None for c in changes)} under {target}")
        else:
            print("\nnot confirmed; nothing written")
            return EXIT_USAGE
    return EXIT_REGRESSION if rc == 1 else EXIT_OK


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("regen", parents=[common, running_parser(*FLAGS)],
                       help="regenerate the current env's golden records",
                       description="Re-run the suites into a scratch store, show what would change, then write.")
    p.add_argument("--yes", "-y", action="store_true", help="write without asking (CI)")
    p.add_argument("--dry-run", action="store_true", help="only show what would change")
    p.set_defaults(func=cmd_regen, passthrough=True)
