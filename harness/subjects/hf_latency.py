"""The installed transformers as a timed subject: prefill, steady-state decode and generate() on
each path, and the serving paths (compiled static-cache generate(), continuous batching's generate_batch
and the same requests through generate() in turn), as zero-argument callables
for `harness.designs.latency.interleaved`, plus the calibration workloads (the reference engine's forward
and decode) and a proportional slowdown to inject into a model's forward (for checking that the latency
suite catches one).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from harness.subjects import hf_cache, hf_compiled, hf_continuous, timing
from harness.subjects.hf import Zoo, generate
from harness.subjects.timing import rss_bytes, theoretical_speedup

DECODE_WARMUP = 4  # decode steps after prefill before the timed ones (steady state)
DECODE_STEPS = 8  # timed decode steps per sample
CACHE_LEN = 128  # static cache capacity (the long prompt is 83 tokens)
CALIBRATION_MODEL = "llama-target"  # its reference-engine forward is every field's calibration
COMPILE_BACKEND = "aot_eager"  # the serving case's compiled path (graph capture, no code generation: seconds on a CPU)


def new_cache(model, kind: str):
    """An empty DynamicCache or StaticCache(max_cache_len=CACHE_LEN) for the model."""
    dynamic, dyn_err, static, st_err = hf_cache.new_caches(model, CACHE_LEN)
    cache, err = (dynamic, dyn_err) if kind == "dynamic" else (static, st_err)
    if cache is None:
        raise RuntimeError(f"cannot build a {kind} cache: {err}")
    return cache


def prefill(model, ids: torch.Tensor, kind: str) -> Callable[[], Any]:
    """One forward over the whole prompt into a fresh cache of `kind` (building the cache included)."""
    def run():
        return hf_cache.forward(model, ids, new_cache(model, kind))
    return run


def decode_setup(model, ids: torch.Tensor, kind: str) -> Callable[[], tuple[Any, torch.Tensor, int]]:
    """A prefilled cache after DECODE_WARMUP greedy steps: (cache, next token, its position)."""
    def setup():
        cache = new_cache(model, kind)
        nxt = hf_cache.forward(model, ids, cache)[-1].argmax().view(1, 1)
        for _ in range(DECODE_WARMUP):
            nxt = hf_cache.forward(model, nxt, cache)[-1].argmax().view(1, 1)
        return cache, nxt
    return setup


def decode_steps(model) -> Callable[[tuple[Any, torch.Tensor]], None]:
    """DECODE_STEPS greedy single-token forwards through a prefilled cache (per-token time =
    sample / DECODE_STEPS)."""
    def run(state):
        cache, nxt = state
        for _ in range(DECODE_STEPS):
            nxt = hf_cache.forward(model, nxt, cache)[-1].argmax().view(1, 1)
    return run


def generate_path(zoo: Zoo, model_name: str, path: str, ids: torch.Tensor, new_tokens: int, draft_tokens: int,
                  weight: float | None = None, assistant: str | None = None) -> Callable[[], Any]:
    """One greedy generate() call on `path` (plain, assisted, prompt_lookup, mtp, ensemble)."""
    model = zoo.load(model_name).model
    helper = zoo.load(assistant).model if assistant else None

    def run():
        return generate(model, ids, new_tokens, assistant=helper,
                        prompt_lookup=draft_tokens if path == "prompt_lookup" else None,
                        use_mtp=path == "mtp", ensemble_weight=weight,
                        draft_tokens=None if path in ("plain", "prompt_lookup", "mtp") else draft_tokens)
    return run


def compiled_generate(model, ids: torch.Tensor, new_tokens: int) -> Callable[[], hf_compiled.Compiled]:
    """One greedy static-cache generate() call compiled as the compiled suite asks (aot_eager, on every
    device: harness/subjects/hf_compiled.py); timed after a call that compiled it, so the samples are the
    steady state - unless the version recompiles on every call (#37908's class), which they then hold."""
    config, _ = hf_compiled.compile_config(COMPILE_BACKEND)

    def run() -> hf_compiled.Compiled:
        return hf_compiled.run(model, ids, new_tokens, config)
    return run


def continuous_batch(model, prompts: list[list[int]], new_tokens: int) -> Callable[[], hf_continuous.Served]:
    """One generate_batch of the prompts (greedy, the model's eos, the continuous suite's paged-cache sizing)."""
    def run() -> hf_continuous.Served:
        return hf_continuous.run_batch(model, prompts, new_tokens, eos_token_id=model.generation_config.eos_token_id,
                                       pad_token_id=model.config.pad_token_id or 0)
    return run


def sequential_generate(model, prompts: list[list[int]], new_tokens: int, device: str) -> Callable[[], list[Any]]:
    """The same requests through greedy generate(), one after another (what serving without continuous
    batching does with them)."""
    rows = [torch.tensor([p], device=device) for p in prompts]

    def run() -> list[Any]:
        return [generate(model, ids, new_tokens) for ids in rows]
    return run


@dataclass(frozen=True)
class Calibration:
    """A fixed reference workload timed beside a subject: `run()` and what it is."""

    run: Callable[[], Any]
    describes: str


def generic_calibration(zoo: Zoo) -> Calibration:
    """The fallback workload (a model the engine does not implement): the reference engine's
    forward of the calibration model over its short prompt, no cache."""
    ref = zoo.oracle.model(CALIBRATION_MODEL)
    ids = zoo.prompt_ids(CALIBRATION_MODEL, "short-0")[0].cpu()
    positions = torch.arange(ids.shape[0])
    return Calibration(lambda: ref.forward(ids, positions, None),
                       f"reference engine: {CALIBRATION_MODEL} forward over short-0 (generic)")


def prefill_calibration(zoo: Zoo, name: str, ids: torch.Tensor) -> Calibration:
    """The same prompt's forward through the model's reference-engine twin (fresh, no cache)."""
    ref = zoo.oracle.model(name)
    if ref is None:
        return generic_calibration(zoo)
    flat = ids[0].cpu()
    positions = torch.arange(flat.shape[0])
    return Calibration(lambda: ref.forward(flat, positions, None),
                       f"reference engine: {name} forward over the same {flat.shape[0]} tokens")


def decode_calibration(zoo: Zoo, name: str, ids: torch.Tensor) -> Calibration:
    """DECODE_STEPS single-token steps of the model's reference-engine twin over a prefilled cache
    (rewound after each sample, so every sample does the same work)."""
    ref = zoo.oracle.model(name)
    if ref is None:
        return generic_calibration(zoo)
    flat = ids[0].cpu()
    caches = ref.new_caches(slack=DECODE_STEPS + 1)
    last = int(ref.forward(flat, torch.arange(flat.shape[0]), caches).logits[-1].argmax())

    def run() -> None:
        token = last
        for i in range(DECODE_STEPS):
            token = int(ref.forward(torch.tensor([token]), torch.tensor([flat.shape[0] + i]), caches).logits[-1].argmax())
        for cache in caches:
            cache.rewind(DECODE_STEPS)
    return Calibration(run, f"reference engine: {name}, {DECODE_STEPS} single-token steps over a prefilled cache")


def generate_calibration(zoo: Zoo, name: str, ids: torch.Tensor, new_tokens: int) -> Calibration:
    """A greedy decode of `new_tokens` tokens by the model's reference-engine twin (plain)."""
    ref = zoo.oracle.model(name)
    if ref is None:
        return generic_calibration(zoo)
    from harness.engine.decode import decode

    prompt = ids[0].tolist()
    return Calibration(lambda: decode(ref, prompt, new_tokens, drafter=None, k=1, mode="greedy", w=None,
                                      static_max_len=None, eos_token_id=None),
                       f"reference engine: {name} greedy decode of {new_tokens} tokens")


def requests_calibration(zoo: Zoo, name: str, prompts: list[list[int]], new_tokens: int) -> Calibration:
    """Greedy decodes of `new_tokens` tokens of each prompt in turn by the model's reference-engine twin."""
    ref = zoo.oracle.model(name)
    if ref is None:
        return generic_calibration(zoo)
    from harness.engine.decode import decode

    def run() -> None:
        for prompt in prompts:
            decode(ref, prompt, new_tokens, drafter=None, k=1, mode="greedy", w=None, static_max_len=None,
                   eos_token_id=None)
    return Calibration(run, f"reference engine: {name} greedy decodes of {new_tokens} tokens of {len(prompts)} "
                            "prompts in turn")


def rss_delta(model, ids: torch.Tensor, kind: str, steps: int = 16) -> int:
    """CPU resident-set growth (bytes) while a fresh cache of `kind` is prefilled with `ids` and
    decoded `steps` tokens, the cache still alive at the end (allocator-granular; 0 off Linux)."""
    before = rss_bytes()
    cache = new_cache(model, kind)
    nxt = hf_cache.forward(model, ids, cache)[-1].argmax().view(1, 1)
    for _ in range(steps):
        nxt = hf_cache.forward(model, nxt, cache)[-1].argmax().view(1, 1)
    grown = rss_bytes() - before
    del cache
    return grown


@contextlib.contextmanager
def slowed(model, fraction: float) -> Iterator[None]:
    """Make every forward of `model` cost (1 + fraction) times its own time: after each call it
    busy-waits fraction * (that call's time) - CPU work, like a real slowdown, not a sleep."""
    if not fraction:
        yield
        return
    starts: list[float] = []

    def pre(_module, _args):
        starts.append(timing.timer())

    def post(_module, _args, _out):
        timing.busy_wait(fraction * (timing.timer() - starts.pop()))

    handles = [model.register_forward_pre_hook(pre), model.register_forward_hook(post)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def cost_ratio(zoo: Zoo, model_name: str, path: str, assistant: str | None) -> float:
    """c = t(one draft step) / t(one target step), from the architectures: prompt lookup 0 (a
    string match), MTP 1 / trunk layers (one MTP layer), an assistant its layers / the target's
    (the zoo's models share widths); a user model's assistant: its parameters / the target's."""
    if path == "prompt_lookup":
        return 0.0
    if zoo.checkpoints.is_user(model_name) and path != "mtp":
        def params(name: str) -> int:
            return sum(p.numel() for p in zoo.load(name).model.parameters())
        return params(assistant) / params(model_name)
    layers = zoo.checkpoints.config_json(model_name)["num_hidden_layers"]
    if path == "mtp":
        return 1.0 / layers
    return zoo.checkpoints.config_json(assistant)["num_hidden_layers"] / layers


def speculative_stats(got, draft_tokens: int, c: float, plain_s: float, path_s: float) -> dict[str, float]:
    """Per-token acceptance a (accepted / (accepted + rejections): drafts after a rejection were
    never tested), tokens per target forward, and the measured speedup (plain / path, medians of
    one run) next to Leviathan et al.'s theoretical one from a, g = draft_tokens and c."""
    accepted, drafted = got.acceptance_trace()
    rejections = sum(1 for a, d in zip(accepted, drafted, strict=True) if a < d)
    a = sum(accepted) / max(1, sum(accepted) + rejections)
    return {"acceptance": a, "accepted": sum(accepted), "drafted": sum(drafted),
            "tokens_per_forward": len(got.tokens) / max(1, got.target_forwards), "draft_tokens": draft_tokens,
            "cost_ratio": c, "speedup": plain_s / path_s,
            "theoretical_speedup": theoretical_speedup(a, draft_tokens, c)}
