"""Golden records: the per-env store ``<root>/<env-key>/<suite>/<case>.json``.

A record is ``{"schema": N, "suite": ..., "case": ..., "env": {fingerprint}, "fields": {name:
Field.to_json()}}``, written as JSON with sorted keys, two-space indent and every float rounded to
`FLOAT_DIGITS` significant digits (relative error <= 5e-8, far below the fp32 tensor tolerance
rtol=1.3e-6), so diffs in review are small and stable. Observed values go through the same
`normalize_field` before they are compared, so a freshly written record compares equal to itself.

Safety:
- writes are atomic: a temporary file in the same directory, fsync, then `os.replace`; a reader
  (or a process killed mid-write) sees the old record or the new one, never half of one; a
  written record gets the usual mode (0o666 & ~umask), not the temporary file's 0600;
- writers of one env are serialised with an exclusive `fcntl.flock` on
  ``<root>/../.harness-locks/<root name>.<env-key>.lock`` - beside the records tree, never in it
  (users commit the tree; the lock directory ignores itself in git), and outside the env directory
  a regen swaps. The holder writes who it is (pid, user, host, since when, command) into the file;
  a writer that waits says so on stderr after `LOCK_NOTICE_S`, naming the holder and how long it
  will wait, and gives up after `LOCK_TIMEOUT_S` with a `TimeoutError` naming both. Another user's
  lock file is locked through a read-only descriptor. The lock is taken only to write: `update`
  first merges without it and returns when nothing would change, so a read-only run never creates
  a lock file; otherwise it re-reads and merges under the lock, so two pytest-xdist workers that
  add different fields of the same case both keep theirs;
- a regeneration (`replace_records`) is one transaction: the full new set of the env's records is
  built in ``<root>/.<env-key>.regen-tmp/`` (same filesystem) and swapped in with an atomic
  ``renameat2(RENAME_EXCHANGE)`` (Linux; elsewhere two renames via ``.<env-key>.regen-old``), so a
  killed regen leaves the old set or the new set whole, never a mix. Leftover scratch trees of a
  killed run are dot names (never listed as env keys) and are removed by the next regen of that env;
- corrupt JSON, an unknown schema version, a record of another suite/case or a malformed field
  raise `RecordError` naming the file; nothing is overwritten unless the caller asks for it
  (``replace_unreadable=True``, what --force-regen does, and reports);
- OS errors (read-only store, full disk, a lock that cannot be taken) propagate as `OSError`; the
  plugin turns them into a test failure message and a write error of the run (its verdict is then
  ERROR, never PASS), `harness regen` into one line and exit 2;
- records are written only inside the store: an env or suite directory that is a symlink out of it
  is refused (`OutsideStoreError`, an OSError naming both) before anything is written;
- every record is read through harness/store/reading.py (a regular file inside the store, at most
  `MAX_RECORD_BYTES`, strict JSON nested at most `MAX_DEPTH`, clean text) and written as strict
  JSON: a non-finite float as the text "NaN" / "Infinity" / "-Infinity", a lone surrogate as U+FFFD.
"""

from __future__ import annotations

import contextlib
import errno
import getpass
import json
import math
import os
import re
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.schema import Field, Record, RecordedReference, RecordError, non_finite_text
from harness.store.files import _atomic_write_text, _copy_durable, _fsync_dir, _rename_exchange
from harness.store.reading import InputError, clean_text, read_json

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: no inter-process lock, single-worker runs only
    fcntl = None  # type: ignore[assignment]

