"""Answers that are data: a deterministic computation's result kept on disk under the sha256 of
exactly what determines it.

The reference engine is deterministic given the weights, the torch version, the dtype and its own
code, so its answers (a greedy decode, a forward's logits, an exact distribution) are data: the
suites ask `AnswerCache.get(key, compute)` and a rerun reads them back instead of recomputing.

- the key is a JSON-able mapping; the caller puts in it everything the answer depends on (the
  digest of the code that computes it - `source_digest`: the module of the computation and every
  harness module it imports, transitively - the weights' sha256, torch's version, the arguments);
- an entry is ``<root>/<sha[:2]>/<sha>.pt``: one JSON header line ``{"key": ..., "sha256": ...}``,
  then the value as `torch.save` wrote it, read with ``torch.load(weights_only=True)`` (tensors,
  dicts, lists, tuples and plain values only: nothing in a cache file can run code); written
  atomically (temporary file + rename);
- an entry is trusted only if the key stored in it is the key asked for, byte for byte, its
  sha256 (over the key and the value's bytes) matches, and so does its HMAC-SHA256 under this
  user's secret (`secret_file`: $XDG_CONFIG_HOME/genharness/engine-cache.key, 32 random bytes
  created 0600 on first use, outside the cache directory): a cache directory restored from
  somewhere else (a CI cache, a shared or copied directory) cannot plant an answer, since whoever
  wrote it could recompute a checksum but not the HMAC; an entry that cannot be read or does not
  match is recomputed and rewritten, never used, and named once (a warning with its path; of the
  entries without an HMAC - a cache an older harness wrote - only the first is named). A
  secret file that is not a regular 0600 file of this user (or cannot be made) turns the cache off
  for the run, said once;
- a write that fails (a full disk: OSError, or torch's RuntimeError) costs time, never a result;
- `enabled=False` (``--no-cache``) computes every answer afresh and writes nothing;
  `writable=False` (a run with a fault injected) reads clean answers but never stores its own.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import hmac
import io
import json
import os
import secrets
import stat
import tempfile
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def canonical(key: Mapping[str, Any]) -> str:
    """The key as one canonical JSON text (sorted keys, tuples as lists)."""
    return json.dumps(key, sort_keys=True, separators=(",", ":"), default=str)


PACKAGE = Path(__file__).resolve().parents[1]  # harness/


def module_file(name: str) -> Path | None:
    """The source file of harness module `name` (None: not a harness module, or not found)."""
    parts = name.split(".")
    if parts[0] != PACKAGE.name:
        return None
    base = PACKAGE.joinpath(*parts[1:])
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def _imports(path: Path, name: str) -> set[str]:
    """The harness modules `path` (module `name`) imports, at any depth of its code."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            out.add(base)
            out |= {f"{base}.{alias.name}" for alias in node.names}  # `from pkg import module`
    return {m for m in out if module_file(m) is not None}


@functools.cache
def source_files(*modules: str) -> tuple[Path, ...]:
    """Every file of the import graph of `modules` within the harness (each module, its packages'
    __init__, and what they import, transitively)."""
    seen: dict[str, Path] = {}
    todo = list(modules)
    while todo:
        name = todo.pop()
        path = module_file(name)
        if name in seen or path is None:
            continue
        seen[name] = path
        todo += _imports(path, name)
        todo += [".".join(name.split(".")[:i]) for i in range(2, len(name.split(".")))]  # parent packages
    return tuple(sorted(set(seen.values())))


