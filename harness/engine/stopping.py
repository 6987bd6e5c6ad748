"""The stop rule: where a greedy generate() must stop on a token stream, what a finished row of a
batch holds after it, and the least a streamer must hand out before the stream ends - the
harness's own statement of generate()'s documented stopping, in pure python (no torch tensors,
never transformers).

It runs nothing of the library it judges: it reads the tokens a row follows (a greedy row's
prefix does not depend on when it stops, so an unstopped run of the same prompt gives them), the
stopping settings as given (eos ids, stop strings, max_new_tokens / max_length, min_new_tokens /
min_length, the pad token), and text decoded by a decoder that is not the one judged (the
`tokenizers` library reading the checkpoint's tokenizer.json: harness/engine/detokenize.py).

**Stopping** (`StopRule.stop`): a row stops at the first step i (1-based: i new tokens) where
  - its token is an eos id and i >= min_new (min_new_tokens masks the eos ids before that), or
  - a stop string ends inside the text of its last token (decoded prompt + i tokens, with part
    of the stop string past the text of prompt + i - 1 tokens: `ends_in_last_token`), or
  - i == max_new (max_new_tokens, else max_length minus the prompt);
every reason that holds at that step is named. A batch runs until its last row stops (`rows`):
it is L = max_i tokens long, and a row that stopped at i < L is filled with L - i pad ids.

**Streaming** (`least_pieces`): TextStreamer is documented to hand out text "as soon as entire
words are formed": once a space follows a word, the text up to that space is out. Each step that
moves that mark past where it was (`formed`) needs a piece handed out by then; one `put()` call
carries at most `window` new tokens (1 on plain decoding, draft tokens + 1 on assisted), so the
pieces are at least the fewest windows that cover those steps, plus one for the prompt when it is
streamed and holds a space. A streamer that holds everything until `end()` hands out one piece.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


def new_token_budget(prompt_len: int, max_new_tokens: int | None = None, max_length: int | None = None) -> int:
    """The new tokens a row may have: max_new_tokens when given (it takes precedence), else
    max_length minus the prompt's length."""
    if max_new_tokens is not None:
        return int(max_new_tokens)
    if max_length is None:
        raise ValueError("neither max_new_tokens nor max_length: the stop rule needs a length limit")
    return int(max_length) - prompt_len


def min_new_budget(prompt_len: int, min_new_tokens: int | None = None, min_length: int | None = None) -> int:
    """The new tokens before which an eos id cannot stop a row: min_new_tokens when given, else
    min_length minus the prompt's length (0: none)."""
    if min_new_tokens is not None:
        return int(min_new_tokens)
    return max(0, int(min_length) - prompt_len) if min_length is not None else 0


def ends_in_last_token(before: str, after: str, stop: str) -> bool:
    """`stop` occurs in `after` (the text with the last token) ending past `before` (the text
    without it): the last token completes it."""
    start = after.rfind(stop)
    return start >= 0 and start + len(stop) > len(before)


def prefix_texts(decode: Callable[[list[int]], str], prompt: Sequence[int], stream: Sequence[int]) -> list[str]:
    """The decoded prompt followed by the first i tokens of the stream, for i = 0..len(stream)."""
    return [decode([*prompt, *stream[:i]]) for i in range(len(stream) + 1)]


@dataclass(frozen=True)
class StopRule:
    """One row's stopping settings, resolved: eos ids, stop strings, and the new-token limits."""

    eos: tuple[int, ...]
    stop_strings: tuple[str, ...]
    max_new: int
    min_new: int = 0

    @classmethod
    def of(cls, prompt_len: int, eos: Sequence[int] = (), stop_strings: Sequence[str] = (),
           max_new_tokens: int | None = None, max_length: int | None = None,
           min_new_tokens: int | None = None, min_length: int | None = None) -> StopRule:
        return cls(tuple(int(e) for e in eos), tuple(stop_strings), new_token_budget(prompt_len, max_new_tokens, max_length),
                   min_new_budget(prompt_len, min_new_tokens, min_length))

    def stop(self, stream: Sequence[int], texts: Sequence[str]) -> dict[str, Any]:
        """Where a row following `stream` must stop, and why (`texts[i]`: the decoded prompt and
        first i tokens): {"new_tokens": i, "by": sorted reasons of "eos", "stop_string",
        "max_length"}; {"new_tokens": None, "by": []} when the stream ends before anything stops it."""
        for i, token in enumerate(stream[:self.max_new]):
            by = []
            if token in self.eos and i + 1 >= self.min_new:
                by.append("eos")
            if any(ends_in_last_token(texts[i], texts[i + 1], s) for s in self.stop_strings):
                by.append("stop_string")
            if i + 1 == self.max_new:
                by.append("max_length")
            if by:
                return {"new_tokens": i + 1, "by": sorted(by)}
        return {"new_tokens": None, "by": []}


def rows(rule: StopRule, streams: Sequence[Sequence[int]], texts: Sequence[Sequence[str]], pad: int | None) -> dict[str, Any]:
    """What a batch following `streams` under `rule` must return: per row where it stops
    ("stops"), the batch's length (the latest stop: a row whose stream ends first counts its whole
    stream), and each row's new tokens - its stream up to its stop, then `pad` up to that length."""
    stops = [rule.stop(s, t) for s, t in zip(streams, texts, strict=True)]
    cut = [s["new_tokens"] if s["new_tokens"] is not None else min(len(stream), rule.max_new)
           for s, stream in zip(stops, streams, strict=True)]
    length = max(cut, default=0)
    return {"stops": stops, "cut": cut, "length": length,
            "rows": [list(stream[:c]) + [pad] * (length - c) for stream, c in zip(streams, cut, strict=True)]}


# ----------------------------------------------------------------------------------------------
# streaming


def formed(text: str) -> int:
    """How much of `text` a word-by-word streamer must have handed out: up to its last space."""
    return text.rfind(" ") + 1


def late_pieces(timeline: Sequence[tuple[int, int]], texts: Sequence[str]) -> list[str]:
    """The put()s after which a streamer had handed out less than it must have: `timeline[j]` is
    (new ids fed by then, characters handed out by then), observed while generate() ran; `texts[k]`
    the text it holds after k new ids (see `least_pieces`). After k ids a word-by-word streamer has
    handed out at least `formed(texts[k])` characters - the text up to its last space - so a piece
    held back for a put or more is late at the put that formed it."""
    out = []
    for fed, handed in timeline:
        need = formed(texts[min(fed, len(texts) - 1)])
        if handed < need:
            out.append(f"after {fed} new ids: {handed} characters handed out, {need} formed")
    return out


def least_pieces(texts: Sequence[str], window: int = 1, prompt_streamed: bool = False) -> int:
    """The fewest non-empty pieces a streamer can hand out (see the module doc): `texts[k]` is the
    text it holds after k new tokens (`texts[0]`: the decoded prompt when `prompt_streamed`, else
    ""); each step k >= 1 that moves `formed` past every earlier step's needs a piece, one piece per
    `put()` of at most `window` tokens."""
    marks, steps = formed(texts[0]), []
    for k in range(1, len(texts)):
        mark = formed(texts[k])
        if mark > marks:
            steps.append(k)
            marks = mark
    pieces, covered = 0, 0
    for k in steps:
        if k > covered:
            pieces += 1
            covered = k + max(1, window) - 1
    return pieces + (1 if prompt_streamed and formed(texts[0]) > 0 else 0)
