"""Small pure helpers that turn arbitrary record values into display text.

Nothing here escapes HTML: the template does that (Jinja2 autoescape). These functions only
make values readable and must never raise on an unexpected shape.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

MAX_CHARS = 4000  # longest value shown in full; longer text is cut with a note


def as_number(value: Any) -> float | None:
    """A finite float from an int/float (not bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def as_interval(value: Any) -> tuple[float, float] | None:
    """A (lo, hi) pair from a two-element list of finite numbers, else None."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    lo, hi = as_number(value[0]), as_number(value[1])
    if lo is None or hi is None:
        return None
    return (min(lo, hi), max(lo, hi))


def fmt_float(value: float) -> str:
    if not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


def truncate(text: str, max_chars: int = MAX_CHARS) -> str:
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}... ({len(text) - max_chars} more characters)"


def to_json_text(value: Any, *, indent: int | None = None) -> str:
    """JSON for containers, falling back to repr for anything JSON cannot hold."""
    try:
        return json.dumps(value, ensure_ascii=False, default=repr, indent=indent)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def fmt_value(value: Any, max_chars: int = MAX_CHARS) -> str:
    """Readable one-value text: numbers to 4 significant digits, containers as JSON."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return fmt_float(value)
    if isinstance(value, str):
        return truncate(value, max_chars) if value else '""'
    return truncate(to_json_text(value), max_chars)


def is_long(text: str) -> bool:
    """Text that reads better in a wrapped block than inline in a table cell."""
    return len(text) > 80 or "\n" in text


def common_prefix_len(a: Sequence[Any], b: Sequence[Any]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def split_common(old: str, new: str) -> tuple[str, str, str]:
    """(common prefix, rest of old, rest of new) of two strings."""
    n = common_prefix_len(old, new)
    return old[:n], old[n:], new[n:]


def tail(text: str, max_chars: int = 240) -> str:
    """The end of a long text, with a leading ellipsis when cut."""
    return text if len(text) <= max_chars else "\u2026" + text[-max_chars:]


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys: {"versions": {"torch": "2.5"}} -> {"versions.torch": "2.5"}.
    A non-mapping at the top is kept under the key "(value)"."""
    if not isinstance(data, Mapping):
        return {} if data is None and not prefix else {prefix or "(value)": data}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, name))
        else:
            flat[name] = value
    return flat


def humanize(key: str) -> str:
    """'values_changed' -> 'values changed'."""
    return str(key).replace("_", " ")
