"""When generate() stops, what fills a finished row, and what a streamer hands out
(suites/test_stopping.py; tables: harness/cases/ `stopping`, `streaming`).

**Stopping.** One greedy generate() per case with one stopping setting (`settings`): an eos list
(the model's eos plus a token the stream really produces), a stop string that is hit (a word of the
stream) and one that never appears (one character: #31435's class - a one-letter stop string made
`StopStringCriteria` raise), max_new_tokens, max_length, both (max_new_tokens takes precedence),
min_new_tokens (the eos list's extra token suppressed where it would come, and released exactly at
the step it comes: `MIN_NEW`), and a batch
of 2 where one row stops early (with an explicit pad token, and without: which token fills).

The oracle is the harness's stop rule (harness/engine/stopping.py `StopRule`, `rows`), never the
library's own stopping verdict: a greedy row's prefix does not depend on when it stops, so the same
generate() with only max_new_tokens (and, for min_new_tokens, the harness's own `SuppressUntil` in
place of the library's processor) gives the stream each row follows; the rule reads that stream,
the eos ids, the limits and the stop strings - matched on the text of the `tokenizers` library
reading the checkpoint's tokenizer.json (harness/engine/detokenize.py), not on transformers' decode
- and says where each row stops, why, how long the batch is and what fills a finished row. The
chosen eos token, stop string and min_new_tokens come from that stream (`pick_token`, `pick_word`),
so they exist on any model, a user's too.

  setup       exact   what the case asked for (eos list, stop strings, limits, pad token)
  error       exact   the exception generate() raised, or None
  tokens      tokens  new tokens per row (pads included), with top-2 margins
  text        exact   each row decoded (follows tokens)
  stopped     exact   per row: the new tokens when the library's criteria first said stop, and
                      which (max_length, eos, stop_string - each StoppingCriteria call recorded)
  pad_fill    exact   batch cases: per row, the ids after the library's stop
 references, computed in the run (the stop rule on the unstopped stream; a stop-string case whose
 model has no decoder of its own is `not checked`, with the reason):
  stops_as_specified  exact  per row {tokens: the returned row up to the rule's stop, length: the
                             returned row's} equals {the stream up to that stop, the batch length
                             the rule gives}: a row that stops early, late (one more token, a pad
                             included) or on the wrong id fails, whatever the library's criteria said;
                             a stopped run that raises where the unstopped one did not fails here too
                             (the rule's rows against the error: a first run sees #31435's class)
  criteria_as_specified exact the library's own first stop per row {new_tokens, by} equals the rule's
  pad_fill_as_specified exact batch cases: the returned ids after the rule's stop are the rule's fill:
                             the pad_token_id passed (pad-batch), or, none passed, the generation
                             config's pad token, else the first eos id (pad-batch-default: the
                             documented fallback), up to the batch length

**Streaming.** TextStreamer (what it prints) and TextIteratorStreamer (what its iterator yields),
each with skip_prompt off and on, on plain and assisted generate() (`COMBINATIONS`); and a batch of 2,
which TextStreamer refuses ("only supports batch size 1") - recorded as the error it is.

  error       exact   per combination: the exception, or None
  tokens      tokens  per combination: the returned new ids, with margins
  streamed    exact   per combination: the text handed out, concatenated (follows tokens)
  pieces      exact   per combination: the pieces, in order (how the streamer cuts text: 5.24 prints
                      letters at once, 5.14 waited for a space); presentation - a difference is
                      `changed`, never a regression: the contracts are the two references below
 references, computed in the run (on the `tokenizers` decode of the checkpoint's tokenizer.json,
 `not checked` with the reason where there is none):
  streamed_equals_decode  exact  the harness's own join of the pieces the streamer handed out equals
                                 the decode of the ids it was fed (the prompt's and the returned new
                                 ids, together, unless skip_prompt; TextStreamer ends with a newline)
  pieces_as_formed        exact  per combination min(pieces, least) equals least: the text pieces
                                 handed out are at least `least_pieces` of the fed text - a word is
                                 out once the space after it arrived, one put() per token (assisted:
                                 per draft tokens + 1) - so a streamer that holds its text until
                                 end() fails on a first run
  pieces_in_time          exact  per combination, the put()s after which less text had been handed out
                                 than formed by then (harness/engine/stopping.py `late_pieces`): the
                                 harness watches the streamer while generate() runs (after each put(),
                                 the ids fed and the characters handed out) - a streamer that hands
                                 each piece out one put() late hands out the same pieces and fails here
                                 only - expected none
  tokens_equal_unstreamed tokens a streamer does not change the ids: each combination's equal a run
                                 without one
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from harness.engine import stopping as stop_rule
from harness.engine.detokenize import Decoder
from harness.engine.stopping import StopRule, late_pieces, least_pieces, prefix_texts
from harness.schema import Case, Observation
from harness.subjects import hf
from harness.subjects.hf_stopping import STREAMERS, Stopped, SuppressUntil, stop_run, stream_run

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

NEVER_STOP_STRING = "@"  # one character (#31435); the zoo's stories never write it
PICK_FROM = 2  # the eos token / stop word is taken from this step on, so a row runs a few tokens first
BATCH_CHECKS = ("pad-batch", "pad-batch-default")
# min_new_tokens relative to the step where the extra eos id first comes: one past it (the id is
# suppressed where the model wants it), and at it (the id is released exactly there: vllm #46243
# released it one step late)
MIN_NEW = {"min-new-tokens": 1, "min-new-tokens-release": 0}
COMBINATIONS = tuple((s, skip) for s in STREAMERS for skip in (False, True))


# ----------------------------------------------------------------------------------------------
# pure logic


def pick_token(stream: Sequence[int], eos: Sequence[int], start: int = PICK_FROM,
               avoid: Sequence[int] = ()) -> tuple[int, int] | None:
    """(step, token): the first step from `start` whose token is not an eos id, has not occurred
    earlier in the stream, and does not occur in `avoid` up to that step (another row's stream: that
    row stops later, if at all); None when the stream has no such step."""
    for i in range(start, len(stream)):
        token = stream[i]
        if token not in eos and token not in stream[:i] and token not in avoid[:i + 1]:
            return i, token
    return None


def pick_word(pieces: Sequence[str], texts: Sequence[str], start: int = PICK_FROM, min_len: int = 3) -> str | None:
    """A stop string the stream will hit: the first step's token text from `start` that, stripped,
    is a word of `min_len`+ letters not yet in the text before it (`texts[i]`: the prompt and the
    first i tokens, decoded)."""
    for i in range(start, len(pieces)):
        word = pieces[i].strip()
        if len(word) >= min_len and word.isalpha() and word not in texts[i]:
            return word
    return None


def fill_after(row: Sequence[int], new_tokens: int | None) -> list[int]:
    """The ids a batch appended to a row after it stopped."""
    return [] if new_tokens is None else list(row[new_tokens:])


def eos_ids(value: Any) -> list[int]:
    """A generation config's eos_token_id as a list (None: none)."""
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def expected_stream_text(text: str, streamer: str) -> str:
    """What a streamer must hand out in all: the text of what it was fed (the new ids, after the
    prompt unless skip_prompt, decoded together) and TextStreamer's closing newline
    (`print(..., end=None)` at the stream's end)."""
    return text + ("\n" if streamer == "TextStreamer" else "")


