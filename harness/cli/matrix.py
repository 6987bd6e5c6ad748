"""`harness matrix --transformers V1 V2 ... [--torch V] [-n N] [--envdir DIR] [--out DIR]`: record each version
in its own nox session (noxfile.py, `suites-<version>`), then render the chain of upgrade reports
V1 -> V2 -> ... and an index page linking them.

Per version (a *cell*): ``nox -s suites-<V>`` in a fresh (reused when cached) virtualenv with that
transformers, torch pinned (``--torch V``: the cells' venvs under ``<envdir>/torch<V>/``), this package; it runs ``pytest suites --force-regen`` and records its
own env key into the store. A cell that fails to install or to run is reported (its log's tail on
the index page) and the matrix goes on; the chain links the cells that recorded. Output:

    DIR/index.html                     cells (version, env key, status, time) and the chain
    DIR/<a>-to-<b>/{index.html,results.json,summary.md}   one upgrade report per link
    DIR/cells/<V>/{nox.log,results.json}                  each cell's log and run results
    DIR/<a>-to-<b>/paired/                               --pair-seconds S: the link's paired latency
                                                         (b's venv against a's, call by call)
"""

from __future__ import annotations

import argparse
import html
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.checking.envs import compare_envs
from harness.checking.findings import Findings
from harness.cli.project import Project, UsageError, open_project
from harness.report import ResultsFileError, load_results
from harness.report.output import write_file, write_report
from harness.report.terminal import timestamped_dir


@dataclass
class Cell:
    version: str
    status: str = "pending"  # recorded | recorded, tests failed | failed
    env_key: str = ""
    interpreter: str = ""  # the cell's python, from its results.json (what --pair-seconds pairs)
    seconds: float = 0.0
    error: str = ""  # the log's tail when the cell failed

    @property
    def reason(self) -> str:
        """The line of the error that says why (pip's first ERROR line when there is one)."""
        lines = self.error.splitlines()
        return next((line for line in lines if line.startswith("ERROR")), lines[-1] if lines else "")


@dataclass
class Link:
    a: Cell
    b: Cell
    directory: str
    verdict: str
    headline: str
    paired: str = ""  # --pair-seconds: the paired latency verdict of b against a ("" unpaired)


def nox_command(version: str, envdir: str | None = None, posargs: Sequence[str] = ()) -> list[str]:
    command = [sys.executable, "-m", "nox", "-s", f"suites-{version}"]
    if envdir:
        command += ["--envdir", envdir]  # the cells' virtualenvs (default: nox's .nox/ in the project)
    return command + (["--", *posargs] if posargs else [])


def torch_envdir(envdir: str | None, torch: str) -> str:
    """Where the cells of one torch version keep their virtualenvs: ``<envdir or .nox>/torch<V>`` -
    nox names a venv by its session (``suites-<transformers>``), so without it two torch versions of
    one transformers would share a venv and reinstall torch (3 GB with its CUDA dependencies) in turn."""
    return str(Path(envdir or ".nox") / f"torch{torch}")


def run_nox(cell: Cell, project: Project, out: Path, args: argparse.Namespace, versions: Sequence[str]) -> int:
    """Run one cell's nox session; its output goes to DIR/cells/<V>/nox.log. `harness bisect` adds
    to `args` the session's posargs (the case filter), its own environment (HARNESS_BASELINE,
    HARNESS_RUNS, another store) and where the virtualenvs go (`envdir`)."""
    cell_dir = out / "cells" / cell.version
    env = {**os.environ, "HARNESS_MATRIX_VERSIONS": " ".join(versions),
           "HARNESS_GOLDEN_DIR": str(project.store.root.resolve()),
           "HARNESS_RESULTS": str((cell_dir / "results.json").resolve())}
    if args.torch:
        env["HARNESS_TORCH"] = args.torch
    if args.workers:
        env["HARNESS_WORKERS"] = args.workers
    env.update(getattr(args, "cell_env", None) or {})
    command = nox_command(cell.version, getattr(args, "envdir", None), getattr(args, "posargs", ()))
    with open(cell_dir / "nox.log", "w", encoding="utf-8") as log:
        return subprocess.run(command, cwd=project.root, env=env, stdout=log, stderr=subprocess.STDOUT,
                              check=False).returncode


