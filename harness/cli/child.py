"""The pytest child of `harness check` / `harness regen`, tied to the harness process's life.

- The child runs in a process group of its own (its pytest-xdist workers with it), so a signal
  meant for the harness reaches the harness first, which stops the whole group on purpose;
- it dies with the harness, however the harness dies: the kernel sends it SIGKILL when its parent
  exits (Linux ``PR_SET_PDEATHSIG``), and a watchdog (`Guard`) - a small process in a session of
  its own, holding the read end of a pipe only the harness writes to - sees the pipe close without
  the harness's "done", kills the child's process group (workers included) and removes the
  scratch paths of the run (a regen's ``harness-regen-*`` store, a check's half-written report);
- SIGINT (Ctrl-C) or SIGTERM to the harness while the child runs: the child's group gets SIGINT
  (pytest ends its session), then SIGTERM, then SIGKILL, `STOP_GRACE_S` apart; then the
  interrupt goes on up (`harness` exits 130, its callers' cleanup runs);
- the child reads nothing from the terminal (stdin is /dev/null): no prompt of a library can wait
  for, or get, an answer.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from harness.cli.startup import raise_if_interrupted

STOP_GRACE_S = 10.0  # how long a stopped child gets after each signal (SIGINT, then SIGTERM) before the next
PR_SET_PDEATHSIG = 1
INTERRUPTS = {signal.SIGINT, signal.SIGTERM}  # held over a child's start (`run`)

WATCHDOG = r"""
import os, shutil, signal, sys
groups, paths, done = [], sys.argv[1:], False
for line in sys.stdin:  # ends when the harness closes the pipe - or dies, however it dies
    line = line.strip()
    if line == "done":
        done = True
    elif line.startswith("group "):
        groups.append(int(line.split()[1]))
if not done:
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
    for path in paths:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
"""


class Guard:
    """A watchdog for one command: if this process dies before `close`, it kills every child
    process group announced with `watch` and removes `cleanup`."""

    def __init__(self, cleanup: Sequence[Path] = ()) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", WATCHDOG, *(str(p) for p in cleanup)], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, text=True)

    def watch(self, group: int) -> None:
        self._send(f"group {group}")

    def _send(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.process.stdin is not None
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()

    def close(self, done: bool = True) -> None:
        """The command ended on its own terms (`done`): the watchdog leaves without touching
        anything; otherwise it does its work now."""
        if done:
            self._send("done")
        with contextlib.suppress(OSError, ValueError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_GRACE_S)


@contextlib.contextmanager
def guarded(cleanup: Sequence[Path] = ()) -> Iterator[Guard]:
    """A `Guard` for the block; the block's own exceptions (an interrupt) leave cleanup to the
    block's callers (they run), so the watchdog is told the command is done either way."""
    guard = Guard(cleanup)
    try:
        yield guard
    finally:
        guard.close(done=True)


def _prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _child_setup(parent: int, prctl: Any) -> Any:
    def setup() -> None:  # in the child, between fork and exec: async-signal-safe calls only
        os.setpgid(0, 0)
        # the harness held SIGINT / SIGTERM over the fork (`run`): one sent to its group before the
        # line above was the harness's (it stops this child itself) - dropped, then the defaults back
        for sig in INTERRUPTS:
            signal.signal(sig, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, INTERRUPTS)
        for sig in INTERRUPTS:
            signal.signal(sig, signal.SIG_DFL)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:  # the harness died before the line above
                os._exit(1)
    return setup


def stop(process: subprocess.Popen) -> None:
    """Stop the child's process group: SIGINT, SIGTERM, SIGKILL, `STOP_GRACE_S` apart; a second
    Ctrl-C while it waits kills the group at once (it escaped here and left the xdist workers
    running for the grace period) and then propagates."""
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
            try:
                process.wait(timeout=STOP_GRACE_S)
                break
            except subprocess.TimeoutExpired:
                continue
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # workers the controller left behind
        with contextlib.suppress(subprocess.TimeoutExpired, KeyboardInterrupt):
            process.wait(timeout=STOP_GRACE_S)  # reaped: no zombie


def _terminated(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def run(command: list[str], cwd: Path, guard: Guard | None = None) -> int:
    """Run `command` as a child tied to this process (see the module docstring); its exit code.
    KeyboardInterrupt (SIGINT, or SIGTERM while it runs) stops the child's group and propagates.
    SIGINT / SIGTERM are held from before the fork until the child is started, watched and the
    SIGTERM handler is in: one that comes meanwhile is raised inside the block that stops the child
    (before, a Ctrl-C in that window left the child's xdist workers running)."""
    raise_if_interrupted()  # a Ctrl-C a library swallowed (harness/cli/startup.py): no child is started
    main = _main_thread()
    held = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS) if main else None
    previous = None
    try:
        process = subprocess.Popen(command, cwd=cwd, stdin=subprocess.DEVNULL,
                                   preexec_fn=_child_setup(os.getpid(), _prctl()))
        if guard is not None:
            guard.watch(process.pid)
        previous = signal.signal(signal.SIGTERM, _terminated) if main else None
    except BaseException:
        _release(held)
        raise
    try:
        _release(held)  # a signal that came while held is raised here
        return process.wait()
    except BaseException:
        stop(process)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _release(held: Any) -> None:
    if held is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
