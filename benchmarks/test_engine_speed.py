"""Reference engine speed, as ratios measured in one run (this machine is noisy; absolute
times mean little). Run: `pytest benchmarks --benchmark-enable -s`.

1. Plain greedy decode tokens/s: reference engine vs transformers' generate() on the same
   model (target: reference >= 1.5x on the zoo models on CPU).
2. Speculative speedup of the reference engine vs the theoretical one (Leviathan et al. 2023,
   eq. 1 and thm. 3.8): with per-token acceptance rate a, draft length g and cost ratio
   c = t(draft forward) / t(target forward),
       E[tokens per step] = (1 - a^(g+1)) / (1 - a),   speedup = E / (g*c + 1),
   (target: measured speedup >= 0.85 of that).
Each ratio is printed and stored in the benchmark's extra_info.
"""

from __future__ import annotations

import time

import pytest
import torch

from harness.engine.decode import decode
from harness.engine.drafters import AssistantDrafter
from harness.zoo import load, prompts

NEW_TOKENS = 48
REPEATS = 5


def best_of(fn, repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def ids_of(name: str) -> list[int]:
    _, tok = load.load_hf(name)
    return tok(prompts.BY_ID["short-0"].text).input_ids


def theoretical_speedup(a: float, g: int, c: float) -> float:
    expected_tokens = (1 - a ** (g + 1)) / (1 - a) if a < 1 else g + 1
    return expected_tokens / (g * c + 1)


@pytest.mark.parametrize("name", ["llama-target", "mistral-sliding", "qwen2-hybrid", "llama4-chunked"])
def test_reference_vs_transformers_tokens_per_second(benchmark, name):
    torch.set_num_threads(1)
    model, _ = load.load_hf(name)
    ref = load.load_reference(name)
    ids = ids_of(name)
    x = torch.tensor([ids])
    # the same work on both sides: NEW_TOKENS greedy tokens, no early stop at </s>
    out = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                         do_sample=False, pad_token_id=0)
    assert out.shape[1] - len(ids) == len(decode(ref, ids, NEW_TOKENS).tokens) == NEW_TOKENS
    t_hf = best_of(lambda: model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=NEW_TOKENS,
                                          min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0))
    t_ref = best_of(lambda: decode(ref, ids, NEW_TOKENS))
    ratio = t_hf / t_ref
    benchmark.extra_info.update(model=name, hf_seconds=t_hf, ref_seconds=t_ref, ref_over_hf_tokens_per_s=ratio)
    print(f"\n{name}: reference {NEW_TOKENS / t_ref:.0f} tok/s, transformers {NEW_TOKENS / t_hf:.0f} tok/s, "
          f"ratio {ratio:.2f} (target >= 1.5)")
    benchmark(lambda: decode(ref, ids, NEW_TOKENS))


def test_speculative_speedup_vs_theory(benchmark):
    torch.set_num_threads(1)
    target, assistant = load.load_reference("llama-target"), load.load_reference("llama-assistant")
    ids, g = ids_of("llama-target"), 4
    one = torch.tensor(ids[-1:])
    t_target = best_of(lambda: target.forward(one, torch.tensor([len(ids)]), None), 50)
    t_draft = best_of(lambda: assistant.forward(one, torch.tensor([len(ids)]), None), 50)
    run = decode(target, ids, NEW_TOKENS, drafter=AssistantDrafter(assistant), k=g)
    accepted, _ = run.acceptance
    rejections = sum(1 for s in run.steps if s.accepted < s.drafted)
    a = accepted / (accepted + rejections)  # per-token acceptance: drafts after a rejection were never tested
    t_plain = best_of(lambda: decode(target, ids, NEW_TOKENS))
    t_spec = best_of(lambda: decode(target, ids, NEW_TOKENS, drafter=AssistantDrafter(assistant), k=g))
    measured, theory = t_plain / t_spec, theoretical_speedup(a, g, t_draft / t_target)
    benchmark.extra_info.update(acceptance=a, cost_ratio=t_draft / t_target, measured_speedup=measured,
                                theoretical_speedup=theory, fraction_of_theory=measured / theory)
    print(f"\nacceptance {a:.3f}, c {t_draft / t_target:.2f}: speedup measured {measured:.2f}x, "
          f"theory {theory:.2f}x, fraction {measured / theory:.2f} (target >= 0.85)")
    benchmark(lambda: decode(target, ids, NEW_TOKENS, drafter=AssistantDrafter(assistant), k=g))
