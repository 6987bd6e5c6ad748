"""Golden records: the per-env store ``<root>/<env-key>/<suite>/<case>.json``.

A record is ``{"schema": N, "suite": ..., "case": ..., "env": {fingerprint}, "fields": {name:
Field.to_json()}}``, written as JSON with sorted keys, two-space indent and every float rounded to
`FLOAT_DIGITS` significant digits (relative error <= 5e-9, far below the fp32 tensor tolerance
rtol=1.3e-6), so diffs in review are small and stable. Observed values go through the same
`normalize_field` before they are compared, so a freshly written record compares equal to itself.

Safety:
- writes are atomic: a temporary file in the same directory, fsync, then `os.replace`; a reader
  (or a process killed mid-write) sees the old record or the new one, never half of one;
- updates of one record are serialised with an exclusive `fcntl.flock` on a lock file kept
  outside the store (under the system temp dir), and merge per field: two pytest-xdist workers
  that add different fields of the same case both keep theirs;
- corrupt JSON, an unknown schema version, a record of another suite/case or a malformed field
  raise `RecordError` naming the file; nothing is overwritten unless the caller asks for it
  (``replace_unreadable=True``, what --force-regen does, and reports).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.schema import Field, Record, RecordError

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: no inter-process lock, single-worker runs only
    fcntl = None  # type: ignore[assignment]

FLOAT_DIGITS = 8  # significant digits kept for every float in a record
RECORD_SUFFIX = ".json"
_SAFE_NAME = re.compile(r"[^A-Za-z0-9._=+-]+")


# ----------------------------------------------------------------------------------------------
# normalisation


def round_float(x: float, digits: int = FLOAT_DIGITS) -> float:
    """`x` to `digits` significant digits (NaN / inf unchanged; -0.0 becomes 0.0)."""
    if not math.isfinite(x):
        return x
    if x == 0:
        return 0.0
    return float(f"{x:.{digits}g}")


def to_plain(value: Any) -> Any:
    """JSON-ready copy of `value`: tensors / arrays -> nested lists, numpy scalars -> Python,
    tuples -> lists, mapping keys -> str, floats rounded to `FLOAT_DIGITS` significant digits."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return round_float(value)
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((to_plain(v) for v in value), key=repr)
    if hasattr(value, "detach") and hasattr(value, "tolist"):  # torch tensor (bf16 has no numpy twin)
        tensor = value.detach().cpu()
        if tensor.is_floating_point():
            tensor = tensor.double()
        return to_plain(tensor.tolist())
    if hasattr(value, "tolist"):  # numpy array or scalar
        return to_plain(value.tolist())
    if hasattr(value, "item"):
        return to_plain(value.item())
    raise TypeError(f"cannot store a value of type {type(value).__name__} in a golden record: {value!r}")


def normalize_field(f: Field) -> Field:
    """The field as it will read back from its record (plain JSON types, rounded floats)."""
    return Field(kind=f.kind, value=to_plain(f.value), extras=to_plain(f.extras))


def safe_name(text: str) -> str:
    """A string usable as one path component (case ids and suite names pass through unchanged
    when they only use ``[A-Za-z0-9._=+-]``)."""
    name = _SAFE_NAME.sub("_", str(text)).strip(".")
    if not name:
        raise ValueError(f"cannot make a file name from {text!r}")
    return name


