"""`harness bisect --transformers GOOD BAD TARGET` (or `--torch GOOD BAD`): the first release that shows a finding.

TARGET is what `harness repro` takes: SUITE/CASE[:FIELD], or a finding's number in the last
report's results.json (--results FILE). The releases between GOOD and BAD come from the registry
(`harness/cli/releases.py`: final releases, in version order); each probed release is one cell of
`harness matrix` - the same nox session (noxfile.py `suites-<V>`, through `matrix.record_cell` /
`run_nox`) - that runs only the target's case, `--runs` times, against GOOD's record: the project's
record of GOOD's env key when the store has one, else a record the GOOD cell takes first (into
DIR/store, never the project's store). The search and what counts as showing the finding:
`harness/checking/bisection.py`. Output:

    first release showing outputs/CASE:error: 5.20.0 (last without: 5.19.0); 6 cells built, 9 min

    DIR/cells/<V>/{nox.log,results.json,results.run2.json}   each probed release (torch: DIR/torch<V>/cells/<tf>/)
    DIR/bisect.md                                           the steps, their verdicts and logs

Exit 0 when a release is named; 1 when none is (GOOD shows it too, BAD does not, intermittent,
undecided, or a cell failed to build - with the reason); 2 usage.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.checking.bisection import Bisection, Step, Target, Verdict, cell_verdict, search, stop_reason
from harness.cli import releases
from harness.cli.common import output_dir
from harness.cli.matrix import Cell, Runner, check_versions, record_cell, run_nox, torch_envdir
from harness.cli.project import Project, UsageError, open_project
from harness.cli.repro import resolve_target
from harness.report import ResultsFileError, load_results
from harness.report.output import write_file
from harness.report.terminal import timestamped_dir
from harness.store.env import is_safe_key, key_of
from harness.store.records import GoldenStore


@dataclass
class Plan:
    """What one bisection probes: along which axis, the releases, the other axis's version, the
    target, and the reference it checks against (env key, store; `record_first`: taken by GOOD's cell)."""

    axis: str  # "transformers" | "torch"
    versions: list[str]
    pinned: str  # the other axis's version in every cell
    target: Target
    finding: str
    reference: str
    store: Path
    record_first: bool
    out: Path
    envdir: str | None
    runs: int
    workers: str | None


def installed(package: str) -> str:
    return metadata.version(package).split("+", 1)[0]


def cell_key(transformers: str, torch: str) -> str:
    """The env key a cell of these versions records under on this machine (device and dtype as here)."""
    rest = key_of().split("-", 2)[2]
    return f"tf{transformers}-torch{torch}-{rest}"


def make_plan(project: Project, args: argparse.Namespace, lister: releases.Lister) -> Plan:
    axis = "transformers" if args.transformers else "torch"
    good, bad = args.transformers or args.torch
    package_versions = (good, bad)
    if axis == "transformers":
        check_versions(package_versions, args.pin)
    else:
        check_versions([args.pin] if args.pin else [], None)
        for version in package_versions:
            check_versions([], version)
    pinned = args.pin or installed("torch" if axis == "transformers" else "transformers")
    good_key = cell_key(good, pinned) if axis == "transformers" else cell_key(pinned, good)
    reference = args.baseline or good_key
    if args.baseline and not is_safe_key(args.baseline):
        raise UsageError(f"--baseline {args.baseline[:80]!r} is not an env key (letters, digits, '.', '_', '-')")
    found = resolve_target(project, argparse.Namespace(target=args.target, baseline=reference, against="",
                                                       results=args.results))
    target = Target(found.suite, found.case, tuple(f for f in found.fields if f))
    versions = releases.between(lister(axis), good, bad)
    out = output_dir(args.out, "--out") if args.out else timestamped_dir(project.reports_dir / "bisect")
    out.mkdir(parents=True, exist_ok=True)
    stored = project.store.read(reference, target.suite, target.case) is not None
    if args.baseline and not stored:
        raise UsageError(f"{args.baseline} has no record of {target.suite}/{target.case} in {project.store.root}")
    return Plan(axis, versions, pinned, target, found.finding, reference,
                project.store.root if stored else out / "store", not stored, out, args.envdir, args.runs,
                args.workers)


# ----------------------------------------------------------------------------------------------
# one cell


def cell_place(plan: Plan, version: str, sub: str = "") -> tuple[Cell, Path, str | None, str]:
    """(the nox cell, the DIR its cells/ go under, its virtualenvs' directory, its torch) of a release."""
    if plan.axis == "transformers":
        return Cell(version), plan.out / sub, plan.envdir, plan.pinned
    envdir = torch_envdir(plan.envdir, version)  # another torch: another venv
    return Cell(plan.pinned), plan.out / f"torch{version}" / sub, envdir, version


def run_cell(project: Project, plan: Plan, version: str, runner: Runner, env: dict[str, str],
             sub: str = "") -> tuple[Cell, Path]:
    """One nox session of the release, only the target's case: (the cell, its directory)."""
    cell, out, envdir, torch = cell_place(plan, version, sub)
    case = ["--harness-case", f"{plan.target.suite}:{plan.target.case}"]
    # a check against GOOD's own env key would write a field it lacks into that store: strict never writes
    posargs = [*case, "--harness-strict"] if "HARNESS_BASELINE" in env else case
    args = argparse.Namespace(torch=torch, workers=plan.workers, envdir=envdir, cell_env=env, posargs=posargs)
    record_cell(cell, project, out, args, [cell.version], runner)
    return cell, out / "cells" / cell.version


def results_files(cell_dir: Path, runs: int) -> list[Path]:
    return [cell_dir / ("results.json" if i == 1 else f"results.run{i}.json") for i in range(1, runs + 1)]


def probe(project: Project, plan: Plan, version: str, runner: Runner) -> Step:
    """Check the target in one cell against the reference, `plan.runs` times."""
    start = time.monotonic()
    env = {"HARNESS_GOLDEN_DIR": str(plan.store.resolve()), "HARNESS_BASELINE": plan.reference,
           "HARNESS_RUNS": str(plan.runs)}
    cell, cell_dir = run_cell(project, plan, version, runner, env)
    step = Step(version, Verdict.FAILED, cell.reason, str(cell_dir / "nox.log"))
    if cell.status != "failed":
        runs = []
        for path in results_files(cell_dir, plan.runs):
            try:
                runs.append(load_results(path).outcomes)
            except ResultsFileError as exc:
                step.detail = f"run {len(runs) + 1} of the case wrote no results ({exc})"
                break
        else:
            step.verdict, step.detail = cell_verdict(runs, plan.target)
    step.seconds = time.monotonic() - start
    return step


def record_reference(project: Project, plan: Plan, runner: Runner) -> Step | None:
    """No record of GOOD's env: GOOD's cell records the case into DIR/store first. A Step when that
    failed (the search then stops there), else None with `plan.reference` set to the key it recorded."""
    start = time.monotonic()
    good = plan.versions[0]
    cell, cell_dir = run_cell(project, plan, good, runner, {"HARNESS_GOLDEN_DIR": str(plan.store.resolve())},
                              "reference")
    log = str(cell_dir / "nox.log")
    if cell.status == "failed":
        return Step(good, Verdict.FAILED, cell.reason, log, time.monotonic() - start)
    if GoldenStore(plan.store).read(cell.env_key, plan.target.suite, plan.target.case) is None:
        return Step(good, Verdict.UNDECIDED, f"GOOD's cell wrote no record of {plan.target.suite}/"
                    f"{plan.target.case} (a case that fails its in-run checks is never a reference)", log,
                    time.monotonic() - start)
    plan.reference = cell.env_key
    return None


# ----------------------------------------------------------------------------------------------
# the command


def bisect(project: Project, args: argparse.Namespace, lister: releases.Lister = releases.pip_releases,
           runner: Runner = run_nox, say: Callable[[str], None] = print) -> tuple[Plan, Bisection, float]:
    start = time.monotonic()
    plan = make_plan(project, args, lister)
    say(f"harness: bisect {plan.axis} {plan.versions[0]} .. {plan.versions[-1]} ({len(plan.versions) - 2} releases "
        f"between) on {plan.target}; reference: {plan.reference if not plan.record_first else 'recorded by GOOD first'}")
    failed = record_reference(project, plan, runner) if plan.record_first else None
    if failed is not None:
        say(f"harness: bisect: recording the reference in {failed.version}: {failed.verdict} - {failed.detail}")
        return plan, Bisection(steps=[failed], stopped=stop_reason(failed, "")), time.monotonic() - start
    probed = 0

    def announce(version: str) -> Step:
        nonlocal probed
        probed += 1
        say(f"harness: bisect [{probed}] {plan.axis} {version} ...")
        step = probe(project, plan, version, runner)
        say(f"harness: bisect [{probed}] {plan.axis} {version}: {step.verdict} - {step.detail} "
            f"({step.seconds:.0f} s; log {step.log})")
        return step

    return plan, search(plan.versions, announce), time.monotonic() - start


def sentence(plan: Plan, result: Bisection, seconds: float) -> str:
    cells = len({s.version for s in result.steps})
    tail = f"{cells} cell{'s' if cells != 1 else ''} built, {seconds / 60:.0f} min"
    if result.first:
        return f"first release showing {plan.target}: {result.first} (last without: {result.last_without}); {tail}"
    return f"no release named for {plan.target}: {result.stopped}; {tail}"


def write_steps(plan: Plan, result: Bisection, line: str) -> Path:
    rows = "".join(f"| {s.version} | {s.verdict} | {s.detail.replace('|', '/')} | {s.seconds:.0f} s | `{s.log}` |\n"
                   for s in result.steps)
    text = (f"# bisect {plan.axis} {plan.versions[0]} .. {plan.versions[-1]}\n\n{line}\n\n"
            f"- target: `{plan.target}`" + (f" ({plan.finding})" if plan.finding else "") + "\n"
            f"- reference: `{plan.reference}` in `{plan.store}`\n- releases: {', '.join(plan.versions)}\n"
            f"- other axis pinned at {plan.pinned}; {plan.runs} run(s) of the case per cell\n\n"
            "| release | verdict | why | time | cell log |\n|---|---|---|---|---|\n" + rows)
    return write_file(plan.out / "bisect.md", text)


def cmd_bisect(args: argparse.Namespace, extra: Any) -> int:
    if bool(args.transformers) == bool(args.torch):
        raise UsageError("pass one of --transformers GOOD BAD or --torch GOOD BAD")
    if args.runs < 1:
        raise UsageError("--runs must be at least 1")
    project = open_project(args)
    plan, result, seconds = bisect(project, args)
    line = sentence(plan, result, seconds)
    print(f"\n{line}\nsteps: {write_steps(plan, result, line)}")
    return 0 if result.first else 1


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("bisect", parents=[common], help="find the first release that shows a finding",
                       description="Probe the releases between GOOD and BAD (one nox cell each, as `harness matrix`), "
                                   "running only the finding's case against GOOD's record, and name the first "
                                   "release that shows it.")
    axis = p.add_mutually_exclusive_group(required=True)
    axis.add_argument("--transformers", nargs=2, metavar=("GOOD", "BAD"), help="bisect transformers releases")
    axis.add_argument("--torch", nargs=2, metavar=("GOOD", "BAD"), help="bisect torch releases")
    p.add_argument("target", metavar="SUITE/CASE[:FIELD] | N",
                   help="a case (and field), or a finding's number in the last report's results.json")
    p.add_argument("--pin", metavar="V", help="the other package's version in every cell (default: the installed one)")
    p.add_argument("--baseline", metavar="KEY", help="the record to check against (default: GOOD's env key; "
                                                     "recorded by GOOD's cell first when the store has none)")
    p.add_argument("--results", metavar="FILE", help="the results.json a finding's number refers to")
    p.add_argument("--runs", type=int, default=2, metavar="N",
                   help="runs of the case per cell; runs that disagree make it intermittent (default 2)")
    p.add_argument("--envdir", metavar="DIR", help="where the cells' virtualenvs go (default: nox's .nox/)")
    p.add_argument("-n", dest="workers", metavar="N", help="pytest-xdist workers per cell")
    p.add_argument("--out", metavar="DIR", help="where the cells' logs go (default: <reports_dir>/bisect/<time>)")
    p.set_defaults(func=cmd_bisect)
