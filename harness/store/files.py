"""Durable file operations for the golden store: a write that readers see whole or not at all,
files with the usual permissions, a copy that is on disk before it is used, and an atomic swap of
two directories where the platform has one. Plain functions; harness/store/records.py composes them.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import sys
import tempfile
from pathlib import Path


def _file_mode() -> int:
    """The mode a plain ``open(path, "w")`` would give a new file: 0o666 & ~umask."""
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o666 & ~umask


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # make renames in `directory` durable
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` so that readers only ever see a complete file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _file_mode())  # mkstemp creates 0600
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_dir(path.parent)


def write_text(path: Path, text: str) -> None:
    """`text` written atomically as UTF-8; a lone surrogate (which UTF-8 cannot hold) becomes U+FFFD
    rather than failing the write."""
    from harness.store.reading import clean_text

    _atomic_write_text(Path(path), clean_text(text))


def _copy_durable(src: str, dst: str) -> str:
    """Copy a file's bytes (new file, usual mode) and fsync it."""
    with open(src, "rb") as source, open(dst, "wb") as target:
        shutil.copyfileobj(source, target)
        target.flush()
        os.fsync(target.fileno())
    return dst


def _rename_exchange(a: Path, b: Path) -> bool:
    """Atomically swap two existing paths (Linux renameat2 RENAME_EXCHANGE); False when the
    platform or filesystem cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))
