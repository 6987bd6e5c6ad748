"""The plugin's pytest options: one per `RunSettings` field (harness/settings/run.py `OPTIONS`), so
`pytest suites` and `harness check` take the same settings and neither mirrors the other by hand.
Every option defaults to None ("not given"): the defaults live in `RunSettings`.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.settings.run import OPTIONS

GROUP = "harness"
TERMINAL_SUMMARY = "harness_terminal_summary"
ALIASES = {"strict": ("--strict",)}  # pytest's own --strict also makes a run strict (read from ini/option)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(GROUP, "golden records of the upgrade validation harness")
    for option in OPTIONS:
        _add(group, option.pytest, **option.parser_kwargs())
    parser.addini(TERMINAL_SUMMARY, type="bool", default=True,
                  help="print the golden-record summary at the end of a pytest run (`harness check` prints its "
                       "own and sets this to false: the summary appears once)")


def _add(group: Any, *names: str, **kwargs: Any) -> None:
    """addoption that tolerates another plugin owning the same flag (e.g. pytest-regressions'
    --force-regen): the value is then read under that plugin's dest, see `value`."""
    try:
        group.addoption(*names, **kwargs)
    except ValueError:
        pass
