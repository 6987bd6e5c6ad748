"""`harness merge DIR...`: import record sets uploaded by CI runners into the store.

Each DIR is a record store root, ``DIR/<env-key>/<suite>/<case>.json`` (a matrix job's
``golden/records/<env-key>/`` uploaded as an artifact and downloaded under ``DIR/<env-key>/``).
Every record is read and validated first; then, per env key:

- the same key in two inputs with different record sets is refused, naming both paths (identical
  sets are fine: a rerun job, an artifact downloaded twice);
- a key the store does not have is added; one it has with the same records is left alone; one it
  has with other records is refused unless ``--replace`` (then the store's set for that key is
  swapped for the imported one in one transaction, `GoldenStore.replace_records`).

Nothing is written unless every input is readable and no conflict was found. Every record is read
through the input layer (harness/store/reading.py): regular files inside the input only (no FIFO,
device or symlink out of it), at most `MAX_RECORD_BYTES`, strict JSON (no NaN / Infinity, no
duplicate key), nested at most `MAX_DEPTH`; a violation is one line naming the file and the limit.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.cli.project import UsageError, open_project
from harness.schema import Record, RecordError
from harness.store.env import env_key, is_safe_key
from harness.store.records import GoldenStore, RecordLimitError, record_text

RecordSet = dict[tuple[str, str], Record]


def as_json(records: RecordSet) -> dict[tuple[str, str], Any]:
    return {key: record.to_json() for key, record in records.items()}


def first_difference(a: RecordSet, b: RecordSet) -> str:
    """'suite/case' of the first record present in one set only or different between them."""
    for key in sorted(set(a) | set(b)):
        if key not in a or key not in b or a[key].to_json() != b[key].to_json():
            return "/".join(key)
    return ""


def key_of_record(record: Record) -> str | None:
    """The env key the record's own `env` (its fingerprint) names (None: it names none)."""
    try:
        return env_key(record.env) if isinstance(record.env, dict) else None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def check_records(here: Path, key: str, records: RecordSet) -> None:
    """An input env directory is merged only when its name is an env key, every record's `env` names
    that key (the directory name is not trusted), and every record is within the store's limits
    as the store would write it (a record the next read would refuse is never written)."""
    if not is_safe_key(key):
        raise UsageError(f"{here}: {key!r} is not an env key (expected e.g. tf5.24.0-torch2.13.0-cpu-x86_64-fp32); "
                         "nothing was merged")
    for (suite, stem), record in records.items():
        path = here / suite / f"{stem}.json"
        named = key_of_record(record)
        if named != key:
            raise UsageError(f"{path}: its env names {named or 'no env key'}, not the directory's {key}; "
                             "nothing was merged")
        try:
            record_text(path, record.to_json())
        except RecordLimitError as exc:
            raise UsageError(f"refused record {exc}; nothing was merged") from None


def read_inputs(dirs: Sequence[str]) -> dict[str, tuple[Path, RecordSet]]:
    """env key -> (its directory, its records), over every input; conflicts are `UsageError`s."""
    found: dict[str, tuple[Path, RecordSet]] = {}
    for raw in dirs:
        source = GoldenStore(Path(raw))
        if not source.root.is_dir():
            raise UsageError(f"{source.root}: not a directory (expected <dir>/<env-key>/<suite>/<case>.json)")
        keys = source.env_keys()
        if not keys:
            raise UsageError(f"{source.root}: no records (expected <dir>/<env-key>/<suite>/<case>.json)")
        for key in keys:
            try:
                records = source.env_records(key)
            except RecordError as exc:
                raise UsageError(f"refused record {exc}; nothing was merged") from exc
            here = source.root / key
            check_records(here, key, records)
            if key in found and as_json(found[key][1]) != as_json(records):
                other = found[key][0]
                raise UsageError(f"env key {key}: {other} and {here} hold different record sets (first difference: "
                                 f"{first_difference(found[key][1], records)}); keep one of them; nothing was merged")
            found.setdefault(key, (here, records))
    return found


def merge(store: GoldenStore, dirs: Sequence[str], replace: bool = False) -> list[str]:
    """Import the record sets under `dirs` into `store`; returns one line per env key."""
    incoming = read_inputs(dirs)
    plan: list[tuple[str, Path, RecordSet, RecordSet]] = []
    for key, (here, records) in sorted(incoming.items()):
        try:
            existing = store.env_records(key) if key in store.env_keys() else {}
        except RecordError as exc:
            raise UsageError(f"corrupt record in the store {exc}; nothing was merged") from exc
        if existing and as_json(existing) != as_json(records) and not replace:
            raise UsageError(f"env key {key}: {store.root / key} and {here} hold different record sets (first "
                             f"difference: {first_difference(existing, records)}); pass --replace to take {here}'s; "
                             "nothing was merged")
        plan.append((key, here, records, existing))
    lines = []
    for key, here, records, existing in plan:
        if existing and as_json(existing) == as_json(records):
            lines.append(f"{key}: {len(records)} records from {here} already in {store.root / key}; nothing to write")
            continue
        store.replace_records(key, records.values(), remove=[k for k in existing if k not in records])
        verb = "replaced" if existing else "added"
        lines.append(f"{key}: {verb} {len(records)} records from {here} under {store.root / key}")
    return lines


def cmd_merge(args: argparse.Namespace, extra: Sequence[str]) -> int:
    project = open_project(args)
    if not project.store.root.is_dir():
        raise UsageError(f"{project.store.root} does not exist (the store to merge into); create it first")
    try:
        lines = merge(project.store, args.dirs, args.replace)
    except OSError as exc:
        raise UsageError(f"cannot write records under {project.store.root}: {exc}") from exc
    for line in lines:
        print(f"harness: merge: {line}")
    return 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("merge", parents=[common], help="import record sets (<dir>/<env-key>/...) into the store",
                       description="Import record sets uploaded by CI runners into the golden store.")
    p.add_argument("dirs", metavar="DIR", nargs="+", help="a record store root: DIR/<env-key>/<suite>/<case>.json")
    p.add_argument("--replace", action="store_true", help="replace the store's records of an env key that differ")
    p.set_defaults(func=cmd_merge)