@functools.cache
def source_digest(*modules: str) -> str:
    """sha256 of the code an answer depends on: `source_files(*modules)`, names and bytes."""
    digest = hashlib.sha256()
    for path in source_files(*modules):
        digest.update(str(path.relative_to(PACKAGE)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def checksum(text: str, payload: bytes) -> str:
    return hashlib.sha256(text.encode("utf-8") + b"\0" + payload).hexdigest()


def signature(secret: bytes, text: str, payload: bytes) -> str:
    """HMAC-SHA256 of an entry (its key and value's bytes) under this user's secret."""
    return hmac.new(secret, text.encode("utf-8") + b"\0" + payload, hashlib.sha256).hexdigest()


SECRET_BYTES = 32


class Unsigned(ValueError):
    """An entry without an HMAC: an older harness's, or forged - recomputed; only the first is named."""


class SecretError(OSError):
    """The cache's secret file cannot be made, or is not a 0600 regular file of this user."""


def load_secret(path: Path) -> bytes:
    """This user's cache secret from `path`, created (32 random bytes, mode 0600, its directory
    0700) when absent - atomically, so concurrent workers agree on one. `SecretError` when it is
    not a regular file owned by this user readable by nobody else, or not 32 bytes."""
    if not path.exists() and not path.is_symlink():
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=path.parent)  # created 0600
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(secrets.token_bytes(SECRET_BYTES))
                with contextlib.suppress(FileExistsError):  # another worker made it first: theirs is the one
                    os.link(tmp, path)
            finally:
                os.unlink(tmp)
        except OSError as exc:
            raise SecretError(f"cannot create {path}: {exc.strerror or exc}") from exc
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise SecretError(f"cannot open {path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise SecretError(f"{path} is not a regular file of this user with mode 0600 "
                              f"(mode {stat.filemode(info.st_mode)}, owner uid {info.st_uid})")
        secret = handle.read(SECRET_BYTES + 1)
    if len(secret) != SECRET_BYTES:
        raise SecretError(f"{path} does not hold {SECRET_BYTES} bytes")
    return secret


def default_secret_file() -> Path:
    """$XDG_CONFIG_HOME/genharness/engine-cache.key (~/.config/...): apart from the cache directory."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "genharness" / "engine-cache.key"


class AnswerCache:
    """Deterministic answers on disk under `root` (see the module docstring)."""

    def __init__(self, root: Path | None, enabled: bool = True, writable: bool = True,
                 secret_file: Path | None = None):
        self.root = Path(root) if root is not None else None
        self.enabled = enabled and root is not None
        self.writable = writable
        self.secret_file = Path(secret_file) if secret_file is not None else default_secret_file()
        self._secret: bytes | None = None
        self.hits = self.misses = 0
        self.rejected: set[Path] = set()  # entries found unreadable or not matching (named once)
        self.unsigned_named = False  # entries without an HMAC (an older harness's cache): the first one named

    def secret(self) -> bytes | None:
        """This user's secret (read once); None - the cache off for this run, said once - when
        `load_secret` refuses it."""
        if self._secret is None and self.enabled:
            try:
                self._secret = load_secret(self.secret_file)
            except SecretError as exc:
                self.enabled = False
                warnings.warn(f"engine cache off: its key {exc}; every answer is computed", stacklevel=4)
        return self._secret

    def path(self, text: str) -> Path:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        assert self.root is not None
        return self.root / digest[:2] / f"{digest}.pt"

    def get(self, key: Mapping[str, Any], compute: Callable[[], T]) -> T:
        """The stored answer for `key`, else `compute()` (stored for next time)."""
        secret = self.secret()
        if not self.enabled or secret is None:
            return compute()
        text = canonical(key)
        path = self.path(text)
        if path.is_file():
            found, value = self._read(path, text, secret)
            if found:
                self.hits += 1
                return value
        self.misses += 1
        value = compute()
        if self.writable:
            self._write(path, text, value, secret)
        return value

    def _read(self, path: Path, text: str, secret: bytes) -> tuple[bool, Any]:
        """(True, the value) when the entry at `path` is this key's and intact; else (False, None),
        the entry named once."""
        import torch

        try:
            with path.open("rb") as handle:
                header = json.loads(handle.readline())
                payload = handle.read()
            if not isinstance(header, dict) or header.get("key") != text:
                raise ValueError("it holds another key, or none")
            if header.get("sha256") != checksum(text, payload):
                raise ValueError("its checksum does not match its content")
            if "hmac" not in header:
                raise Unsigned("it carries no HMAC (written by an older harness, or forged)")
            if not hmac.compare_digest(str(header["hmac"]), signature(secret, text, payload)):
                raise ValueError("its HMAC does not match this user's key (written elsewhere, or forged)")
            return True, torch.load(io.BytesIO(payload), weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unreadable entry is recomputed, never trusted
            unsigned = isinstance(exc, Unsigned)
            if path not in self.rejected and not (unsigned and self.unsigned_named):
                warnings.warn(f"engine cache entry {path} is unreadable or altered ({type(exc).__name__}: "
                              f"{str(exc)[:200]}); recomputed and rewritten"
                              + ("; further entries without an HMAC are recomputed without a warning" if unsigned
                                 else ""), stacklevel=3)
            self.rejected.add(path)
            self.unsigned_named = self.unsigned_named or unsigned
            return False, None

    @staticmethod
    def _write(path: Path, text: str, value: Any, secret: bytes) -> None:
        """Write the entry atomically; any failure (OSError, torch's RuntimeError) costs time only."""
        import torch

        with contextlib.suppress(OSError, RuntimeError):  # a cache that cannot be written costs time, not correctness
            buffer = io.BytesIO()
            torch.save(value, buffer)
            payload = buffer.getvalue()
            header = json.dumps({"key": text, "sha256": checksum(text, payload),
                                 "hmac": signature(secret, text, payload)}).encode("utf-8") + b"\n"
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(header + payload)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise


def default_root() -> Path:
    """$XDG_CACHE_HOME/genharness (~/.cache/genharness): shared by projects, keyed by content."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "genharness"
