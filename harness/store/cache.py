"""Answers that are data: a deterministic computation's result kept on disk under the sha256 of
exactly what determines it.

The reference engine is deterministic given the weights, the torch version, the dtype and its own
code, so its answers (a greedy decode, a forward's logits, an exact distribution) are data: the
suites ask `AnswerCache.get(key, compute)` and a rerun reads them back instead of recomputing.

- the key is a JSON-able mapping; the caller puts in it everything the answer depends on (the
  engine's code digest, the weights' sha256, torch's version, the arguments);
- an entry is ``<root>/<sha[:2]>/<sha>.pt``, written atomically (temporary file + rename) with
  `torch.save` and read with ``torch.load(weights_only=True)`` (tensors, dicts, lists, tuples and
  plain values only: nothing in a cache file can run code);
- an entry is trusted only if the key stored in it is the key asked for, byte for byte; an entry
  that cannot be read or does not match is recomputed and rewritten, never used;
- `enabled=False` (``--no-cache``) computes every answer afresh and writes nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def canonical(key: Mapping[str, Any]) -> str:
    """The key as one canonical JSON text (sorted keys, tuples as lists)."""
    return json.dumps(key, sort_keys=True, separators=(",", ":"), default=str)


class AnswerCache:
    """Deterministic answers on disk under `root` (see the module docstring)."""

    def __init__(self, root: Path | None, enabled: bool = True):
        self.root = Path(root) if root is not None else None
        self.enabled = enabled and root is not None
        self.hits = self.misses = 0

    def path(self, text: str) -> Path:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        assert self.root is not None
        return self.root / digest[:2] / f"{digest}.pt"

    def get(self, key: Mapping[str, Any], compute: Callable[[], T]) -> T:
        """The stored answer for `key`, else `compute()` (stored for next time)."""
        if not self.enabled:
            return compute()
        import torch

        text = canonical(key)
        path = self.path(text)
        if path.is_file():
            try:
                entry = torch.load(path, weights_only=True)
                if isinstance(entry, dict) and entry.get("key") == text:
                    self.hits += 1
                    return entry["value"]
            except Exception:  # noqa: BLE001 - any unreadable entry is recomputed, never trusted
                pass
        self.misses += 1
        value = compute()
        self._write(path, {"key": text, "value": value})
        return value

    @staticmethod
    def _write(path: Path, entry: dict[str, Any]) -> None:
        import torch

        with contextlib.suppress(OSError):  # a cache that cannot be written costs time, not correctness
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as handle:
                    torch.save(entry, handle)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise


def default_root() -> Path:
    """$XDG_CACHE_HOME/genharness (~/.cache/genharness): shared by projects, keyed by content."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "genharness"
