"""`harness envs`: the recorded env keys with their versions, hardware, dtype and record counts."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from harness.cli.common import EXIT_OK
from harness.cli.project import open_project
from harness.report.terminal import table


def cmd_envs(args: argparse.Namespace, extra: Sequence[str]) -> int:
    project = open_project(args)
    keys = project.store.env_keys()
    if not keys:
        print(f"no recorded envs under {project.store.root}")
        return EXIT_OK
    rows = []
    for key in keys:
        env = project.store.env_of(key) or {}
        device = env.get("device", {})
        per_suite: dict[str, int] = {}
        for path in project.store.record_paths(key):
            per_suite[path.parent.name] = per_suite.get(path.parent.name, 0) + 1
        rows.append((key, env.get("transformers", "?"), env.get("torch", "?"),
                     f"{device.get('type', '?')} {device.get('name', '')}".strip(), env.get("dtype", "?"),
                     sum(per_suite.values()), " ".join(f"{s}={n}" for s, n in sorted(per_suite.items()))))
    print(f"recorded envs under {project.store.root}:")
    for line in table(("env key", "transformers", "torch", "device", "dtype", "records", "per suite"), rows,
                      (60, 14, 14, 40, 6, 8, 120)):
        print("  " + line)
    return EXIT_OK


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("envs", parents=[common], help="list recorded env keys",
                       description="List the env keys recorded in the golden store, with transformers and torch "
                                   "versions, device, dtype and records per suite.")
    p.set_defaults(func=cmd_envs)
