"""Sampled `generate()` as a subject: N draws of the first K tokens on one path, distinct seeds.

- plain sampling draws in batches (`num_return_sequences`), one seed per batch;
- every speculative path (assisted, prompt lookup, MTP, ensemble) runs batch size 1 in
  transformers, so it is one `generate()` call per draw, seed `seed + i` for draw i, with the
  arguments built once and nothing recorded that the draw does not need.
A draw is the new tokens up to and including the first end token. `effective_processors` spies
on which logits processors the installed version really applies (its defaults included, e.g. a
top-k of 50 nobody asked for), so the expected distribution is computed for those settings and
a changed default is a recorded difference of its own.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.engine.processors import Sampling
from harness.subjects import error_of, is_subject_error
from harness.subjects.hf import draft_schedule, path_kwargs

PLAIN_BATCH = 512  # draws per plain generate() call (num_return_sequences)

# the processors whose settings map onto `Sampling` (anything else is reported, never ignored)
KNOWN = {"RepetitionPenaltyLogitsProcessor": ("repetition_penalty", "penalty"),
         "TemperatureLogitsWarper": ("temperature", "temperature"), "TopKLogitsWarper": ("top_k", "top_k"),
         "TopPLogitsWarper": ("top_p", "top_p"), "MinPLogitsWarper": ("min_p", "min_p")}


@dataclass
class Draws:
    samples: list[tuple[int, ...]] = field(default_factory=list)
    processors: list[list[Any]] = field(default_factory=list)  # [[class name, {param: value}], ...]
    error: dict[str, str] | None = None
    seconds: float = 0.0

    def effective(self) -> Sampling | None:
        """The settings the applied processors amount to; None if one of them is not a `Sampling` setting."""
        values: dict[str, Any] = {}
        for name, params in self.processors:
            if name not in KNOWN:
                return None
            key, param = KNOWN[name]
            values[key] = params.get(param)
        return Sampling(**values)


@contextlib.contextmanager
def spy_processors(sink: list[list[Any]]) -> Iterator[None]:
    """Record the logits processors generate() builds (the first call's), as plain data."""
    from transformers.generation import utils

    original = utils.GenerationMixin._get_logits_processor

    def spy(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if not sink:
            sink.extend([type(p).__name__, {k: _plain(v) for k, v in sorted(vars(p).items())
                                            if not k.startswith("_") and _plain(v) is not None}] for p in out)
        return out

    utils.GenerationMixin._get_logits_processor = spy
    try:
        yield
    finally:
        utils.GenerationMixin._get_logits_processor = original


def _plain(v: Any) -> Any:
    if isinstance(v, (bool, int, float, str)):
        return v
    return None


def _cut(tokens: list[int], eos: frozenset[int]) -> tuple[int, ...]:
    ends = [i for i, t in enumerate(tokens) if t in eos]
    return tuple(tokens[: ends[0] + 1] if ends else tokens)


def eos_ids(model) -> frozenset[int]:
    """The end tokens generate() stops at (generation config first, then the model config)."""
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    return frozenset() if eos is None else frozenset([int(eos)] if isinstance(eos, int) else map(int, eos))


def draw(model, input_ids: torch.Tensor, K: int, n: int, sampling: Sampling, *, seed: int, assistant=None,
         prompt_lookup: int | None = None, use_mtp: bool = False, ensemble_weight: float | None = None,
         draft_tokens: int | None = None) -> Draws:
    """n draws of the first K tokens of `generate(do_sample=True)` on one path (see the module docstring)."""
    kwargs: dict[str, Any] = dict(do_sample=True, max_new_tokens=K, pad_token_id=model.config.pad_token_id,
                                  attention_mask=torch.ones_like(input_ids), **sampling.kwargs(),
                                  **path_kwargs(assistant, prompt_lookup, use_mtp, ensemble_weight))
    speculative = assistant is not None or prompt_lookup is not None or use_mtp
    eos = eos_ids(model)
    out = Draws()
    start = time.process_time()
    T = input_ids.shape[1]
    try:
        with spy_processors(out.processors), draft_schedule(assistant, draft_tokens), torch.no_grad():
            if not speculative:
                for i, done in enumerate(range(0, n, PLAIN_BATCH)):
                    torch.manual_seed(seed + i)
                    rows = model.generate(input_ids, num_return_sequences=min(PLAIN_BATCH, n - done), **kwargs)
                    out.samples += [_cut(r[T:].tolist(), eos) for r in rows]
            else:
                for i in range(n):
                    torch.manual_seed(seed + i)
                    out.samples.append(_cut(model.generate(input_ids, **kwargs)[0, T:].tolist(), eos))
    except Exception as exc:
        if not is_subject_error(exc):
            raise
        out.error = error_of(exc)
    out.seconds = time.process_time() - start
    return out


def next_token_probs(model, sampling: Sampling):
    """ctx -> transformers' own (unprocessed) forward, processed by the engine's `processors`:
    the target side of a lossless path on a family the reference engine does not implement."""
    from harness.engine.processors import probs

    memo: dict[tuple[int, ...], torch.Tensor] = {}

    def p(ctx: tuple[int, ...]) -> torch.Tensor:
        if ctx not in memo:
            with torch.no_grad():
                logits = model(torch.tensor([ctx], device=model.device)).logits[0, -1].float().cpu()
            memo[ctx] = probs(logits, ctx, sampling)
        return memo[ctx]

    return p
