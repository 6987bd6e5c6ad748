"""Plain-text output of the command line: columns, the run summary, summary.md's text (written by
harness/report/output.py, as every report file is)."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.checking.findings import Findings, library_hint
from harness.checking.humane import printable, shorten
from harness.report import library_errors
from harness.report.repro import repro_text
from harness.report.run_panel import upgrade_line
from harness.schema import Results, Status
from harness.store.env import machine_differences, moved_axes

MAX_LISTED = 50  # outcomes listed per status in the summary; the report has them all
MAX_FINDINGS = 30  # findings listed in the terminal summary


def timestamped_dir(parent: Path) -> Path:
    """parent/<YYYYmmdd-HHMMSS>[-N], not yet existing."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    candidate, n = parent / stamp, 1
    while candidate.exists():
        candidate, n = parent / f"{stamp}-{n}", n + 1
    return candidate


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], widths: Sequence[int | None] | None = None) -> list[str]:
    """Plain-text columns; a cell is cut to its column's width when one is given (None: never cut -
    names such as case ids must stay whole, or two rows read the same)."""
    cells = [[str(h) for h in headers]]
    for row in rows:
        cells.append([shorten(c, widths[i]) if widths and widths[i] else printable(c) for i, c in enumerate(row)])
    size = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(size[i]) for i, c in enumerate(r)).rstrip() for r in cells]
    return [lines[0], "  ".join("-" * s for s in size), *lines[1:]]


def print_summary(results: Results, title: str, findings: Findings | None = None) -> None:
    """Counts per status, the findings (`findings`: those of `results`, grouped once by the caller),
    then every regression / changed outcome with its old -> new detail."""
    print()
    print(printable(title))
    fault = results.meta.get("injected_fault") if isinstance(results.meta, dict) else None
    if fault:
        print(printable(f"INJECTED FAULT: {fault['name']} - {fault['breaks']}"))
    axis = moved_axes(results.env, results.baseline_env)
    if axis:
        print(printable(axis))
    machine = machine_differences(results.env, results.baseline_env)
    if machine:
        print(printable(machine))
    counts = results.counts()
    print("fields compared, by status (pytest's 'passed' above counts tests):")
    for line in table(("status", "fields"), ((s, n) for s, n in counts.items())):
        print("  " + line)
    for line in results.meta.get("left_out") or []:
        print(printable(f"left out: {line}"))
    users = results.meta.get("user_models") or []
    if users:  # the report groups by model when the run had models of yours
        from harness.report.page import model_views, outcome_view

        print("\nper model:")
        views = model_views([outcome_view(i, o) for i, o in enumerate(results.outcomes)], users,
                            results.meta.get("shipped_models") or [])
        for line in table(("model", "", "cases", "outcomes"),
                          ((v.name, v.origin, v.cases, ", ".join(f"{n} {s}" for s, n in v.counts)) for v in views),
                          (None, None, None, 80)):
            print("  " + line)
    for line in library_errors.terminal_lines(results.outcomes):
        print(printable(line))
    found = findings if findings is not None else Findings.of(results)
    listed = found.numbered
    print(f"\n{found.headline(results.verdict)}" + (":" if listed else "."))
    for number, finding in listed[:MAX_FINDINGS]:
        indent = "  " if "." not in number else "     "
        print(f"{indent}{number}. {printable(finding.sentence())}")
    if len(listed) > MAX_FINDINGS:
        print(f"  ... and {len(listed) - MAX_FINDINGS} more (see the report)")
    for status in (Status.REGRESSION, Status.CHANGED):
        listed = [o for o in results.outcomes if o.status is status]
        if not listed:
            continue
        print(f"\n{status.value} ({len(listed)}):")
        rows = ((suite, case, o.field, o.kind, o.category or "-", o.against, o.detail)
                for o, suite, case in collapsed(listed)[:MAX_LISTED])
        for line in table(("suite", "case", "field", "kind", "category", "against", "old -> new"), rows,
                          (None, None, None, None, None, None, 100)):
            print("  " + line)
        if len(listed) > MAX_LISTED:
            print(f"  ... and {len(listed) - MAX_LISTED} more (see the report)")


def collapsed(outcomes: Sequence[Any]) -> list[tuple[Any, str, str]]:
    """(outcome, suites, cases) with outcomes that say the same thing about the same field - one
    cause, e.g. a changed checkpoint in every case of a model - on one row: "case (+N more)"."""
    same: dict[tuple[Any, ...], list[Any]] = {}
    for o in outcomes:
        same.setdefault((o.field, o.kind, o.category, o.against, o.detail), []).append(o)
    rows = []
    for group in same.values():
        first, more = group[0], len(group) - 1
        suites = list(dict.fromkeys(o.suite for o in group))
        rows.append((first, first.suite if len(suites) == 1 else f"{len(suites)} suites",
                     first.case + (f" (+{more} more)" if more else "")))
    return rows


def md_cell(text: Any, width: int = 200) -> str:
    return shorten(text, width).replace("|", "/")


