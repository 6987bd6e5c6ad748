"""`harness compare A B`: compare two recorded envs (two versions, CPU vs GPU, fp32 vs bf16)
without running anything - the same report as a run, plus `summary.md` for a pull request;
`--claims FILE` checks a release's notes against it."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from harness.checking.claims import evaluate, load_claims, terminal_lines
from harness.checking.envs import compare_envs
from harness.cli.common import finish, output_dir
from harness.cli.project import open_project, validate_env_key
from harness.report.terminal import timestamped_dir


def cmd_compare(args: argparse.Namespace, extra: Sequence[str]) -> int:
    project = open_project(args)
    validate_env_key(project.store, args.a, "A")
    validate_env_key(project.store, args.b, "B")
    n = len(project.store.record_paths(args.a)) + len(project.store.record_paths(args.b))
    print(f"harness: comparing {args.b} against {args.a} ({n} records)", flush=True)
    claims = load_claims(args.claims) if args.claims else None
    results = compare_envs(project.store, project.config, args.a, args.b)
    if claims:
        results.meta["claims"] = claims  # kept in results.json, so `harness report` shows the table again
    checked = evaluate(claims, results.outcomes) if claims else None
    out = output_dir(args.out, "--out") if args.out else timestamped_dir(project.reports_dir / f"compare-{args.a}-vs-{args.b}")
    code = finish(results, out, claims=checked, owned=not args.out)
    if checked:
        print("\n" + "\n".join(terminal_lines(checked)))
    return code


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("compare", parents=[common], help="compare two recorded envs without running anything",
                       description="Compare the records of env B against env A's, field by field, with the rules "
                                   "of a live run; write the report and summary.md.")
    p.add_argument("a", metavar="A", help="baseline env key")
    p.add_argument("b", metavar="B", help="env key compared against A")
    p.add_argument("--out", metavar="DIR", help="where the report goes (default: <reports_dir>/compare-A-vs-B/<time>)")
    p.add_argument("--claims", metavar="FILE", help="a release's claims (JSON, e.g. docs/claims/transformers-5.14.json): "
                                                    "each checked against the outcomes, shown in the report and summary.md")
    p.set_defaults(func=cmd_compare)