def text_pieces(pieces: Sequence[str], streamer: str) -> int:
    """The non-empty pieces of text a streamer handed out (TextStreamer's closing newline, its own
    write at the end, is not a piece of the text)."""
    pieces = [p for p in pieces if p]
    if streamer == "TextStreamer" and pieces and pieces[-1] == "\n":
        pieces = pieces[:-1]
    return len(pieces)


# ----------------------------------------------------------------------------------------------
# stopping


def _prompts(zoo: Zoo, case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """The first prompt's ids [1, T], and both prompts cut to one length [2, L] (no padding)."""
    first, second = (zoo.prompt_ids(case.model, p) for p in case.param("prompts"))
    length = min(first.shape[1], second.shape[1])
    return first, torch.cat([first[:, :length], second[:, :length]])


def _decoder(zoo: Zoo, model: str) -> Decoder | str:
    """The model's decode that is not the library's (harness/engine/detokenize.py), or why none."""
    return zoo.memo(("stopping-decoder", model), lambda: Decoder.of(zoo.checkpoints.directory(model)))


def _unstopped(zoo: Zoo, case: Case, ids: torch.Tensor, extra: tuple = (), **settings: Any) -> Stopped:
    lm = zoo.load(case.model)
    key = ("stopping-unstopped", case.model, tuple(map(tuple, ids.tolist())), case.new_tokens, extra)
    return zoo.memo(key, lambda: stop_run(lm.model, lm.tokenizer, ids, dict(
        max_new_tokens=case.new_tokens, pad_token_id=lm.model.config.pad_token_id, **settings)))


def _cannot(obs: Observation, reason: str) -> Observation:
    """The case's setting cannot be built from this model's stream (a random model repeating one
    token): skipped with the reason, never a pass."""
    obs.skipped("stops_as_specified", "exact", reason)
    return obs.stop(reason)


def stop(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    lm = zoo.load(case.model)
    model, tok, check, n = lm.model, lm.tokenizer, case.param("check"), case.new_tokens
    single, batch = _prompts(zoo, case)
    ids = batch if check in BATCH_CHECKS else single
    eos = eos_ids(model.generation_config.eos_token_id)
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else tok.pad_token_id
    if check == "pad-batch" and pad is None:
        return _cannot(obs, f"{case.model} has no pad token (config and tokenizer): the fill of a finished row is "
                            "the pad-batch-default case's")
    decode = _decoder(zoo, case.model)
    base = _unstopped(zoo, case, ids)
    if base.error is not None:
        obs.add("error", base.error, unstopped=True)
        return obs.stop(f"the unstopped run raised {base.error['type']}: {base.error['message']}")
    stream, prompt = base.rows[0], ids[0].tolist()

    settings: dict[str, Any] = {"max_new_tokens": n}
    stop_strings: list[str] = []
    reference_rows = base.rows
    if check in ("eos-list", *MIN_NEW, *BATCH_CHECKS):
        if check in BATCH_CHECKS:  # the earliest token one row produces before the other: that row stops first
            picks = [pick_token(a, eos, avoid=b) for a, b in (base.rows, base.rows[::-1])]
            picked = min((p for p in picks if p is not None), default=pick_token(stream, eos))
        else:
            picked = pick_token(stream, eos)
        if picked is None:
            return _cannot(obs, f"no token of the unstopped stream can serve as a second eos id: {stream}")
        step, token = picked
        settings["eos_token_id"] = [*eos, token]  # every eos id of the model's, then one the stream produces
        if check in MIN_NEW:
            count = step + MIN_NEW[check]
            settings["min_new_tokens"] = count
            suppressed = _unstopped(zoo, case, ids, ("suppress", count, tuple(settings["eos_token_id"])),
                                    logits_processor=[SuppressUntil(ids.shape[1], count, settings["eos_token_id"])])
            reference_rows = suppressed.rows
    elif check == "stop-string-hit":
        picking = tok.decode if isinstance(decode, str) else decode  # only chooses the setting
        word = pick_word([picking([t]) for t in stream], prefix_texts(picking, prompt, stream))
        if word is None:
            return _cannot(obs, f"no word of the unstopped stream can serve as a stop string: {tok.decode(stream)!r}")
        stop_strings = [word]
    elif check == "stop-string-never":
        stop_strings = [NEVER_STOP_STRING]
    elif check == "max-length":
        settings = {"max_length": ids.shape[1] + n}
    elif check == "max-length-and-new-tokens":
        settings = {"max_length": ids.shape[1] + 2, "max_new_tokens": n}  # max_new_tokens takes precedence
    if stop_strings:
        settings["stop_strings"] = stop_strings
    if check != "pad-batch-default":
        settings["pad_token_id"] = pad
    obs.add("setup", {**settings, "prompt_tokens": ids.shape[1], "rows": ids.shape[0]})

    got = stop_run(model, tok, ids, settings)
    obs.add("error", got.error)
    if got.error is None:
        obs.add("tokens", got.rows, kind="tokens", margins=got.margins)
        obs.add("text", [tok.decode(r) for r in got.rows], follows="tokens")
        obs.add("stopped", got.stops, follows="tokens")
        if check in BATCH_CHECKS:
            obs.add("pad_fill", [fill_after(row, s["new_tokens"]) for row, s in zip(got.rows, got.stops, strict=True)],
                    follows="tokens")
    if stop_strings and isinstance(decode, str):
        judged = ("stops_as_specified", "criteria_as_specified", *(("pad_fill_as_specified",) * (check in BATCH_CHECKS)))
        for name in judged:
            obs.skipped(name, "exact", f"stop strings are matched on a decode that is not transformers': {decode}",
                        category="not-checkable")
        return obs
    stop_eos = settings.get("eos_token_id", eos)
    config_pad = model.generation_config.pad_token_id
    filler = pad if check != "pad-batch-default" else (config_pad if config_pad is not None else stop_eos[0])
    rule = StopRule.of(ids.shape[1], stop_eos, stop_strings, settings.get("max_new_tokens"), settings.get("max_length"),
                       settings.get("min_new_tokens"))
    texts = [prefix_texts(decode, ids[r].tolist(), row) if stop_strings else [""] * (len(row) + 1)
             for r, row in enumerate(reference_rows)]
    want = stop_rule.rows(rule, reference_rows, texts, filler)
    if got.error is not None:  # the unstopped run worked, so the rule knows what this one had to return
        obs.reference("stops_as_specified", {"rows": f"raised {got.error['type']}: {got.error['message']}"},
                      {"rows": [row[:c] for row, c in zip(want["rows"], want["cut"], strict=True)]},
                      expected_extras={"stops": want["stops"], "length": want["length"]}, implementations_differ=False)
        return obs
    obs.reference("stops_as_specified",
                  [{"tokens": row[:c], "length": len(row)} for row, c in zip(got.rows, want["cut"], strict=True)],
                  [{"tokens": row[:c], "length": want["length"]} for row, c in zip(want["rows"], want["cut"], strict=True)],
                  expected_extras={"stops": want["stops"]}, implementations_differ=False)
    obs.reference("criteria_as_specified", got.stops, want["stops"], implementations_differ=False)
    if check in BATCH_CHECKS:
        obs.reference("pad_fill_as_specified", [row[c:] for row, c in zip(got.rows, want["cut"], strict=True)],
                      [row[c:] for row, c in zip(want["rows"], want["cut"], strict=True)],
                      observed_extras={"generation_config_pad_token_id": config_pad}, implementations_differ=False)
    return obs


# ----------------------------------------------------------------------------------------------
# streaming


def _combination(streamer: str, skip_prompt: bool) -> str:
    return f"{streamer}.skip_prompt={skip_prompt}"


def stream(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    if not hf.requires(obs, hf.PATH_FEATURE.get(case.path)):
        return obs
    lm = zoo.load(case.model)
    model, tok, n = lm.model, lm.tokenizer, case.new_tokens
    single, batch = _prompts(zoo, case)
    assistant = zoo.load(case.assistant).model if case.assistant else None
    path = hf.path_kwargs(assistant)
    if case.param("check") == "stream-batch":
        got = stream_run(model, tok, batch, n, "TextStreamer", False, **path)
        obs.add("error", got.error, rows=batch.shape[0])
        return obs
    runs = {}
    with hf.draft_schedule(assistant, case.draft_tokens):
        for streamer, skip in COMBINATIONS:
            runs[_combination(streamer, skip)] = stream_run(model, tok, single, n, streamer, skip, **path)
        unstreamed = hf.generate(model, single, n, assistant=assistant)  # the same call without a streamer
    obs.add("error", {k: r.error for k, r in runs.items()})
    ok = {k: r for k, r in runs.items() if r.error is None}
    if not ok:
        return obs
    obs.add("tokens", [r.tokens for r in ok.values()], kind="tokens", margins=[r.margins for r in ok.values()],
            combinations=list(ok))
    obs.add("streamed", {k: "".join(r.pieces) for k, r in ok.items()}, follows="tokens")
    obs.add("pieces", {k: r.pieces for k, r in ok.items()}, follows="tokens", presentation=True)
    decode = _decoder(zoo, case.model)
    if isinstance(decode, str):
        for name in ("streamed_equals_decode", "pieces_as_formed", "pieces_in_time"):
            obs.skipped(name, "exact", f"the streamed text is judged on a decode that is not transformers': {decode}",
                        category="not-checkable")
    else:
        prompt, window = single[0].tolist(), (case.draft_tokens or n) + 1 if assistant is not None else 1
        fed = {k: prefix_texts(decode, [] if k.endswith("True") else prompt, r.tokens) for k, r in ok.items()}
        obs.reference("streamed_equals_decode", {k: "".join(r.pieces) for k, r in ok.items()},
                      {k: expected_stream_text(fed[k][-1], k.split(".")[0]) for k in ok}, implementations_differ=False)
        counts = {k: text_pieces(r.pieces, k.split(".")[0]) for k, r in ok.items()}
        least = {k: least_pieces(fed[k], window, prompt_streamed=not k.endswith("True")) for k in ok}
        obs.reference("pieces_as_formed", {k: min(counts[k], least[k]) for k in ok}, least,
                      observed_extras={"pieces": counts, "window": window}, implementations_differ=False)
        obs.reference("pieces_in_time", {k: late_pieces(r.timeline, fed[k]) for k, r in ok.items()},
                      {k: [] for k in ok}, implementations_differ=False,
                      observed_extras={"timeline": {k: r.timeline for k, r in ok.items()}})
    if unstreamed.error is not None:
        obs.skipped("tokens_equal_unstreamed", "tokens",
                    f"generate() without a streamer raised {unstreamed.error['type']}: {unstreamed.error['message']}")
    else:
        obs.reference("tokens_equal_unstreamed", [r.tokens for r in ok.values()], [unstreamed.tokens] * len(ok),
                      kind="tokens", observed_extras={"margins": [r.margins for r in ok.values()],
                                                      "scales": [r.scales for r in ok.values()]},
                      expected_extras={"margins": [unstreamed.margins] * len(ok), "scales": [unstreamed.scales] * len(ok)},
                      implementations_differ=False)
    return obs

