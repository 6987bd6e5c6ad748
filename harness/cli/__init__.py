"""The `harness` command line (also `python -m harness`).

    harness check   [--baseline KEY] [-n N] [--strict] [--inject-fault NAME] [--model PATH [--assistant PATH]] [-- PYTEST ARGS]
    harness regen   [--yes | --dry-run] [-n N] [--model PATH [--assistant PATH]] [-- PYTEST ARGS]
    harness init    [--model PATH [--assistant PATH]] [--name NAME]
    harness compare A B [--out DIR] [--claims FILE]
    harness envs | merge DIR... [--replace] | matrix --transformers V1 V2 ... [--torch V] [-n N] [--out DIR]
    harness faults [--only NAME ...] [-j N] [--out FILE] [--list]
    harness report RESULTS_JSON [--out DIR]

`check` runs the suites in a pytest subprocess (its progress is pytest's own output), then writes
``<reports_dir>/<env-key>/<timestamp>/{results.json,index.html,junit.xml}``. `compare` does the
same from two recorded envs without running anything. Settings come from ``[tool.harness]`` in the
project's pyproject.toml (found upward from the current directory, or ``--root``); flags win.

Exit codes: 0 all pass (or only changes the policy allows: capability changes, new records),
1 regression (or a failing test), 2 usage or input error (bad flag, unknown env key, corrupt record,
missing fixture, bad ``[tool.harness]`` key, unreadable results.json, pytest usage/internal error,
no tests collected). User errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from harness.checking.claims import (
    ClaimsError,
    ClaimsReport,
    check_claims,
    evaluate,
    load_claims,
    markdown_lines,
    terminal_lines,
)
from harness.checking.regen import apply_regen, diff_records, print_regen_changes
from harness.cli.faults import add_parser as add_faults_parser
from harness.cli.matrix import add_parser as add_matrix_parser
from harness.cli.merge import add_parser as add_merge_parser
from harness.cli.project import (
    Project,
    UsageError,
    check_fixtures,
    check_workers,
    current_env_key,
    open_project,
    preflight_records,
    pytest_command,
    pytest_problem,
    run_pytest,
    validate_env_key,
)
from harness.faults import FaultError
from harness.faults import get as get_fault
from harness.report import ResultsFileError, load_results, render, write_junit
from harness.report.terminal import (
    markdown_summary,
    print_summary,
    printable,
    relative_to,
    table,
    timestamped_dir,
    write_outputs,
)
from harness.schema import Outcome, Record, RecordError, Results
from harness.settings.config import ConfigError, HarnessConfig
from harness.store.records import GoldenStore

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE = 0, 1, 2
# plugin options the CLI sets itself: as pytest args after -- they would contradict its flags
OWNED_OPTIONS = {"--harness-results": "", "--golden-dir": "--golden-dir", "--baseline": "--baseline",
                 "--force-regen": "harness regen", "--harness-dtype": "--dtype", "--harness-device": "--device",
                 "--harness-attn": "--attn", "--harness-threads": "--threads", "--rootdir": "--root",
                 "--harness-model": "--model", "--harness-assistant": "--assistant",
                 "--inject-fault": "--inject-fault", "--harness-deep": "--deep"}


# ----------------------------------------------------------------------------------------------
# output helpers


def unreadable_records(results: Results) -> list[Outcome]:
    return [o for o in results.outcomes if o.category == "unreadable-record"]


def finish(results: Results, out_dir: Path, pytest_rc: int = 0, results_json: bool = True,
           claims: ClaimsReport | None = None) -> int:
    """Render, print the summary and the paths, and return the exit code of the verdict. A pytest
    run that broke (collection error, crash) makes the report say ERROR, never PASS. `claims`: the
    release-notes table shown in the report (`harness compare --claims`)."""
    problem = pytest_problem(pytest_rc)
    if problem:
        results.meta["error"] = problem
        results_json = True  # the plugin's results.json does not know the run broke
    index, junit = write_outputs(results, out_dir, results_json, claims)
    meta = results.meta
    print_summary(results, f"{meta.get('env_key', '?')} vs baseline {meta.get('baseline_key', '?')}")
    print(f"\nreport: {index}\njunit:  {junit}")
    broken = unreadable_records(results)
    if broken:
        files = sorted({str(o.diff.get("file") or o.detail) for o in broken})
        error(f"corrupt golden record {files[0]}" + (f" (and {len(files) - 1} more)" if len(files) > 1 else "")
              + f": {broken[0].diff.get('reason') or broken[0].detail}; "
              "fix or delete it, or rewrite the current env's records with `harness regen`")
        return EXIT_USAGE
    if problem:
        error(problem)
        return EXIT_USAGE
    if results.verdict == "regression":
        print("verdict: REGRESSION")
        return EXIT_REGRESSION
    if pytest_rc == 1:
        print("verdict: FAILED (pytest reported failing tests that are not golden regressions; see its output)")
        return EXIT_REGRESSION
    print("verdict: changed within policy (allowed); accept the changes with `harness regen`"
          if results.verdict == "changed" else "verdict: pass")
    return EXIT_OK


def error(message: str) -> None:
    print(f"harness: error: {printable(message)}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# check


def require_store(project: Project, args: argparse.Namespace) -> None:
    """A golden directory that does not exist is a typo or a wrong checkout, never 'no records'."""
    if not project.store.root.is_dir():
        source = "--golden-dir" if getattr(args, "golden_dir", None) else "[tool.harness] golden_dir"
        raise UsageError(f"{project.store.root} does not exist ({source}); fix the path, or create the directory "
                         "and record this env with `harness regen`")


def cmd_check(args: argparse.Namespace, extra: Sequence[str]) -> int:
    project = open_project(args)
    require_store(project, args)
    check_workers(args.workers)
    check_fixtures(project.settings, args)
    key = current_env_key(args)
    baseline = args.baseline or project.settings.baseline
    if baseline:
        source = "--baseline" if args.baseline else f"{project.root / 'pyproject.toml'}: [tool.harness] baseline"
        validate_env_key(project.store, baseline, source, key)
    preflight_records(project.store, baseline or key)
    run_dir = timestamped_dir(project.reports_dir / key)
    run_dir.mkdir(parents=True)
    command = pytest_command(project, args, run_dir / "results.json", extra)
    if args.baseline:
        command += ["--baseline", args.baseline]
    if args.strict:
        command.append("--harness-strict")
    if args.inject_fault:
        command += ["--inject-fault", args.inject_fault]
    rc = run_pytest(command, project.root)
    if not (run_dir / "results.json").exists():
        shutil.rmtree(run_dir, ignore_errors=True)
        if not any(run_dir.parent.iterdir()):
            run_dir.parent.rmdir()
        problem = pytest_problem(rc)
        if problem:
            raise UsageError(problem)
        if rc == 1:
            error("tests failed and no results.json was written (no test used the `golden` fixture?)")
            return EXIT_REGRESSION
        print("harness: no test used the `golden` fixture; nothing to report")
        return EXIT_OK
    return finish(load_results(run_dir / "results.json"), run_dir, rc, results_json=False)


# ----------------------------------------------------------------------------------------------
# regen


def confirm(question: str) -> bool:
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def regen_write_error(exc: OSError, target: Path, outcome: str) -> str:
    """One line for an OS error (read-only store, full disk, lock not taken) while writing records."""
    where = f"{exc.filename}: " if exc.filename and str(exc.filename) != str(target) else ""
    return f"cannot write records under {target}: {where}{exc.strerror or exc}; {outcome}"


def cmd_regen(args: argparse.Namespace, extra: Sequence[str]) -> int:
    if not (args.yes or args.dry_run or sys.stdin.isatty()):
        raise UsageError("regen asks before writing records but stdin is not a terminal; "
                         "pass --yes to write without asking (CI), or --dry-run to only show the changes")
    project = open_project(args)
    check_workers(args.workers)
    check_fixtures(project.settings, args)
    key = current_env_key(args)
    target = project.store.root / key
    if not args.dry_run:  # a store that cannot be written fails now, not after the suites ran
        try:
            with project.store.lock(key):
                pass
        except OSError as exc:
            raise UsageError(regen_write_error(exc, target, "nothing was run")) from exc
    with tempfile.TemporaryDirectory(prefix="harness-regen-") as tmp:
        scratch = Project(project.root, project.settings, GoldenStore(Path(tmp) / "records"), project.reports_dir)
        results_path = Path(tmp) / "results.json"
        command = pytest_command(scratch, args, results_path, extra) + ["--force-regen", "--baseline", key]
        rc = run_pytest(command, project.root)
        problem = pytest_problem(rc)
        if problem:
            raise UsageError(problem + "; nothing was written")
        ran = load_results(results_path).meta.get("env_key") if results_path.exists() else key
        if ran != key:
            raise UsageError(f"the suites ran as env {ran!r}, expected {key!r}; nothing was written")
        new = scratch.store.env_records(key)
        old: dict[tuple[str, str], Record | RecordError] = {}
        for path in project.store.record_paths(key):
            try:
                old[(path.parent.name, path.stem)] = project.store.read_file(path)
            except RecordError as exc:
                old[(path.parent.name, path.stem)] = exc
        complete = rc == 0 and not extra and not args.model  # --model runs one checkpoint's cases only
        from harness.checking.compare import Policy

        policy = Policy(alpha=project.settings.alpha, thresholds=project.settings.thresholds)
        changes = diff_records(old, new, complete, policy)
        print_regen_changes(key, changes, len(set(old) & set(new)) - sum(c.change == "changed" for c in changes))
        if not complete:
            why = ("some tests failed (see pytest's output above)" if rc else
                   "--model runs one checkpoint's cases" if args.model else "pytest arguments select part of the suites")
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


# ----------------------------------------------------------------------------------------------
# compare


def compare_envs(store: GoldenStore, settings: HarnessConfig, key_a: str, key_b: str) -> Results:
    """Every record of B against A's through the checking core (per-case Holm at alpha / number
    of compared cases, as a live run decides per test)."""
    from harness.checking import stats
    from harness.checking.core import compare_records

    records_a, records_b = store.env_records(key_a), store.env_records(key_b)
    compared = len(set(records_a) & set(records_b))
    alpha = stats.per_test_alpha(settings.alpha, compared)
    outcomes = compare_records(records_a, records_b, alpha=alpha, thresholds=settings.thresholds,
                               name_a=key_a, name_b=key_b)
    meta = {"command": "harness compare", "env_key": key_b, "baseline_key": key_a, "alpha": settings.alpha,
            "alpha_per_test": alpha, "compared_cases": compared, "golden_dir": relative_to(settings.rootdir, store.root),
            "multiple_testing": "Bonferroni across cases (alpha/m), Holm within a case"}
    return Results(env=store.env_of(key_b) or {}, baseline_env=store.env_of(key_a), outcomes=outcomes, meta=meta)


def cmd_compare(args: argparse.Namespace, extra: Sequence[str]) -> int:
    project = open_project(args)
    validate_env_key(project.store, args.a, "A")
    validate_env_key(project.store, args.b, "B")
    n = len(project.store.record_paths(args.a)) + len(project.store.record_paths(args.b))
    print(f"harness: comparing {args.b} against {args.a} ({n} records)", flush=True)
    claims = load_claims(args.claims) if args.claims else None
    results = compare_envs(project.store, project.settings, args.a, args.b)
    if claims:
        results.meta["claims"] = claims  # kept in results.json, so `harness report` shows the table again
    checked = evaluate(claims, results.outcomes) if claims else None
    out = Path(args.out) if args.out else timestamped_dir(project.reports_dir / f"compare-{args.a}-vs-{args.b}")
    code = finish(results, out, claims=checked)
    if checked:
        print("\n" + "\n".join(terminal_lines(checked)))
    extra = [markdown_lines(checked)] if checked else []
    (out / "summary.md").write_text(markdown_summary(results, extra), encoding="utf-8")
    print(f"summary: {out / 'summary.md'}")
    return code


# ----------------------------------------------------------------------------------------------
# init


def cmd_init(args: argparse.Namespace, extra: Sequence[str]) -> int:
    from harness.cli.project import init_project

    pyproject, golden = init_project(Path.cwd(), args.name, args.model, args.assistant)
    print(f"harness: wrote [tool.harness] to {pyproject} and created {golden}")
    print("next: set path = ... to your checkpoint (if you did not pass --model), then run `harness check`")
    return EXIT_OK


# ----------------------------------------------------------------------------------------------
# envs, report


def cmd_envs(args: argparse.Namespace, extra: Sequence[str]) -> int:
    project = open_project(args)
    keys = project.store.env_keys()
    if not keys:
        print(f"no recorded envs under {project.store.root}")
        return EXIT_OK
    rows = []
    for key in keys:
        env = project.store.env_of(key) or {}
        device = env.get("device", {})
        per_suite: dict[str, int] = {}
        for path in project.store.record_paths(key):
            per_suite[path.parent.name] = per_suite.get(path.parent.name, 0) + 1
        rows.append((key, env.get("transformers", "?"), env.get("torch", "?"),
                     f"{device.get('type', '?')} {device.get('name', '')}".strip(), env.get("dtype", "?"),
                     sum(per_suite.values()), " ".join(f"{s}={n}" for s, n in sorted(per_suite.items()))))
    print(f"recorded envs under {project.store.root}:")
    for line in table(("env key", "transformers", "torch", "device", "dtype", "records", "per suite"), rows,
                      (60, 14, 14, 40, 6, 8, 120)):
        print("  " + line)
    return EXIT_OK


def cmd_report(args: argparse.Namespace, extra: Sequence[str]) -> int:
    source = Path(args.results)
    results = load_results(source)
    out = Path(args.out) if args.out else source.resolve().parent
    claims = results.meta.get("claims")
    index = render(results, out, evaluate(check_claims(claims, f"{source}: meta.claims"), results.outcomes)
                   if claims else None)
    print_summary(results, f"{results.meta.get('env_key', '?')} vs baseline {results.meta.get('baseline_key', '?')}")
    print(f"\nreport: {index}")
    if args.junit:
        print(f"junit:  {write_junit(results, args.junit)}")
    return EXIT_OK


# ----------------------------------------------------------------------------------------------
# argument parsing


def fault_name(name: str) -> str:
    """--inject-fault: a name of the catalogue (argparse reports an unknown one, exit 2)."""
    try:
        return get_fault(name).name
    except FaultError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--inject-fault {name}: ")) from exc


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", metavar="DIR", help="project root (default: nearest pyproject.toml with "
                                                        "[tool.harness] upward from the current directory)")
    common.add_argument("--golden-dir", metavar="DIR", help="golden record store (default: [tool.harness] golden_dir)")
    common.add_argument("--reports-dir", metavar="DIR", help="where reports go (default: [tool.harness] reports_dir)")

    running = argparse.ArgumentParser(add_help=False)
    running.add_argument("-n", dest="workers", metavar="N", help="pytest-xdist workers (a number, 'auto')")
    running.add_argument("--suites", metavar="PATH", help="suites to run (default: <root>/suites)")
    running.add_argument("--dtype", default="fp32", help="dtype of the run (fp32, bf16, fp16; default fp32)")
    running.add_argument("--device", default="cpu", help="device of the run (cpu, cuda[:N]; default cpu)")
    running.add_argument("--attn", default="sdpa", help="attention implementation (default sdpa)")
    running.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own)")
    running.add_argument("-v", "--verbose", action="store_true", help="pytest's verbose output instead of -q")
    running.add_argument("--model", metavar="PATH", help="run only this checkpoint of yours (a save_pretrained "
                                                         "directory, safetensors) instead of the configured models")
    running.add_argument("--assistant", metavar="PATH", help="--model's assistant: adds the assisted / ensemble cases")
    running.add_argument("--deep", action="store_true", help="the deeper modes: every sampling path x setting at a "
                                                             "smaller detectable TV, 3x the latency samples (slower)")

    parser = argparse.ArgumentParser(prog="harness", description="Upgrade validation harness for LLM text generation.",
                                     epilog="exit codes: 0 pass (or allowed changes), 1 regression, 2 usage or input error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("check", parents=[common, running], help="run the suites against the golden records",
                       description="Run the suites against golden records; extra pytest args go after --.")
    p.add_argument("--baseline", metavar="KEY", help="env key to compare against (default: [tool.harness] "
                                                     "baseline, else the current env's own records)")
    p.add_argument("--strict", action="store_true", help="a missing golden record fails instead of being written")
    p.add_argument("--inject-fault", metavar="NAME", type=fault_name,
                   help="inject a fault of the catalogue (harness/faults/, `harness faults --list`) for this run")
    p.set_defaults(func=cmd_check, passthrough=True)

    p = sub.add_parser("regen", parents=[common, running], help="regenerate the current env's golden records",
                       description="Re-run the suites into a scratch store, show what would change, then write.")
    p.add_argument("--yes", "-y", action="store_true", help="write without asking (CI)")
    p.add_argument("--dry-run", action="store_true", help="only show what would change")
    p.set_defaults(func=cmd_regen, passthrough=True)

    p = sub.add_parser("compare", parents=[common], help="compare two recorded envs without running anything")
    p.add_argument("a", metavar="A", help="baseline env key")
    p.add_argument("b", metavar="B", help="env key compared against A")
    p.add_argument("--out", metavar="DIR", help="where the report goes (default: <reports_dir>/compare-A-vs-B/<time>)")
    p.add_argument("--claims", metavar="FILE", help="a release's claims (JSON, e.g. docs/claims/transformers-5.14.json): "
                                                    "each checked against the outcomes, shown in the report and summary.md")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("init", help="write a commented starter [tool.harness] block for the current directory",
                       description="Write a starter [tool.harness] block into ./pyproject.toml (created if absent) "
                                   "and create its golden_dir; refuses a pyproject.toml that has one already.")
    p.add_argument("--model", metavar="PATH", help="your checkpoint (default: a placeholder path to edit)")
    p.add_argument("--assistant", metavar="PATH", help="its assistant (optional)")
    p.add_argument("--name", default="my-model", help="the model's name in case ids (default my-model)")
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("envs", parents=[common], help="list recorded env keys")
    p.set_defaults(func=cmd_envs)
    add_merge_parser(sub, common)
    add_matrix_parser(sub, common)
    add_faults_parser(sub, common)

    p = sub.add_parser("report", help="re-render a report from a results.json")
    p.add_argument("results", metavar="RESULTS_JSON")
    p.add_argument("--out", metavar="DIR", help="where index.html goes (default: next to RESULTS_JSON)")
    p.add_argument("--junit", metavar="PATH", help="also write JUnit XML there")
    p.set_defaults(func=cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2, message already printed)
        return int(exc.code or 0)
    if extra and not getattr(args, "passthrough", False):
        error(f"{args.command} takes no pytest arguments (got: -- {' '.join(extra)})")
        return EXIT_USAGE
    for item in extra:
        owned = OWNED_OPTIONS.get(item.split("=", 1)[0])
        if owned is not None:
            error(f"pytest argument {item!r} after -- is set by harness itself" + (f"; use {owned}" if owned else ""))
            return EXIT_USAGE
    try:
        return args.func(args, extra)
    except (UsageError, ConfigError, RecordError, ResultsFileError, ClaimsError) as exc:
        error(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        error("interrupted")
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
