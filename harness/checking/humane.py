"""Differences in human terms: "key: old -> new" lines instead of deepdiff's sentences. Pure.

`change_lines(old, new)` walks two JSON values and returns one line per changed leaf, e.g.
``n: 12 -> 13``, ``static.distinct[0].attn_mask: {"dtype": "bool", ...} -> None``,
``lm_head.weight: added ""``, ``embed_out.weight: removed``; two strings that differ show the text
around their first divergence when either is longer than a line (`text_around`). The structured diff (deepdiff's) stays in
`Outcome.diff` for the report's tables; these lines are the one-line `detail`.
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


def _walk(old: Any, new: Any, path: list[Any], out: list[str]) -> None:
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


def change_lines(old: Any, new: Any) -> list[str]:
    """One 'key: old -> new' line per changed leaf (paths like `a.b[2].c`; `root` for the whole value)."""
    out: list[str] = []
    _walk(old, new, [], out)
    return out


def change_detail(old: Any, new: Any, limit: int = 3) -> str:
    """The first `limit` change lines joined by '; ', with '(+K more)'."""
    lines = change_lines(old, new)
    return "; ".join(lines[:limit]) + (f" (+{len(lines) - limit} more)" if len(lines) > limit else "")


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
