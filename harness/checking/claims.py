"""Release notes, checked: a release's claims against the outcomes of a comparison. Pure but `load`.

A claims file (JSON, e.g. docs/claims/transformers-5.14.json) lists what a release says it
changed, each claim mapped to the record fields that would show it:

    {"title": "...", "source": "...",
     "claims": [{"id": "gptneox-lm-head", "text": "GPTNeoX embed_out -> lm_head",
                 "evidence": [{"suite": "backends", "case": "gptneox-*", "field": "state_dict_keys",
                               "expect": {"status": ["regression", "changed"],
                                          "detail": "lm_head.weight: added"}}]}]}

`case` and `field` are fnmatch globs. `expect` (all optional, all must hold for one outcome):
`status` / `category` (lists of allowed values), `detail` (a substring of the outcome's detail:
"key: old -> new" lines, harness/checking/humane.py), `new` (a regex the new value must match, for a field
the baseline did not record). Per claim (`evaluate`):

- observed: every evidence entry that has outcomes has one that meets its `expect`;
- not observed: some evidence entry has outcomes, none of which meets its `expect`;
- not observable on this zoo: no outcome matches any entry (no such field recorded).

Findings (harness/checking/findings.py) none of whose outcomes backs an observed expectation are listed
as "not in the release notes" (regressions, changes and missing fields; new records are counted).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from harness.checking.findings import group_findings
from harness.schema import Outcome, Status

OBSERVED, NOT_OBSERVED, NOT_OBSERVABLE = "observed", "not observed", "not observable on this zoo"
EXPECT_KEYS = {"status", "category", "detail", "new"}


class ClaimsError(ValueError):
    """A claims file that cannot be used; the message starts with the file's path."""


@dataclass(frozen=True)
class ClaimRow:
    id: str
    text: str
    verdict: str
    evidence: str  # one line per evidence entry: what matched and whether it met the expectation


@dataclass(frozen=True)
class ClaimsReport:
    title: str
    source: str
    rows: tuple[ClaimRow, ...]
    uncovered: tuple[str, ...]  # finding sentences not backed by any claim
    new_findings: int  # findings of records / fields the baseline did not have (not listed)


def load_claims(path: str | Path) -> dict[str, Any]:
    """Read and validate a claims file; every problem is a `ClaimsError` naming it."""
    from harness.store.reading import InputError, read_json

    path = Path(path)
    try:  # the input layer: no FIFO or device, size, UTF-8, strict JSON nested at most MAX_DEPTH
        data = read_json(path)
    except InputError as exc:
        raise ClaimsError(f"{path}: cannot read claims: {exc.problem}") from None
    return check_claims(data, path)


def check_expect(expect: Any, where: str) -> None:
    """An evidence entry's `expect`: status / category lists of strings, detail a string, new a
    regular expression that compiles."""
    if not isinstance(expect, dict):
        raise ClaimsError(f"{where}: 'expect' must be an object, got {type(expect).__name__}")
    unknown = set(expect) - EXPECT_KEYS
    if unknown:
        raise ClaimsError(f"{where}: unknown expect key(s) {', '.join(sorted(unknown))}; "
                          f"known: {', '.join(sorted(EXPECT_KEYS))}")
    for key in ("status", "category"):
        if key in expect and not (isinstance(expect[key], list) and all(isinstance(v, str) for v in expect[key])):
            raise ClaimsError(f"{where}: expect.{key} must be a list of strings, got {expect[key]!r:.80}")
    for key in ("detail", "new"):
        if key in expect and not isinstance(expect[key], str):
            raise ClaimsError(f"{where}: expect.{key} must be a string, got {expect[key]!r:.80}")
    if "new" in expect:
        try:
            re.compile(expect["new"])
        except re.error as exc:
            raise ClaimsError(f"{where}: expect.new {expect['new']!r:.80} is not a regular expression: {exc}") from None


