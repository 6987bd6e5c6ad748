"""`harness repro SUITE/CASE[:FIELD] | N [--baseline KEY] [--against KEY] [--results FILE] [--out DIR]
[--run] [--python EXE ...]`: a finding as something to file upstream.

Writes into DIR `repro.py` (a standalone script, torch + transformers only: the case's one call with
its arguments, seed and dtype; it prints the observed value beside the baseline record's and exits 1
when the installed transformers shows the difference, 0 when it matches), the checkpoints it loads
(a zoo model's files copied under DIR/models/; a user model's path as it is), and `issue.md` (both
environments from the records' fingerprints, the script, each run's output, the finding in plain
words). N is a finding's number in the last report's results.json (or --results FILE): its first
case and field, its baseline and env keys. The script is written, never run, unless asked: `--run`
runs it with this interpreter, `--python EXE` (another version's venv; repeatable) with this one and
EXE; their outputs go into the issue. (The script is fixed code plus its data as JSON in string
literals, parsed when it runs - harness/report/repro.py `script`: a record's text never becomes code;
still, read it before you run it.) `--no-run` is the default, kept as a flag for older command lines.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.cli.common import output_dir
from harness.cli.project import Project, UsageError, open_project, validate_env_key
from harness.report import repro
from harness.report.output import write_file
from harness.schema import Case, Record
from harness.store.env import is_safe_key

RUN_TIMEOUT_S = 600


@dataclass(frozen=True)
class Target:
    suite: str
    case: str
    fields: tuple[str, ...]
    baseline: str
    against: str
    finding: str = ""  # the finding's sentence, where the target came from a report


def cmd_repro(args: argparse.Namespace, extra: Sequence[str]) -> int:
    project = open_project(args)
    target = resolve_target(project, args)
    validate_env_key(project.store, target.baseline, "--baseline")
    if target.against and not is_safe_key(target.against):
        raise UsageError(f"--against {target.against[:80]!r} is not an env key (letters, digits, '.', '_', '-')")
    record = project.store.read(target.baseline, target.suite, target.case)
    if record is None:
        raise UsageError(f"{target.baseline} has no record of {target.suite}/{target.case}")
    case, users = find_case(project, target.suite, target.case)
    recipe = repro.recipe_of(target.suite, case)
    try:
        plan = repro.plan(target.suite, case, record, target.baseline, prompts_of(case, recipe, users),
                          checkpoints_of(case, users), target.fields)
        text = repro.script(plan)  # fixed code and its data as JSON: checked before anything is written
    except repro.ReproError as exc:
        raise UsageError(str(exc)) from None
    out = output_dir(args.out or str(project.reports_dir / "repro" / safe(plan.target)), "--out")
    out.mkdir(parents=True, exist_ok=True)
    copy_checkpoints(plan, project, out)
    script = out / "repro.py"
    write_file(script, text)
    print(f"harness: wrote {script} ({plan.recipe}: {', '.join(plan.fields)} against {target.baseline})", flush=True)
    asked = (args.run or bool(args.python)) and not args.no_run
    outputs = [run_script(script, exe) for exe in [sys.executable, *(args.python or ())]] if asked else []
    observed = project.store.read(target.against, target.suite, target.case) if target.against else None
    finding = target.finding or plain_words(project, record, observed, plan.fields)
    envs = [(target.baseline, record.env), (target.against or "this env", observed.env if observed else current_env())]
    write_file(out / "issue.md", repro.issue_body(plan, text, finding, envs, outputs))
    for label, _, code in outputs:
        print(f"  {label}: exit {code} ({'shows the difference' if code == 1 else 'matches the baseline' if code == 0 else 'failed'})")
    print(f"issue:  {out / 'issue.md'}\nrun it: python {script}" + ("" if asked else "   (not run: read it, then run "
                                                                        "it, or pass --run)"))
    return 0


def safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


# ----------------------------------------------------------------------------------------------
# what to reproduce


def resolve_target(project: Project, args: argparse.Namespace) -> Target:
    """SUITE/CASE[:FIELD], or a finding's number in a report's results.json; a suite or case that
    is no name the store could hold (`../../x`, a '/' in a case) is a usage error."""
    if re.fullmatch(r"\d+(\.\d+)?", args.target):
        found = from_finding(project, args)
        check_names(found.suite, found.case, f"finding {args.target}")
        return found
    where, _, field = args.target.partition(":")
    suite, _, case = where.partition("/")
    if not suite or not case:
        raise UsageError(f"{args.target!r}: expected SUITE/CASE[:FIELD] or a finding's number")
    check_names(suite, case, repr(args.target))
    meta = last_meta(project, args) if not args.baseline else {}
    baseline = args.baseline or meta.get("baseline_key")
    if not baseline:
        raise UsageError("which baseline? pass --baseline KEY (`harness envs` lists them)")
    return Target(suite, case, (field,) if field else (), baseline, args.against or meta.get("env_key", ""))


def check_names(suite: str, case: str, where: str) -> None:
    """A suite and a case id as the store names them: letters, digits and `._=+-`, no leading or
    trailing dot (harness/store/records.py `safe_name` keeps such a name as it is)."""
    from harness.store.records import safe_name

    for what, name in (("suite", suite), ("case", case)):
        try:
            kept = safe_name(name) == name
        except ValueError:
            kept = False
        if not kept:
            raise UsageError(f"{where}: {what} {name[:80]!r} is not a name (letters, digits and '._=+-', no leading "
                             "or trailing dot); expected SUITE/CASE[:FIELD] or a finding's number")


def results_path(project: Project, args: argparse.Namespace) -> Path | None:
    """--results FILE, else the newest results.json under the reports directory."""
    if args.results:
        return Path(args.results)
    found = sorted(project.reports_dir.rglob("results.json"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def last_meta(project: Project, args: argparse.Namespace) -> dict[str, Any]:
    path = results_path(project, args)
    if path is None:
        return {}
    from harness.report import load_results

    return dict(load_results(path).meta)


def from_finding(project: Project, args: argparse.Namespace) -> Target:
    from harness.checking.findings import Findings
    from harness.report import load_results

    path = results_path(project, args)
    if path is None:
        raise UsageError(f"no results.json under {project.reports_dir}; pass --results FILE")
    results = load_results(path)
    found = Findings.of(results)
    finding = found.number(args.target)
    if finding is None:
        raise UsageError(f"{path} has no finding {args.target} (it has {len(found.numbered)})")
    first = finding.outcomes[0]
    return Target(first.suite, first.case, (first.field,), args.baseline or results.meta.get("baseline_key", ""),
                  args.against or results.meta.get("env_key", ""), finding.sentence(width=400))


def find_case(project: Project, suite: str, case_id: str) -> tuple[Case, dict[str, Any]]:
    """The case from the suite's table (the zoo's and the project's own models)."""
    from harness import cases
    from harness.settings.run import RunSettings, SettingsError

    row = cases.suite(suite)
    if row is None or row.repro is None:
        raise UsageError(f"suite {suite!r}: `harness repro` writes scripts for {', '.join(repro.scripted())}")
    try:
        run = RunSettings.make(project.config, {}).validate(front="cli")
    except SettingsError as exc:
        raise UsageError(str(exc)) from None
    users = {m.name: m for m in run.user_models}
    users.update({m.assistant_name: m for m in run.user_models if m.assistant_name})
    for table in row.tables:
        for case in table(run):
            if case.id == case_id:
                return case, users
    raise UsageError(f"{suite} has no case {case_id!r} (see the suite's case table, harness/cases/)")


