"""Detection and false alarms of the latency suite, as the full default run decides them.

    python benchmarks/latency_power.py --runs 20                                  # clean, quiet machine
    python benchmarks/latency_power.py --runs 20 --busy                           # clean, the other core busy
    python benchmarks/latency_power.py --runs 20 --fault waiting-forward-15       # a slowdown that only waits
    python benchmarks/latency_power.py --runs 20 --fault slower-forward-15        # a slowdown that computes
    python benchmarks/latency_power.py --runs 3 --fault forward-allocates-30pct-more
    python benchmarks/latency_power.py --runs 20 --sigma                          # between-run SD per field
    python benchmarks/latency_power.py --runs 12 --sigma --select "llama-target and generate"  # one case

Each run is the timing phase of a default `harness check`, in a fresh process, against this env's
committed records: `pytest suites --harness-phase timing --harness-strict` collects every suite, so
the per-test alpha is the whole run's (alpha / m, m = every golden test), and runs only the timing
tests - exactly what `harness check` does after its parallel phase. A run "flags" when any latency
or memory field is a regression; a field is "judged" when it was not skipped as not judged (busy).
`--busy` keeps one CPU-bound process spinning on the other core for the whole measurement.
`--sigma` prints, per field, the SD across runs of the run's paired median log ratio, the runs' own
SE and the between-run part tau = sqrt(sd^2 - se^2) (what `latency_run_sd` must cover). Prints one line per run and the totals; `--json` keeps everything.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def one_run(fault: str | None, out: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("CI", None)
    cmd = [sys.executable, "-m", "pytest", "suites", "-p", "no:cacheprovider", "-q", "--harness-phase", "timing",
           "--harness-strict", "--harness-results", str(out), *(["--inject-fault", fault] if fault else [])]
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    if not out.exists():
        raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
    results = json.loads(out.read_text())
    fields = [o for o in results["outcomes"] if o["kind"] in ("latency", "memory")]
    return {"seconds": round(time.monotonic() - start, 1), "alpha": results["meta"]["alpha_per_test"],
            "golden_tests": results["meta"]["golden_tests"],
            "flagged": sorted(f"{o['case']}/{o['field']}" for o in fields if o["status"] == "regression"),
            "judged": sum(1 for o in fields if o["kind"] == "latency" and o["category"] not in ("not-judged",
                                                                                                "not-comparable")),
            "latency_fields": sum(1 for o in fields if o["kind"] == "latency"),
            "not_judged": sorted({o["detail"] for o in fields if o["category"] == "not-judged"})[:3],
            "ratios": {f"{o['case']}/{o['field']}": round(o["diff"]["ratio"], 4) for o in fields
                       if "ratio" in o.get("diff", {})}}


def log_ratios(records: Path) -> dict[str, tuple[float, float]]:
    """Per latency field of this env's records: the paired median log ratio of this machine's entry
    and its within-run SE."""
    from harness.checking.compare_stats import latency_entries
    from harness.checking.stats import paired_log_ratios
    from harness.schema import Record
    from harness.store.env import env_key, fingerprint, hardware_class

    fp = fingerprint(threads=1)
    out = {}
    for path in sorted((records / env_key(fp) / "latency").glob("*.json")):
        record = Record.from_json(json.loads(path.read_text()), path)
        for name, f in record.fields.items():
            if f.kind == "latency":
                entry = latency_entries(f, record.env).get(hardware_class(fp))
                if entry and "cpu" in entry:
                    out[f"{record.case}/{name}"] = paired_log_ratios(entry["samples"], entry["calibration"])
    return out


def sigma(runs: int, select: str | None = None) -> dict[str, dict[str, float]]:
    """Per field, over `runs` regenerations into scratch stores: the SD across runs of the paired
    median log ratio (`sd`), the root mean square of the runs' own SEs (`se`) and the between-run
    part the samples of one run cannot see, tau = sqrt(max(0, sd^2 - se^2)) - what
    `latency_run_sd` is (stats.slowdown_test adds each run's own SE beside it)."""
    per_field: dict[str, list[tuple[float, float]]] = {}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("CI", None)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs):
            store = Path(tmp) / f"run{i}"
            store.mkdir()  # a new store: every field is measured and written, nothing compared
            done = subprocess.run([sys.executable, "-m", "pytest", "suites/test_latency.py", "-p", "no:cacheprovider", "-q",
                            "--golden-dir", str(store), "--harness-results", str(Path(tmp) / f"r{i}.json"),
                            "--harness-budget", "full",  # generate() per path too (the quick tier leaves it out)
                            *(["-k", select] if select else [])],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
            if done.returncode != 0:
                raise RuntimeError(f"run {i + 1} failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
            for name, value in log_ratios(store).items():
                per_field.setdefault(name, []).append(value)
            print(f"run {i + 1}: {len(per_field)} fields", flush=True)
    out = {}
    for name, v in per_field.items():
        if len(v) > 1:
            sd = statistics.stdev(m for m, _ in v)
            se = math.sqrt(statistics.fmean(e * e for _, e in v))
            out[name] = {"sd": sd, "se": se, "tau": math.sqrt(max(0.0, sd * sd - se * se))}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--fault", help="a fault of the catalogue to inject (e.g. waiting-forward-15)")
    ap.add_argument("--busy", action="store_true", help="keep a CPU-bound process spinning meanwhile")
    ap.add_argument("--sigma", action="store_true", help="measure the between-run SD per field instead")
    ap.add_argument("--select", metavar="EXPR", help="with --sigma: only the latency tests pytest's -k EXPR selects")
    ap.add_argument("--json", type=Path, help="write every run's fields and ratios here")
    args = ap.parse_args(argv)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.busy else None
    try:
        if args.sigma:
            sds = sigma(args.runs, args.select)
            print("    sd      se     tau  field (log scale)")
            for name, v in sorted(sds.items(), key=lambda kv: -kv[1]["tau"]):
                print(f"{v['sd']:.4f}  {v['se']:.4f}  {v['tau']:.4f}  {name}")
            for group, pick in (("generate", lambda n: "/generate_" in n), ("forward", lambda n: "/generate_" not in n)):
                taus = [v["tau"] for n, v in sds.items() if pick(n)]
                if taus:
                    print(f"{group}: tau max {max(taus):.4f}, median {statistics.median(taus):.4f}")
            if args.json:
                args.json.write_text(json.dumps(sds, indent=1))
            return 0
        runs = []
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.runs):
                run = one_run(args.fault, Path(tmp) / f"run{i}.json")
                runs.append(run)
                print(f"run {i + 1}: {'FLAGGED ' + ', '.join(run['flagged']) if run['flagged'] else 'clean'}; "
                      f"judged {run['judged']}/{run['latency_fields']}; {run['seconds']} s; load "
                      f"{os.getloadavg()[0]:.2f}" + (f"; not judged: {run['not_judged'][0]}" if run["not_judged"] else ""),
                      flush=True)
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    hits = sum(1 for r in runs if r["flagged"])
    judged = sum(r["judged"] for r in runs)
    fields = sum(r["latency_fields"] for r in runs)
    print(f"fault {args.fault or 'none'}{' (other core busy)' if args.busy else ''}: {hits}/{len(runs)} runs flagged "
          f"a regression; {judged}/{fields} latency fields judged; per-test alpha {runs[0]['alpha']:.3g} "
          f"({runs[0]['golden_tests']} golden tests)")
    if args.json:
        args.json.write_text(json.dumps({"fault": args.fault, "busy": args.busy, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
