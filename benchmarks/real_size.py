"""Your own model at real size (issue 42): a default `harness check --model` on random-init Llama
checkpoints of ~100M, ~500M and ~1B parameters, its wall time and peak memory, and the preflight's
estimate against what it measured.

    python benchmarks/real_size.py [--sizes 100m 500m 1b] [--record] [-- HARNESS CHECK ARGS]

Each checkpoint is made offline into a temporary directory (never committed): a seeded random
`LlamaForCausalLM` saved in bf16 (`save_pretrained`, safetensors) with the zoo's tokenizer padded
with added tokens to a 32k vocabulary. The run is a first run into a scratch store (every record
written) with an empty answer cache of its own (XDG_CACHE_HOME under the scratch directory: the
reference engine computes every answer) - what a new user's first day costs. Measured:

- wall seconds of `harness check --model DIR`, and its ratio to the calibration workload timed in
  this process right before (benchmarks/time_to_verdict.py `calibration`: a machine twice as fast
  halves both);
- peak memory of the whole process tree (the harness, pytest and its xdist workers), sampled every
  0.2 s from /proc: the sum of the processes' RSS (an upper bound: file pages a memory-mapped
  checkpoint shares between processes count once per process), of their PSS (shared pages split
  between the processes that map them: what the machine really holds), of their anonymous memory
  (what no process shares), and the largest one process's RSS;
- the preflight's estimate of the run's seconds (`harness/settings/preflight.py`, printed by the
  run) against the measured wall, as a ratio.

`--record` writes the figures to benchmarks/real_size.json under the date; the load average is
recorded beside them (the timings of a shared machine are only comparable as ratios of one run).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "real_size.json"
sys.path.insert(0, str(REPO / "benchmarks"))

# name -> Llama sizes (hidden, layers, heads, kv heads, intermediate); vocab 32000, untied lm_head
SIZES = {
    "100m": (768, 10, 12, 4, 2048),
    "500m": (1536, 12, 16, 4, 6144),
    "1b": (2048, 16, 32, 8, 8192),  # issue 42's checkpoint
}
VOCAB = 32000


def checkpoint(directory: Path, name: str, vocab: int = VOCAB) -> int:
    """Save a seeded random-init Llama of size `name` in bf16; return its parameters."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    hidden, layers, heads, kv, inner = SIZES[name]
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inner, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=2048,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # built in bf16: no fp32 copy of a 1B model on the way
    try:
        model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    model.save_pretrained(str(directory), safe_serialization=True)
    params = sum(p.numel() for p in model.parameters())
    del model
    tokenizer = AutoTokenizer.from_pretrained(str(REPO / "golden" / "models" / "llama-target"))
    tokenizer.add_tokens([f"<x{i}>" for i in range(vocab - len(tokenizer))])
    tokenizer.save_pretrained(str(directory))
    return params


def _tree(root: int) -> list[int]:
    """`root` and its descendants (from /proc/*/stat's parent ids)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(parents.get(pid, []))
    return out


def _memory(pid: int) -> tuple[int, int, int]:
    """(RSS, PSS, anonymous) bytes of one process (zeros when it is gone)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            text = handle.read()
    except OSError:
        return 0, 0, 0
    fields = dict(re.findall(r"^(\w+):\s+(\d+) kB", text, re.M))
    return tuple(int(fields.get(k, 0)) * 1024 for k in ("Rss", "Pss", "Anonymous"))  # type: ignore[return-value]


class Peak(threading.Thread):
    """Samples a process tree's memory every `every` seconds; keeps the peaks: the summed RSS (a page
    of the memory-mapped checkpoint counts once per process mapping it), the summed PSS (shared pages
    split between their processes: what the machine holds), the largest one process's RSS, and the
    summed anonymous memory (what no process shares: the models as loaded, activations)."""

    def __init__(self, pid: int, every: float = 0.2):
        super().__init__(daemon=True)
        self.pid, self.every, self.rss, self.pss, self.workers = pid, every, 0, 0, 0
        self.process_rss, self.anon = 0, 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            pids = _tree(self.pid)
            sizes = [_memory(p) for p in pids]
            self.rss = max(self.rss, sum(s[0] for s in sizes))
            self.pss = max(self.pss, sum(s[1] for s in sizes))
            self.anon = max(self.anon, sum(s[2] for s in sizes))
            self.process_rss = max([self.process_rss, *(s[0] for s in sizes)])
            self.workers = max(self.workers, len(pids))
            self.done.wait(self.every)


