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
- an entry is trusted only if the key stored in it is the key asked for, byte for byte, and its
  sha256 (over the key and the value's bytes) matches; an entry that cannot be read or does not
  match is recomputed and rewritten, never used, and named once (a warning with its path);
- a write that fails (a full disk: OSError, or torch's RuntimeError) costs time, never a result;
- `enabled=False` (``--no-cache``) computes every answer afresh and writes nothing;
  `writable=False` (a run with a fault injected) reads clean answers but never stores its own.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import io
import json
import os
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


class AnswerCache:
    """Deterministic answers on disk under `root` (see the module docstring)."""

    def __init__(self, root: Path | None, enabled: bool = True, writable: bool = True):
        self.root = Path(root) if root is not None else None
        self.enabled = enabled and root is not None
        self.writable = writable
        self.hits = self.misses = 0
        self.rejected: set[Path] = set()  # entries found unreadable or not matching (named once)

    def path(self, text: str) -> Path:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        assert self.root is not None
        return self.root / digest[:2] / f"{digest}.pt"

    def get(self, key: Mapping[str, Any], compute: Callable[[], T]) -> T:
        """The stored answer for `key`, else `compute()` (stored for next time)."""
        if not self.enabled:
            return compute()
        text = canonical(key)
        path = self.path(text)
        if path.is_file():
            found, value = self._read(path, text)
            if found:
                self.hits += 1
                return value
        self.misses += 1
        value = compute()
        if self.writable:
            self._write(path, text, value)
        return value

    def _read(self, path: Path, text: str) -> tuple[bool, Any]:
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
            return True, torch.load(io.BytesIO(payload), weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unreadable entry is recomputed, never trusted
            if path not in self.rejected:
                self.rejected.add(path)
                warnings.warn(f"engine cache entry {path} is unreadable or altered ({type(exc).__name__}: "
                              f"{str(exc)[:200]}); recomputed and rewritten", stacklevel=3)
            return False, None

    @staticmethod
    def _write(path: Path, text: str, value: Any) -> None:
        """Write the entry atomically; any failure (OSError, torch's RuntimeError) costs time only."""
        import torch

        with contextlib.suppress(OSError, RuntimeError):  # a cache that cannot be written costs time, not correctness
            buffer = io.BytesIO()
            torch.save(value, buffer)
            payload = buffer.getvalue()
            header = json.dumps({"key": text, "sha256": checksum(text, payload)}).encode("utf-8") + b"\n"
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
