"""How far a long run is (issue 42): a plain line per suite on the controller - tests done / total,
elapsed, an estimate of what is left - for the suite that just reported and for the whole run:

    harness: progress: outputs 2/3 tests, 41 s, ~21 s left; run 12/31 tests, 3m05s, ~4m50s left

Registered for `harness check` / `regen` and for a run on models of yours. Plain lines (no cursor control), so a terminal and a CI log show the same thing. A line is written
when a suite finishes, and otherwise at most every `EVERY` seconds; a run without models of
yours (the zoo's, about a minute) starts writing only after `QUIET_FOR` seconds. The estimates are rates, not promises: what is left of a suite = its elapsed wall
time / tests done x tests left; of the run = the run's elapsed / done x left (wall time, so the
workers' parallelism is in it). Under pytest-xdist the totals come from the first worker's
collection (every worker collects the same items).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

EVERY = 20.0  # seconds between two lines of a suite still running
SUITE_DONE_GAP = 2.0  # a finished suite's line waits at least this long after the previous line
QUIET_FOR = 60.0  # a run without models of yours (the zoo's, ~1 min) prints nothing before this


def suite_of(nodeid: str) -> str:
    """'suites/test_outputs.py::test_generate[...]' -> 'outputs'."""
    module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
    name = module[:-3] if module.endswith(".py") else module
    return name[5:] if name.startswith("test_") else name


def duration(seconds: float) -> str:
    """41 -> '41 s', 185 -> '3m05s', 3725 -> '1h02m'."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def left(elapsed: float, done: int, total: int) -> str:
    """The estimate of what is left at the rate so far ('' before the first test is done)."""
    if done <= 0 or total <= done:
        return ""
    return f", ~{duration(elapsed / done * (total - done))} left"


def line(suite: str, done: int, total: int, suite_elapsed: float, run_done: int, run_total: int,
         run_elapsed: float) -> str:
    """The progress line (see the module docstring)."""
    return (f"harness: progress: {suite} {done}/{total} tests, {duration(suite_elapsed)}"
            f"{left(suite_elapsed, done, total)}; run {run_done}/{run_total} tests, {duration(run_elapsed)}"
            f"{left(run_elapsed, run_done, run_total)}")


class Progress:
    """The pytest plugin that writes the lines (registered on the controller only)."""

    def __init__(self, config: pytest.Config, long_work: bool = True, clock: Any = time.monotonic):
        self.config, self.clock = config, clock
        self.quiet_for = 0.0 if long_work else QUIET_FOR
        self.start = clock()
        self.totals: Counter[str] = Counter()
        self.done: Counter[str] = Counter()
        self.first: dict[str, float] = {}
        self.last_line = -EVERY

    def _collected(self, nodeids: list[str]) -> None:
        if not self.totals:
            self.totals = Counter(suite_of(n) for n in nodeids)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._collected([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self._collected(list(ids))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not (report.when == "call" or (report.when == "setup" and not report.passed)):
            return
        suite, now = suite_of(report.nodeid), self.clock()
        self.first.setdefault(suite, now - (report.duration or 0.0))
        self.done[suite] += 1
        finished = self.done[suite] >= self.totals.get(suite, 0)
        since = now - self.last_line
        if now - self.start < self.quiet_for or not (since >= EVERY or (finished and since >= SUITE_DONE_GAP)):
            return
        self.last_line = now
        text = line(suite, self.done[suite], max(self.totals.get(suite, 0), self.done[suite]), now - self.first[suite],
                    sum(self.done.values()), max(sum(self.totals.values()), sum(self.done.values())), now - self.start)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            writer = getattr(reporter, "_tw", None)  # -q's progress dots leave the line open
            if writer is not None and getattr(writer, "width_of_current_line", 0):
                reporter.write("\n")
            reporter.write_line(text)
