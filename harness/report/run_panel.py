"""The report's Run panel in plain words: what ran (the suites, the selection), how long each
phase took and with how many workers, against which records - read from results.json's meta (the
pytest command lines `harness check` ran, harness/cli/project.py `run_phases`). The raw metadata
stays below it, behind a disclosure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.schema import RUN_ERRORS


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value after `flag` in a command line (`-k EXPR`, `-n N`), or None."""
    argv = list(argv)
    for i, arg in enumerate(argv[:-1]):
        if arg == flag:
            return argv[i + 1]
    return None


def workers(argv: Sequence[str]) -> str:
    n = flag_value(argv, "-n")
    if n is None or n == "0":
        return "1 process"
    return "one per core (-n auto)" if n == "auto" else f"{n} workers"


def seconds(value: Any) -> str:
    return f"{value:.1f} s" if isinstance(value, (int, float)) else "?"


def phase_line(phase: dict[str, Any]) -> str:
    argv = phase.get("argv") or []
    return (f"{phase.get('phase', '?')}: {seconds(phase.get('duration_s'))}, {workers(argv)}, "
            f"{phase.get('outcomes', '?')} fields")


def run_rows(meta: Any) -> list[tuple[str, str]]:
    """(label, plain text) rows: the command, the phases, the records compared and written against."""
    if not isinstance(meta, dict):
        return []
    argv = meta.get("argv") or []
    rows = []
    if argv:
        command = "pytest " + str(argv[0])
        selection = flag_value(argv, "-k")
        rows.append(("command", command + (f" -k {selection!r}" if selection else " (every test)")))
    phases = [p for p in meta.get("phases") or [] if isinstance(p, dict)]
    for phase in phases:
        rows.append(("phase", phase_line(phase)))
    if not phases and argv:
        rows.append(("workers", workers(argv)))
    if "duration_s" in meta:
        rows.append(("duration", seconds(meta["duration_s"]) + (" in all" if len(phases) > 1 else "")))
    if meta.get("env_key"):
        baseline = meta.get("baseline_key") or meta["env_key"]
        rows.append(("records", f"this env {meta['env_key']} against "
                     + ("its own records" if baseline == meta["env_key"] else f"{baseline}'s")
                     + (f" in {meta['golden_dir']}" if meta.get("golden_dir") else "")
                     + upgrade_line(meta, " - ")))
    if "golden_tests" in meta:
        rows.append(("checks", f"{meta['golden_tests']} golden tests, family-wise alpha {meta.get('alpha', '?')}"
                     + (", strict" if meta.get("strict") else "")))
    for line in meta.get("left_out") or []:  # the quick tier's and the budget plans' cases not run
        rows.append(("left out", str(line)))
    for key in (*RUN_ERRORS, "broken_tests"):
        if meta.get(key):
            rows.append((key.replace("_", " "), str(meta[key])))
    return rows


def upgrade_line(meta: dict[str, Any], sep: str = "") -> str:
    """Why the baseline is another env's when none was named: this env had no records of its own
    (harness/store/baseline.py) - "" otherwise."""
    chosen = meta.get("upgrade_baseline")
    if not isinstance(chosen, dict) or not chosen.get("key"):
        return ""
    return (f"{sep}compared with {chosen['key']} ({chosen.get('why', '')}): this env has no records of its own; "
            "`--baseline KEY` to choose")
