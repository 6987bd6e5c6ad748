"""Differences in human terms: "key: old -> new" lines instead of deepdiff's sentences. Pure.

`change_lines(old, new)` walks two JSON values and returns one line per changed leaf, e.g.
``n: 12 -> 13``, ``static.distinct[0].attn_mask: {"dtype": "bool", ...} -> None``,
``lm_head.weight: added ""``, ``embed_out.weight: removed``; two strings that differ show the text
around their first divergence when either is longer than a line (`text_around`). Two recorded
signatures (harness/subjects/hf_api.py: `[[name, kind, default], ...]`) are told apart by parameter
(`signature_lines`): ``parameter `tokens_to_remove` renamed from `max_length```, ``parameter `cache`
added (keyword-only, default None)``, ``parameter `x` removed``, ``parameter `n` default 1 -> 2``.
The structured diff (deepdiff's) stays in `Outcome.diff` for the report's tables; these lines are
the one-line `detail`.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

VALUE_WIDTH = 60
CONTEXT = 24  # characters of text shown before a divergence


def show(value: Any, width: int = VALUE_WIDTH) -> str:
    """A value as short readable text: None, numbers and strings as Python shows them, containers
    as JSON cut to `width`."""
    text = repr(value) if value is None or isinstance(value, (str, bool, int, float)) else json.dumps(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _path(parts: list[Any]) -> str:
    out = "root" if parts and isinstance(parts[0], int) else ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "root"


def text_around(old: str, new: str, context: int = CONTEXT, width: int = VALUE_WIDTH) -> str:
    """'...<common tail>[old rest] -> ...<common tail>[new rest]' around the first differing character."""
    i = next((k for k, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
    start = max(0, i - context)
    lead = ("..." if start else "") + old[start:i]

    def side(s: str) -> str:
        rest = s[i:i + width - len(lead)]
        return repr(lead + rest + ("..." if i + len(rest) < len(s) else ""))

    return f"{side(old)} -> {side(new)} (from char {i})"


PARAMETER_KINDS = {"POSITIONAL_ONLY": "positional-only", "POSITIONAL_OR_KEYWORD": "positional or keyword",
                   "VAR_POSITIONAL": "*args", "KEYWORD_ONLY": "keyword-only", "VAR_KEYWORD": "**kwargs"}
REQUIRED = "<required>"  # harness/subjects/hf_api.py NO_DEFAULT


def is_signature(value: Any) -> bool:
    """A recorded signature: a list of [name, kind, default] with inspect's kind names."""
    return isinstance(value, list) and all(
        isinstance(p, list) and len(p) == 3 and isinstance(p[0], str) and p[1] in PARAMETER_KINDS for p in value)


def _parameter(kind: str, default: Any) -> str:
    what = PARAMETER_KINDS[kind]
    if kind in ("VAR_POSITIONAL", "VAR_KEYWORD"):
        return what
    return f"{what}, required" if default == REQUIRED else f"{what}, default {show(default)}"


def signature_lines(old: list[list[Any]], new: list[list[Any]]) -> list[str]:
    """One line per parameter that changed between two signatures: renamed (removed and added at
    the same position with the same kind), added, removed, re-defaulted, of another kind, or moved."""
    before = {p[0]: (i, p[1], p[2]) for i, p in enumerate(old)}
    after = {p[0]: (i, p[1], p[2]) for i, p in enumerate(new)}
    removed = [n for n in before if n not in after]
    added = [n for n in after if n not in before]
    out: list[str] = []
    for name in list(removed):
        twin = next((a for a in added if after[a][:2] == before[name][:2]), None)
        if twin is None:
            continue
        removed.remove(name)
        added.remove(twin)
        redefault = f", default {show(before[name][2])} -> {show(after[twin][2])}" if before[name][2] != after[twin][2] else ""
        out.append(f"parameter `{twin}` renamed from `{name}`{redefault}")
    out += [f"parameter `{n}` added ({_parameter(after[n][1], after[n][2])})" for n in added]
    out += [f"parameter `{n}` removed (was {_parameter(before[n][1], before[n][2])})" for n in removed]
    common = [n for n in before if n in after]
    for name in common:
        (_, kind_a, default_a), (_, kind_b, default_b) = before[name], after[name]
        if kind_a != kind_b:
            out.append(f"parameter `{name}` {PARAMETER_KINDS[kind_a]} -> {PARAMETER_KINDS[kind_b]}")
        if default_a != default_b:
            out.append(f"parameter `{name}` default {show(default_a)} -> {show(default_b)}")
    order_a, order_b = common, sorted(common, key=lambda n: after[n][0])
    if order_a != order_b:
        out.append(f"parameters reordered: {', '.join(order_a)} -> {', '.join(order_b)}")
    return out


