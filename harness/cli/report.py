"""`harness report RESULTS_JSON`: re-render a report (HTML, optionally JUnit) from a results.json."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.checking.claims import check_claims, evaluate
from harness.checking.findings import Findings
from harness.cli.common import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, error, output_dir, run_error
from harness.report import load_results, render, write_junit
from harness.report.terminal import print_summary


def cmd_report(args: argparse.Namespace, extra: Sequence[str]) -> int:
    source = Path(args.results)
    results = load_results(source)
    out = output_dir(args.out, "--out") if args.out else source.resolve().parent
    claims = results.meta.get("claims")
    findings = Findings.of(results)  # once, for the page and the summary
    index = render(results, out, evaluate(check_claims(claims, f"{source}: meta.claims"), results.outcomes)
                   if claims else None, findings)
    print_summary(results, f"{results.meta.get('env_key', '?')} vs baseline {results.meta.get('baseline_key', '?')}",
                  findings)
    print(f"\nreport: {index}")
    if args.junit:
        print(f"junit:  {write_junit(results, args.junit)}")
    verdict = results.verdict  # the exit code `check` gave this run: a report never turns it green
    if verdict == "error":
        error(run_error(results))
        return EXIT_USAGE
    return EXIT_REGRESSION if verdict in ("regression", "failed") else EXIT_OK


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("report", help="re-render a report from a results.json",
                       description="Re-render the HTML report (and optionally JUnit XML) of a run or comparison "
                                   "from its results.json, without running anything.")
    p.add_argument("results", metavar="RESULTS_JSON")
    p.add_argument("--out", metavar="DIR", help="where index.html goes (default: next to RESULTS_JSON)")
    p.add_argument("--junit", metavar="PATH", help="also write JUnit XML there")
    p.set_defaults(func=cmd_report)