def dumps(data: Any) -> str:
    """Canonical record text: sorted keys, indent 2, rounded floats, trailing newline."""
    return json.dumps(to_plain(data), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


# ----------------------------------------------------------------------------------------------
# records


@dataclass(frozen=True)
class FieldChange:
    """What one write did to one field: 'new', 'changed', 'unchanged' (not rewritten)."""

    field: str
    change: str


@dataclass
class WriteReport:
    """What `GoldenStore.update` did to one record file."""

    path: Path
    changes: list[FieldChange] = field(default_factory=list)
    replaced_unreadable: str = ""  # the RecordError text of a record that was replaced
    written: bool = False

    def changed_fields(self) -> list[str]:
        return [c.field for c in self.changes if c.change != "unchanged"]


def _atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` so that readers only ever see a complete file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def atomic_write_json(path: Path, data: Any) -> None:
    """`dumps(data)` written atomically (temp file in the same directory + `os.replace`)."""
    _atomic_write_text(Path(path), dumps(data))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Exclusive inter-process lock for one record path (a lock file under the temp dir, so the
    store itself never holds lock files)."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    lock_dir = Path(tempfile.gettempdir()) / "harness-golden-locks"
    lock_dir.mkdir(exist_ok=True)
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:40]
    with open(lock_dir / f"{digest}.lock", "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class UnknownEnvError(ValueError):
    """An env key that is malformed or has no records; the message lists the known keys."""


class GoldenStore:
    """Records under `root`: ``root/<env-key>/<suite>/<case>.json``."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    # paths and listing --------------------------------------------------------------------
    def path(self, env_key: str, suite: str, case: str) -> Path:
        return self.root / safe_name(env_key) / safe_name(suite) / (safe_name(case) + RECORD_SUFFIX)

    def env_keys(self) -> list[str]:
        """Env keys that have at least one record, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".") and any(self._files(p))
        )

    @staticmethod
    def _files(env_dir: Path) -> Iterator[Path]:
        for path in sorted(env_dir.glob(f"*/*{RECORD_SUFFIX}")):
            if not path.name.startswith("."):
                yield path

    def record_paths(self, env_key: str) -> list[Path]:
        return list(self._files(self.root / env_key))

    def records(self, env_key: str) -> Iterator[Record]:
        """Every record of one env (each validated against its path)."""
        for path in self.record_paths(env_key):
            yield self.read_file(path)

    def read_file(self, path: Path) -> Record:
        """A record found by listing: its suite and (sanitised) case must match its path."""
        record = self._load(path, suite=None, case=None)
        if safe_name(record.suite) != path.parent.name or safe_name(record.case) != path.stem:
            raise RecordError(path, f"record is for {record.suite}/{record.case}, which does not belong at this path")
        return record

    def require_env(self, key: str, source: str, current: str | None = None) -> None:
        """`key` (given by `source`, e.g. "--baseline") must name a recorded env, or be `current`,
        the env being run; else `UnknownEnvError` listing the known keys."""
        from harness.env import is_safe_key

        if not is_safe_key(key):
            raise UnknownEnvError(f"{source} {key!r} is not an env key (letters, digits, '.', '_', '-')")
        known = self.env_keys()
        if key in known or key == current:
            return
        listing = ", ".join(known) if known else "none"
        raise UnknownEnvError(f"{source} {key!r}: no golden records for this env key under {self.root}; "
                              f"known env keys: {listing}")

    def env_records(self, env_key: str) -> dict[tuple[str, str], Record]:
        """(suite dir, file stem) -> record, for every record of one env (`RecordError` on the
        first unreadable one)."""
        return {(p.parent.name, p.stem): self.read_file(p) for p in self.record_paths(env_key)}

    def env_of(self, env_key: str) -> dict[str, Any] | None:
        """The fingerprint stored in the env's first readable record (None if it has none)."""
        for path in self.record_paths(env_key):
            try:
                return self.read_file(path).env
            except RecordError:
                continue
        return None

    # reading ------------------------------------------------------------------------------
    @staticmethod
    def _load(path: Path, suite: str | None, case: str | None) -> Record:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise RecordError(path, f"cannot read: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise RecordError(path, f"corrupt JSON: {exc}") from exc
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RecordError(path, f"corrupt JSON: {exc}") from exc
        return Record.from_json(data, path, suite=suite, case=case)

    def read(self, env_key: str, suite: str, case: str) -> Record | None:
        """The record, or None when there is none. Raises `RecordError` when it is unusable."""
        path = self.path(env_key, suite, case)
        if not path.exists():
            return None
        return self._load(path, suite=suite, case=case)

    # writing ------------------------------------------------------------------------------
    def write(self, env_key: str, record: Record) -> Path:
        """Write a whole record atomically (no merge; prefer `update`)."""
        path = self.path(env_key, record.suite, record.case)
        with _locked(path):
            atomic_write_json(path, record.to_json())
        return path

    def update(
        self,
        env_key: str,
        suite: str,
        case: str,
        env: dict[str, Any],
        fields: Mapping[str, Field],
        *,
        overwrite: bool = False,
        replace_unreadable: bool = False,
    ) -> WriteReport:
        """Merge `fields` into the record under an exclusive lock; write atomically if anything
        changed. Other fields already in the record are kept.

        overwrite=False (a normal run): only fields the record lacks are added ('new'); existing
        ones are left as they are ('unchanged'), whatever their value.
        overwrite=True (--force-regen): fields whose value differs are rewritten ('changed') and
        the record's env becomes `env`.
        An unreadable record raises `RecordError` unless `replace_unreadable` (then it is replaced
        and the report says so).
        """
        path = self.path(env_key, suite, case)
        report = WriteReport(path=path)
        with _locked(path):
            try:
                record = self.read(env_key, suite, case)
            except RecordError as exc:
                if not replace_unreadable:
                    raise
                report.replaced_unreadable = str(exc)
                record = None
            if record is None:
                record = Record(suite=suite, case=case, env=to_plain(env))
            dirty = bool(report.replaced_unreadable)
            for name, new in fields.items():
                new = normalize_field(new)
                old = record.fields.get(name)
                if old is None:
                    change = "new"
                elif overwrite and old.to_json() != new.to_json():
                    change = "changed"
                else:
                    change = "unchanged"
                report.changes.append(FieldChange(name, change))
                if change != "unchanged":
                    record.fields[name] = new
                    dirty = True
            if dirty:
                if overwrite or not path.exists():
                    record.env = to_plain(env)
                atomic_write_json(path, record.to_json())
                report.written = True
        return report
