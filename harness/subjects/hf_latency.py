"""The installed transformers as a timed subject: prefill, steady-state decode and generate() on
each path, as zero-argument callables for `harness.designs.latency.interleaved`, plus the calibration
workload (the reference engine's forward) and a proportional slowdown to inject into a model's
forward (for checking that the latency suite catches one).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from harness.subjects import hf_cache, timing
from harness.subjects.hf import Zoo, generate
from harness.subjects.timing import rss_bytes, theoretical_speedup

DECODE_WARMUP = 4  # decode steps after prefill before the timed ones (steady state)
DECODE_STEPS = 8  # timed decode steps per sample
CACHE_LEN = 128  # static cache capacity (the long prompt is 83 tokens)
CALIBRATION_MODEL = "llama-target"  # its reference-engine forward is every field's calibration


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


def calibration(zoo: Zoo) -> Callable[[], Any]:
    """The fixed reference workload: the reference engine's (torch only) forward of the
    calibration model over the short prompt, no cache."""
    ref = zoo.reference(CALIBRATION_MODEL)
    ids = zoo.prompt_ids(CALIBRATION_MODEL, "short-0")[0].cpu()
    positions = torch.arange(ids.shape[0])

    def run():
        return ref.forward(ids, positions, None)
    return run


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
    if zoo.is_user(model_name) and path != "mtp":
        def params(name: str) -> int:
            return sum(p.numel() for p in zoo.load(name).model.parameters())
        return params(assistant) / params(model_name)
    layers = zoo.config_json(model_name)["num_hidden_layers"]
    if path == "mtp":
        return 1.0 / layers
    return zoo.config_json(assistant)["num_hidden_layers"] / layers


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
