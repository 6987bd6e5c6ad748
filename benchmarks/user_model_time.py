"""How long `harness check --model PATH` takes on a checkpoint of a given size, to estimate a real one's.

    python benchmarks/user_model_time.py --sizes 256x4 512x8 --vocab 32000 [--threads N]

For each size (hidden x layers) it saves a seeded random Qwen3 (head_dim 64, MLP 3x hidden,
untied lm_head) with the zoo's tokenizer padded with added tokens to `--vocab`, runs
`harness check --model DIR` into a scratch store (the first run: every record written, what a
first run on your model costs) and prints its CPU time (the process and its pytest subprocess;
the suites run one intra-op thread, so on an idle machine this is the wall time - on a shared one
the wall time is noisier) and wall time, with the model's compute parameters (every weight but
the input embedding, which is a lookup). A line through the first and last points, CPU time =
fixed + per-parameter * compute params, is extrapolated to `--target` parameters (default 1.24e9,
Llama-3.2-1B). The cases are the defaults for a model without an assistant (plain and
prompt lookup, greedy and sampled, dynamic and static cache, two prompts; caches; backends).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def checkpoint(directory: Path, hidden: int, layers: int, vocab: int) -> int:
    """Save the model; return its compute parameters (all but the input embedding)."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    heads = max(hidden // 64, 1)
    config = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=3 * hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=max(heads // 2, 1), head_dim=hidden // heads,
                         max_position_embeddings=512, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    model.save_pretrained(str(directory), safe_serialization=True)
    tokenizer = AutoTokenizer.from_pretrained(str(REPO / "golden" / "models" / "llama-target"))
    tokenizer.add_tokens([f"<x{i}>" for i in range(vocab - len(tokenizer))])
    tokenizer.save_pretrained(str(directory))
    return sum(p.numel() for p in model.parameters()) - model.model.embed_tokens.weight.numel()


def timed_check(model: Path, scratch: Path, threads: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the harness process and its pytest subprocess)."""
    (scratch / "records").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("CI", None)
    cmd = [sys.executable, "-m", "harness", "check", "--root", str(REPO), "--golden-dir", str(scratch / "records"),
           "--reports-dir", str(scratch / "reports"), "--model", str(model)]
    if threads:
        cmd += ["--threads", str(threads)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if run.returncode not in (0, 1):
        raise SystemExit(f"harness check failed ({run.returncode}):\n{run.stdout[-2000:]}\n{run.stderr[-2000:]}")
    return seconds, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["256x4", "512x8"], help="HIDDENxLAYERS per checkpoint")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--threads", type=int, default=0, help="--threads of the run (0: the suites' default, 1)")
    parser.add_argument("--target", type=float, default=1.24e9, help="compute parameters to extrapolate to")
    args = parser.parse_args()
    points = []
    with tempfile.TemporaryDirectory(prefix="harness-user-time-") as tmp:
        for size in args.sizes:
            hidden, layers = (int(x) for x in size.split("x"))
            directory = Path(tmp) / f"qwen3-{size}"
            params = checkpoint(directory, hidden, layers, args.vocab)
            wall, cpu = timed_check(directory, Path(tmp) / f"run-{size}", args.threads)
            points.append((params, cpu))
            print(f"{size}: {params / 1e6:.1f}M compute params, vocab {args.vocab}: harness check --model "
                  f"{cpu:.1f} s CPU ({wall:.1f} s wall)", flush=True)
            shutil.rmtree(directory)
    if len(points) >= 2:
        (p0, t0), (p1, t1) = points[0], points[-1]
        slope = (t1 - t0) / (p1 - p0)
        fixed = t0 - slope * p0
        print(f"fit (CPU time): {fixed:.1f} s + {slope * 1e6:.3f} s per M params -> {args.target / 1e9:.2f}B params: "
              f"{(fixed + slope * args.target) / 60:.1f} min")


if __name__ == "__main__":
    main()