def prompts_of(case: Case, recipe: str | None, users: dict[str, Any]) -> dict[str, str]:
    from harness.zoo.prompts import BY_ID

    owner = users.get(case.model)
    own = {p.id: p.text for p in owner.prompts} if owner is not None and case.model == owner.name else {}
    return {pid: own.get(pid) or BY_ID[pid].text for pid in repro.prompt_ids_of(recipe or "", case)}


def checkpoints_of(case: Case, users: dict[str, Any]) -> dict[str, str]:
    """model name -> where the script finds it: a zoo model beside it, a user model at its own path."""
    out: dict[str, str] = {}
    for name in repro.models_of(case):
        owner = users.get(name)
        if owner is None:
            out[name] = f"{repro.MODELS_SUBDIR}/{name}"
        else:
            out[name] = str((owner.path if name == owner.name else owner.assistant).resolve())
    return out


def copy_checkpoints(plan: repro.Plan, project: Project, out: Path) -> None:
    from harness.zoo.load import check_files

    for name, source in repro.copy_targets(plan, project.config.models_dir).items():
        check_files(name, models_dir=project.config.models_dir)  # the manifest's sha256, before copying
        dest = out / repro.MODELS_SUBDIR / name
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(source, dest)


# ----------------------------------------------------------------------------------------------
# the two sides


def run_script(script: Path, python: str) -> tuple[str, str, int]:
    """(label, output, exit code) of the script under one interpreter."""
    try:
        done = subprocess.run([python, script.name], cwd=script.parent, capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return python, f"could not run: {exc}", -1
    text = done.stdout + (f"\n[stderr]\n{done.stderr[-3000:]}" if done.returncode not in (0, 1) else "")
    head = done.stdout.splitlines()[0] if done.stdout else ""
    version = re.search(r"transformers (\S+?),", head)
    return f"transformers {version.group(1) if version else '?'} ({python})", text, done.returncode


def current_env() -> dict[str, Any]:
    from harness.store.env import fingerprint

    return fingerprint()


def plain_words(project: Project, baseline: Record, observed: Record | None, fields: tuple[str, ...]) -> str:
    """The harness's own verdict on the fields, comparing the two records (as `harness compare` does)."""
    if observed is None:
        return ""
    from harness.checking.core import compare_records

    key = (baseline.suite, baseline.case)
    outcomes = compare_records({key: baseline}, {key: observed}, alpha=project.config.alpha,
                               thresholds=project.config.thresholds)
    lines = [f"- `{o.field}`: **{o.status.value}**" + (f" ({o.category.value})" if o.category.value else "")
             + f" - {o.detail}" for o in outcomes if o.field in fields]
    return "\n".join(lines)


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("repro", parents=[common], help="write a standalone script and issue body for a finding",
                       description="Write a standalone script (torch + transformers only) that makes a case's call "
                                   "and compares it with the baseline record, and an issue body around it.")
    p.add_argument("target", metavar="SUITE/CASE[:FIELD] | N",
                   help="a case (and field), or a finding's number in the last report's results.json")
    p.add_argument("--baseline", metavar="KEY", help="the env key whose record is the expected value "
                                                     "(default: the report's baseline)")
    p.add_argument("--against", metavar="KEY", help="the env key of the observed side's record, for the issue "
                                                    "(default: the report's env)")
    p.add_argument("--results", metavar="FILE", help="the results.json a finding's number refers to "
                                                     "(default: the newest under the reports directory)")
    p.add_argument("--out", metavar="DIR", help="where the script goes (default: <reports_dir>/repro/<case>)")
    p.add_argument("--python", metavar="EXE", action="append",
                   help="run the script with this interpreter too (another version's venv); repeatable; implies --run")
    p.add_argument("--run", action="store_true", help="run the script once written (with this interpreter and each "
                                                      "--python); by default it is only written")
    p.add_argument("--no-run", action="store_true", help="write the script without running it (the default)")
    p.set_defaults(func=cmd_repro)
