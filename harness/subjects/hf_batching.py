"""The installed transformers' batching as a subject: one generate() call on a padded batch (or
on one prompt alone), with what reached the model recorded.

- `batch_run(...)` -> `BatchRun`: the new tokens of each row, their top-2 margins, each step's
  processed scores per row, every forward call's 2D attention mask and position ids as the
  top-level model received them (`record_forwards`: the model's `forward` wrapped for the call),
  and the padding warnings transformers logged (`record_padding_warnings`) - or the exception
  transformers raised (a speculative path that refuses a batch), as data.

The padded batch itself is built by the harness (harness/designs/batching.py `pad_rows`), so what
is observed is generate(), not a tokenizer's padding.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.subjects import observe
from harness.subjects.hf import draft_schedule, path_kwargs, top2_margin, top2_scale

PADDING_WORD = "padding"  # a warning is kept when it mentions padding (others, e.g. warning_once ones, are not ours)


@dataclass
class Forward:
    """One call of the model's forward: its 2D attention mask and position ids ([B, T] lists;
    None when the call received none), and how many keys its attention spans."""

    attention_mask: list[list[int]] | None
    position_ids: list[list[int]] | None
    key_length: int | None = None  # the cache's length before the call plus the call's input length


def _key_length(kwargs: dict[str, Any]) -> int | None:
    ids = kwargs.get("input_ids")
    if not isinstance(ids, torch.Tensor):
        return None
    cache = kwargs.get("past_key_values", kwargs.get("cache"))
    past = cache.get_seq_length() if hasattr(cache, "get_seq_length") else 0
    return int(past) + int(ids.shape[-1])


@dataclass
class BatchRun:
    rows: list[list[int]] = field(default_factory=list)  # new tokens per row
    margins: list[list[float]] = field(default_factory=list)  # top-1 minus top-2 of each step's scores, per row
    scales: list[list[float]] = field(default_factory=list)  # the same scores' `top2_scale`, per row
    scores: list[list[list[float]]] = field(default_factory=list)  # per row, per step: the processed scores
    forwards: list[Forward] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # padding warnings transformers logged or warned
    error: dict[str, str] | None = None


def _as_rows(value: Any) -> list[list[int]] | None:
    if not isinstance(value, torch.Tensor):
        return None
    rows = value.reshape(value.shape[0], -1) if value.dim() >= 2 else value.reshape(1, -1)
    return rows.long().tolist()


@contextlib.contextmanager
def record_forwards(model, sink: list[Forward]) -> Iterator[None]:
    """Every call of `model.forward` during the block, as a `Forward` (the keyword arguments
    `attention_mask` and `position_ids` that generate() passed; a positional call records None)."""
    original = model.forward

    @functools.wraps(original)  # generate() inspects forward's signature
    def forward(*args, **kwargs):
        sink.append(Forward(_as_rows(kwargs.get("attention_mask")), _as_rows(kwargs.get("position_ids")),
                            _key_length(kwargs)))
        return original(*args, **kwargs)

    model.forward = forward
    try:
        yield
    finally:
        del model.forward


class _Keep(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if PADDING_WORD in message.lower():
            self.sink.append(message)


@contextlib.contextmanager
def record_padding_warnings(sink: list[str]) -> Iterator[None]:
    """The padding warnings of the block: transformers' logger (its own handlers stay; its level is
    lowered to WARNING for the block, so a quieter TRANSFORMERS_VERBOSITY does not hide one) and
    Python warnings, in order, each message once as raised."""
    handler = _Keep(sink)
    logger = logging.getLogger("transformers")
    level = logger.level
    logger.addHandler(handler)
    if level > logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
        sink.extend(str(w.message) for w in caught if PADDING_WORD in str(w.message).lower())
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def batch_run(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int, pad_token_id: int,
              *, do_sample: bool = False, seed: int | None = None, assistant=None, prompt_lookup: int | None = None,
              draft_tokens: int | None = None) -> BatchRun:
    """One generate() of `input_ids` [B, T] with `attention_mask` (the padding the harness built),
    greedy or seeded sampling, on the plain path or a speculative one (an assistant, prompt lookup)."""
    kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=do_sample, return_dict_in_generate=True,
                                  output_scores=True, pad_token_id=pad_token_id,
                                  **path_kwargs(assistant, prompt_lookup))
    out = BatchRun()
    if seed is not None:
        torch.manual_seed(seed)

    def run() -> Any:
        with (record_forwards(model, out.forwards), record_padding_warnings(out.warnings),
              draft_schedule(assistant, draft_tokens), torch.no_grad()):
            return model.generate(input_ids, attention_mask=attention_mask, **kwargs)

    result, out.error = observe(run)
    if out.error is not None:
        return out
    prompt_len, rows = input_ids.shape[1], input_ids.shape[0]
    out.rows = result.sequences[:, prompt_len:].tolist()
    out.margins = [[top2_margin(s[r]) for s in result.scores] for r in range(rows)]
    out.scales = [[top2_scale(s[r]) for s in result.scores] for r in range(rows)]
    out.scores = [[s[r].float().tolist() for s in result.scores] for r in range(rows)]
    return out
