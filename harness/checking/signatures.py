"""API surface by compatibility: an entry point or a signature compared as a caller of the baseline
version sees it. Pure functions on recorded values (harness/subjects/hf_api.py: a signature is
``[[name, kind, default], ...]``, an absent entry point the text ``"<missing>"``).

A caller written against the baseline keeps working when the entry point exists and every call
it could make still binds the same way:

- compatible (`changed`, feature-added): an entry point that exists now and was absent; a
  parameter added with a default (or *args / **kwargs); a required parameter that gained a default;
  a keyword-only parameter that may now be passed by position too;
- breaking (a regression): an entry point absent now (feature-removed); a parameter removed or
  renamed; a required parameter added; a default changed or removed; a parameter that can no longer
  be passed as before (positional -> keyword-only, ...); positional parameters reordered.

The detail says it in plain words ("exists in this version, absent in the baseline"; the
parameter lines of harness/checking/humane.py `signature_lines`), never a raw value diff.
"""

from __future__ import annotations

from typing import Any

from harness.checking.humane import REQUIRED, is_signature, show, signature_lines
from harness.checking.policy import verdict
from harness.schema import Category, Outcome, Status

ABSENT = "<missing>"  # harness/subjects/hf_api.py MISSING: the entry point does not exist
POSITIONAL = ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")
VARIADIC = ("VAR_POSITIONAL", "VAR_KEYWORD")
# (old kind, new kind) a caller of the old kind still binds under
WIDER = {("KEYWORD_ONLY", "POSITIONAL_OR_KEYWORD"), ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")}


def _absent(value: Any) -> bool:
    return value == ABSENT


def brief(value: Any) -> str:
    """A signature as a caller reads it, `(a, b=1, *, c=None, **kwargs)` (cut to a line); else `show`."""
    if not is_signature(value):
        return show(value)
    parts, star = [], False
    for name, kind, default in value:
        if kind == "KEYWORD_ONLY" and not star:
            parts.append("*")
            star = True
        prefix = {"VAR_POSITIONAL": "*", "VAR_KEYWORD": "**"}.get(kind, "")
        star = star or kind == "VAR_POSITIONAL"
        parts.append(prefix + name + ("" if default == REQUIRED or prefix else f"={show(default, 20)}"))
    return show("(" + ", ".join(parts) + ")", 90).strip("'")


def breaking(old: list[list[Any]], new: list[list[Any]]) -> list[str]:
    """What breaks a caller of `old` under `new` (empty: every call still binds the same way)."""
    before = {p[0]: p for p in old}
    after = {p[0]: p for p in new}
    out = [f"parameter `{n}` gone" for n, p in before.items() if n not in after and p[1] not in VARIADIC]
    out += [f"parameter `{n}` is required" for n, p in after.items()
            if n not in before and p[1] not in VARIADIC and p[2] == REQUIRED]
    for name in (n for n in before if n in after):
        (_, kind_a, default_a), (_, kind_b, default_b) = before[name][:3], after[name][:3]
        if kind_a != kind_b and (kind_a, kind_b) not in WIDER:
            out.append(f"parameter `{name}` cannot be passed as before")
        if default_a != default_b and default_a != REQUIRED:
            out.append(f"parameter `{name}` default changed")
    positional = [p[0] for p in old if p[1] in POSITIONAL and p[0] in after]
    if positional != [p[0] for p in new if p[0] in positional]:
        out.append("positional parameters reordered")
    return out


def api_transition(name: str, old: Any, new: Any) -> Outcome | None:
    """The verdict on an entry point's recorded value (a signature, or anything with the absent
    marker on one side); None when this is not an API value (the exact rule decides)."""
    if _absent(old) and not _absent(new):
        return verdict(name, "exact", Status.CHANGED, f"exists in this version, absent in the baseline: {brief(new)}",
                       Category.FEATURE_ADDED, {"old": old, "new": new})
    if _absent(new) and not _absent(old):
        return verdict(name, "exact", Status.REGRESSION, f"absent in this version, exists in the baseline (was "
                       f"{brief(old)})", Category.FEATURE_REMOVED, {"old": old, "new": new})
    if not (is_signature(old) and is_signature(new)):
        return None
    lines = signature_lines(old, new)
    broken = breaking(old, new)
    diff = {"changes": lines, "breaking": broken, "old": old, "new": new}
    if broken:
        return verdict(name, "exact", Status.REGRESSION, f"incompatible with the baseline's callers: "
                       f"{'; '.join(lines or broken)}", Category.REAL_CHANGE, diff)
    return verdict(name, "exact", Status.CHANGED, f"compatible with the baseline's callers: {'; '.join(lines)}",
                   Category.FEATURE_ADDED, diff)
