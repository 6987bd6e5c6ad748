"""False alarms and power of the paired A/B latency mode (`harness check --against`), measured.

    python benchmarks/paired_power.py --load 1 --load 4 --reps 3 --json benchmarks/paired_power.json
    python benchmarks/paired_power.py --table benchmarks/paired_power.json        # its table again

Both timing workers run this env (an A/A pair: nothing differs but the process), pinned to the same
cores as `harness check --against` pins them (harness/designs/paired.py), a fresh pair per rep. Per
background load L
(L CPU-bound spinner processes this script starts and stops; the host's own load adds to it and is
recorded at the start and end of each condition), per condition - A/A, and a CPU-bound slowdown of
3 / 5 / 10 % injected into the new side (`paired.slowed`: a CPU-bound spin of that fraction of each
call's own wall time, inside the timed call; no sleep) - and per rep, each
field is paired for `--seconds` / 12 seconds (the share a default 180 s run of all 12 paired fields
gives it) and decided by `compare_paired` at the per-test alpha of such a run (0.01 / 16: m = 12
fields, rounded up to a power of two; 0.01 / 64 per clock and direction).

A/A: a field called slower or faster (a regression or changed) is a false alarm (<= alpha per field: 0.000625; the
reps cannot show a rate that small - the table gives the count and the A/A t statistics' spread,
which should look like Student's t). Injected: "detected" = called slower (a regression) or a
significant slowdown inside the tolerance; the table's (x...) is the median measured ratio of the
injected runs (the spin reads above its nominal fraction: the call after it runs on colder caches).
Goal (issue 61): 5 % detected at power >= 0.8.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.checking import stats  # noqa: E402
from harness.checking.compare_stats import compare_paired  # noqa: E402
from harness.checking.policy import Policy  # noqa: E402
from harness.designs import paired  # noqa: E402
from harness.zoo.specs import MODELS_DIR  # noqa: E402

FIELDS = ("llama-target.prefill/prefill_long_dynamic", "llama-target.decode/decode_dynamic",
          "llama-target.generate/generate_plain")
SLOWDOWNS = (0.0, 0.03, 0.05, 0.10)


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


CHILDREN: list[subprocess.Popen] = []  # spinners and workers, stopped on exit or SIGTERM


def spinners(n: int) -> list[subprocess.Popen]:
    out = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    CHILDREN.extend(out)
    return out


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def on_term(*_: object) -> None:
    stop(CHILDREN)
    os._exit(143)


def run(loads: list[int], reps: int, seconds: float, fields: tuple[str, ...], models: Path) -> list[dict]:
    """Per load, per rep a fresh pair of workers (a process's own speed - its memory layout - is part
    of what an A/A pair must show), then every condition and field on that pair."""
    alpha = stats.per_test_alpha(0.01, len(paired.FIELDS))
    policy = Policy(alpha=alpha)
    chosen = [f for f in paired.FIELDS if f.key in fields]
    budget = seconds / len(paired.FIELDS)
    rows = []
    cores = paired.shared_core()
    for load in loads:
        spin = spinners(load)
        try:
            for rep in range(reps):
                new, old = (paired.Worker(sys.executable, models, cores) for _ in range(2))
                CHILDREN.extend([new.proc, old.proc])
                try:
                    for slow in SLOWDOWNS:
                        for field in chosen:
                            before = loadavg()
                            got = paired.pair(new, old, field, budget, slow_new=slow)
                            if got.error:
                                raise SystemExit(f"{field.key}: {got.error}")
                            o = compare_paired(field.name, {"wall": got.new, "cpu": got.new_cpu},
                                               {"wall": got.old, "cpu": got.old_cpu}, policy)
                            d = o.diff
                            row = {"load": load, "slow": slow, "rep": rep, "field": field.key,
                                   "status": o.status.value, "category": str(o.category), "clock": d["clock"],
                                   "ratio": d["ratio"], "ci": d["ratio_ci"], "detectable": d["detectable_slowdown"],
                                   "p_slower": d["p_slower"], "t": math.log(d["ratio"]) / d["sd"] if d["sd"] else 0.0,
                                   "wall_ratio": d["wall_ratio"], "wall_detectable": d["wall_detectable_slowdown"],
                                   "wall_call": d["wall_call"], "blocks": d["blocks"], "seconds": got.seconds,
                                   "loadavg": [before, loadavg()]}
                            rows.append(row)
                            print(json.dumps(row), flush=True)
                finally:
                    new.close()
                    old.close()
        finally:
            stop(spin)
    return rows


def table(rows: list[dict], alpha: float) -> list[str]:
    out = ["| load (spinners) | host load avg | field | A/A false alarms | A/A t sd | detects, CPU (median) | "
           "detects, wall (median) | 3 % detected | 5 % detected | 10 % detected | blocks |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for load in sorted({r["load"] for r in rows}):
        for field in dict.fromkeys(r["field"] for r in rows):
            mine = [r for r in rows if r["load"] == load and r["field"] == field]
            if not mine:
                continue
            aa = [r for r in mine if r["slow"] == 0.0]
            alarms = sum(r["status"] not in ("pass", "skipped") for r in aa)
            ts = [r["t"] for r in aa]
            sd = (sum((x - sum(ts) / len(ts)) ** 2 for x in ts) / max(len(ts) - 1, 1)) ** 0.5 if ts else 0.0
            det = sorted(r["detectable"] for r in mine)[len(mine) // 2]
            wdet = sorted(r["wall_detectable"] for r in mine)[len(mine) // 2]
            hits = []
            for slow in SLOWDOWNS[1:]:
                inj = [r for r in mine if r["slow"] == slow]
                hit = sum(r["status"] == "regression" or (r["category"] == "tolerated-drift" and r["ratio"] > 1)
                          for r in inj)
                measured = sorted(r["ratio"] for r in inj)[len(inj) // 2] if inj else float("nan")
                hits.append(f"{hit}/{len(inj)} (x{measured:.3f})")
            lo, hi = min(r["loadavg"][0] for r in mine), max(r["loadavg"][1] for r in mine)
            blocks = sorted(r["blocks"] for r in mine)[len(mine) // 2]
            out.append(f"| {load} | {lo:.1f}-{hi:.1f} | {field} | {alarms}/{len(aa)} | {sd:.2f} | {det:.1%} | {wdet:.1%} | "
                       + " | ".join(hits) + f" | {blocks} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--load", type=int, action="append", help="background spinners (repeatable; default 1 and 4)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=180.0, help="a whole run's pairing seconds (default 180)")
    ap.add_argument("--fields", default=",".join(FIELDS))
    ap.add_argument("--json", help="write the rows and the table here")
    ap.add_argument("--table", metavar="JSON", help="print the table of a --json file again (no measuring)")
    args = ap.parse_args()
    if args.table:
        saved = json.loads(Path(args.table).read_text())
        print("\n".join(table(saved["rows"], saved["alpha_field"])))
        return
    signal.signal(signal.SIGTERM, on_term)  # the spinners and workers are stopped on kill too
    loads = args.load or [1, 4]
    start = time.time()
    rows = run(loads, args.reps, args.seconds, tuple(args.fields.split(",")), MODELS_DIR)
    alpha = stats.per_test_alpha(0.01, len(paired.FIELDS))
    lines = table(rows, alpha)
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": "python benchmarks/paired_power.py " + " ".join(sys.argv[1:]), "alpha_field": alpha,
            "seconds_per_field": args.seconds / len(paired.FIELDS), "wall_seconds": time.time() - start,
            "table": lines, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
