"""Bisection over releases: does one cell show a finding, and which release is the first to show it.

A *target* is a case (and optionally the fields) a finding names. A cell's run checks that case
against the GOOD version's record (the harness's own comparers: `harness/checking/core.py`), so a
cell *shows* the finding when a target field's outcome is a difference from that record
(`regression`, `changed` or `missing`), and is *clean* when every target field passes. Two cases
are never named as a release:

- *intermittent*: the field's own verdict says the difference is a near-tie (`tie-flip`), or two
  runs of the case in the one cell disagree (their (field, status, category) sets differ);
- *undecided*: the target was not judged (no outcome, `new` - or `missing-record` in a strict run -:
  the reference has no value for it, `skipped` / `not-checked` with its reason) - a check never reads "clean" for what it did not check.

The search (`search`) assumes the finding, once introduced, stays: it probes GOOD (must be clean:
"GOOD shows it too" otherwise) and BAD (must show it), then halves the interval; the boundary it
names is two adjacent releases it probed itself - the last clean one and the first showing one -
never a release inferred from a neighbour. It stops at the first cell that failed to build, with the
reason, and at the first intermittent or undecided cell.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from harness.schema import Category, Outcome, Status

DIFFERS = (Status.REGRESSION, Status.CHANGED, Status.MISSING)
NEAR_TIE = (Category.TIE_FLIP,)


class Verdict(str, Enum):
    SHOWS = "shows it"
    CLEAN = "clean"
    INTERMITTENT = "intermittent"
    UNDECIDED = "undecided"
    FAILED = "failed"  # the cell did not build or run: nothing was observed

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Target:
    suite: str
    case: str
    fields: tuple[str, ...] = ()  # empty: any field of the case

    def __str__(self) -> str:
        return f"{self.suite}/{self.case}" + (f":{','.join(self.fields)}" if self.fields else "")


@dataclass
class Step:
    """One probed release: its verdict, why, and where its cell's log is."""

    version: str
    verdict: Verdict
    detail: str = ""
    log: str = ""
    seconds: float = 0.0


def target_outcomes(outcomes: Sequence[Outcome], target: Target) -> list[Outcome]:
    """The run's outcomes of the target's case and fields (information lines are never a check)."""
    return [o for o in outcomes if o.suite == target.suite and o.case == target.case and o.status != Status.INFO
            and (not target.fields or o.field in target.fields)]


def run_verdict(outcomes: Sequence[Outcome], target: Target) -> tuple[Verdict, str]:
    """One run: shows / clean / intermittent (a near-tie) / undecided, and the outcome that says so."""
    mine = target_outcomes(outcomes, target)
    if not mine:
        return Verdict.UNDECIDED, f"the run has no outcome for {target}"
    ties = [o for o in mine if o.category in NEAR_TIE]
    if ties:
        return Verdict.INTERMITTENT, describe(ties[0])
    differs = [o for o in mine if o.status in DIFFERS and o.category != Category.MISSING_RECORD]
    if differs:
        return Verdict.SHOWS, describe(differs[0])
    unjudged = [o for o in mine if o.status != Status.PASS]
    if unjudged:
        return Verdict.UNDECIDED, describe(unjudged[0])
    return Verdict.CLEAN, f"{len(mine)} field(s) pass"


def describe(outcome: Outcome) -> str:
    category = f" ({outcome.category.value})" if outcome.category.value else ""
    return f"{outcome.status.value}{category} in `{outcome.field}`: {outcome.detail}"


def signature(outcomes: Sequence[Outcome], target: Target) -> set[tuple[str, str, str]]:
    return {(o.field, o.status.value, o.category.value) for o in target_outcomes(outcomes, target)}


def cell_verdict(runs: Sequence[Sequence[Outcome]], target: Target) -> tuple[Verdict, str]:
    """All runs of the case in one cell: intermittent when they disagree, else the first run's verdict."""
    if not runs:
        return Verdict.UNDECIDED, "the cell ran nothing"
    first = signature(runs[0], target)
    for i, run in enumerate(runs[1:], 2):
        if signature(run, target) != first:
            one, other = run_verdict(runs[0], target), run_verdict(run, target)
            return Verdict.INTERMITTENT, f"run 1: {one[0]} ({one[1]}); run {i}: {other[0]} ({other[1]})"
    return run_verdict(runs[0], target)


@dataclass
class Bisection:
    """What the search found: the first release showing the target and the last without it, or
    why it named none (`stopped`)."""

    steps: list[Step] = field(default_factory=list)
    first: str = ""
    last_without: str = ""
    stopped: str = ""


def search(versions: Sequence[str], probe: Callable[[str], Step]) -> Bisection:
    """Binary search over `versions` (GOOD first, BAD last, in release order), probing each release
    at most once; a release is named only between two adjacent probed releases, clean then showing."""
    result = Bisection()

    def run(i: int) -> Step:
        step = probe(versions[i])
        result.steps.append(step)
        return step

    good, bad = versions[0], versions[-1]
    expected = ((0, Verdict.CLEAN, f"GOOD shows it too: {good}"), (len(versions) - 1, Verdict.SHOWS,
                                                                        f"BAD does not show it: {bad}"))
    for index, wanted, refusal in expected:
        step = run(index)
        if step.verdict != wanted:
            result.stopped = stop_reason(step, refusal)
            return result
    low, high = 0, len(versions) - 1
    while high - low > 1:
        mid = (low + high) // 2
        step = run(mid)
        if step.verdict == Verdict.SHOWS:
            high = mid
        elif step.verdict == Verdict.CLEAN:
            low = mid
        else:
            result.stopped = stop_reason(step, "")
            return result
    result.first, result.last_without = versions[high], versions[low]
    return result


def stop_reason(step: Step, refusal: str) -> str:
    """Why the search stops at `step`: a failed cell's reason, intermittent, undecided, or the refusal."""
    if step.verdict == Verdict.FAILED:
        return f"{step.version}: the cell failed: {step.detail}"
    if step.verdict == Verdict.INTERMITTENT:
        return f"intermittent in {step.version}: {step.detail}"
    if step.verdict == Verdict.UNDECIDED:
        return f"undecided in {step.version}: {step.detail}"
    return f"{refusal} ({step.detail})"
