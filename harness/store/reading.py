"""The one way the harness reads a JSON file it did not just write: a golden record, a record set
to merge, a results.json. Every input is hostile until read; `read_json` states its limits and
refuses, in one line naming the file and the limit (`InputError`), whatever breaks one:

- regular files only: a FIFO (which would block the read forever), a device (``/dev/zero``: an
  endless read), a directory or a socket is refused before a byte is read (opened non-blocking,
  checked with fstat on the opened file, so it cannot be swapped in between);
- a symlink is followed only when it stays inside `root` (the tree being read, e.g. a merge
  input); one pointing out of it is refused;
- size: at most `max_bytes` (default `MAX_RECORD_BYTES`; a results.json may be larger,
  `MAX_RESULTS_BYTES`) - one more byte is read to know, never the whole of an oversized file;
- text: valid UTF-8 (a BOM is tolerated);
- JSON, strictly (RFC 8259): no NaN / Infinity, no duplicate key in an object, nesting at most
  `max_depth` (`MAX_DEPTH`; checked on the raw text before parsing, so a 100k-deep input costs a
  linear scan, never a `RecursionError`);
- strings: a lone surrogate (``"\\ud800"``: valid JSON, not valid Unicode) becomes U+FFFD, so
  nothing read can fail to be written, printed or rendered later (`clean_text`).

Schema checks belong to the noun read (`schema.Record.from_json`, `report.load`); they run on
what this returns.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

MAX_RECORD_BYTES = 16 * 1024 * 1024  # a record of the zoo is < 30 kB; a user model's a few 100 kB
MAX_RESULTS_BYTES = 256 * 1024 * 1024  # a whole run's outcomes (the zoo's: ~0.5 MB)
MAX_TOML_BYTES = 1024 * 1024  # a pyproject.toml (this project's: ~10 kB)
MAX_DEPTH = 64  # nesting of objects and arrays (records: < 10, results.json: < 15)

_SURROGATE = re.compile("[\ud800-\udfff]")
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKETS = re.compile(r"[\[\]{}]")


class InputError(ValueError):
    """An input file the harness refuses; the message names the file and the limit it broke."""

    def __init__(self, path: Path | str, problem: str) -> None:
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{path}: {problem}")


def clean_text(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (a Python str holds a surrogate only
    unpaired: a pair decodes to one code point)."""
    return _SURROGATE.sub("\ufffd", text)


def clean(value: Any) -> Any:
    """`value` (parsed JSON) with `clean_text` applied to every string, keys included."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(k): clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value


def depth(text: str) -> int:
    """The deepest nesting of objects and arrays in JSON `text` (brackets inside strings ignored)."""
    deepest = level = 0
    for match in _BRACKETS.finditer(_STRINGS.sub('""', text)):
        if match.group() in "[{":
            level += 1
            deepest = max(deepest, level)
        else:
            level -= 1
    return deepest


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


def read_bytes(path: Path | str, *, max_bytes: int = MAX_RECORD_BYTES, root: Path | str | None = None) -> bytes:
    """The bytes of a regular file of at most `max_bytes` (inside `root` once symlinks are
    resolved, when given); `InputError` otherwise."""
    path = Path(path)
    if root is not None:
        target = path.resolve()
        if not _inside(target, Path(root).resolve()):
            raise InputError(path, f"a symlink to {target}, outside {root}; only files inside it are read")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except OSError as exc:
        raise InputError(path, f"cannot be opened: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(path, f"not a regular file ({_kind(info.st_mode)}); only regular files are read")
        if info.st_size > max_bytes:
            raise InputError(path, f"{info.st_size} bytes, over the limit of {max_bytes} bytes")
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise InputError(path, f"over the limit of {max_bytes} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(path, f"cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (strict JSON has no NaN or Infinity)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: Python's float() overflows to infinity without a word
        raise ValueError(f"{clean_text(text)[:40]} overflows a float (strict JSON has no Infinity)")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {clean_text(key)[:80]!r} in one object")
        out[key] = value
    return out


def parse_json(text: str, path: Path | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """Strict JSON (no NaN / Infinity, nor a number that overflows to one, no duplicate keys, at most `max_depth` deep), strings cleaned."""
    deepest = depth(text)
    if deepest > max_depth:
        raise InputError(path, f"nested {deepest} deep, over the limit of {max_depth}")
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float,
                          object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except ValueError as exc:
        raise InputError(path, f"not valid JSON: {exc}") from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise InputError(path, f"nested over the limit of {max_depth}") from None
    return clean(data)


def read_json(path: Path | str, *, max_bytes: int = MAX_RECORD_BYTES, max_depth: int = MAX_DEPTH,
              root: Path | str | None = None) -> Any:
    """A JSON input read within the limits above; `InputError` (one line: the file and the limit)."""
    raw = read_bytes(path, max_bytes=max_bytes, root=root)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not valid UTF-8 (byte {exc.start})") from None
    return parse_json(text, path, max_depth=max_depth)


def read_toml(path: Path | str, *, max_bytes: int = MAX_TOML_BYTES) -> dict[str, Any]:
    """A TOML file (pyproject.toml) read within the same limits: a regular file (no FIFO, no
    device), at most `max_bytes`, UTF-8, valid TOML nested at most `MAX_DEPTH`; `InputError`."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - python 3.10
        import tomli as tomllib

    raw = read_bytes(path, max_bytes=max_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not valid UTF-8 (byte {exc.start})") from None
    deepest = depth(text)  # brackets of arrays and inline tables; a string's are not counted
    if deepest > MAX_DEPTH:
        raise InputError(path, f"nested {deepest} deep, over the limit of {MAX_DEPTH}")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(path, f"not valid TOML: {exc}") from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise InputError(path, f"nested over the limit of {MAX_DEPTH}") from None
