"""What a run wrote to the golden store, as lines a person reads (the terminal after a run, the
report's "Records written" section): one line per record file with its fields by change, or why
nothing was written. Reads results.json's meta.writes and meta.write_rule (harness/plugin/session.py).
"""

from __future__ import annotations

from typing import Any

from harness.checking.humane import printable

MAX_WRITES = 30  # record files listed; results.json's meta.writes has them all


def written_records(writes: Any) -> list[dict[str, Any]]:
    """The entries of results.json's meta.writes that changed a file."""
    if not isinstance(writes, list):
        return []
    return [w for w in writes if isinstance(w, dict) and (w.get("fields") or w.get("replaced_unreadable"))]


NAMES = 6  # field names shown per record and change


def _count_changes(fields: Any) -> str:
    """{"tokens": "new", "text": "new", "n": "changed"} -> '2 new (text, tokens), 1 changed (n)'."""
    if not isinstance(fields, dict):
        return ""
    per: dict[str, list[str]] = {}
    for name, change in sorted(fields.items()):
        per.setdefault(str(change), []).append(str(name))

    def names(listed: list[str]) -> str:
        more = f", +{len(listed) - NAMES} more" if len(listed) > NAMES else ""
        return ", ".join(listed[:NAMES]) + more

    return ", ".join(f"{len(listed)} {change} ({names(listed)})" for change, listed in per.items())


def writes_lines(meta: Any, limit: int = MAX_WRITES) -> list[str]:
    """What a run wrote to the golden store, for a person: one line per record file, or why nothing
    was written (results.json meta.writes and meta.write_rule)."""
    meta = meta if isinstance(meta, dict) else {}
    written = written_records(meta.get("writes"))
    rule = str(meta.get("write_rule") or "")
    where = str(meta.get("golden_dir") or "the golden store")
    if not written:
        why = rule.split(" - ", 1)[1] if rule.startswith("not written - ") else ""
        return [f"records written: none{f' ({why})' if why else ''}"]
    fields = sum(len(w.get("fields") or {}) for w in written)
    verb = "rewrote" if meta.get("force_regen") else "wrote"
    lines = [f"records written: {verb} {fields} field(s) in {len(written)} record(s) under {where}/"]
    for w in written[:limit]:
        extra = " (replaced an unreadable record)" if w.get("replaced_unreadable") else ""
        lines.append(f"  {printable(w.get('path'))}: {printable(_count_changes(w.get('fields')))}{extra}")
    if len(written) > limit:
        lines.append(f"  ... and {len(written) - limit} more records (results.json meta.writes lists them)")
    return lines