def measured_check(model: Path, scratch: Path, extra: list[str], repo: Path = REPO) -> dict:
    """One `harness check --model DIR` of the harness in `repo`: wall, peak RSS / PSS, the preflight's
    estimate, the output's tail."""
    (scratch / "records").mkdir(parents=True, exist_ok=True)
    # a new user's first run: the engine's answers are not on disk yet (a cache of its own, under scratch)
    env = {**os.environ, "PYTHONPATH": str(repo), "XDG_CACHE_HOME": str(scratch / "cache")}
    env.pop("CI", None)
    cmd = [sys.executable, "-m", "harness", "check", "--root", str(repo), "--golden-dir", str(scratch / "records"),
           "--reports-dir", str(scratch / "reports"), "--model", str(model), *extra]
    start = time.perf_counter()
    process = subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak = Peak(process.pid)
    peak.start()
    lines = []
    assert process.stdout is not None
    for line in process.stdout:
        lines.append(line)
        if line.startswith(("harness: plan", "harness: progress", "harness: 1 worker", "harness: error")) \
                or " passed" in line or " failed" in line:
            print("   ", line.rstrip(), flush=True)
    rc = process.wait()
    wall = time.perf_counter() - start
    peak.done.set()
    peak.join()
    text = "".join(lines)
    estimate = re.search(r"harness: plan: .*?~(\d+) s", text)
    return {"rc": rc, "wall": wall, "peak_rss": peak.rss, "peak_pss": peak.pss, "peak_process_rss": peak.process_rss,
            "peak_anon": peak.anon, "processes": peak.workers,
            "estimate": float(estimate.group(1)) if estimate else None, "tail": text[-3000:]}


def main() -> None:
    from time_to_verdict import calibration

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--record", action="store_true", help="write the figures to benchmarks/real_size.json")
    parser.add_argument("--label", default="", help="a name for this measurement in the json (e.g. before / after)")
    parser.add_argument("--repo", type=Path, default=REPO,
                        help="the harness tree to run (another checkout: a 'before' measurement)")
    parser.add_argument("extra", nargs="*", help="arguments after -- go to harness check")
    args = parser.parse_args()
    calib = calibration()
    load = os.getloadavg()[0]
    rows = {}
    with tempfile.TemporaryDirectory(prefix="harness-real-size-") as tmp:
        for name in args.sizes:
            directory = Path(tmp) / f"llama-{name}"
            params = checkpoint(directory, name)
            os.sync()  # the checkpoint's gigabytes written back before the run, not while its preflight times the machine
            print(f"{name}: {params / 1e6:.0f}M parameters (bf16, {sum(p.stat().st_size for p in directory.glob('*.safetensors')) / 2**30:.2f} GiB)", flush=True)
            got = measured_check(directory, Path(tmp) / f"run-{name}", args.extra, args.repo.resolve())
            row = {"params": params, "rc": got["rc"], "wall": round(got["wall"], 1),
                   "ratio": round(got["wall"] / calib), "peak_rss_gib": round(got["peak_rss"] / 2**30, 2),
                   "peak_pss_gib": round(got["peak_pss"] / 2**30, 2),
                   "peak_process_rss_gib": round(got["peak_process_rss"] / 2**30, 2),
                   "peak_anon_gib": round(got["peak_anon"] / 2**30, 2), "estimate": got["estimate"],
                   "estimate_over_measured": round(got["estimate"] / got["wall"], 2) if got["estimate"] else None,
                   "load": round(os.getloadavg()[0], 2)}
            rows[name] = row
            print(f"{name}: {json.dumps(row)}", flush=True)
            if got["rc"] not in (0, 1):
                print(got["tail"], flush=True)
            import shutil

            shutil.rmtree(directory)
    if args.record:
        data = json.loads(RESULTS.read_text()) if RESULTS.exists() else {
            "about": ("Issue 42: a default `harness check --model` on random-init bf16 Llama checkpoints "
                      "(benchmarks/real_size.py); wall seconds, their ratio to the calibration workload "
                      "(benchmarks/time_to_verdict.py), peak RSS and PSS of the process tree, the preflight's "
                      "estimate over the measured wall."), "runs": {}}
        label = args.label or time.strftime("%Y-%m-%d")
        data["runs"][label] = {"calibration": round(calib, 4), "load_at_start": round(load, 2),
                               "cores": os.cpu_count(), "memory_gib": round(os.sysconf("SC_PHYS_PAGES") *
                                                                           os.sysconf("SC_PAGE_SIZE") / 2**30, 1),
                               "sizes": rows}
        RESULTS.write_text(json.dumps(data, indent=1) + "\n")


if __name__ == "__main__":
    main()
