"""The installed transformers' stopping and streaming as a subject: greedy generate() under a
stopping setting (an eos list, stop strings, max_length / max_new_tokens, min_new_tokens, a pad
token), with the verdict of every stopping criterion on every call recorded; and generate() with a
`TextStreamer` / `TextIteratorStreamer` attached, the streamed text beside the returned ids.

- `stop_run(...)` -> `Stopped`: the new tokens of each row (pads included), their top-2 margins,
  and per row where the library's own criteria first said "stop" and which ones
  (`record_criteria`: each `StoppingCriteria` subclass's `__call__` wrapped for the call), or the
  exception transformers raised, as data;
- `SuppressUntil`: the harness's own, independent statement of what min_new_tokens must do (the
  given ids masked while fewer than `count` new tokens exist), passed as a logits processor to an
  otherwise unstopped run, so the expected stream of a min_new_tokens case is the library's own
  arithmetic without the library's min_new_tokens code;
- `stream_run(...)` -> `Streamed`: what a streamer handed out (TextStreamer: what it printed to
  stdout; TextIteratorStreamer: each piece its iterator yields) and the ids generate() returned.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.subjects import observe
from harness.subjects.hf import top2_margin, top2_scale

# the library's criteria by the name a record uses
CRITERIA = {"MaxLengthCriteria": "max_length", "EosTokenCriteria": "eos", "StopStringCriteria": "stop_string",
            "MaxTimeCriteria": "max_time", "ConfidenceCriteria": "confidence"}
STREAMERS = ("TextStreamer", "TextIteratorStreamer")
DRAIN_TIMEOUT_S = 2.0  # a TextIteratorStreamer whose generate() never called end() stops being read after this


@dataclass
class Stopped:
    rows: list[list[int]] = field(default_factory=list)  # new tokens per row, pads included
    margins: list[list[float]] = field(default_factory=list)  # top-1 minus top-2 of each step's scores, per row
    scales: list[list[float]] = field(default_factory=list)  # the same scores' `top2_scale`, per row
    stops: list[dict[str, Any]] = field(default_factory=list)  # per row: {"new_tokens": n, "by": [criteria]}
    error: dict[str, str] | None = None


@contextlib.contextmanager
def record_criteria(sink: list[tuple[str, list[bool], int]]) -> Iterator[None]:
    """Every call of a stopping criterion of the installed version, as (name, done per row, the
    sequence length it saw); the classes are restored afterwards."""
    from transformers.generation import stopping_criteria as sc

    classes = [c for c in vars(sc).values()
               if inspect.isclass(c) and issubclass(c, sc.StoppingCriteria) and c is not sc.StoppingCriteria
               and "__call__" in vars(c)]
    originals = {c: vars(c)["__call__"] for c in classes}

    def wrap(name: str, original: Any) -> Any:
        @functools.wraps(original)
        def __call__(self, input_ids, scores, **kwargs):
            out = original(self, input_ids, scores, **kwargs)
            done = out.reshape(-1).tolist() if isinstance(out, torch.Tensor) else [bool(out)] * input_ids.shape[0]
            sink.append((name, [bool(d) for d in done], int(input_ids.shape[-1])))
            return out
        return __call__

    for c, original in originals.items():
        c.__call__ = wrap(CRITERIA.get(c.__name__, c.__name__), original)
    try:
        yield
    finally:
        for c, original in originals.items():
            c.__call__ = original


def first_stops(calls: list[tuple[str, list[bool], int]], rows: int, prompt_len: int) -> list[dict[str, Any]]:
    """Per row: the number of new tokens when a criterion first said stop for it, and every
    criterion that said so at that length (sorted); {"new_tokens": None, "by": []} when none did."""
    out: list[dict[str, Any]] = []
    for row in range(rows):
        hits = [(length, name) for name, done, length in calls if row < len(done) and done[row]]
        if not hits:
            out.append({"new_tokens": None, "by": []})
            continue
        first = min(length for length, _ in hits)
        out.append({"new_tokens": first - prompt_len, "by": sorted({n for length, n in hits if length == first})})
    return out


class SuppressUntil:
    """Mask `ids` (scores -inf) while fewer than `count` tokens follow the prompt: min_new_tokens as
    its documentation states it, written here so the expected stream does not run the library's
    MinNewTokensLengthLogitsProcessor."""

    def __init__(self, prompt_len: int, count: int, ids: list[int]):
        self.prompt_len, self.count, self.ids = prompt_len, count, list(ids)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if input_ids.shape[-1] - self.prompt_len >= self.count or not self.ids:
            return scores
        scores = scores.clone()
        scores[:, self.ids] = float("-inf")
        return scores


def stop_run(model, tokenizer, input_ids: torch.Tensor, settings: dict[str, Any]) -> Stopped:
    """One greedy generate() of `input_ids` ([B, T], no padding) with the stopping `settings`
    (generate() keywords: eos_token_id, stop_strings, max_length, max_new_tokens, min_new_tokens,
    pad_token_id, logits_processor); the tokenizer is passed when there are stop strings."""
    kwargs: dict[str, Any] = dict(do_sample=False, return_dict_in_generate=True, output_scores=True, **settings)
    if "stop_strings" in settings:
        kwargs["tokenizer"] = tokenizer
    if "logits_processor" in kwargs:
        from transformers import LogitsProcessorList

        kwargs["logits_processor"] = LogitsProcessorList(kwargs["logits_processor"])
    calls: list[tuple[str, list[bool], int]] = []

    def run() -> Any:
        with record_criteria(calls), torch.no_grad():
            return model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)

    result, error = observe(run)
    if error is not None:
        return Stopped(error=error)
    prompt_len, rows = input_ids.shape[1], input_ids.shape[0]
    return Stopped(rows=result.sequences[:, prompt_len:].tolist(),
                   margins=[[top2_margin(s[r]) for s in result.scores] for r in range(rows)],
                   scales=[[top2_scale(s[r]) for s in result.scores] for r in range(rows)],
                   stops=first_stops(calls, rows, prompt_len))


# ----------------------------------------------------------------------------------------------
# streaming


@dataclass
class Streamed:
    pieces: list[str] = field(default_factory=list)  # what the streamer handed out, in order
    tokens: list[int] = field(default_factory=list)  # the new ids generate() returned
    margins: list[float] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)  # the same scores' `top2_scale`
    error: dict[str, str] | None = None
    # after each put() of new ids while generate() ran: (new ids fed so far, characters handed out so far)
    timeline: list[tuple[int, int]] = field(default_factory=list)


def _timed(cls: type) -> type:
    """The version's streamer class, watched: after each put() the harness notes how many new ids
    it was fed and how much text it had handed out (on_finalized_text) by then - when a piece came,
    observed while generate() runs, not collected after it. Its behaviour is the version's own."""

    class Timed(cls):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.harness_puts, self.harness_fed, self.harness_handed = 0, 0, 0
            self.harness_timeline: list[tuple[int, int]] = []

        def put(self, value: Any) -> None:
            super().put(value)
            self.harness_puts += 1
            if self.harness_puts > 1:  # the first put is the prompt
                self.harness_fed += int(value.shape[-1]) if value.dim() else 1
                self.harness_timeline.append((self.harness_fed, self.harness_handed))

        def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
            self.harness_handed += len(text)
            super().on_finalized_text(text, stream_end=stream_end)

    Timed.__name__ = cls.__name__
    return Timed


