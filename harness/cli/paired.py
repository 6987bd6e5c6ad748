"""`harness check --against PYTHON`: paired A/B latency of this env (new) against the env of another
interpreter (old), in one time window on this host (harness/designs/paired.py: the workers and the
ABBA schedule; harness/checking/compare_stats.py `compare_paired`: the statistic and the verdict).

The run's family is its paired fields: each is decided at alpha / bucket(m) (m = the fields;
`stats.per_test_alpha`), half of it per direction, so a run with nothing changed reports a latency
finding with probability <= alpha. Memory: the bytes one call allocates, asked once per env,
compared by `compare_memory` (deterministic for a torch build). Prints one line per field and the
verdict; a user model (--model PATH, else the project's [tool.harness.models]) adds its own fields
(paired.py `user_fields`). Writes ``<reports_dir>/paired/<YYYYmmdd-HHMMSS>/``: paired.json (both envs, the load, every
field's outcome and its blocks) and the run's report from the same outcomes (results.json, index.html,
junit.xml, summary.md: `write_paired`). Exit 1 on a regression, 0 otherwise, 2 for a usage error."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from harness.checking import stats
from harness.checking.compare_stats import compare_memory, compare_paired
from harness.checking.policy import Policy
from harness.cli.common import EXIT_OK, EXIT_REGRESSION
from harness.cli.project import Project, UsageError
from harness.designs import paired
from harness.report.terminal import timestamped_dir
from harness.schema import Outcome, Results, Status


def python_of(spec: str) -> str:
    """--against: an interpreter (a path, or a venv directory holding bin/python)."""
    path = Path(spec)
    if path.is_dir() and (path / "bin" / "python").exists():
        return str(path / "bin" / "python")
    found = shutil.which(spec)
    if found is None or not os.access(found, os.X_OK):
        raise UsageError(f"--against {spec}: not an interpreter (a python executable or a venv directory)")
    return found


def user_models(project: Project, args: argparse.Namespace) -> tuple[Any, ...]:
    """The user models whose paths are paired too: --model PATH (with --assistant), else the project's
    [tool.harness.models] tables - each resolved here first, so a bad path is this command's usage
    error, not a worker's."""
    from harness.settings.models import ModelError, from_flags, resolve

    model, assistant = getattr(args, "harness_model", None), getattr(args, "harness_assistant", None)
    if assistant and not model:
        raise UsageError("--assistant needs --model PATH (the model it drafts for)")
    declared = (from_flags(str(model), str(assistant) if assistant else None),) if model else project.config.user_models
    try:
        return tuple(resolve(m) for m in declared)
    except ModelError as exc:
        raise UsageError(f"bad model: {exc}") from None


def load_line() -> str:
    try:
        return "load " + " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "load unknown"


def cmd_paired(project: Project, args: argparse.Namespace) -> int:
    python = python_of(args.against)
    users = user_models(project, args)
    fields = fields_of(args.pair_fields, users)
    seconds = seconds_of(args.pair_seconds)
    threads = int(getattr(args, "harness_threads", None) or 1)
    regressions = pair_envs(project, sys.executable, python, fields, users, seconds, threads,
                            timestamped_dir(project.reports_dir / "paired"))
    return EXIT_REGRESSION if regressions else EXIT_OK


def fields_of(spec: str | None, users: tuple[Any, ...] = ()) -> tuple[paired.PairedField, ...]:
    """--pair-fields NAMES (comma-separated parts of a field's key; all without) as fields."""
    fields = paired.select([p for p in (spec or "").split(",") if p], users)
    if not fields:
        raise UsageError(f"--pair-fields {spec}: no paired field matches; fields: "
                         + ", ".join(f.key for f in paired.select([], users)))
    return fields


def seconds_of(spec: Any) -> float:
    seconds = float(spec)
    if seconds <= 0:
        raise UsageError(f"--pair-seconds {spec}: must be > 0")
    return seconds


