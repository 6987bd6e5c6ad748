"""Ctrl-C while the `harness` command is still importing (before `main` can catch it): the
process exits 130 at once - nothing has started, so nothing needs undoing - instead of Python's
KeyboardInterrupt traceback and death by SIGINT. Only for the command's own process (its script or
`python -m harness`), in the main thread; anything else importing harness.cli keeps its handler."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

EXIT_INTERRUPTED = 130  # as harness/cli/common.py: 128 + SIGINT


def _exit_130(signum: int, frame: object) -> None:
    os.write(2, b"harness: error: interrupted\n")  # as `main` says it (harness/cli/common.py `error`)
    os._exit(EXIT_INTERRUPTED)


def is_the_command() -> bool:
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name in ("harness", "__main__.py") and threading.current_thread() is threading.main_thread()


_interrupted = False  # a Ctrl-C reached this process (whatever became of its KeyboardInterrupt)


def _remembered_interrupt(signum: int, frame: object) -> None:
    """The command's SIGINT handler after its imports: Python's KeyboardInterrupt, remembered. A
    KeyboardInterrupt raised inside a library's code can be swallowed there (measured: SIGINT 0.8 s
    into `harness check` under load landed in the preflight's `import torch`, and the harness went on
    to start pytest and ran on for the child's whole run), and one raised inside an import leaves
    the module half-made; so inside an import it is only remembered, and `raise_if_interrupted`
    raises it where the command starts a child and where the command returns."""
    global _interrupted
    _interrupted = True
    if not _importing(frame):  # inside an import the exception would break the module half-made
        raise KeyboardInterrupt  # (numpy: "cannot load module more than once"); a checkpoint raises it


def _importing(frame: object) -> bool:
    """Whether the interrupted code runs inside an import (importlib's frames are on the stack)."""
    f = frame
    while f is not None:
        if f.f_code.co_filename.startswith("<frozen importlib"):  # type: ignore[attr-defined]
            return True
        f = f.f_back  # type: ignore[attr-defined]
    return False


def raise_if_interrupted() -> None:
    """KeyboardInterrupt if a Ctrl-C reached this process and was swallowed on the way."""
    if _interrupted:
        raise KeyboardInterrupt


@contextlib.contextmanager
def quiet_interrupts_while_importing() -> Iterator[None]:
    if is_the_command():  # a mask inherited with SIGINT / SIGTERM blocked would make Ctrl-C wait forever
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    if not is_the_command() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    signal.signal(signal.SIGINT, _exit_130)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, _remembered_interrupt)
