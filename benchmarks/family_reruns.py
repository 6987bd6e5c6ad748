"""A user's own model of each of 19 families, checked twice: the second, unchanged run must be clean.

    python benchmarks/family_reruns.py [--families llama,gpt2,...] [--json FILE] [-n N]

For each family a seeded random-init checkpoint (hidden 32, 2 layers, 4 heads, 2 kv heads where the
family has them; the zoo's tokenizer, vocab 512; safetensors) is saved into a scratch directory and
`harness check --model DIR` runs twice into a scratch store: the first run writes the model's
records, the second, with nothing changed, must exit 0, write nothing and report no field as
changed, fixed, new or regressed (issue 43: a rerun of an unchanged model is clean; an outcome that
depends on which test ran before it in the worker is a bug of the harness, not of the model).

A first run that fails only on in-run references (`against: reference` - a finding in the library
on this model, e.g. transformers #44609's sliding-window static cache recompiling at every decode
step under the compiled suite, Gemma 2 / Gemma 3) is not written as golden; the user's next step is
`harness regen --model DIR --yes`, which records the finding as tracked. That step is taken here,
named in the line, and the rerun after it must be clean: exit 0, the accepted findings reported as
`changed (known-deviation)` and nothing else. A first run failing on anything else is not accepted.
Prints one line per family (both exits, the second run's non-pass outcomes) and the total; exit 1
when any family's rerun was not clean.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
H, L, HEADS, KV = 32, 2, 4, 2
SPREAD = 0.25
COMMON = dict(vocab_size=512, bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
DECODER = dict(hidden_size=H, intermediate_size=2 * H, num_hidden_layers=L, num_attention_heads=HEADS,
               num_key_value_heads=KV, max_position_embeddings=512)

# model_type -> the config's keyword arguments (beyond COMMON)
FAMILIES: dict[str, dict] = {
    "llama": DECODER,
    "qwen2": DECODER,
    "qwen3": {**DECODER, "head_dim": H // HEADS},
    "qwen3_moe": {**DECODER, "head_dim": H // HEADS, "num_experts": 4, "num_experts_per_tok": 2,
                  "moe_intermediate_size": H, "decoder_sparse_step": 1},
    "gemma2": {**DECODER, "head_dim": H // HEADS, "sliding_window": 16},
    "gemma3_text": {**DECODER, "head_dim": H // HEADS, "sliding_window": 16},
    "phi3": {**DECODER, "pad_token_id": 0},
    "mistral": {**DECODER, "sliding_window": None},
    "olmo2": DECODER,
    "gpt2": dict(n_embd=H, n_layer=L, n_head=HEADS, n_positions=512),
    "gptj": dict(n_embd=H, n_layer=L, n_head=HEADS, n_positions=512, rotary_dim=4),
    "gpt_neox": {k: v for k, v in DECODER.items() if k != "num_key_value_heads"},
    "opt": dict(hidden_size=H, ffn_dim=2 * H, num_hidden_layers=L, num_attention_heads=HEADS,
                max_position_embeddings=512, word_embed_proj_dim=H),
    "falcon": dict(hidden_size=H, num_hidden_layers=L, num_attention_heads=HEADS, new_decoder_architecture=True,
                   num_kv_heads=KV),
    "granite": DECODER,
    "cohere": DECODER,
    "stablelm": DECODER,
    "qwen3_next": {**DECODER, "head_dim": H // HEADS, "num_experts": 4, "num_experts_per_tok": 2,
                   "moe_intermediate_size": H, "shared_expert_intermediate_size": H,
                   "linear_num_value_heads": 2, "linear_num_key_heads": 2, "linear_key_head_dim": 8,
                   "linear_value_head_dim": 8, "layer_types": ["linear_attention", "full_attention"]},
    "qwen3_5_text": {**DECODER, "head_dim": H // HEADS, "linear_num_value_heads": 2, "linear_num_key_heads": 2,
                     "linear_key_head_dim": 8, "linear_value_head_dim": 8,
                     "layer_types": ["linear_attention", "full_attention"]},
}


def checkpoint(family: str, directory: Path) -> None:
    """Save a seeded random-init model of `family`: 2-d weights N(0, SPREAD^2), so the logits have a
    spread (std ~1.4 at hidden 32, greedy steps not all near-ties) while activations stay near unit
    scale through the layers - at 0.5 they grow ~2.8x a matmul, and fp32 rounding differences between
    two implementations (3e-5 on unit-scale logits) outgrow the in-run references' allowance (which
    scales with the compared values, not with the model's intermediate magnitudes)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(family, **{**COMMON, **FAMILIES[family]})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.normal_(0.0, SPREAD)
    model.save_pretrained(str(directory), safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(REPO / "golden" / "models" / "llama-target" / name, directory / name)


def check(model: Path, scratch: Path, workers: str, command: str = "check") -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    env.pop("CI", None)
    cmd = [sys.executable, "-m", "harness", command, "--root", str(REPO), "--golden-dir", str(scratch / "records"),
           "--reports-dir", str(scratch / "reports"), "--model", str(model), "-n", workers,
           *(["--yes"] if command == "regen" else [])]
    (scratch / "records").mkdir(exist_ok=True)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True, timeout=1800)
    seconds = round(time.monotonic() - start, 1)
    report = next((line.split(":", 1)[1].strip() for line in proc.stdout.splitlines() if line.startswith("report:")), "")
    outcomes = []
    if report and (Path(report).parent / "results.json").exists():
        outcomes = json.loads((Path(report).parent / "results.json").read_text())["outcomes"]
    not_pass = sorted(f"{o['status']}/{o.get('category', '')}: {o['suite']}/{o['case']}/{o['field']}" for o in outcomes
                      if o["status"] in ("changed", "regression", "new", "missing"))
    library = sorted(f"{o['suite']}/{o['case']}/{o['field']}" for o in outcomes
                     if o["status"] == "regression" and o.get("against") == "reference")
    regressed = sum(o["status"] == "regression" for o in outcomes)
    wrote = next((line for line in proc.stdout.splitlines() if line.startswith("records written")), "")
    return {"exit": proc.returncode, "seconds": seconds, "not_pass": not_pass, "wrote": wrote,
            "library_findings": library if library and len(library) == regressed else [],
            "tail": proc.stdout[-800:] + proc.stderr[-800:]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("-n", dest="workers", default="2")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows, dirty = [], 0
    for family in args.families.split(","):
        with tempfile.TemporaryDirectory(prefix=f"rerun-{family}-") as tmp:
            scratch = Path(tmp)
            model = scratch / f"my-{family.replace('_', '-')}"
            try:
                checkpoint(family, model)
            except Exception as exc:  # a family this transformers cannot build is said, not a crash
                print(f"{family}: cannot build ({type(exc).__name__}: {exc})", flush=True)
                rows.append({"family": family, "build_error": str(exc)})
                continue
            first = check(model, scratch, args.workers)
            accepted = first["library_findings"] if first["exit"] == 1 else []
            if accepted:  # the user's step for a finding in the library: record it as tracked
                first["regen"] = check(model, scratch, args.workers, "regen")
            second = check(model, scratch, args.workers)
        tracked = {f"changed/known-deviation: {name}" for name in accepted}
        clean = (second["exit"] == 0 and not [x for x in second["not_pass"] if x not in tracked]
                 and "none" in second["wrote"])
        dirty += not clean
        rows.append({"family": family, "first": first, "second": second, "clean": clean, "accepted": accepted})
        took = f", regen --yes accepted {len(accepted)} library finding(s): {'; '.join(accepted)}" if accepted else ""
        print(f"{family}: first exit {first['exit']} ({first['seconds']} s){took}, second exit {second['exit']} "
              f"({second['seconds']} s), {'clean' if clean else 'NOT CLEAN: ' + '; '.join(second['not_pass'][:6])} "
              f"[{second['wrote']}]", flush=True)
        if not clean and not second["not_pass"]:
            print("   " + second["tail"].replace("\n", "\n   "), flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    print(f"\n{dirty}/{len(rows)} families' unchanged reruns were not clean")
    return 1 if dirty else 0


if __name__ == "__main__":
    sys.exit(main())