def pair_envs(project: Project, new_python: str, old_python: str, fields: tuple[paired.PairedField, ...],
              users: tuple[Any, ...], seconds: float, threads: int, out: Path) -> int:
    """Pair `new_python`'s env against `old_python`'s on `fields` for `seconds` in all, print a line
    per field and the verdict, write `write_paired`'s folder `out`; the number of regressions."""
    cores = paired.shared_core()
    models = project.config.models_dir
    alpha = stats.per_test_alpha(project.config.alpha, len(fields))
    workers: list[paired.Worker] = []
    try:
        new = paired.Worker(new_python, models, cores, threads, users)
        workers.append(new)
        old = paired.Worker(old_python, models, cores, threads, users)
        workers.append(old)
        hello = {"new": new.ask({"op": "hello"}), "old": old.ask({"op": "hello"})}
        if {h.get("protocol") for h in hello.values()} != {paired.PROTOCOL}:
            raise UsageError(f"--against {old_python}: its timing worker speaks another protocol ({hello['old']})")
        print(f"harness: paired latency, new transformers {hello['new']['transformers']} torch {hello['new']['torch']} "
              f"({new_python}) vs old transformers {hello['old']['transformers']} torch {hello['old']['torch']} "
              f"({old_python}); {len(fields)} fields, ~{seconds:.0f} s of pairing, cores {cores}, threads {threads}, "
              f"alpha {alpha:.3g} a field; {load_line()}", flush=True)
        outcomes, records = run_fields(new, old, fields, seconds / len(fields), alpha, project)
    finally:
        for w in workers:
            w.close()
    regressions = sum(o.status is Status.REGRESSION for o in outcomes)
    run = {"against": old_python, "alpha_field": alpha, "alpha": project.config.alpha, "cores": cores,
           "threads": threads, "seconds": seconds, "end": load_line()}
    path, report = write_paired(out, hello, run, outcomes, records)
    counts = {s.value: sum(o.status is s for o in outcomes) for s in Status if any(o.status is s for o in outcomes)}
    verdict = "regression" if regressions else "pass"
    print(f"harness: paired verdict {verdict}: " + ", ".join(f"{n} {s}" for s, n in counts.items())
          + f"; {load_line()}; {path}\nreport: {report}")
    return regressions


def env_of(hello: dict[str, Any], threads: int) -> dict[str, Any]:
    """A paired worker's environment as a run's report reads it (its hello: the versions it runs)."""
    return {"transformers": hello.get("transformers"), "torch": hello.get("torch"), "device": {"type": "cpu"},
            "dtype": "fp32", "threads": threads}


def write_paired(out: Path, hello: dict[str, Any], run: dict[str, Any], outcomes: list[Outcome],
                 records: list[dict[str, Any]]) -> tuple[Path, Path]:
    """The paired run's folder: paired.json (both envs, the run's settings, every field's outcome and
    its blocks) and the report a run writes - results.json, index.html, junit.xml, summary.md - from
    the same outcomes, so the paired verdict reads like any other run's (a CI's JUnit, a PR's summary)."""
    from harness.report.output import write_report

    out.mkdir(parents=True, exist_ok=True)
    path = out / "paired.json"
    path.write_text(json.dumps({"envs": hello, **run, "outcomes": [o.to_json() for o in outcomes], "fields": records},
                               indent=1) + "\n")
    new, old = env_of(hello["new"], run["threads"]), env_of(hello["old"], run["threads"])
    key = "tf{transformers}-torch{torch}".format
    results = Results(env=new, baseline_env=old, outcomes=outcomes,
                      meta={"env_key": key(**new), "baseline_key": f"{key(**old)} (paired: {run['against']})",
                            "command": f"harness check --against {run['against']}", "alpha": run["alpha"],
                            "paired": {k: v for k, v in run.items() if k != "against"}})
    paths = write_report(results, out)
    return path, paths.index


def run_fields(new: paired.Asks, old: paired.Asks, fields: tuple[paired.PairedField, ...], budget: float,
               alpha: float, project: Project) -> tuple[list[Outcome], list[dict[str, Any]]]:
    """Each field paired for `budget` seconds and decided; its memory compared once."""
    policy = Policy(alpha=alpha, thresholds=project.config.thresholds)
    env = {"device": {"type": "cpu"}, "dtype": "fp32"}
    memory_policy = Policy(alpha=alpha, thresholds=project.config.thresholds, observed_env=env, baseline_env=env)
    outcomes: list[Outcome] = []
    records: list[dict[str, Any]] = []
    for field in fields:
        got = paired.pair(new, old, field, budget)
        if got.error:
            outcome = Outcome("latency", field.case, field.name, "latency", Status.SKIPPED,
                              f"not compared: {got.error}", "not-comparable", against="paired")
        else:
            outcome = compare_paired(field.name, {"wall": got.new, "cpu": got.new_cpu},
                                     {"wall": got.old, "cpu": got.old_cpu}, policy)
            outcome = Outcome("latency", field.case, field.name, outcome.kind, outcome.status, outcome.detail,
                              outcome.category, outcome.diff, "paired", outcome.p_value)
        outcomes.append(outcome)
        records.append({"field": field.key, "seconds": got.seconds, "blocks": got.blocks, "new": got.new,
                        "old": got.old, "new_cpu": got.new_cpu, "old_cpu": got.old_cpu, "error": got.error})
        print(f"  {field.key}: {outcome.status.value}{' (' + outcome.category + ')' if outcome.category else ''} "
              f"- {outcome.detail}", flush=True)
        if got.error:
            continue
        mem = paired.memory(new, old, field)
        if mem is not None:
            m = compare_memory(f"memory_{field.name}", paired_field(mem[0]), paired_field(mem[1]), memory_policy)
            m = Outcome("latency", field.case, m.field, m.kind, m.status, m.detail, m.category, m.diff, "paired")
            outcomes.append(m)
            print(f"  {field.case}/{m.field}: {m.status.value} - {m.detail}", flush=True)
    return outcomes, records


def paired_field(value: dict[str, Any]) -> Any:
    from harness.schema import Field

    return Field("memory", value)