Runner = Callable[[Cell, Project, Path, argparse.Namespace, Sequence[str]], int]


def record_cell(cell: Cell, project: Project, out: Path, args: argparse.Namespace, versions: Sequence[str],
                runner: Runner) -> None:
    cell_dir = out / "cells" / cell.version
    cell_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    rc = runner(cell, project, out, args, versions)
    cell.seconds = time.monotonic() - start
    try:
        meta = load_results(cell_dir / "results.json").meta
        cell.env_key, cell.interpreter = str(meta.get("env_key", "")), str(meta.get("interpreter", ""))
    except ResultsFileError:
        cell.env_key = ""
    if cell.env_key:
        cell.status = "recorded" if rc == 0 else "recorded, tests failed"
        return
    cell.status = "failed"
    log = cell_dir / "nox.log"
    tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:] if log.exists() else []
    cell.error = "\n".join(tail) or f"nox exited {rc} and wrote no log"


def link_report(project: Project, a: Cell, b: Cell, out: Path) -> Link:
    name = f"{a.version}-to-{b.version}"
    results = compare_envs(project.store, project.config, a.env_key, b.env_key)
    findings = Findings.of(results)  # once: the link's page, its summary.md and the index's line
    write_report(results, out / name, findings, junit=False)
    return Link(a, b, name, results.verdict, findings.headline(results.verdict))


def index_html(cells: Sequence[Cell], links: Sequence[Link], torch: str) -> str:
    e = html.escape
    rows = "".join(
        f"<tr class='{e(c.status.split(',')[0])}'><td>{e(c.version)}</td><td><code>{e(c.env_key or '-')}</code></td>"
        f"<td>{e(c.status)}</td><td>{c.seconds:.0f} s</td><td>{'<pre>' + e(c.error) + '</pre>' if c.error else ''}"
        f"</td></tr>" for c in cells)
    chain = "".join(
        f"<li><a href='{e(k.directory)}/index.html'>{e(k.a.version)} &rarr; {e(k.b.version)}</a>: verdict "
        f"<b>{e(k.verdict)}</b>, {e(k.headline)} (<a href='{e(k.directory)}/summary.md'>summary.md</a>)"
        + (f"; paired latency: <a href='{e(k.directory)}/paired/index.html'>{e(k.paired)}</a>" if k.paired else "")
        + "</li>" for k in links) or "<li>fewer than two cells recorded: no upgrade report</li>"
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>transformers upgrade matrix</title>"
            "<style>body{font-family:sans-serif;margin:2em}td,th{border:1px solid #ccc;padding:.3em .6em;"
            "vertical-align:top}table{border-collapse:collapse}.failed{background:#fde8e8}pre{margin:0;"
            "white-space:pre-wrap;max-width:60em}</style></head><body>"
            f"<h1>transformers upgrade matrix</h1><p>torch {e(torch or 'as in constraints.txt')}, CPU; one nox session "
            "per version (noxfile.py)</p><h2>Upgrade chain</h2><ol>" + chain + "</ol><h2>Cells</h2><table><tr><th>"
            "transformers</th><th>env key</th><th>status</th><th>time</th><th>error</th></tr>" + rows +
            "</table></body></html>\n")


def matrix(project: Project, args: argparse.Namespace, runner: Runner = run_nox) -> tuple[list[Cell], list[Link], Path]:
    versions = list(dict.fromkeys(args.transformers))
    if args.torch:  # another torch: another venv (`torch_envdir`)
        args = argparse.Namespace(**{**vars(args), "envdir": torch_envdir(getattr(args, "envdir", None), args.torch)})
    out = Path(args.out) if args.out else timestamped_dir(project.reports_dir / "matrix")
    out.mkdir(parents=True, exist_ok=True)
    cells = [Cell(v) for v in versions]
    for i, cell in enumerate(cells, 1):
        print(f"harness: matrix [{i}/{len(cells)}] transformers {cell.version}: nox -s suites-{cell.version} ...",
              flush=True)
        record_cell(cell, project, out, args, versions, runner)
        print(f"harness: matrix [{i}/{len(cells)}] transformers {cell.version}: {cell.status} "
              f"({cell.seconds:.0f} s){' as ' + cell.env_key if cell.env_key else ''}", flush=True)
        if cell.error:
            print("  " + cell.reason, flush=True)
    recorded = [c for c in cells if c.env_key]
    links = [link_report(project, a, b, out) for a, b in zip(recorded, recorded[1:], strict=False)]
    if getattr(args, "pair_seconds", None):
        for link in links:
            link.paired = pair_link(project, link, out, args)
    write_file(out / "index.html", index_html(cells, links, args.torch or ""))
    return cells, links, out


