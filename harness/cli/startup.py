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


@contextlib.contextmanager
def quiet_interrupts_while_importing() -> Iterator[None]:
    if is_the_command():  # a mask inherited with SIGINT / SIGTERM blocked would make Ctrl-C wait forever
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    if not is_the_command() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    previous = signal.signal(signal.SIGINT, _exit_130)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