def check_claims(data: Any, path: str | Path) -> dict[str, Any]:
    """Validate claims data (a file's, or the copy a results.json keeps in meta["claims"])."""
    claims = data.get("claims") if isinstance(data, dict) else None
    if not isinstance(claims, list) or not claims:
        raise ClaimsError(f"{path}: expected a JSON object with a non-empty 'claims' list")
    for i, claim in enumerate(claims):
        where = f"{path}: claims[{i}]"
        if not isinstance(claim, dict) or not all(isinstance(claim.get(k), str) for k in ("id", "text")):
            raise ClaimsError(f"{where}: needs string 'id' and 'text'")
        evidence = claim.get("evidence")
        if not isinstance(evidence, list) or not evidence:
            raise ClaimsError(f"{where} ({claim['id']}): needs a non-empty 'evidence' list")
        for j, entry in enumerate(evidence):
            if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("suite", "case", "field")):
                raise ClaimsError(f"{where}.evidence[{j}]: needs string 'suite', 'case' and 'field'")
            check_expect(entry.get("expect", {}), f"{where}.evidence[{j}]")
    return data


def selects(entry: dict[str, Any], outcome: Outcome) -> bool:
    return (outcome.suite == entry["suite"] and fnmatchcase(outcome.case, entry["case"])
            and fnmatchcase(outcome.field, entry["field"]))


def meets(expect: dict[str, Any], outcome: Outcome) -> bool:
    """Whether one outcome shows the claimed change (a pass or an information row never does)."""
    if outcome.status in (Status.PASS, Status.INFO):
        return False
    if "status" in expect and outcome.status.value not in expect["status"]:
        return False
    if "category" in expect and outcome.category.value not in expect["category"]:
        return False
    if "detail" in expect and expect["detail"] not in outcome.detail:
        return False
    return "new" not in expect or re.search(expect["new"], str(outcome.diff.get("new", ""))) is not None


def _entry_line(entry: dict[str, Any], matched: list[Outcome], met: list[Outcome]) -> str:
    where = f"{entry['suite']}/{entry['case']}/{entry['field']}"
    if not matched:
        return f"{where}: no such field"
    statuses = sorted({o.status.value for o in matched})
    return f"{where}: {len(met)}/{len(matched)} case(s) as claimed ({', '.join(statuses)})"


def evaluate(claims: dict[str, Any], outcomes: list[Outcome]) -> ClaimsReport:
    """Each claim's verdict over a comparison's outcomes, and the findings no claim covers."""
    rows, backing = [], set()
    for claim in claims["claims"]:
        lines, observable, satisfied = [], 0, 0
        for entry in claim["evidence"]:
            matched = [o for o in outcomes if selects(entry, o)]
            met = [o for o in matched if meets(entry.get("expect", {}), o)]
            backing.update(id(o) for o in met)
            observable += bool(matched)
            satisfied += bool(met)
            lines.append(_entry_line(entry, matched, met))
        verdict = NOT_OBSERVABLE if not observable else OBSERVED if satisfied == observable else NOT_OBSERVED
        rows.append(ClaimRow(claim["id"], claim["text"], verdict, "; ".join(lines)))
    findings = group_findings(outcomes)
    listed = [f for f in findings if f.status not in (Status.NEW, Status.SKIPPED)]
    uncovered = tuple(f.sentence(200) for f in listed if not any(id(o) in backing for o in f.outcomes))
    return ClaimsReport(str(claims.get("title", "release notes")), str(claims.get("source", "")), tuple(rows),
                        uncovered, len(findings) - len(listed))


def markdown_lines(report: ClaimsReport) -> list[str]:
    """The claims table and the uncovered findings as markdown (a section of summary.md)."""
    lines = [f"## Release notes, checked: {report.title}", ""]
    if report.source:
        lines += [f"Source: {report.source}", ""]
    lines += ["| claim | verdict | evidence |", "|---|---|---|"]
    lines += [f"| **{r.id}**: {r.text.replace('|', '/')} | {r.verdict} | {r.evidence.replace('|', '/')} |"
              for r in report.rows]
    lines += ["", f"### Not in the release notes ({len(report.uncovered)})", ""]
    lines += [f"- {line}" for line in report.uncovered] or ["- none"]
    if report.new_findings:
        many = "findings" if report.new_findings != 1 else "finding"
        lines += ["", f"({report.new_findings} {many} of records or fields the baseline did not have: not listed here.)"]
    return lines


def terminal_lines(report: ClaimsReport) -> list[str]:
    return [f"release notes, checked ({report.title}):", *(f"  {r.id}: {r.verdict}" for r in report.rows),
            f"  not in the release notes: {len(report.uncovered)} finding(s)"]
