"""The `harness` command line (also `python -m harness`). One module per command:

    harness check   [--baseline KEY] [-n N] [--strict] [--inject-fault NAME] [--model PATH [--assistant PATH]] [-- PYTEST ARGS]
    harness regen   [--yes | --dry-run] [-n N] [--model PATH [--assistant PATH]] [-- PYTEST ARGS]
    harness init    [--model PATH [--assistant PATH]] [--name NAME] | --ci github [--transformers V ...] [--torch V ...] [--dtype D ...]
    harness compare A B [--out DIR] [--claims FILE]
    harness envs | merge DIR... [--replace] | matrix --transformers V1 V2 ... [--torch V] [-n N] [--out DIR]
    harness faults [--only NAME ...] [-j N] [--out FILE] [--list]
    harness report RESULTS_JSON [--out DIR]
    harness repro  SUITE/CASE[:FIELD] | N [--baseline KEY] [--out DIR] [--run] [--python EXE]
    harness bisect --transformers GOOD BAD | --torch GOOD BAD  SUITE/CASE[:FIELD] | N [--envdir DIR] [--out DIR]

`check` and `regen` turn their flags into one `RunSettings` (harness/settings/run.py) and hand it
to pytest as flags; settings come from ``[tool.harness]`` in the project's pyproject.toml (found
upward from the current directory, or ``--root``); flags win. Exit codes: harness/cli/common.py.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from harness.cli.startup import quiet_interrupts_while_importing, raise_if_interrupted

with quiet_interrupts_while_importing():  # Ctrl-C before main() runs: exit 130, no traceback
    from harness.checking.claims import ClaimsError
    from harness.cli import bisect, check, compare, envs, faults, init, matrix, merge, regen, report, repro
    from harness.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, common_parser, error
    from harness.cli.project import UsageError
    from harness.report import ResultsFileError
    from harness.schema import RecordError
    from harness.settings.config import ConfigError
    from harness.settings.run import OWNED_OPTIONS, owned_option
    from harness.store.reading import InputError

COMMANDS = (check, regen, compare, envs, merge, matrix, bisect, faults, init, report, repro)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness", description="Upgrade validation harness for LLM text generation.",
                                     epilog="exit codes: 0 pass (or allowed changes), 1 regression, 2 usage or input error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = common_parser()
    for command in COMMANDS:
        command.add_parser(sub, common)
    parser.set_defaults(subcommands=sub.choices)
    return parser


def unknown_arguments(args: argparse.Namespace, unknown: Sequence[str]) -> None:
    """A flag the subcommand does not have: its own usage and error (exit 2), with the nearest flag
    it does have - never the top-level usage, which does not show the subcommand's flags."""
    import difflib

    command = args.subcommands[args.command]
    flags = [s for action in command._actions for s in action.option_strings]
    near = next((difflib.get_close_matches(u.split("=", 1)[0], flags, n=1) for u in unknown if u.startswith("-")), [])
    command.error(f"unrecognized arguments: {' '.join(unknown)}" + (f" (did you mean {near[0]}?)" if near else ""))


def owned_pytest_args(extra: Sequence[str]) -> str:
    """Why the pytest arguments this run would add (after --, then PYTEST_ADDOPTS) set what the
    harness owns ('' when they do not). The plugin checks the list pytest parses, ini addopts
    included (harness/plugin/options.py `check_front`)."""
    import os
    import shlex

    try:
        addopts = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError as exc:
        return f"PYTEST_ADDOPTS: {exc}"
    for where, items in (("after --", extra), ("in PYTEST_ADDOPTS", addopts)):
        item = owned_option(items)
        if item is not None:
            owned = OWNED_OPTIONS.get(item.split("=", 1)[0])
            return f"pytest argument {item!r} {where} is set by harness itself" + (f"; use {owned}" if owned else "")
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; exit codes: harness/cli/common.py. Ctrl-C at any moment is exit 130."""
    try:
        rc = _main(argv)
        if rc != EXIT_INTERRUPTED:  # (already said: "interrupted", once)
            raise_if_interrupted()  # a Ctrl-C that came inside an import, or that a library swallowed
        return rc
    except KeyboardInterrupt:  # while parsing, or between a command's steps
        error("interrupted")
        return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            unknown_arguments(args, unknown)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2, message already printed)
        return int(exc.code or 0)
    if extra and not getattr(args, "passthrough", False):
        error(f"{args.command} takes no pytest arguments (got: -- {' '.join(extra)})")
        return EXIT_USAGE
    if getattr(args, "passthrough", False):
        problem = owned_pytest_args(extra)
        if problem:
            error(problem)
            return EXIT_USAGE
    try:
        return args.func(args, extra)
    except (UsageError, ConfigError, RecordError, ResultsFileError, ClaimsError, InputError) as exc:
        error(str(exc))
        return EXIT_USAGE
    except OSError as exc:  # the file system said no (full disk, a path that is a file): one line, not a traceback
        where = f" ({exc.filename})" if exc.filename else ""
        error(f"{exc.strerror or exc}{where}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        error("interrupted")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
