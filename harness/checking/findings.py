"""Findings, not rows: outcomes with the same suite-independent cause, grouped. Pure functions.

A comparison of two envs yields hundreds of outcomes, but usually a handful of causes: 13 cases
raising "Assisted decoding requires a cache that can be cropped" are one finding, and so are
"index 43 is out of bounds ... size 43" and "index 106 ... size 106". The cause of an outcome is

    (field, kind, status, category, normalised detail)

where the detail is normalised by masking numbers (indices, sizes, steps, values) and the case ids
and env keys it may quote (`cause`). Passes and information rows (`info`) are not findings. A case whose `error` field is itself
a finding (broken, error-changed, fixed) no longer observes its other fields: those `missing`
outcomes are folded into that finding as `follows` instead of being findings of their own.
Order: regressions first, then changed / missing, then the rest (new, skipped); larger first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from harness.schema import Category, Outcome, Status

STATUS_RANK = {Status.REGRESSION: 0, Status.CHANGED: 1, Status.MISSING: 1, Status.NEW: 2, Status.SKIPPED: 2}
NOT_FINDINGS = (Status.PASS, Status.INFO)  # a pass, and information shown beside the checks
ERROR_FIELD = "error"  # the outputs suite's exception-as-data field
ERROR_CATEGORIES = (Category.BROKEN, Category.ERROR_CHANGED, Category.FIXED)

_ENV_KEY = re.compile(r"\btf[\w.+-]*-torch[\w.+-]*")
_NUMBER = re.compile(r"(?<![A-Za-z_])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def normalise(detail: str, cases: Iterable[str] = ()) -> str:
    """`detail` with the parts that vary between cases of one cause masked: case ids -> <case>,
    env keys -> <env>, numbers -> N (not digits inside identifiers, e.g. `index_copy_`, `sm90`)."""
    text = detail
    for case in sorted({c for c in cases if c}, key=len, reverse=True):
        text = re.sub(rf"(?<![\w.-]){re.escape(case)}(?![\w.-])", "<case>", text)
    text = _ENV_KEY.sub("<env>", text)
    return " ".join(_NUMBER.sub("N", text).split())


ANY_FIELD = "*"
FIELDLESS = (Status.NEW, Status.SKIPPED)  # "no baseline record" says nothing about one field


def cause(outcome: Outcome) -> tuple[str, str, str, str, str]:
    """The suite-independent cause of an outcome: (field, kind, status, category, normalised detail);
    a new or skipped record's fields share one cause (field and kind "*")."""
    fieldless = outcome.status in FIELDLESS
    return (ANY_FIELD if fieldless else outcome.field, ANY_FIELD if fieldless else outcome.kind,
            outcome.status.value, outcome.category.value, normalise(outcome.detail, (outcome.case,)))


@dataclass
class Finding:
    """One cause and the outcomes that show it; `follows` are the outcomes it explains (the fields
    a case no longer observes because it raises)."""

    key: tuple[str, str, str, str, str]
    outcomes: list[Outcome] = field(default_factory=list)
    follows: list[Outcome] = field(default_factory=list)

    @property
    def status(self) -> Status:
        return Status(self.key[2])

    @property
    def category(self) -> str:
        return self.key[3]

    @property
    def fields(self) -> list[str]:
        return list(dict.fromkeys(o.field for o in self.outcomes))

    @property
    def cases(self) -> list[str]:
        """'suite/case' of every affected case, in order of first appearance."""
        return list(dict.fromkeys(f"{o.suite}/{o.case}" for o in self.outcomes))

    @property
    def example(self) -> str:
        """The first outcome's own detail (real numbers, not masks)."""
        return self.outcomes[0].detail

    def sentence(self, width: int = 160) -> str:
        """One line: '<status> (<category>) in <field> of N case(s): <detail>'."""
        what = self.status.value + (f" ({self.category})" if self.category else "")
        n = len(self.cases)
        detail = " ".join(self.example.split())
        if len(detail) > width:
            detail = detail[: width - 3] + "..."
        extra = f" (+{len(self.follows)} fields no longer observed)" if self.follows else ""
        fields = self.fields
        where = f"`{fields[0]}`" if len(fields) == 1 else f"{len(fields)} fields ({', '.join(fields[:4])}" + (
            ", ...)" if len(fields) > 4 else ")")
        return f"{what} in {where} of {n} case{'s' if n != 1 else ''}: {detail}{extra}"

    def anchor(self, index: int) -> str:
        return f"f{index}"


def group_findings(outcomes: Iterable[Outcome]) -> list[Finding]:
    """Every non-pass outcome in exactly one finding (as a member or as one that `follows`), ordered
    regressions first, then changed / missing, then the rest; within a rank, most cases first."""
    listed = [o for o in outcomes if o.status not in NOT_FINDINGS]
    error_cases = {(o.suite, o.case): cause(o) for o in listed
                   if o.field == ERROR_FIELD and o.category in ERROR_CATEGORIES}
    findings: dict[tuple[str, str, str, str, str], Finding] = {}
    folded: list[tuple[tuple[str, str, str, str, str], Outcome]] = []
    for o in listed:
        owner = error_cases.get((o.suite, o.case))
        if o.status is Status.MISSING and owner is not None:
            folded.append((owner, o))
            continue
        key = cause(o)
        findings.setdefault(key, Finding(key)).outcomes.append(o)
    for owner, o in folded:
        findings[owner].follows.append(o)
    return sorted(findings.values(), key=lambda f: (STATUS_RANK.get(f.status, 3), -len(f.cases), f.key))


def headline(findings: list[Finding]) -> str:
    """'N distinct findings (R regressions, C changes, ...)' for the top of a report."""
    per: dict[str, int] = {}
    for f in findings:
        per[f.status.value] = per.get(f.status.value, 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in per.items())
    return f"{len(findings)} distinct finding{'s' if len(findings) != 1 else ''}" + (f" ({parts})" if parts else "")
