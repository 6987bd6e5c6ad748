"""Sampled `generate()` as a subject: N draws of the first K tokens on one path, distinct seeds.

- plain sampling draws in batches of PLAIN_BATCH (`num_return_sequences`), one seed per batch;
- every speculative path (assisted, prompt lookup, MTP, ensemble) runs batch size 1 in
  transformers, so it is one `generate()` call per draw, seed `seed + i` for draw i, with the
  arguments built once and nothing recorded that the draw does not need.
A draw is the new tokens up to and including the first end token. `spy_processors` spies
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
from harness.subjects.hf_whitebox import chain_of

PLAIN_BATCH = 100  # draws per plain generate() call (num_return_sequences); designs draw multiples of it

# the processors whose settings map onto `Sampling` (anything else is reported, never ignored)
KNOWN = {"RepetitionPenaltyLogitsProcessor": ("repetition_penalty", "penalty"),
         "TemperatureLogitsWarper": ("temperature", "temperature"), "TopKLogitsWarper": ("top_k", "top_k"),
         "TopPLogitsWarper": ("top_p", "top_p"), "MinPLogitsWarper": ("min_p", "min_p")}


# processors that only mask the end token before a minimum length: identity once the context is that long
MIN_LENGTH = {"MinLengthLogitsProcessor", "MinNewTokensLengthLogitsProcessor"}


def effective(processors: list[list[Any]]) -> Sampling | None:
    """The settings a processor list amounts to; None if one of them is not a `Sampling` setting
    (or one is applied twice)."""
    values: dict[str, Any] = {}
    for name, params in processors:
        if name not in KNOWN or KNOWN[name][0] in values:
            return None
        key, param = KNOWN[name]
        values[key] = params.get(param)
    return Sampling(**values)


def chain_steps(processors: list[list[Any]], context_len: int) -> list[Sampling]:
    """A processor list as the engine's chain - one single-setting `Sampling` per processor, in the
    list's order, repeats kept (harness/engine/processors.py `probs`); a min-length processor is
    identity once the context is long enough. ValueError names a processor the engine cannot apply."""
    chain: list[Sampling] = []
    for name, params in processors:
        if name in MIN_LENGTH:
            need = params.get("min_length", 0) if name == "MinLengthLogitsProcessor" else \
                params.get("prompt_length_to_skip", 0) + params.get("min_new_tokens", 0)
            if context_len < (need or 0):
                raise ValueError(f"{name} masks the end token at this context length ({context_len} < {need})")
            continue
        if name not in KNOWN:
            raise ValueError(f"processor {name} has no engine counterpart")
        key, param = KNOWN[name]
        chain.append(Sampling(**{key: params.get(param)}))
    return chain


@dataclass
class Draws:
    samples: list[tuple[int, ...]] = field(default_factory=list)
    processor_lists: list[list[list[Any]]] = field(default_factory=list)  # every list built, in order
    error: dict[str, str] | None = None
    seconds: float = 0.0

    @property
    def processors(self) -> list[list[Any]]:
        """The target's processors ([[class name, {param: value}], ...]): the first list generate() built."""
        return self.processor_lists[0] if self.processor_lists else []

    @property
    def drafter_processors(self) -> list[list[Any]]:
        """The assistant's: the list its own generate() built (the second), else the target's (MTP)."""
        return self.processor_lists[1] if len(self.processor_lists) > 1 else self.processors

    def effective(self) -> Sampling | None:
        return effective(self.processors)


@contextlib.contextmanager
def spy_processors(sink: list[list[list[Any]]]) -> Iterator[None]:
    """Record every logits-processor list generate() builds (the target's, then an assistant's), as plain data."""
    from transformers.generation import utils

    original = utils.GenerationMixin._get_logits_processor

    def spy(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if len(sink) < 2:
            sink.append(chain_of(out))
        return out

    utils.GenerationMixin._get_logits_processor = spy
    try:
        yield
    finally:
        utils.GenerationMixin._get_logits_processor = original


def _cut(tokens: list[int], eos: frozenset[int]) -> tuple[int, ...]:
    ends = [i for i, t in enumerate(tokens) if t in eos]
    return tuple(tokens[: ends[0] + 1] if ends else tokens)


def eos_ids(model) -> frozenset[int]:
    """The end tokens generate() stops at (generation config first, then the model config)."""
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    return frozenset() if eos is None else frozenset([int(eos)] if isinstance(eos, int) else map(int, eos))


def sampling_kwargs(model, input_ids: torch.Tensor, K: int, sampling: Sampling, *, assistant=None,
                    prompt_lookup: int | None = None, use_mtp: bool = False,
                    ensemble_weight: float | None = None) -> dict[str, Any]:
    """The generate() keyword arguments of a sampled call on one path (K new tokens)."""
    return dict(do_sample=True, max_new_tokens=K, pad_token_id=model.config.pad_token_id,
                attention_mask=torch.ones_like(input_ids), **sampling.kwargs(),
                **path_kwargs(assistant, prompt_lookup, use_mtp, ensemble_weight))


def draw(model, input_ids: torch.Tensor, K: int, n: int, sampling: Sampling, *, seed: int, assistant=None,
         prompt_lookup: int | None = None, use_mtp: bool = False, ensemble_weight: float | None = None,
         draft_tokens: int | None = None, start: int = 0) -> Draws:
    """Draws start .. n - 1 of the first K tokens of `generate(do_sample=True)` on one path (see the
    module docstring). Draw i depends on (seed, i) only - speculative draw i uses seed + i, plain
    batch j (draws j*PLAIN_BATCH ..) seed + j - so the first m of n draws are the m draws, and a case
    drawn for two designs shares them (`start`: a multiple of PLAIN_BATCH)."""
    kwargs = sampling_kwargs(model, input_ids, K, sampling, assistant=assistant, prompt_lookup=prompt_lookup,
                             use_mtp=use_mtp, ensemble_weight=ensemble_weight)
    speculative = assistant is not None or prompt_lookup is not None or use_mtp
    eos = eos_ids(model)
    out = Draws()
    begin = time.process_time()
    T = input_ids.shape[1]
    try:
        with spy_processors(out.processor_lists), draft_schedule(assistant, draft_tokens), torch.no_grad():
            if not speculative:
                if start % PLAIN_BATCH:
                    raise ValueError(f"plain draws extend in batches of {PLAIN_BATCH}, not from {start}")
                for done in range(start, n, PLAIN_BATCH):
                    torch.manual_seed(seed + done // PLAIN_BATCH)
                    rows = model.generate(input_ids, num_return_sequences=min(PLAIN_BATCH, n - done), **kwargs)
                    out.samples += [_cut(r[T:].tolist(), eos) for r in rows]
            else:
                for i in range(start, n):
                    torch.manual_seed(seed + i)
                    out.samples.append(_cut(model.generate(input_ids, **kwargs)[0, T:].tolist(), eos))
    except Exception as exc:
        if not is_subject_error(exc):
            raise
        out.error = error_of(exc)
    out.seconds = time.process_time() - begin
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
