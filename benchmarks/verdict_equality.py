"""The whole default run decides the same serially with every reference-engine answer computed
afresh as it does on two xdist workers reading the on-disk answer cache (issue 31's done-when).

    python benchmarks/verdict_equality.py

Runs `pytest suites --harness-strict` three times against this env's committed records, each with
a fresh answer cache (XDG_CACHE_HOME in a scratch directory): serial with `--harness-no-cache`,
then `-n 2` twice (the first computes and stores the engine's answers, the second reads them back),
and compares the outcome sets (suite, case, field, against) -> (status, category). Prints the
counts, each run's wall seconds and every difference; exit 1 when the sets differ.
tests/test_time_to_verdict.py checks the same on a subset inside the test budget.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def outcomes(tmp: Path, name: str, *args: str) -> tuple[dict[tuple[str, ...], tuple[str, str]], float]:
    results = tmp / f"{name}.json"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp / "cache"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("CI", None)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "suites", "-q", "-p", "no:cacheprovider", "--harness-strict",
                           "--harness-results", str(results), *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=3600)
    took = time.perf_counter() - start
    if not results.exists():
        raise RuntimeError(f"{name}: no results (exit {done.returncode})\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    data = json.loads(results.read_text())["outcomes"]
    return {(o["suite"], o["case"], o["field"], o["against"]): (o["status"], o["category"]) for o in data}, took


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        serial, t_serial = outcomes(Path(tmp), "serial", "--harness-no-cache")
        cold, t_cold = outcomes(Path(tmp), "cold", "-n", "2")
        warm, t_warm = outcomes(Path(tmp), "warm", "-n", "2")
    print(f"serial, uncached: {len(serial)} outcomes, {t_serial:.1f} s; -n 2 computing the cache: {len(cold)}, "
          f"{t_cold:.1f} s; -n 2 reading it: {len(warm)}, {t_warm:.1f} s")
    differ = 0
    for name, other in (("-n 2 cold", cold), ("-n 2 warm", warm)):
        for key in sorted(set(serial) | set(other)):
            if serial.get(key) != other.get(key):
                differ += 1
                print(f"  {name}: {'/'.join(key)}: serial {serial.get(key)} vs {other.get(key)}")
    print("identical" if not differ else f"{differ} difference(s)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
