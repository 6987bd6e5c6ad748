"""Power and false-alarm rate of the latency suite, measured by rerunning it.

    python benchmarks/latency_power.py --runs 20 --fault slower-forward-15    # detection rate
    python benchmarks/latency_power.py --runs 20 --busy                      # false alarms under load

Each run is `pytest suites/test_latency.py` against this env's own committed records (the
baseline), in a fresh process; `--fault NAME` injects a fault of the catalogue (the latency ones make
every forward cost more); `--busy` keeps one CPU-bound process
spinning on the other core for the whole measurement. A run "flags" when any latency field is a
regression. Prints one line per run (the regressed fields, every field's ratio) and the total.
Takes ~30 s per run on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def one_run(fault: str | None, out: Path) -> tuple[list[str], dict[str, float]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("CI", None)  # compare against the records, write nothing new
    cmd = [sys.executable, "-m", "pytest", "suites/test_latency.py", "-p", "no:cacheprovider", "-q",
           "--harness-results", str(out), *(["--inject-fault", fault] if fault else [])]
    subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    outcomes = [o for o in json.loads(out.read_text())["outcomes"] if o["kind"] == "latency"]
    flagged = sorted(f"{o['case']}/{o['field']}" for o in outcomes if o["status"] == "regression")
    ratios = {f"{o['case'].split('.')[0]}/{o['field']}": round(float(o["diff"]["ratio"]), 3) for o in outcomes if "ratio" in o.get("diff", {})}
    return flagged, ratios


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--fault", help="a fault of the catalogue to inject (e.g. slower-forward-15)")
    ap.add_argument("--busy", action="store_true", help="keep a CPU-bound process spinning meanwhile")
    ap.add_argument("--json", type=Path, help="write every run's fields and ratios here")
    args = ap.parse_args(argv)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    runs = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.runs):
                flagged, ratios = one_run(args.fault, Path(tmp) / f"run{i}.json")
                runs.append({"flagged": flagged, "ratios": ratios})
                print(f"run {i + 1}: {'FLAGGED ' + ','.join(flagged) if flagged else 'clean'} {ratios}", flush=True)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    hits = sum(1 for r in runs if r["flagged"])
    print(f"fault {args.fault or 'none'}{' (other core busy)' if args.busy else ''}: "
          f"{hits}/{len(runs)} runs flagged a regression")
    if args.json:
        args.json.write_text(json.dumps({"fault": args.fault, "busy": args.busy, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