class _Writes(io.StringIO):
    """stdout that keeps each write (print() writes the text, then its `end`)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, s: str) -> int:
        self.writes.append(s)
        return super().write(s)


def stream_run(model, tokenizer, input_ids: torch.Tensor, max_new_tokens: int, streamer: str, skip_prompt: bool,
               **path: Any) -> Streamed:
    """One greedy generate() with a streamer of the installed version attached (`streamer`: a name
    of `STREAMERS`): TextStreamer's printed writes (stdout captured), or the pieces
    TextIteratorStreamer's iterator yields once generate() returned (its queue holds them all);
    `path`: generate() keywords that put the call on a decoding path (an assistant)."""
    import transformers

    kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=False, return_dict_in_generate=True,
                                  output_scores=True, pad_token_id=model.config.pad_token_id, **path)
    out = Streamed()
    writes = _Writes()

    def run() -> Any:
        if streamer == "TextStreamer":
            kwargs["streamer"] = _timed(transformers.TextStreamer)(tokenizer, skip_prompt=skip_prompt)
            with contextlib.redirect_stdout(writes), torch.no_grad():
                result = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
            out.pieces = [w for w in writes.writes if w]
        else:
            iterator = _timed(transformers.TextIteratorStreamer)(tokenizer, skip_prompt=skip_prompt,
                                                                 timeout=DRAIN_TIMEOUT_S)
            kwargs["streamer"] = iterator
            with torch.no_grad():
                result = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
            out.pieces = list(iterator)
        out.timeline = list(kwargs["streamer"].harness_timeline)
        return result

    result, out.error = observe(run)
    if out.error is not None:
        return out
    out.tokens = result.sequences[0, input_ids.shape[1]:].tolist()
    out.margins = [top2_margin(s[0]) for s in result.scores]
    out.scales = [top2_scale(s[0]) for s in result.scores]
    return out
