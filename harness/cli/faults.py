"""`harness faults`: run the catching cases under every fault of the catalogue (harness/faults/)
and write the sensitivity table.

One fault = one pytest subprocess over the catching suite, restricted to the catalogue's case glob
(``--harness-case suite:GLOB``), with ``--inject-fault NAME``, strict (the store is read-only: a
faulty run never writes a record) against the current env's committed records. A fault is
**caught** when its results.json has a regression of the catalogue's field in a matching case.
A clean control run - the union of every selection, no fault - must report no regression at all,
or a "catch" would prove nothing. Runs go `jobs` at a time.

The **empty store** column: is the fault caught on a first run, with no baseline record (what a
user's first run on their own model, or a new env, relies on)? Decided from the same run where it
can be (`in_run`: a regression of a matching case that no baseline decided - a reference, a
deviation, a fit against exact probabilities, coverage below what the run generated, a path that
silently did not run); otherwise by one more run of the fault's cases on an empty store (not strict:
a first run), whose regressions of a matching case, any field, catch it - and which says whether a
faulty case's record was written anyway. The clean control runs on an empty store too (no false
alarm there either). A fault caught only against a baseline is listed as such in the table: API
contracts, latency and memory have no in-run truth to compare with.

The same column in another dtype (``--dtype bf16 --empty-only``): only the empty-store run, in that
dtype, per fault; ``--merge`` adds it to docs/faults.json (`empty_by_dtype`) and renders docs/faults.md
from the merged results - a partial run (``--only``) replaces its faults' entries, the rest stay.

A fault whose catching suite is not in the checkout (suites/test_<suite>.py) is not run and is
listed as "no suite yet"; any other fault not caught is a gap in the suites, and the command
exits 1.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from harness.cli.project import UsageError, current_env_key, open_project
from harness.faults import BY_NAME, FAULTS, Catch, Fault
from harness.settings.run import RunSettings

CAUGHT, MISSED, NO_SUITE, CLEAN_OK, CLEAN_ALARM = "caught", "MISSED", "no suite yet", "clean", "FALSE ALARM"


@dataclass
class FaultRun:
    """What one run showed: the fault (None: the clean control), its verdict, and the evidence."""

    fault: str | None
    status: str
    seconds: float = 0.0
    caught_by: list[dict[str, str]] = field(default_factory=list)  # matching regressions (case, field, detail)
    regressions: list[dict[str, str]] = field(default_factory=list)  # every regression of the run
    cases: int = 0  # cases the run checked
    error: str = ""
    empty_store: str = ""  # caught / MISSED on an empty store ("" not run: no suite)
    empty_by: list[dict[str, str]] = field(default_factory=list)  # the regressions that caught it there
    empty_from: str = ""  # "same run" (decided in-run in the baseline run) or "empty-store run"
    empty_written: list[str] = field(default_factory=list)  # matching cases the empty-store run wrote anyway
    empty_seconds: float = 0.0
    # the empty-store verdict in other dtypes: dtype -> {empty_store, empty_by, empty_written, empty_seconds, error}
    empty_by_dtype: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


def load_committed(path: Path) -> dict[str, Any] | None:
    """docs/faults.json (None where there is none), read through the input layer
    (harness/store/reading.py: a regular file, its size, strict JSON, its depth) and checked as
    `merged` reads it - `runs` and `clean` fault runs with each field of its type, `commands` and
    `env_key` text - so a file that is not one is one line naming it (`InputError` / `UsageError`),
    before any fault runs."""
    from harness.store.reading import read_json

    if not os.path.lexists(path):
        return None
    data = read_json(path)
    problem = _committed_problem(data)
    if problem:
        raise UsageError(f"{path}: not a fault table ({problem}); restore it from git or delete it")
    return data


def _committed_problem(data: Any) -> str:
    if not isinstance(data, dict):
        return f"a JSON object expected, got {type(data).__name__}"
    if not isinstance(data.get("runs", []), list):
        return "'runs' must be a list"
    if not isinstance(data.get("env_key", ""), str):
        return "'env_key' must be text"
    commands = data.get("commands", [])
    if not isinstance(commands, list) or not all(isinstance(c, str) for c in commands):
        return "'commands' must be a list of text"
    runs = [(f"runs[{i}]", r) for i, r in enumerate(data.get("runs", []))]
    if data.get("clean") is not None:
        runs.append(("clean", data["clean"]))
    defaults = {f.name: f for f in fields(FaultRun)}
    for where, run in runs:
        if not isinstance(run, dict):
            return f"{where} must be an object"
        unknown = sorted(set(run) - set(defaults))
        if unknown or "status" not in run:
            return f"{where}: unknown key {unknown[0]!r}" if unknown else f"{where}: no 'status'"
        for name, value in run.items():
            if name == "fault":
                ok = value is None or isinstance(value, str)
            elif name == "status":
                ok = isinstance(value, str)
            else:
                default = defaults[name].default if defaults[name].default is not MISSING \
                    else defaults[name].default_factory()  # type: ignore[misc]
                kind = (int, float) if isinstance(default, (int, float)) else type(default)
                ok = isinstance(value, kind) and not isinstance(value, bool)
                if ok and isinstance(value, list):
                    ok = all(isinstance(v, (dict, str)) for v in value)
                if ok and name == "empty_by_dtype":
                    ok = all(isinstance(v, dict) for v in value.values())
            if not ok:
                return f"{where}.{name}: {type(value).__name__} is not what a fault run holds there"
    return ""


def suite_file(root: Path, suite: str) -> Path:
    return root / "suites" / f"test_{suite}.py"


def command(root: Path, globs: Sequence[str], results: Path, golden_dir: Path, fault: str | None,
            strict: bool = True, dtype: str = "fp32") -> list[str]:
    """The pytest command of one run: every suite collected (so the per-test alpha is a whole run's),
    only the cases of `globs` ('suite:glob') run, strict (an empty store's first run: not), one fault,
    in `dtype`."""
    cmd = [sys.executable, "-m", "pytest", str(root / "suites"), "-p", "no:cacheprovider",
           "-q", "--rootdir", str(root), *(["--harness-strict"] if strict else []), "--golden-dir", str(golden_dir),
           "--harness-results", str(results), *(["--harness-dtype", dtype] if dtype != "fp32" else [])]
    for glob in globs:
        cmd += ["--harness-case", glob]
    return cmd + (["--inject-fault", fault] if fault else [])


def regressions(results: dict[str, Any]) -> list[dict[str, str]]:
    return [{"suite": o["suite"], "case": o["case"], "field": o["field"], "detail": o.get("detail", ""),
             **({"in_run": "yes"} if in_run(o) else {})}
            for o in results.get("outcomes", []) if o.get("status") == "regression"]


def in_run(o: dict[str, Any]) -> bool:
    """A regression an empty store would report as well - no baseline record took part in it: a
    reference (computed in the run), a deviation from an exact value, a fit against exact
    probabilities, fewer positions than the run generated, a path whose call silently did not run
    (harness/checking/compare.py `judged_alone`)."""
    diff, category = o.get("diff") or {}, o.get("category")
    if category == "reference-lost":  # a reference the baseline record ran: only a baseline knows
        return False
    if o.get("against") == "reference" or category == "deviation":
        return True
    if category == "distribution-mismatch":
        return diff.get("test") == "g-test-fit"
    if category == "coverage-lost":
        need, seen = diff.get("min_positions"), diff.get("positions")
        return isinstance(need, int) and isinstance(seen, int) and seen < need
    return category == "feature-ignored" and bool(diff.get("in_run"))


def any_field(fault: Fault) -> Catch:
    """The fault's catching cases, any field (what a first run can show)."""
    return Catch(fault.catch.suite, fault.catch.case, "*")


def matching(fault: Fault, found: list[dict[str, str]]) -> list[dict[str, str]]:
    """The regressions of the fault's catching cases, any field."""
    return caught_by(any_field(fault), found)


def caught_by(catch: Catch, found: list[dict[str, str]]) -> list[dict[str, str]]:
    return [r for r in found if catch.matches(r["suite"], r["case"], r["field"])]


def run_cases(root: Path, golden_dir: Path, globs: Sequence[str], fault: str | None,
              timeout: float = 600, strict: bool = True, dtype: str = "fp32") -> tuple[list[dict[str, str]], int, str]:
    """One pytest run (strict unless told) of the cases of `globs` with `fault` injected (None: clean):
    (its regressions, how many cases it checked, an error when it produced no results)."""
    with tempfile.TemporaryDirectory(prefix="harness-fault-") as tmp:
        results_path = Path(tmp) / "results.json"
        try:
            proc = subprocess.run(command(root, globs, results_path, golden_dir, fault, strict, dtype),
                                  cwd=root, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return [], 0, f"timed out after {timeout:.0f} s"
        if not results_path.exists():
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
            return [], 0, f"pytest exit {proc.returncode}, no results.json: {' | '.join(tail)}"
        results = json.loads(results_path.read_text())
    return regressions(results), len({(o["suite"], o["case"]) for o in results.get("outcomes", [])}), ""


def run(root: Path, golden_dir: Path, fault: Fault | None, faults: Sequence[Fault] = (), timeout: float = 600,
        empty: bool = True, dtype: str = "fp32", empty_only: bool = False) -> FaultRun:
    """Run one fault's catching cases (or, fault None, the clean control over `faults`' selections)
    against the env's records, then (`empty`) its empty-store verdict (`on_empty_store`); `empty_only`:
    the empty-store run alone (no baseline run, so no same-run shortcut), in `dtype`."""
    selected = [fault] if fault is not None else list(faults)
    globs = sorted({f"{f.catch.suite}:{f.catch.case}" for f in selected})
    if empty_only:
        return on_empty_store(root, FaultRun(fault.name if fault else None, ""), fault, globs, timeout, dtype)
    start = time.monotonic()
    found, cases, error = run_cases(root, golden_dir, globs, fault.name if fault else None, timeout, dtype=dtype)
    seconds = time.monotonic() - start
    if fault is None:
        result = FaultRun(None, CLEAN_ALARM if found or error else CLEAN_OK, seconds, regressions=found, cases=cases,
                          error=error)
    else:
        hits = caught_by(fault.catch, found)
        result = FaultRun(fault.name, CAUGHT if hits else MISSED, seconds, hits, found, cases, error)
    return on_empty_store(root, result, fault, globs, timeout, dtype) if empty else result


def on_empty_store(root: Path, result: FaultRun, fault: Fault | None, globs: Sequence[str],
                   timeout: float = 600, dtype: str = "fp32") -> FaultRun:
    """The fault's verdict on an empty store: from the same run when one of its catching cases'
    regressions was decided in the run (`in_run`), else from a first run of those cases on an empty
    store (not strict) - caught by any regression of a matching case; the records that run wrote
    for a matching case are listed (a faulty case must never be written). The clean control always
    runs there: no regression allowed."""
    same = [r for r in matching(fault, result.regressions) if r.get("in_run")] if fault is not None else []
    if same:
        result.empty_store, result.empty_by, result.empty_from = CAUGHT, same, "same run"
        return result
    with tempfile.TemporaryDirectory(prefix="harness-empty-store-") as store:
        start = time.monotonic()
        found, _, error = run_cases(root, Path(store), globs, fault.name if fault else None, timeout, strict=False,
                                    dtype=dtype)
        result.empty_seconds = time.monotonic() - start
        written = sorted(p.stem for p in Path(store).rglob("*.json"))
    if fault is None:
        result.empty_store, result.empty_by = (CLEAN_ALARM if found or error else CLEAN_OK), found
        result.empty_from = "empty-store run"
        return result
    hits = matching(fault, found)
    result.empty_store, result.empty_by, result.empty_from = (CAUGHT if hits else MISSED), hits, "empty-store run"
    result.empty_written = [c for c in written if hits and any_field(fault).matches(fault.catch.suite, c, "")]
    if error:
        result.error = result.error or f"empty store: {error}"
    return result


def run_all(root: Path, golden_dir: Path, faults: Sequence[Fault], jobs: int = 1,
            progress: Any = None, dtype: str = "fp32", empty_only: bool = False) -> tuple[list[FaultRun], FaultRun]:
    """Every fault's run (those whose suite exists), then the clean control over the same cases."""
    runnable = [f for f in faults if suite_file(root, f.catch.suite).exists()]
    done: dict[str, FaultRun] = {f.name: FaultRun(f.name, NO_SUITE) for f in faults if f not in runnable}

    def one(fault: Fault) -> FaultRun:
        result = run(root, golden_dir, fault, dtype=dtype, empty_only=empty_only)
        if progress:
            progress(result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for result in pool.map(one, runnable):
            done[result.fault or ""] = result
    clean = run(root, golden_dir, None, runnable, dtype=dtype, empty_only=empty_only)
    if progress:
        progress(clean)
    return [done[f.name] for f in faults], clean


# ----------------------------------------------------------------------------------------------
# merging a run into the committed results

EMPTY_KEYS = ("empty_store", "empty_by", "empty_written", "empty_seconds", "error")


def empty_verdict(r: FaultRun) -> dict[str, Any]:
    """A run's empty-store verdict, as `FaultRun.empty_by_dtype` keeps it per dtype."""
    return {k: getattr(r, k) for k in EMPTY_KEYS}


def in_dtype(r: FaultRun, dtype: str) -> FaultRun:
    """The fault's empty-store verdict in `dtype` as a FaultRun (status "" when not run there)."""
    return FaultRun(r.fault, "", **r.empty_by_dtype.get(dtype, {}))


def merged(old: dict[str, Any] | None, runs: Sequence[FaultRun], clean: FaultRun, dtype: str = "fp32",
           empty_only: bool = False) -> tuple[list[FaultRun], FaultRun]:
    """The committed results (docs/faults.json, `old`) with this run's in, in catalogue order.

    A full fp32 run replaces its faults' entries (their other dtypes' verdicts kept); its clean control
    replaces the committed one only when it ran over the whole catalogue's selection. A run in another
    dtype or on the empty store alone adds its verdicts as that dtype's column (`empty_by_dtype`) of
    the committed entries - which must exist (the fp32 run first); its clean control replaces the
    column's only when it ran every fault the column holds. A narrower clean control never replaces a
    wider one, and its false alarms are never dropped: they join the committed verdict
    (`with_alarms`), which then reads FALSE ALARM until a run over the whole selection is clean."""
    by_name = {r["fault"]: FaultRun(**r) for r in (old or {}).get("runs", [])}
    base_clean = FaultRun(**old["clean"]) if old and old.get("clean") else None
    if dtype != "fp32" or empty_only:
        absent = [r.fault for r in runs if r.fault not in by_name]
        if absent or base_clean is None:
            raise UsageError(f"--merge: no committed fp32 results for {', '.join(map(str, absent)) or 'the clean control'}; "
                             "run `harness faults --merge` for them first")
        column = {name for name, r in by_name.items() if dtype in r.empty_by_dtype}
        whole = column <= {str(r.fault) for r in runs}
        for r in runs:
            by_name[str(r.fault)].empty_by_dtype[dtype] = empty_verdict(r)
        verdict = empty_verdict(clean)
        committed = base_clean.empty_by_dtype.get(dtype)
        if committed and not whole:
            verdict = empty_verdict(with_alarms(FaultRun(None, "", **committed), clean))
        base_clean.empty_by_dtype[dtype] = verdict
        clean = base_clean
    else:
        for r in runs:
            if r.fault in by_name:
                r.empty_by_dtype = by_name[str(r.fault)].empty_by_dtype
            by_name[str(r.fault)] = r
        if len(runs) < len(FAULTS) and base_clean is not None:
            clean = with_alarms(base_clean, clean)
    return [by_name[f.name] for f in FAULTS if f.name in by_name], clean


def with_alarms(committed: FaultRun, narrower: FaultRun) -> FaultRun:
    """The committed clean control, with the false alarms of a run over a narrower selection added
    (the baseline run's regressions, and the empty store's where it ran there): a partial run may not
    replace the whole selection's verdict, nor may its alarm vanish from the table."""
    regressions = committed.regressions + [r for r in narrower.regressions if r not in committed.regressions]
    empty_by = committed.empty_by + [r for r in narrower.empty_by if r not in committed.empty_by]
    status = CLEAN_ALARM if regressions or narrower.status == CLEAN_ALARM else committed.status
    empty_store = (CLEAN_ALARM if empty_by or narrower.empty_store == CLEAN_ALARM else committed.empty_store)
    error = committed.error or narrower.error
    return replace(committed, status=status, regressions=regressions, empty_by=empty_by, empty_store=empty_store,
                   error=error)


# ----------------------------------------------------------------------------------------------
# the sensitivity table


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(runs: Sequence[FaultRun], clean: FaultRun, env_key: str, command_line: str, jobs: int = 1) -> str:
    """docs/faults.md: one row per fault - what it breaks, the suite / case / field that caught it,
    the seconds its run took - and the clean control."""
    caught = sum(r.status == CAUGHT for r in runs)
    ran = sum(r.status != NO_SUITE for r in runs)
    dtypes = sorted({d for r in [*runs, clean] for d in r.empty_by_dtype})
    lines = [
        "# Sensitivity: the fault catalogue",
        "",
        f"Generated by `{command_line}` (harness/cli/faults.py) against the records of `{env_key}`; "
        "do not edit by hand. Each fault (harness/faults/) is injected into the installed transformers "
        "for one strict pytest run of its catching suite, restricted to the catalogue's cases; *caught* "
        "means that run reported the catalogue's field as a regression. Seconds: wall time of that run "
        "(a fresh pytest process: imports and model loading included).",
        "",
        f"**Detection: {caught}/{ran}** faults caught where the catalogue says"
        + (f" ({len(runs) - ran} waiting for their suite)." if ran < len(runs) else "."),
        f"**Time**: {sum(r.seconds for r in runs) + clean.seconds:.0f} s of runs in all, {jobs} at a time on "
        "this project's shared 2-core machine (a run's seconds include waiting for the CPU).",
        f"**Clean control** (every selection below, no fault: {clean.cases} cases): "
        + (f"{len(clean.regressions)} regressions - "
           + "; ".join(f"{r['suite']}/{r['case']} {r['field']}" for r in clean.regressions[:5])
           if clean.regressions else "no regression") + f", {clean.seconds:.0f} s.",
        "",
        f"**Empty store** (a first run, no baseline record): {sum(r.empty_store == CAUGHT for r in runs)}/{ran} "
        f"caught; clean control there: {clean.empty_store or 'not run'}"
        + (f" ({len(clean.empty_by)} regressions)" if clean.empty_by else "") + ".",
        *[line for d in dtypes for line in ("", dtype_summary(runs, clean, d))],
        "",
        "| fault | area | what it breaks | caught by (suite / case / field) | evidence | other regressions "
        "| empty store | " + "".join(f"empty store, {d} | " for d in dtypes) + "s |",
        "|---|---|---|---|---|---|---|" + "---|" * len(dtypes) + "---|",
    ]
    for r in runs:
        fault = BY_NAME[r.fault or ""]
        where = f"`{fault.catch.suite}` / `{fault.catch.case}` / `{fault.catch.field}`"
        if r.status == CAUGHT:
            hit = r.caught_by[0]
            evidence = f"{hit['case']} `{hit['field']}`: {hit['detail'][:140]}"
            others = f"{len(r.regressions) - len(r.caught_by)}"
        elif r.status == NO_SUITE:
            evidence, others = f"not run: suites/test_{fault.catch.suite}.py is not in this checkout", ""
        else:
            evidence = f"**{r.status}**: " + (r.error or f"{len(r.regressions)} other regressions, none of the field")
            others = f"{len(r.regressions)}"
        seconds = f"{r.seconds + r.empty_seconds:.1f}" if r.status != NO_SUITE else ""
        other = "".join(f"{_cell(empty_cell(in_dtype(r, d)) or 'not run')} | " for d in dtypes)
        lines.append(f"| `{fault.name}` | {fault.area} | {_cell(fault.breaks)} | {where} | {_cell(evidence)} "
                     f"| {others} | {_cell(empty_cell(r))} | {other}{seconds} |")
    baseline_only = [r for r in runs if r.empty_store == MISSED]
    if baseline_only:
        lines += ["", "Only a baseline can see (not caught on an empty store): nothing computed in the run says "
                  "what these must be, so they are judged against what the baseline recorded - API contracts (the "
                  "names, signatures and defaults a release exposes), latency, memory, and any behaviour that has "
                  "no in-run oracle yet:", ""]
        lines += [f"- `{r.fault}` ({BY_NAME[r.fault or ''].area})" for r in baseline_only]
    lines += ["", "Notes:", ""]
    lines += [f"- `{f.name}`: {f.notes}" for f in FAULTS if f.notes and any(r.fault == f.name for r in runs)]
    return "\n".join(lines).rstrip() + "\n"


def dtype_summary(runs: Sequence[FaultRun], clean: FaultRun, dtype: str) -> str:
    """The summary line of the empty-store column in `dtype` (`harness faults --dtype D --empty-only`)."""
    there = [in_dtype(r, dtype) for r in runs if dtype in r.empty_by_dtype]
    missed = [r.fault for r in there if r.empty_store != CAUGHT]
    control = in_dtype(clean, dtype)
    return (f"**Empty store in {dtype}** (the same first run with the models in {dtype}; {len(there)} faults run "
            f"there): {len(there) - len(missed)}/{len(there)} caught"
            + (f", missed: {', '.join(f'`{m}`' for m in missed)}" if missed else "")
            + f"; clean control there: {control.empty_store or 'not run'}"
            + (f" ({len(control.empty_by)} regressions)" if control.empty_by else "") + ".")


def empty_cell(r: FaultRun) -> str:
    """The empty-store column: caught (by which case / field, from which run; a faulty record written
    anyway is flagged) or MISSED."""
    if not r.empty_store:
        return ""
    if r.empty_store != CAUGHT:
        return f"**{r.empty_store}**" + (f": {r.error}" if r.error.startswith("empty store") else "")
    hit = r.empty_by[0]
    written = f"; **record written**: {', '.join(r.empty_written)}" if r.empty_written else ""
    run = f" ({r.empty_from})" if r.empty_from else ""  # a dtype's column keeps no run name
    return f"caught{run}: {hit['case']} `{hit['field']}`{written}"


# ----------------------------------------------------------------------------------------------
# the command


def writable_table(out: Path, flag: str) -> None:
    """Refuse, before any fault runs, a table path that cannot be written: a directory (the table or
    its .json beside it), or a folder that cannot be made or written (one line, exit 2)."""
    for path in (out, out.with_suffix(".json")):
        if path.is_dir():
            raise UsageError(f"{flag} {path}: a directory, not a file; pass the table's file (its .json goes beside it)")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=".faults-", suffix=".tmp"):
            pass
    except OSError as exc:
        raise UsageError(f"{flag} {out}: cannot write in {out.parent}: {exc.strerror or exc}; "
                         "nothing was run") from exc


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("faults", parents=[common], help="inject every catalogued fault, check the suites catch it, "
                                                        "write the sensitivity table",
                       description="Run each fault of harness/faults/ against its catching cases and write the "
                                   "sensitivity table (markdown).")
    p.add_argument("--only", nargs="+", metavar="NAME", help="these faults only (default: the whole catalogue)")
    p.add_argument("-j", "--jobs", type=int, default=2, help="fault runs at a time (default 2)")
    p.add_argument("--out", metavar="FILE", help="where the table goes (default: <root>/docs/faults.md; "
                                                 "with --only: <reports_dir>/faults.md)")
    p.add_argument("--list", action="store_true", help="list the catalogue and exit")
    p.add_argument("--dtype", default="fp32", help="run the models in this dtype (fp32, bf16, fp16; default fp32)")
    p.add_argument("--empty-only", action="store_true",
                   help="only the empty-store run of each fault (a first run), no baseline run")
    p.add_argument("--empty-caught", action="store_true",
                   help="the faults docs/faults.json shows caught on an empty store (fp32): the in-run oracles' faults")
    p.add_argument("--merge", action="store_true",
                   help="merge into docs/faults.json and render docs/faults.md from it (another dtype: its column)")
    p.set_defaults(func=cmd_faults)


def cmd_faults(args: argparse.Namespace, extra: Sequence[str]) -> int:

    if args.list:
        for f in FAULTS:
            print(f"{f.name:32} {f.area:11} {f.catch.suite}/{f.catch.case}/{f.catch.field}: {f.breaks}")
        return 0
    unknown = [n for n in args.only or () if n not in BY_NAME]
    if unknown:
        raise UsageError(f"--only {' '.join(unknown)}: no such fault; known: {', '.join(BY_NAME)}")
    if args.jobs < 1:
        raise UsageError(f"-j {args.jobs}: expected at least 1")
    project = open_project(args)
    settings = RunSettings(project.config, project.store.root, project.reports_dir / "results.json", dtype=args.dtype)
    key = current_env_key(settings)
    committed = project.root / "docs" / "faults.json"
    old = load_committed(committed) if args.merge or args.empty_caught else None
    if args.empty_caught:
        caught = [r["fault"] for r in (old or {}).get("runs", []) if r.get("empty_store") == CAUGHT]
        args.only = [n for n in (args.only or BY_NAME) if n in caught]
        if not args.only:
            raise UsageError(f"--empty-caught: {committed} shows no fault caught on an empty store")
    if not args.empty_only and not project.store.record_paths(key):
        raise UsageError(f"no records for this env ({key}) under {project.store.root}: a fault is caught against the "
                         "env's own records; record them first with `harness regen`")
    faults = [BY_NAME[n] for n in args.only] if args.only else list(FAULTS)
    if args.merge:  # what the merge would refuse after the runs (no committed fp32 entry...), refused before them
        merged(copy.deepcopy(old), [FaultRun(f.name, "") for f in faults], FaultRun(None, ""), args.dtype,
               args.empty_only)
    out = Path(args.out) if args.out else (project.reports_dir / "faults.md" if args.only and not args.merge
                                           else project.root / "docs" / "faults.md")
    writable_table(out, "--out" if args.out else "the table")

    def progress(r: FaultRun) -> None:
        print(f"  {r.fault or '(clean control)':32} {r.status:12} {r.seconds:6.1f} s  empty store: "
              f"{r.empty_store or '-':12} {r.empty_seconds:6.1f} s" + (f"  {r.error}" if r.error else ""), flush=True)

    print(f"harness: {len(faults)} faults against {key}, {args.jobs} at a time"
          + (" (empty store only)" if args.empty_only else ""), flush=True)
    runs, clean = run_all(project.root, project.store.root, faults, args.jobs, progress, args.dtype, args.empty_only)
    line = (f"harness faults -j {args.jobs}" + (f" --dtype {args.dtype}" if args.dtype != "fp32" else "")
            + (" --empty-only" if args.empty_only else "") + (" --empty-caught" if args.empty_caught else "")
            + (f" --only {' '.join(args.only)}" if args.only and not args.empty_caught else "")
            + (" --merge" if args.merge else ""))
    shown, shown_clean, env_key = runs, clean, key
    if args.merge:
        shown, shown_clean = merged(old, runs, clean, args.dtype, args.empty_only)
        env_key = str((old or {}).get("env_key") or key)
        history = list((old or {}).get("commands", ["harness faults -j 2"] if old else []))
        history += [line] if history[-1:] != [line] else []  # a merge run again replaces its own results
        line = " then ".join(f"`{c}`" for c in history).strip("`")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(markdown(shown, shown_clean, env_key, line, args.jobs), encoding="utf-8")
    data = {"env_key": env_key, "runs": [r.to_json() for r in shown], "clean": shown_clean.to_json()}
    if args.merge:
        data["commands"] = history
    (out.with_suffix(".json")).write_text(json.dumps(data, indent=1), encoding="utf-8")
    missed = [r.fault for r in runs if r.status == MISSED]
    first_run = [r.fault for r in runs if r.empty_store == MISSED]
    if args.empty_only:
        print(f"\ntable: {out}\nempty store ({args.dtype}): caught {sum(r.empty_store == CAUGHT for r in runs)}/{len(runs)}"
              + (f"; missed: {', '.join(str(m) for m in first_run)}" if first_run else "")
              + (f"; clean control there: {len(clean.empty_by)} FALSE ALARMS" if clean.empty_by else
                 "; clean control there: no regression"))
        return 1 if clean.empty_by else 0
    print(f"\ntable: {out}\ncaught {sum(r.status == CAUGHT for r in runs)}/{sum(r.status != NO_SUITE for r in runs)}"
          + (f"; MISSED: {', '.join(str(m) for m in missed)}" if missed else "")
          + (f"; clean control: {len(clean.regressions)} FALSE ALARMS" if clean.regressions else "; clean control: no regression")
          + f"\nempty store: caught {sum(r.empty_store == CAUGHT for r in runs)}/{sum(r.status != NO_SUITE for r in runs)}"
          + (f"; only a baseline sees: {', '.join(str(m) for m in first_run)}" if first_run else "")
          + (f"; clean control there: {len(clean.empty_by)} FALSE ALARMS" if clean.empty_by else ""))
    return 1 if missed or clean.regressions or clean.empty_by else 0
