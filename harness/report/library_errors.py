"""The exceptions transformers raised on your own models, as the command line and summary.md list
them: a library crash on your model is a finding you read first, whatever its field's status (a
first run records it as `new`, a rerun as `pass` - both are still a crash).

The plugin (harness/plugin/golden.py `Golden.check_all`) adds one `info` outcome named
`<field>_raised` per library-error value (`{"type": ..., "message": ...}`, harness/subjects
`error_of`) a user model's case observed, the error in its diff; `grouped` gathers them by
exception, with their cases. A crash (IndexError, RuntimeError, KeyError, ...) is listed line by
line; a refusal (ValueError / NotImplementedError: the library's documented "not supported", e.g.
assisted decoding of a batch) is counted in one line - the report lists each.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from harness.schema import Outcome, Status

SUFFIX = "_raised"
REFUSALS = ("ValueError", "NotImplementedError")  # how transformers says "not supported" on purpose


def errors_in(value: Any) -> list[dict[str, str]]:
    """The library-error values in a field's value: itself, or those one level down (a field such as
    {"dynamic": error, "static": error})."""
    def is_error(v: Any) -> bool:
        return (isinstance(v, dict) and {"type", "message"} <= set(v) <= {"type", "message", "left_changed"}
                and isinstance(v["type"], str) and isinstance(v["message"], str))

    if is_error(value):
        return [value]
    if isinstance(value, dict):
        return [v for v in value.values() if is_error(v)]
    return []


def sentence(field: str, error: dict[str, str]) -> str:
    return f"transformers raised {error['type']}: {error['message']} (field `{field}`)"


def is_library_error(o: Outcome) -> bool:
    return o.status is Status.INFO and o.field.endswith(SUFFIX)


def is_crash(o: Outcome) -> bool:
    return o.diff.get("type") not in REFUSALS


def grouped(outcomes: Iterable[Outcome], crashes: bool = True) -> list[tuple[str, list[str]]]:
    """(what was raised, the cases it was raised in), most cases first: the crashes (or, with
    crashes=False, the refusals)."""
    by: dict[str, list[str]] = {}
    for o in outcomes:
        if is_library_error(o) and is_crash(o) is crashes:
            by.setdefault(o.detail, []).append(f"{o.suite}/{o.case}")
    return sorted(by.items(), key=lambda item: (-len(item[1]), item[0]))


def refusals_line(outcomes: list[Outcome]) -> str:
    n = sum(len(cases) for _, cases in grouped(outcomes, crashes=False))
    return (f"{n} case(s) where transformers refused a call on purpose ({' / '.join(REFUSALS)}: "
            "not supported) - each in the report") if n else ""


def terminal_lines(outcomes: Iterable[Outcome]) -> list[str]:
    outcomes = list(outcomes)
    groups, refused = grouped(outcomes), refusals_line(outcomes)
    if not groups and not refused:
        return []
    lines = [f"\nlibrary crashes on your models ({sum(len(c) for _, c in groups)} case(s)):"]
    for what, cases in groups:
        more = f" and {len(cases) - 3} more" if len(cases) > 3 else ""
        lines.append(f"  - {what}: {', '.join(cases[:3])}{more}")
    return lines + ([f"  ({refused})"] if refused else [])


def markdown_lines(outcomes: Iterable[Outcome]) -> list[str]:
    outcomes = list(outcomes)
    groups, refused = grouped(outcomes), refusals_line(outcomes)
    if not groups and not refused:
        return []
    lines = ["## Library crashes on your models", ""]
    for what, cases in groups:
        listed = ", ".join(f"`{c}`" for c in cases[:6]) + (f" and {len(cases) - 6} more" if len(cases) > 6 else "")
        lines.append(f"- {what.replace('|', '/')}  \n  cases: {listed}")
    return lines + ([f"- {refused}"] if refused else []) + [""]