def _walk(old: Any, new: Any, path: list[Any], out: list[str]) -> None:
    if is_signature(old) and is_signature(new) and old != new:
        prefix = f"{_path(path)}: " if path else ""
        out.extend(prefix + line for line in signature_lines(old, new))
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            if key not in new:
                out.append(f"{_path([*path, key])}: removed (was {show(old[key])})")
            elif key not in old:
                out.append(f"{_path([*path, key])}: added {show(new[key])}")
            else:
                _walk(old[key], new[key], [*path, key], out)
        return
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            _walk(a, b, [*path, i], out)
        return
    if type(old) is type(new) and old == new:
        return
    if isinstance(old, str) and isinstance(new, str) and max(len(old), len(new)) > VALUE_WIDTH:
        out.append(f"{_path(path)}: {text_around(old, new)}")
    elif isinstance(old, list) and isinstance(new, list):
        out.append(f"{_path(path)}: {len(old)} -> {len(new)} items: {show(old)} -> {show(new)}")
    else:
        out.append(f"{_path(path)}: {show(old)} -> {show(new)}")


_OLD_VS_NEW = re.compile(r"\bold (.+?) vs new\b")


def reference_words(detail: str) -> str:
    """A comparer's detail reworded for an in-run reference: its "old" side is the value the oracle
    computed in this run, not a baseline record ("old X vs new Y" -> "expected X vs observed Y")."""
    return _OLD_VS_NEW.sub(r"expected \1 vs observed", detail)


def change_lines(old: Any, new: Any) -> list[str]:
    """One 'key: old -> new' line per changed leaf (paths like `a.b[2].c`; `root` for the whole value)."""
    out: list[str] = []
    _walk(old, new, [], out)
    return out


def change_detail(old: Any, new: Any, limit: int = 3) -> str:
    """The first `limit` change lines joined by '; ', with '(+K more)'."""
    lines = change_lines(old, new)
    return "; ".join(lines[:limit]) + (f" (+{len(lines) - limit} more)" if len(lines) > limit else "")


_MORE = re.compile(r"\(\+\d+ more\)")


def change_set(detail: str) -> set[str]:
    """`change_detail` read back: its change lines as a set; empty where the detail was cut ('(+K more)':
    the whole set is not known)."""
    text = str(detail)
    return set() if _MORE.search(text) else {line.strip() for line in text.split("; ") if line.strip()}


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: Any) -> str:
    """`text` safe for a terminal: control characters (escape sequences, bells, carriage returns)
    become spaces, and what the terminal's encoding cannot show (a lone surrogate) becomes '?'."""
    cleaned = _CONTROL.sub(" ", str(text))
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    return cleaned.encode(encoding, "replace").decode(encoding, "replace")


def shorten(text: Any, width: int) -> str:
    text = " ".join(printable(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def relative_to(root: Path, value: Any) -> str:
    """A path (or text naming one) under `root` as a path relative to it, so reports and results
    carry no machine-specific directories; anything else unchanged."""
    text = str(value)
    prefix = str(Path(root).resolve())
    return text.replace(prefix + "/", "").replace(prefix, ".")
