"""Know the cost before paying it (issue 42): a user model's size, peak memory per worker and time
per suite, from its config.json and safetensors headers only - no weight is read.

Parameters: the sum over the safetensors headers of each tensor's element count (`checkpoint_params`;
`harness/engine/mapped.py` reads the 8-byte length and the JSON header of each file).

Memory, per pytest-xdist worker, in bytes (`worker_memory`):

    private = BASE + P * b_load + ACTIVATIONS
    shared  = the checkpoint's file bytes (memory-mapped by the reference engine, and by transformers
              5 when it loads in the saved dtype: page cache, held once however many processes map it)

with P the parameters and b_load the bytes per parameter of the dtype the model loads in: the
private term counts a loaded copy although transformers 5.x maps the file instead (a release that
copies must still fit), plus one copy more while a case holds two loads at once (eager beside SDPA,
a save / reload). The run holds `shared + n * private`; `workers_for` picks the largest n <= cores
that fits MemAvailable, and `refusal` is the one line a run that cannot fit one worker stops with.

Time (`estimate`): a suite's work is the single-token forwards of the model its cases cost (each case
table's cost units in the suite's registry row, harness/cases/registry.py `Suite.units`: its generate()
tokens, the reference engine's decode at the engine's fp32 cost, the latency samples; summed by
`registry.user_work`); a forward of P parameters costs `SECONDS_PER_GPARAM_UNIT * P / 1e9` seconds at the calibration
workload's speed (`CALIBRATION`: benchmarks/time_to_verdict.py's, 0.0166 s on the 2-core machine the
constants were fit on - a machine twice as fast halves both), plus `FIXED` seconds of start-up,
collection and loading per run. The constants are fit by benchmarks/real_size.py (docs/your-models.md: Your own
checkpoints as subjects); the suites' shares are the work-unit model's, the total is the fit's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

GIB = 2**30
BASE = int(0.9 * GIB)  # python, torch, transformers, the harness and the tokenizer of one worker
ACTIVATIONS = int(0.3 * GIB)  # logits over a 32k-256k vocabulary, caches, the engine's per-op fp32 projection
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp64": 8}
HEADROOM = 0.85  # of MemAvailable a run plans to use

# fit on this project's 2-core machine, quiet (benchmarks/real_size.json "quiet-2026-12-04": load 0.7-1.6,
# calibration 0.0202 s), through the default runs of 112M (52.7 s) and 1104M parameters (232.5 s); the 509M run
# (116.1 s) is the check: estimated 1.1x. (The first fit, through runs at load 5-15 - 305 s and 974 s - gave
# 90 s and 0.29 and estimated these quiet runs 1.8-2.8x: a loaded machine's wall grows faster than its
# one-thread calibration.)
FIXED = 27.0  # seconds at the calibration speed: two pytest sessions' start and collection, the zoo's hash check, loads
SECONDS_PER_GPARAM_UNIT = 0.19  # one single-token forward of 1e9 parameters, at the calibration speed
CALIBRATION = 0.0166  # seconds of the calibration workload on the machine the constants were fit on


def checkpoint_params(directory: Path) -> int:
    """Parameters of a save_pretrained directory: the element counts in its safetensors headers."""
    from harness.engine.mapped import header_of, weight_files

    total = 0
    for path in weight_files(Path(directory)) or sorted(Path(directory).glob("*.safetensors")):
        header, _ = header_of(path)
        for entry in header.values():
            count = 1
            for dim in entry.get("shape", []):
                count *= int(dim)
            total += count
    return total


def file_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in Path(directory).glob("*.safetensors"))


@dataclass(frozen=True)
class Memory:
    """One model's memory: what each worker holds privately, what the workers share (the file's pages)."""

    private: int
    shared: int

    def total(self, workers: int) -> int:
        return self.shared + max(workers, 1) * self.private


def worker_memory(params: int, dtype: str, shared: int) -> Memory:
    """The module docstring's formula, for a model of `params` loading in `dtype`."""
    return Memory(BASE + 2 * params * DTYPE_BYTES.get(dtype, 4) + ACTIVATIONS, shared)


def available_memory() -> int:
    """MemAvailable of /proc/meminfo in bytes (0 when the platform does not say)."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def workers_for(memory: Memory, cores: int, available: int) -> int:
    """The most workers (<= cores) whose memory fits `HEADROOM` of `available`; 0 when not even one
    fits; `cores` when the platform does not say what is available."""
    if available <= 0:
        return max(cores, 1)
    room = HEADROOM * available - memory.shared
    return max(0, min(max(cores, 1), int(room // memory.private))) if room > 0 else 0


def refusal(name: str, memory: Memory, available: int, dtype: str) -> str:
    """The one line a run that cannot hold even one worker stops with, naming the ways out."""
    ways = ["--budget 5m"]
    if dtype == "fp32":
        ways.append("dtype = \"bf16\" for the model")
    ways += ["fewer suites (--suites outputs,sampling)", "a machine with more memory or a GPU (--device cuda)"]
    return (f"{name}: one worker needs ~{memory.total(1) / GIB:.1f} GiB ({memory.private / GIB:.1f} GiB of its own + "
            f"{memory.shared / GIB:.1f} GiB of mapped weights), and {available / GIB:.1f} GiB is available; "
            f"ways out: {', '.join(ways)}")


def estimate(params: int, work: Mapping[str, int], calibration: float = CALIBRATION,
             workers: int = 1) -> dict[str, float]:
    """Seconds per suite (and "total") for a model of `params` parameters whose suites cost `work`
    single-token forwards each (`registry.user_work`), on `workers` workers, at a machine whose
    calibration workload takes `calibration` s."""
    speed = calibration / CALIBRATION
    per_unit = SECONDS_PER_GPARAM_UNIT * params / 1e9 * speed
    out = {suite: round(units * per_unit, 1) for suite, units in work.items() if units}
    timing = out.get("latency", 0.0)  # the latency suite runs alone, after the workers
    parallel = (sum(out.values()) - timing) / max(workers, 1)
    out["total"] = round(FIXED * speed + parallel + timing, 1)
    return out


def calibration(repeats: int = 3) -> float:
    """Seconds of the calibration workload here, now (benchmarks/time_to_verdict.py's: 40 fp32 matmuls of
    256 x 256 on one thread, the best of `repeats`): a busy machine's estimate grows with it."""
    import time

    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            x = a
            for _ in range(40):
                x = torch.tanh(x @ a)
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return best


def cpu_count() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
