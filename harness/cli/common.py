"""What every command shares: exit codes, the one-line error, the parent parsers, the end of a
run (render, summary, verdict -> exit code).

Exit codes: 0 all pass (or only changes the policy allows: capability changes, new records),
1 regression (or a failing test), 2 usage or input error (bad flag, unknown env key, corrupt record,
missing fixture, bad ``[tool.harness]`` key, unreadable results.json, pytest usage/internal error,
no tests collected) or a run that broke (a suite that did not import, a record or report that
could not be written), 130 interrupted (SIGINT). User errors are one line on stderr, never a
traceback; a longer message is cut and names the file holding all of it (`one_line`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness.checking.claims import ClaimsReport, markdown_lines
from harness.checking.findings import Findings, library_hint
from harness.checking.humane import printable
from harness.cli.project import UsageError, cpu_isa, pytest_problem
from harness.report.output import write_report
from harness.report.terminal import print_summary
from harness.report.writes import writes_lines
from harness.schema import Category, Outcome, Results
from harness.settings.run import BY_FIELD

EXIT_OK, EXIT_REGRESSION, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # SIGINT (Ctrl-C), as a shell reports it: 128 + 2



MAX_ERROR_CHARS = 400  # an error is one readable line; a longer text is saved to a file it names


def full_text_file(text: str) -> str:
    """Save a long message where the user can read it whole; its path, or why it could not be saved."""
    try:
        fd, name = tempfile.mkstemp(prefix="harness-error-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as handle:
            handle.write(text + "\n")
        return name
    except OSError as exc:
        return f"not saved: {exc.strerror or exc}"


def one_line(message: Any, limit: int = MAX_ERROR_CHARS) -> str:
    """`message` as one printable line of at most about `limit` characters; a longer (or
    multi-line) message is cut and names the file that holds all of it."""
    line = " ".join(printable(message).split())
    if len(line) <= limit:
        return line
    return f"{line[:limit]}... (full text: {full_text_file(str(message))})"


def error(message: Any) -> None:
    print(f"harness: error: {one_line(message)}", file=sys.stderr, flush=True)


def common_parser() -> argparse.ArgumentParser:
    """--root, --golden-dir, --reports-dir: where the project and its store are."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", metavar="DIR", help="project root (default: nearest pyproject.toml with "
                                                        "[tool.harness] upward from the current directory)")
    golden = BY_FIELD["golden_dir"]
    common.add_argument(golden.cli, "--records", **{**golden.parser_kwargs(),
                                                    "help": golden.help + "; --records DIR is the same"})
    common.add_argument("--reports-dir", metavar="DIR", help="where reports go (default: [tool.harness] reports_dir)")
    return common


def running_parser(*fields: str) -> argparse.ArgumentParser:
    """The flags of a command that runs the suites: -n, --suites, -v and the `RunSettings` options
    named in `fields` (harness/settings/run.py `OPTIONS`, with their CLI names)."""
    running = argparse.ArgumentParser(add_help=False)
    running.add_argument("-n", dest="workers", metavar="N", help="pytest-xdist workers (a number, 'auto')")
    running.add_argument("--suites", metavar="PATH", help="suites to run (default: <root>/suites)")
    running.add_argument("-v", "--verbose", action="store_true", help="pytest's verbose output instead of -q")
    running.add_argument("--cpu-isa", metavar="LEVEL", type=cpu_isa,
                         help="run the suites with torch, oneDNN and MKL capped at this instruction set (avx2, avx512, "
                              "default): another hardware class on this host, recorded under its own env key "
                              "(...-cpu-x86_64-avx2-fp32; harness/store/env.py ISA_CAPS)")
    for name in fields:
        option = BY_FIELD[name]
        kwargs: dict[str, Any] = option.parser_kwargs()
        if name == "fault":
            kwargs["type"] = fault_name
        running.add_argument(option.cli, **kwargs)
    return running


def fault_name(name: str) -> str:
    """--inject-fault: a name of the catalogue (argparse reports an unknown one, exit 2)."""
    from harness.faults import FaultError, get

    try:
        return get(name).name
    except FaultError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--inject-fault {name}: ")) from exc