def markdown_summary(results: Results, extra: Sequence[Sequence[str]] = (), findings: Findings | None = None) -> str:
    """The report's gist as markdown for a pull request or docs/: the distinct findings (one line
    each, with the cases they affect), `extra` sections (e.g. the release-notes claims), per suite
    how many fields ended in each status and category; then every regression, change and missing field.
    No HTML gets through (`escape_markdown`): summary.md is pasted into pull requests. `findings`:
    those of `results`, grouped once by the caller."""
    meta = results.meta
    found = findings if findings is not None else Findings.of(results)
    machine = machine_differences(results.env, results.baseline_env)
    axis = moved_axes(results.env, results.baseline_env)
    hint = library_hint(results)
    lines = [f"# {meta.get('env_key', '?')} vs baseline {meta.get('baseline_key', '?')}", "",
             *([axis[0].upper() + axis[1:] + ".", ""] if axis else []),
             f"Verdict: **{results.verdict}**{f' - {hint}' if hint else ''}. Counts: " + ", ".join(f"{n} {s}" for s, n in results.counts().items()),
             *(["", machine] if machine else []), *(["", "C" + upgrade_line(meta)[1:] + "."] if upgrade_line(meta) else []),
             "", *library_errors.markdown_lines(results.outcomes),
             *[f"Left out: {md_cell(line, 600)}  " for line in meta.get("left_out") or []]]
    lines += to_decide(found, meta.get("baseline_key"))
    top, lines = lines, ["", f"## {found.headline(results.verdict)}", ""]
    for number, finding in found.numbered:
        cases = finding.cases
        listed = ", ".join(f"`{c}`" for c in cases[:6]) + (f" and {len(cases) - 6} more" if len(cases) > 6 else "")
        indent = "   " * number.count(".")
        lines.append(f"{indent}{number.rsplit('.', 1)[-1]}. {md_cell(finding.sentence(200))}  \n{indent}   cases: {listed}")
    for section in extra:
        lines += ["", *section]
    lines += ["", "## Per suite", "", "| suite | outcome | fields |", "|---|---|---|"]
    per: dict[tuple[str, str], int] = {}
    for o in results.outcomes:
        key = (o.suite, o.status.value + (f" ({o.category.value})" if o.category else ""))
        per[key] = per.get(key, 0) + 1
    lines += [f"| {suite} | {what} | {n} |" for (suite, what), n in sorted(per.items())]
    for status in (Status.REGRESSION, Status.CHANGED, Status.MISSING):
        listed = [o for o in results.outcomes if o.status is status]
        if listed:
            lines += ["", f"## {status.value} ({len(listed)})", "", "| suite | case | field | category | detail |",
                      "|---|---|---|---|---|"]
            lines += [f"| {md_cell(suite, 80)} | {md_cell(case, 120)} | {md_cell(o.field, 80)} | "
                      f"{o.category.value or '-'} | {md_cell(o.detail)} |" for o, suite, case in collapsed(listed)]
    # the reviewer's decision first; the rest collapsed (the only HTML here: the tags, added after escaping)
    return (escape_markdown("\n".join(top) + "\n") + "\n<details><summary>every finding, per suite, every outcome"
            "</summary>\n" + escape_markdown("\n".join(lines) + "\n") + "\n</details>\n")


def to_decide(findings: Findings, baseline: str | None) -> list[str]:
    """What a reviewer decides on, under the verdict: each regression finding with the command that
    writes its standalone repro script and issue body (`harness repro`, harness/cli/repro.py)."""
    regressions = [(n, f) for n, f in findings.numbered if f.status is Status.REGRESSION]
    if not regressions:
        return ["No regression."]
    lines = [f"## To decide: {len(regressions)} regression finding{'s' if len(regressions) != 1 else ''}", ""]
    for number, f in regressions:
        lines.append(f"{number}. {md_cell(f.sentence(200))}  \n   repro: {repro_text(f, baseline, '`')}")
    return lines


def escape_markdown(text: str) -> str:
    """Markdown that renders no HTML: every '<', '>' and '&' escaped, as index.html's autoescape
    does (record strings, case names and release notes can carry <script> or <img onerror>). The
    markdown this module writes uses none of the three, so escaping the whole text loses nothing.
    A link or image (`[x](target)`, a definition `[x]: target`) whose target is not http(s) or
    relative (`javascript:`, `data:`, ...) is broken by escaping its bracket: this module writes no
    link, so every one comes from a record, a case name or the release notes."""
    return _LINK.sub(_neutralise_link, html.escape(text, quote=False))


_LINK = re.compile(r"\](\(\s*|:[ \t]*)([^)\s]*)")  # `](target` of a link or image, `]: target` of a definition
_SAFE_TARGET = re.compile(r"https?://|[^:/?#]*(?:[/?#]|$)", re.IGNORECASE)  # http(s), or relative: no scheme


def _neutralise_link(match: re.Match) -> str:
    return match.group(0) if _SAFE_TARGET.match(match.group(2)) else "]\\" + match.group(1) + match.group(2)
