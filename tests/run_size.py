"""m of a default `pytest suites` run - the number of golden tests, counted by collecting the
suites (harness/plugin/selection.py `count_golden_tests`; never kept as a constant) - and the
per-test alpha alpha / m that the bias design, its simulated-bug controls and the sampling-fault
tests are checked at. Adding a golden test to a suite changes it here with no edit."""

from __future__ import annotations

import functools
from pathlib import Path

from harness.checking import stats
from harness.plugin.selection import count_golden_tests
from harness.settings.config import load_config

REPO = Path(__file__).resolve().parents[1]


@functools.cache
def default_run_tests() -> int:
    return count_golden_tests(REPO / "suites", REPO)


def default_run_alpha() -> float:
    """The per-test alpha of a default run: [tool.harness] alpha / m."""
    return stats.per_test_alpha(load_config(REPO).alpha, default_run_tests())