def output_dir(path: str, flag: str) -> Path:
    """A directory a command writes into (created if absent); a path that is a file is a usage error."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{flag} {path}: a file, not a directory; pass a directory (it is created if absent)")
    return out


def unreadable_records(results: Results) -> list[Outcome]:
    return [o for o in results.outcomes if o.category == "unreadable-record"]


def run_error(results: Results) -> str:
    """One line for a run whose verdict is 'error': what broke it, and how many more."""
    meta = results.meta
    if meta.get("error"):
        return str(meta["error"])
    if meta.get("interrupted"):
        return str(meta["interrupted"])
    for key, what in (("collection_errors", "a suite did not import"), ("write_errors", "a record was not written")):
        items = meta.get(key) or []
        if items:
            more = f" (and {len(items) - 1} more)" if len(items) > 1 else ""
            return f"{what}: {items[0]}{more}"
    return "the run did not complete"


REPORT_FILES = ("index.html", "junit.xml", "summary.md")


def discard_report(out_dir: Path, results_json: bool, owned: bool) -> None:
    """What a report write that failed left behind: the whole folder when the run made it (`owned`:
    a timestamped run dir, results.json the plugin wrote included), else the report's own files -
    results.json only when this write made it - and the folder if that leaves it empty."""
    if owned:
        shutil.rmtree(out_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            if not any(out_dir.parent.iterdir()):
                out_dir.parent.rmdir()  # an env folder the run made for it
        return
    for name in REPORT_FILES + (("results.json",) if results_json else ()):
        with contextlib.suppress(OSError):
            (out_dir / name).unlink()
    with contextlib.suppress(OSError):
        out_dir.rmdir()  # only if empty


def finish(results: Results, out_dir: Path, pytest_rc: int = 0, results_json: bool = True,
           claims: ClaimsReport | None = None, owned: bool = False) -> int:
    """Render, print the summary and the paths, and return the exit code of the verdict - the
    same `Results.verdict` the report and JUnit show. A pytest run that broke (collection error,
    crash), failed a test the plugin did not see, or a report that cannot be written make it
    'error' or 'failed', never 'pass'. `claims`: the release-notes table shown in the report
    (`harness compare --claims`). A report that cannot be written (a full disk) leaves nothing
    behind (`discard_report`; `owned`: the run made `out_dir`) and says so in one line. The findings
    are grouped once here and handed to every renderer; harness/report/output.py writes the files."""
    problem = pytest_problem(pytest_rc)
    if problem:
        results.meta["error"] = problem
        results_json = True  # the plugin's results.json does not know the run broke
    if pytest_rc == 1 and results.verdict in ("pass", "changed"):
        results.meta["failed"] = "pytest reported failing tests that are not golden regressions; see its output"
        results_json = True
    findings = Findings.of(results)  # the outcomes are final: their findings, once, for every renderer
    try:  # index.html, junit.xml and summary.md - the report's gist for a pull request (with the claims, if any)
        paths = write_report(results, out_dir, findings, results_json=results_json, claims=claims,
                             summary_extra=[markdown_lines(claims)] if claims else [])
        index, junit, summary = paths.index, paths.junit, paths.summary
    except OSError as exc:
        index = junit = summary = None
        discard_report(out_dir, results_json, owned)
        results.meta["error"] = f"cannot write the report under {out_dir}: {exc.strerror or exc}" + (
            f" ({exc.filename})" if exc.filename else "") + (
            "; its folder was removed" if owned else "; nothing of it was left there")
    meta = results.meta
    print_summary(results, f"{meta.get('env_key', '?')} vs baseline {meta.get('baseline_key', '?')}", findings)
    if isinstance(meta, dict) and "writes" in meta:  # a run (not a comparison of records)
        print()
        for line in writes_lines(meta):
            print(line)
    if index is not None:
        print(f"\nreport: {index}\nsummary: {summary}\njunit:  {junit}")
    broken = unreadable_records(results)
    if broken:
        files = sorted({str(o.diff.get("file") or o.detail) for o in broken})
        error(f"corrupt golden record {files[0]}" + (f" (and {len(files) - 1} more)" if len(files) > 1 else "")
              + f": {broken[0].diff.get('reason') or broken[0].detail}; "
              "fix or delete it, or rewrite the current env's records with `harness regen`")
        return EXIT_USAGE
    verdict = results.verdict
    if verdict == "error":
        print("verdict: ERROR")
        error(run_error(results))
        return EXIT_USAGE
    if verdict == "regression":
        hint = library_hint(results)
        print("verdict: REGRESSION" + (f" - {hint}" if hint else ""))
        return EXIT_REGRESSION
    if verdict == "failed":
        print("verdict: FAILED (tests failed that are not golden regressions; see pytest's output"
              + (f": {', '.join(meta['broken_tests'][:3])}" if meta.get("broken_tests") else "") + ")")
        return EXIT_REGRESSION
    print(verdict_line(results))
    return EXIT_OK


def verdict_line(results: Results) -> str:
    """The 'pass' / 'changed' verdict's line (`Results.verdict`, the report's headline too): a
    change says `harness regen` accepts it; the known deviations the baseline already holds (findings
    in transformers, the same size as recorded) are a pass, said as tracked."""
    known = len(results.tracked)
    tracked = (f"{known} known deviation(s) the baseline already holds are tracked (findings in transformers, "
               "listed above)") if known else ""
    unjudged = sum(o.kind == "latency" and o.category is Category.NOT_JUDGED for o in results.outcomes)
    latency = (f"; latency NOT judged in {unjudged} field(s) (the machine was busy): no slowdown was checked - "
               "`--latency-strict` (the default under CI) makes that a failure") if unjudged else ""
    if results.verdict == "changed":
        return ("verdict: changed within policy (allowed); accept the changes with `harness regen`"
                + (f"; {tracked}" if tracked else "") + latency)
    return "verdict: pass" + (f" - {tracked}; nothing for `harness regen` to accept" if tracked else "") + latency