FLOAT_DIGITS = 8  # significant digits kept for every float in a record
RECORD_SUFFIX = ".json"
LOCK_TIMEOUT_S = 300.0  # how long a writer waits for another one's lock on the same env
LOCK_NOTICE_S = 1.0  # a writer that waited this long says who holds the lock
LOCK_DIR = ".harness-locks"  # beside the records tree (`GoldenStore.lock_dir`)
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
    tuples -> lists, mapping keys -> str, floats rounded to `FLOAT_DIGITS` significant digits, a
    non-finite float -> "NaN" / "Infinity" / "-Infinity" (strict JSON has no such number; the
    numeric kinds read the text back as the float, schema.NON_FINITE), a lone surrogate -> U+FFFD."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return round_float(value) if math.isfinite(value) else non_finite_text(value)
    if isinstance(value, Mapping):
        return {clean_text(str(k)): to_plain(v) for k, v in value.items()}
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
    return json.dumps(to_plain(data), sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


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


def _write_holder(fd: int) -> None:
    """Under the lock: who holds it, for a writer that waits (nothing when the file is read-only)."""
    holder = {"pid": os.getpid(), "user": _user(), "host": socket.gethostname(), "since": time.time(),
              "command": " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:200]}
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no name for this uid (a container): the uid
        return str(os.getuid())


def describe_holder(fd: int) -> str:
    """'pid 123 (bob@host, since 12:00:01, 42 s ago: pytest suites)' from a lock file's holder
    record, or what is known of it."""
    try:
        holder = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace") or "{}")
        since = float(holder["since"])
        return (f"pid {int(holder['pid'])} ({holder.get('user', '?')}@{holder.get('host', '?')}, since "
                f"{time.strftime('%H:%M:%S', time.localtime(since))}, {time.time() - since:.0f} s ago: "
                f"{str(holder.get('command', ''))[:120]})")
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (it did not say who)"


class RecordLimitError(ValueError):
    """A record the store would refuse to read back (harness/store/reading.py limits): never written."""


def record_text(path: Path | str, data: Any) -> str:
    """The record's canonical text, checked against the read limits before it is written - size
    (`MAX_RECORD_BYTES`), nesting (`MAX_DEPTH`), strict JSON (it parses back as itself) - so nothing
    the store writes is refused by the next read; `RecordLimitError` names the file and the limit."""
    from harness.store.reading import MAX_DEPTH, MAX_RECORD_BYTES, InputError, parse_json

    try:
        text = dumps(data)
    except (ValueError, TypeError, RecursionError) as exc:  # NaN / Infinity, or a value nested past Python's limit
        raise RecordLimitError(f"{path}: not written - not strict JSON ({type(exc).__name__}: {str(exc)[:200]})") from None
    size = len(text.encode("utf-8"))
    if size > MAX_RECORD_BYTES:
        raise RecordLimitError(f"{path}: not written - {size} bytes, over the store's limit of {MAX_RECORD_BYTES}")
    try:
        parse_json(text, path, max_depth=MAX_DEPTH)
    except InputError as exc:
        raise RecordLimitError(f"{path}: not written - {exc.problem}") from None
    return text


def write_record_json(path: Path, data: Any) -> None:
    """A record written atomically (`atomic_write_json`), within the read limits (`record_text`)."""
    record_text(path, data)
    atomic_write_json(path, data)


def atomic_write_json(path: Path, data: Any) -> None:
    """`dumps(data)` written atomically (temp file in the same directory + `os.replace`)."""
    _atomic_write_text(Path(path), dumps(data))


class OutsideStoreError(OSError):
    """A record's directory (an env or suite directory that is a symlink) leads out of the store:
    nothing is written there (an OSError: a run's write error, `harness regen`'s one line)."""


class UnknownEnvError(ValueError):
    """An env key that is malformed or has no records; the message lists the known keys."""


class GoldenStore:
    """Records under `root`: ``root/<env-key>/<suite>/<case>.json``."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    # paths and listing --------------------------------------------------------------------
    def path(self, env_key: str, suite: str, case: str) -> Path:
        return self.root / safe_name(env_key) / safe_name(suite) / (safe_name(case) + RECORD_SUFFIX)

    def check_inside(self, path: Path) -> None:
        """`OutsideStoreError` unless `path`'s directory, its symlinks resolved, lies inside the store
        (an env or suite directory that is a symlink out of it would take the records elsewhere; the
        store's root itself may be a symlink)."""
        root = self.root.resolve()
        where = path.parent.resolve()
        if where != root and root not in where.parents:
            raise OutsideStoreError(errno.EXDEV, f"resolves to {where}, outside the store {root}; records are "
                                                 "written only inside it (an env or suite directory is a symlink)",
                                    str(path.parent))

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
        from harness.store.env import is_safe_key

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
    def _load(self, path: Path, suite: str | None, case: str | None) -> Record:
        """Read through the input layer (harness/store/reading.py: regular files inside the store,
        size, depth, strict JSON), then the record's schema."""
        try:
            data = read_json(path, root=self.root)
        except InputError as exc:
            raise RecordError(path, exc.problem) from None
        return Record.from_json(data, path, suite=suite, case=case)

    def read(self, env_key: str, suite: str, case: str) -> Record | None:
        """The record, or None when there is none. Raises `RecordError` when it is unusable."""
        path = self.path(env_key, suite, case)
        if not path.exists():
            return None
        return self._load(path, suite=suite, case=case)

    # locking ------------------------------------------------------------------------------
    @property
    def lock_dir(self) -> Path:
        """Where the store's locks live: a dot directory beside the records tree, never inside it
        (the tree is committed), ignoring itself in git (its own .gitignore)."""
        return self.root.parent / LOCK_DIR

    def lock_path(self, env_key: str) -> Path:
        return self.lock_dir / f"{safe_name(self.root.name)}.{safe_name(env_key)}.lock"

    def _open_lock(self, env_key: str) -> int:
        path = self.lock_path(env_key)
        if not self.lock_dir.is_dir():
            self.lock_dir.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                (self.lock_dir / ".gitignore").write_text("# locks of harness writers (harness/store/records.py)\n*\n")
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:  # another user's lock file: flock works on a read-only descriptor too
            return os.open(path, os.O_RDONLY)

    @contextlib.contextmanager
    def lock(self, env_key: str, timeout: float = LOCK_TIMEOUT_S) -> Iterator[None]:
        """Exclusive inter-process lock for writing one env's records (`lock_path`; the holder
        writes who it is into the file). A writer that has waited `LOCK_NOTICE_S` says on stderr
        who holds the lock and how long it will wait; after `timeout` seconds, `TimeoutError`
        naming the lock and its holder. Not re-entrant: do not nest."""
        if fcntl is None:  # pragma: no cover
            yield
            return
        path = self.lock_path(env_key)
        fd = self._open_lock(env_key)
        try:
            start = time.monotonic()
            told = False
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    waited = time.monotonic() - start
                    if waited >= timeout:
                        raise TimeoutError(errno.ETIMEDOUT, f"lock held for over {timeout:g} s by "
                                                            f"{describe_holder(fd)}", str(path)) from None
                    if not told and waited >= min(LOCK_NOTICE_S, timeout):
                        sys.stderr.write(f"harness: waiting up to {timeout:g} s for the lock {path}, held by "
                                         f"{describe_holder(fd)}\n")
                        sys.stderr.flush()
                        told = True
                    time.sleep(0.01)
            _write_holder(fd)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def check_writable(self, env_key: str) -> None:
        """OSError now if this env's records could not be written (the lock cannot be taken, or the
        store refuses a new file), before anything long runs."""
        with self.lock(env_key):
            fd, name = tempfile.mkstemp(prefix=".write-check.", dir=self.root)
            os.close(fd)
            os.unlink(name)

    # writing ------------------------------------------------------------------------------
    def write(self, env_key: str, record: Record) -> Path:
        """Write a whole record atomically (no merge; prefer `update`)."""
        path = self.path(env_key, record.suite, record.case)
        self.check_inside(path)
        with self.lock(env_key):
            write_record_json(path, record.to_json())
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
        references: Mapping[str, RecordedReference] | None = None,
    ) -> WriteReport:
        """Merge `fields` into the record under an exclusive lock; write atomically if anything
        changed. Other fields already in the record are kept.

        overwrite=False (a normal run): only fields the record lacks are added ('new'); existing
        ones are left as they are ('unchanged'), whatever their value.
        overwrite=True (--force-regen): fields whose value differs are rewritten ('changed') and
        the record's env becomes `env`.
        An unreadable record raises `RecordError` unless `replace_unreadable` (then it is replaced
        and the report says so).
        `references`: the case's in-run reference verdicts, merged by the same rule (a reference the
        record lacks is added, an existing one rewritten only with `overwrite`); the report names
        them ``reference:<name>``.
        """
        refs = dict(references or {})
        report, record = self._merge(env_key, suite, case, env, fields, overwrite, replace_unreadable, refs)
        if record is None:
            return report  # nothing to write: no lock taken (a read-only run creates no lock file)
        self.check_inside(report.path)
        with self.lock(env_key):  # merge again under the lock: another writer may have been first
            report, record = self._merge(env_key, suite, case, env, fields, overwrite, replace_unreadable, refs)
            if record is not None:
                write_record_json(report.path, record.to_json())
                report.written = True
        return report

    def _merge(self, env_key: str, suite: str, case: str, env: dict[str, Any], fields: Mapping[str, Field],
               overwrite: bool, replace_unreadable: bool,
               references: Mapping[str, RecordedReference] | None = None) -> tuple[WriteReport, Record | None]:
        """What `update` would do now: (report, the record to write or None when nothing changes)."""
        path = self.path(env_key, suite, case)
        report = WriteReport(path=path)
        try:
            record = self.read(env_key, suite, case)
        except RecordError as exc:
            if not replace_unreadable:
                raise
            report.replaced_unreadable = str(exc)
            record = None
        existed = record is not None
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
        for name, ref in (references or {}).items():
            old_ref = record.references.get(name)
            change = "new" if old_ref is None else (
                "changed" if overwrite and old_ref.to_json() != ref.to_json() else "unchanged")
            report.changes.append(FieldChange(f"reference:{name}", change))
            if change != "unchanged":
                record.references[name] = ref
                dirty = True
        if not dirty:
            return report, None
        if overwrite or not existed:
            record.env = to_plain(env)
        return report, record

    # regeneration: one transaction per env ---------------------------------------------------
    def scratch_dirs(self, env_key: str) -> tuple[Path, Path]:
        """(the scratch tree a regen builds, where the fallback swap parks the old tree)."""
        key = safe_name(env_key)
        return self.root / f".{key}.regen-tmp", self.root / f".{key}.regen-old"

    def _recover(self, env_key: str) -> None:
        """Under the lock: undo what a killed regen left (an unfinished fallback swap is rolled
        back to the old set; scratch trees are removed)."""
        env_dir = self.root / safe_name(env_key)
        scratch, parked = self.scratch_dirs(env_key)
        if parked.exists():
            if env_dir.exists():
                shutil.rmtree(parked)
            else:
                os.rename(parked, env_dir)
        if scratch.exists():
            shutil.rmtree(scratch)

    def replace_records(self, env_key: str, write: Iterable[Record], remove: Iterable[tuple[str, str]] = ()) -> None:
        """Rewrite one env's records as a single transaction: its current records (stray temp
        files dropped), minus `remove` ((suite dir, file stem) pairs), with `write` written over
        them, are built in a scratch tree next to it and swapped in. Killed at any moment, the env
        directory holds the old set or the new set whole. OS errors propagate (the old set is
        then left in place)."""
        env_dir = self.root / safe_name(env_key)
        scratch, parked = self.scratch_dirs(env_key)
        self.check_inside(env_dir / "x")
        with self.lock(env_key):
            self._recover(env_key)
            try:
                if env_dir.is_dir():
                    shutil.copytree(env_dir, scratch, ignore=shutil.ignore_patterns(".*"),
                                    copy_function=_copy_durable)
                else:
                    scratch.mkdir()
                for suite_dir, stem in remove:
                    path = scratch / suite_dir / f"{stem}{RECORD_SUFFIX}"
                    path.unlink(missing_ok=True)
                    if path.parent.is_dir() and not any(path.parent.iterdir()):
                        path.parent.rmdir()
                for record in write:
                    target = self.path(env_key, record.suite, record.case)
                    write_record_json(scratch / target.relative_to(env_dir), record.to_json())
                self._swap(scratch, env_dir, parked)
            except BaseException:
                with contextlib.suppress(OSError):
                    if scratch.exists() and env_dir.exists():
                        shutil.rmtree(scratch)
                raise
            _fsync_dir(self.root)
            # after the swap: the scratch path (exchange) or the parked one holds the old set
            for leftover in (scratch, parked):
                shutil.rmtree(leftover, ignore_errors=True)

    @staticmethod
    def _swap(scratch: Path, env_dir: Path, parked: Path) -> None:
        if not env_dir.exists():
            os.rename(scratch, env_dir)
        elif not _rename_exchange(scratch, env_dir):
            os.rename(env_dir, parked)
            try:
                os.rename(scratch, env_dir)
            except BaseException:
                os.rename(parked, env_dir)
                raise
