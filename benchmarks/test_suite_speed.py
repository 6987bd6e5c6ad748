"""transformers' speculative paths timed against plain decoding, and the wall time of every suite.
Run with the engine benchmarks: `pytest benchmarks --benchmark-enable -s` (skipped without
--benchmark-enable: the suite timings rerun every suite, a few minutes on 2 cores).

1. Per path (llama-target: assisted, prompt lookup, ensemble w=0.3; glm4moe-mtp: MTP), greedy
   generate() through the installed transformers: the measured speedup over plain generate() in
   the same run (medians of interleaved CPU-time samples, harness/designs/latency.py) next to Leviathan et
   al.'s theoretical one from the measured acceptance, draft length and cost ratio
   (`hf_latency.speculative_stats`).
2. The wall time of `pytest suites/<suite>.py` per suite (a fresh process each, the run's
   records compared, nothing written), and of the latency suite in deep mode.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from harness import cases
from harness.designs import latency
from harness.subjects import hf_latency
from harness.subjects.hf import Zoo

REPO = Path(__file__).resolve().parents[1]
SUITES = sorted(p.name for p in (REPO / "suites").glob("test_*.py"))


@pytest.fixture
def enabled(benchmark):
    if benchmark.disabled:
        pytest.skip("a slow benchmark: run with --benchmark-enable")
    return benchmark


def test_transformers_speculative_speedup_per_path(enabled):
    torch.set_num_threads(1)
    zoo, lines, info = Zoo(), [], {}
    cal = hf_latency.generic_calibration(zoo)
    for case in (c for c in cases.latency() if c.name.endswith(".generate")):
        ids = zoo.prompt_ids(case.model, "short-0")
        plain = hf_latency.generate_path(zoo, case.model, "plain", ids, case.new_tokens, case.draft_tokens)
        for path in case.param("paths")[1:]:
            helper = case.assistant if path in ("assisted", "ensemble") else None
            run = hf_latency.generate_path(zoo, case.model, path, ids, case.new_tokens, case.draft_tokens,
                                           weight=case.param("weight") if path == "ensemble" else None,
                                           assistant=helper)
            got = run()
            if got.error is not None:
                lines.append(f"{case.model} {path}: generate() raised {got.error['type']}")
                continue
            n = 7 if case.model == "llama-target" else 3
            t_plain = latency.interleaved(plain, cal, n, warmup=1)
            t_path = latency.interleaved(run, cal, n, warmup=1)
            c = hf_latency.cost_ratio(zoo, case.model, path, helper)
            s = hf_latency.speculative_stats(got, case.draft_tokens, c, latency.median(t_plain.samples),
                                             latency.median(t_path.samples))
            info[f"{case.model}/{path}"] = s
            lines.append(f"{case.model} {path}: acceptance {s['acceptance']:.2f}, {s['tokens_per_forward']:.2f} "
                         f"tokens/forward, c {c:.3f}: speedup measured {s['speedup']:.2f}x, theory "
                         f"{s['theoretical_speedup']:.2f}x ({s['speedup'] / s['theoretical_speedup']:.2f} of theory)")
    enabled.extra_info.update(info)
    print("\n" + "\n".join(lines))
    enabled.pedantic(lambda: None, rounds=1)


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1800)
    return time.perf_counter() - start, done.returncode


def test_suite_wall_times(enabled):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("CI", None)
    times = {}
    with tempfile.TemporaryDirectory() as tmp:
        for suite in SUITES:
            times[suite] = _timed([f"suites/{suite}", "-q", "-p", "no:cacheprovider", "--harness-strict",
                                   "--harness-results", str(Path(tmp) / f"{suite}.json")], env)
        times["test_latency.py (deep)"] = _timed(
            ["suites/test_latency.py", "-q", "-p", "no:cacheprovider", "--harness-strict",
             "--harness-results", str(Path(tmp) / "deep.json"), "--harness-deep"], env)
    enabled.extra_info.update({k: v[0] for k, v in times.items()})
    print("\n" + "\n".join(f"{k}: {v[0]:.1f} s wall (exit {v[1]})" for k, v in times.items()))
    enabled.pedantic(lambda: None, rounds=1)