def pair_link(project: Project, link: Link, out: Path, args: argparse.Namespace) -> str:
    """Paired latency of the link's cells (harness/cli/paired.py `pair_envs`: b's python the new side,
    a's the old, in one time window), its report under DIR/<a>-to-<b>/paired/; the verdict words."""
    from harness.cli.paired import fields_of, pair_envs, seconds_of

    missing = [c.version for c in (link.a, link.b) if not c.interpreter or not Path(c.interpreter).exists()]
    if missing:
        return f"not paired: no interpreter recorded for {', '.join(missing)}"
    print(f"harness: matrix pairs {link.a.version} -> {link.b.version} ({args.pair_seconds} s)", flush=True)
    regressions = pair_envs(project, link.b.interpreter, link.a.interpreter, fields_of(args.pair_fields),
                            (), seconds_of(args.pair_seconds), 1, out / link.directory / "paired")
    return f"regression ({regressions})" if regressions else "pass"


# a release version as PyPI spells transformers': 4.57.6, 5.0.0, 5.0.0rc1 (a major of 4 or later - the
# versions whose generate() the harness knows; `0.0.0`, a word or a path is no version to build a venv for)
VERSION = re.compile(r"(?:[4-9]|[1-9]\d+)\.\d{1,3}\.\d{1,3}(?:(?:a|b|rc|\.post|\.dev)\d{1,3})?")


def check_versions(versions: Sequence[str], torch: str | None) -> None:
    """Refuse, before any venv is built, a version that is not one (also a path: a cell's
    version names its directory under --out, so a path would write outside it)."""
    for version in versions:
        if not VERSION.fullmatch(version):
            raise UsageError(f"--transformers {version!r}: not a transformers release version (e.g. 5.24.0)")
    if torch is not None and not re.fullmatch(r"\d{1,3}\.\d{1,3}(?:\.\d{1,3})?", torch):
        raise UsageError(f"--torch {torch!r}: not a torch release version (e.g. 2.13.0)")


def cmd_matrix(args: argparse.Namespace, extra: Sequence[str]) -> int:
    check_versions(args.transformers, args.torch)
    project = open_project(args)
    if not project.store.root.is_dir():
        raise UsageError(f"{project.store.root} does not exist (the store the cells record into)")
    cells, links, out = matrix(project, args)
    for link in links:
        paired = f"; paired latency {link.paired}" if link.paired else ""
        print(f"  {link.a.version} -> {link.b.version}: {link.verdict}; {link.headline}{paired}")
    print(f"\nmatrix: {out / 'index.html'}")
    return 1 if any(c.status == "failed" for c in cells) else 0


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("matrix", parents=[common], help="record several transformers versions (nox) and chain "
                       "their upgrade reports", description="One nox session per transformers version, then the "
                       "chain of upgrade reports V1 -> V2 -> ... and an index page.")
    p.add_argument("--transformers", nargs="+", required=True, metavar="V", help="transformers versions, in order")
    p.add_argument("--torch", metavar="V", help="torch version of every cell (default: constraints.txt's)")
    p.add_argument("-n", dest="workers", metavar="N", help="pytest-xdist workers per cell")
    p.add_argument("--envdir", metavar="DIR", help="where the cells' virtualenvs go (default: nox's .nox/; with "
                   "--torch V: DIR/torch<V>/)")
    p.add_argument("--out", metavar="DIR", help="where the reports go (default: <reports_dir>/matrix/<time>)")
    p.add_argument("--pair-seconds", metavar="S", help="also pair each link's two cells' latency call by call "
                   "(harness check --against between their venvs) for S seconds: DIR/<a>-to-<b>/paired/")
    p.add_argument("--pair-fields", metavar="NAMES", help="with --pair-seconds: the paired fields (comma-separated "
                   "parts of a field's key; default all)")
    p.set_defaults(func=cmd_matrix)
