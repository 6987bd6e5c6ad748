"""The plugin's pytest options: one per `RunSettings` field (harness/settings/run.py `OPTIONS`), so
`pytest suites` and `harness check` take the same settings and neither mirrors the other by hand.
Every option defaults to None ("not given"): the defaults live in `RunSettings`.
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.settings.run import (
    FRONT_INI,
    NO_TEST_MODES,
    OPTIONS,
    OWNED_OPTIONS,
    RunSettings,
    clobbers,
    kept_paths,
    no_test_mode,
    owned_option,
)

GROUP = "harness"
TERMINAL_SUMMARY = "harness_terminal_summary"
ALIASES = {"strict": ("--strict",)}  # pytest's own --strict also makes a run strict (read from ini/option)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup(GROUP, "golden records of the upgrade validation harness")
    for option in OPTIONS:
        _add(group, option.pytest, **option.parser_kwargs())
    parser.addini(FRONT_INI, default="", help="set by `harness check` / `regen` for the pytest run they start "
                  "(the options they own are then refused in PYTEST_ADDOPTS and ini addopts)")
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


# the pytest option dests of `NO_TEST_MODES` (what pytest parsed, whichever spelling set them)
NO_TEST_DESTS = {"collectonly": "--collect-only", "markers": "--markers", "setuponly": "--setup-only",
                 "setupplan": "--setup-plan", "showfixtures": "--fixtures", "show_fixtures_per_test": "--fixtures-per-test"}
assert set(NO_TEST_DESTS.values()) <= set(NO_TEST_MODES)


def no_test_run(config: pytest.Config) -> str | None:
    """The mode (as a flag) in which this pytest run runs no test, if any."""
    return next((flag for dest, flag in NO_TEST_DESTS.items() if getattr(config.option, dest, False)), None)


def added_args(config: pytest.Config) -> list[tuple[str, list[str]]]:
    """The arguments pytest prepended to the command line: ini addopts and PYTEST_ADDOPTS."""
    import os
    import shlex

    return [("[pytest] addopts", list(config.getini("addopts"))),
            ("PYTEST_ADDOPTS", shlex.split(os.environ.get("PYTEST_ADDOPTS", "")))]


def check_front(config: pytest.Config, regen: bool, ci: bool) -> None:
    """A run started by `harness check` / `regen` (ini `harness_front = cli`): none of the options the
    harness owns comes from ini addopts or PYTEST_ADDOPTS (the harness set them on the command line
    itself), and a mode that runs no test is refused under CI or for a regen - such a run checks
    nothing, so it can never end green in CI, and a regen of nothing would remove every record."""
    if config.getini(FRONT_INI) != "cli":
        return
    for where, items in added_args(config):
        item = owned_option(items)
        if item is not None:
            owned = OWNED_OPTIONS.get(item.split("=", 1)[0])
            raise pytest.UsageError(f"pytest argument {item!r} in {where} is set by harness itself"
                                    + (f"; use {owned}" if owned else ""))
    mode = no_test_run(config) or no_test_mode([a for _, items in added_args(config) for a in items])
    if mode and (ci or regen):
        raise pytest.UsageError(f"not checked: pytest {mode} runs no test" +
                                (" - a regen of nothing would remove every record" if regen else
                                 " (CI: a check that compared nothing fails)"))


# where pytest keeps the path of each option that empties or writes one (harness/settings/run.py
# PATH_OPTIONS): pytest's own and its common plugins' dests (a plugin that is not installed: absent)
PATH_DESTS = {"basetemp": "--basetemp", "xmlpath": "--junitxml", "resultlog": "--result-log", "report_log": "--report-log",
              "htmlpath": "--html", "debug": "--debug"}


def check_paths(config: pytest.Config, settings: RunSettings) -> None:
    """Refuse a run whose pytest temp, cache or output path - as pytest parsed it, from the command
    line, PYTEST_ADDOPTS or ini addopts - is, holds or lies in the golden store or the models, or is
    or holds the reports directory: --basetemp is emptied (`--basetemp=golden/records` deleted every
    record), the cache written and emptied by --cache-clear, a report file written over."""
    from pathlib import Path

    given: list[tuple[str, Path]] = []
    for dest, flag in PATH_DESTS.items():
        value = getattr(config.option, dest, None)
        if isinstance(value, (str, Path)) and str(value):
            given.append((flag, Path(config.invocation_params.dir) / Path(value).expanduser()))
    try:
        cache_dir = str(config.getini("cache_dir") or "")
    except ValueError:  # the cache provider is off (-p no:cacheprovider): no cache is written
        cache_dir = ""
    if cache_dir and cache_dir != ".pytest_cache":  # the default lives in the rootdir, next to what the harness keeps
        given.append(("cache_dir", config.rootpath / Path(cache_dir).expanduser()))
    for flag, target in given:
        for what, path, inside_too in kept_paths(settings.config, settings.golden_dir):
            if clobbers(target, path, inside_too):
                raise pytest.UsageError(f"pytest {flag} points at {target.resolve()}, which is or holds {what} "
                                        f"({path.resolve()}): pytest would empty or overwrite it; point it elsewhere")
