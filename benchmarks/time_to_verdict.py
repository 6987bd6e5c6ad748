"""Where one `harness check` spends its time, and the run's time as a ratio that holds across machines.

    python benchmarks/time_to_verdict.py [--json FILE] [--record] [--check] [-- HARNESS CHECK ARGS]
    python benchmarks/time_to_verdict.py --pytest [--record] [--check]      # the README's `pytest -n 2`

Runs `harness check` (with its defaults, or the arguments after --) once, with the timing probe
(benchmarks/timing_probe.py) in every pytest process, and prints:
  - the command's wall seconds and its ratio to a fixed calibration workload timed in this process
    right before and after (fp32 matmuls on one thread: a machine twice as fast halves both);
  - per suite: tests, wall seconds (summed over the workers' tests) and CPU seconds;
  - per activity: wall seconds and share of the tests' time - model loading, transformers'
    generate(), the reference engine, statistics, record I/O, the rest (the harness's own code,
    torch outside those);
  - per model load, and the slowest cases.
The ratio is what `benchmarks/budgets.json` keeps per release of the harness: a new release that
makes the everyday command slower shows up there on any machine. `--record` writes this run's
figures under the installed release; `--check` exits 1 when the ratio exceeds the budget's
(budgets.json `budget`: the 60 s / 120 s targets of issue 31 on the 2-core machine they were set on,
divided by that machine's calibration). `--pytest` times `pytest -n 2` (the README's test command)
instead of `harness check` (wall and ratio only: no per-suite table).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUDGETS = REPO / "benchmarks" / "budgets.json"
PYTEST = [sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider"]


def calibration(repeats: int = 5) -> float:
    """Seconds of the fixed workload (40 fp32 matmuls of 256 x 256 on one thread), the best of
    `repeats` - the preflight's own (harness/settings/preflight.py), so its estimates and these
    ratios share one unit."""
    from harness.settings.preflight import calibration as workload

    return workload(repeats)


def run_check(args: list[str], timing_dir: Path | None) -> tuple[float, int, str]:
    """Wall seconds, exit code and output tail of `harness check ARGS` with the timing probe (or, with
    no timing_dir, of the README's `pytest -n 2`)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("CI", None)
    if timing_dir is not None:
        env["HARNESS_TIMING_DIR"] = str(timing_dir)
    command = PYTEST if timing_dir is None else [
        sys.executable, "-m", "harness", "check", *args, "--", "-p", "benchmarks.timing_probe"]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    return time.perf_counter() - start, done.returncode, done.stdout[-3000:] + done.stderr[-2000:]


def release() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("genharness")
    except PackageNotFoundError:
        return "unreleased"


def record(command: str, result: dict) -> None:
    """This run's figures under the installed release in budgets.json (other entries kept)."""
    data = json.loads(BUDGETS.read_text())
    entry = {k: result[k] for k in ("wall", "calibration", "ratio", "load")}
    entry.update(cores=os.cpu_count(), measured=time.strftime("%Y-%m-%d"))
    if "summary" in result:  # harness check: the per-suite table (wall and CPU seconds summed over tests)
        entry["suites"] = {name: {k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}
                           for name, row in sorted(result["summary"]["suites"].items())}
    data.setdefault("releases", {}).setdefault(release(), {})[command] = entry
    BUDGETS.write_text(json.dumps(data, indent=1) + "\n")


def over_budget(command: str, ratio: float) -> str | None:
    budget = json.loads(BUDGETS.read_text())["budget"][command]
    if ratio > budget["ratio"]:
        return f"{command}: ratio {ratio:.0f} exceeds the budget's {budget['ratio']:.0f} ({budget['why']})"
    return None


def summarise(parts: list[dict]) -> dict:
    tests = [t for p in parts for t in p["tests"]]
    suites: dict[str, dict[str, float]] = {}
    for t in tests:
        s = suites.setdefault(t["suite"], {"tests": 0, "wall": 0.0, "cpu": 0.0})
        s["tests"] += 1
        s["wall"] += t["wall"]
        s["cpu"] += t["cpu"]
    activities: dict[str, float] = {}
    loads: dict[str, float] = {}
    for p in parts:
        for k, v in p["activities"].items():
            activities[k] = activities.get(k, 0.0) + v
        for k, v in p["loads"].items():
            name = Path(k).name
            loads[name] = loads.get(name, 0.0) + v
    total = sum(t["wall"] for t in tests)
    activities["other (harness code, torch outside these)"] = max(0.0, total - sum(activities.values()))
    slowest = sorted(tests, key=lambda t: -t["wall"])[:15]
    return {"tests": len(tests), "tests_wall": total, "suites": suites, "activities": activities, "loads": loads,
            "slowest": [{"nodeid": t["nodeid"], "wall": t["wall"]} for t in slowest],
            "workers": len(parts), "cpu": sum(p["cpu"] for p in parts)}


def print_table(result: dict) -> None:
    s = result["summary"]
    print(f"harness check: {result['wall']:.1f} s wall, exit {result['exit']}; calibration {result['calibration']:.4f} s; "
          f"ratio {result['ratio']:.0f}; {s['workers']} pytest process(es), {s['cpu']:.1f} s CPU; load {result['load']}")
    print(f"\n{'suite':12} {'tests':>5} {'wall s':>8} {'CPU s':>8}")
    for name, v in sorted(s["suites"].items(), key=lambda kv: -kv[1]["wall"]):
        print(f"{name:12} {v['tests']:5d} {v['wall']:8.1f} {v['cpu']:8.1f}")
    print(f"\n{'activity':44} {'wall s':>8} {'share':>6}")
    for name, v in sorted(s["activities"].items(), key=lambda kv: -kv[1]):
        print(f"{name:44} {v:8.1f} {v / max(s['tests_wall'], 1e-9):6.1%}")
    print(f"\n{'model load':28} {'wall s':>8}")
    for name, v in sorted(s["loads"].items(), key=lambda kv: -kv[1]):
        print(f"{name:28} {v:8.2f}")
    print("\nslowest cases:")
    for t in s["slowest"]:
        print(f"  {t['wall']:6.2f} s  {t['nodeid']}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the measurement here")
    ap.add_argument("--pytest", action="store_true", help="time `pytest -n 2` instead of `harness check`")
    ap.add_argument("--record", action="store_true", help="write the figures under this release in budgets.json")
    ap.add_argument("--check", action="store_true", help="exit 1 when the ratio exceeds budgets.json's budget")
    args = ap.parse_args(argv)
    command = "pytest -n 2" if args.pytest else "harness check"
    before = calibration()
    with tempfile.TemporaryDirectory() as tmp:
        wall, rc, tail = run_check(extra, None if args.pytest else Path(tmp))
        parts = [json.loads(p.read_text()) for p in Path(tmp).glob("*.json")]
    cal = min(before, calibration())
    result = {"wall": wall, "exit": rc, "calibration": cal, "ratio": wall / cal, "args": extra,
              "load": os.getloadavg()[0]}
    if args.pytest:
        print(f"pytest -n 2: {wall:.1f} s wall, exit {rc}; calibration {cal:.4f} s; ratio {wall / cal:.0f}; "
              f"load {result['load']:.2f}")
    else:
        result["summary"] = summarise(parts)
        print_table(result)
    if rc not in (0, 1):
        print(tail)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if args.record:
        record(command, result)
    problem = over_budget(command, result["ratio"]) if args.check else None
    if problem:
        print(problem)
    return 1 if problem or rc not in (0, 1) else 0


if __name__ == "__main__":
    sys.exit(main())
