"""False alarms of a whole `harness check`: rerun it clean, with fresh seeds, and count regressions.

    python benchmarks/clean_runs.py --runs 20 [-n 2] [--json FILE]

Each run is `harness check --strict -n N` against this env's own committed records (strict: the
store is read-only, a field without a record would fail), in a fresh process, with
`--seed-salt i` (run i draws the bias and sampling suites' samples from fresh seeds; the
seeded-sample outputs keep their seeds, their token streams being records). Prints one line per
run (verdict, wall seconds, the regressed fields) and the total; exit 1 when any run regressed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def one_run(offset: int, workers: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("CI", None)
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "harness", "check", "--strict", "-n", workers, "--seed-salt", str(offset)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - start
    report = next((line.split(":", 1)[1].strip() for line in proc.stdout.splitlines() if line.startswith("report:")), "")
    regressed: list[str] = []
    if report:
        results = json.loads((Path(report).parent / "results.json").read_text())
        regressed = sorted(f"{o['suite']}/{o['case']}/{o['field']}" for o in results["outcomes"]
                           if o["status"] == "regression")
    return {"offset": offset, "exit": proc.returncode, "seconds": round(seconds, 1), "regressed": regressed,
            "report": report}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--first", type=int, default=1, help="seed offset of the first run (default 1)")
    ap.add_argument("-n", dest="workers", default="2", help="pytest-xdist workers of each check (default 2)")
    ap.add_argument("--json", type=Path, help="write every run's result here")
    args = ap.parse_args(argv)
    runs = []
    for i in range(args.first, args.first + args.runs):
        run = one_run(i, args.workers)
        runs.append(run)
        verdict = "clean" if run["exit"] == 0 else f"exit {run['exit']} " + ", ".join(run["regressed"][:5])
        print(f"run {len(runs)} (--seed-salt {i}): {verdict} in {run['seconds']} s", flush=True)
        if args.json:
            args.json.write_text(json.dumps(runs, indent=1))
    alarms = sum(1 for r in runs if r["exit"] != 0)
    secs = sorted(r["seconds"] for r in runs)
    print(f"\n{alarms}/{len(runs)} runs reported a regression; wall {secs[0]}-{secs[-1]} s")
    return 1 if alarms else 0


if __name__ == "__main__":
    sys.exit(main())
