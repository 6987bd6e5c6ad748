"""The text around generate(): what a tokenizer makes of a fixed text set, and what a chat template
renders, tokenizes and makes generate() produce (suites/test_text.py; tables: harness/cases/text.py
`tokenizers`, `chats`).

**Tokenizers.** One case per distinct zoo tokenizer (the manifest's digests of its tokenizer files:
the 13 zoo models share one) and per user model (its own tokenizer). `TEXTS` stresses the classes
that upgrades broke: leading, doubled and trailing spaces, newlines / tabs / CRLF, special-token text
inside a text, unicode (accents, CJK, an emoji: byte fallback), numbers, code, spaces before
punctuation (what clean_up_tokenization_spaces removes) and the empty text.

  setup          exact   special tokens, all_special_ids, vocabulary size, the clean_up / split /
                         add_prefix_space attributes
  pipeline       exact   the backend's normalizer / pre-tokenizer / decoder / model types
  ids            exact   per text: encode without special tokens
  ids_special    exact   per text: encode as called by default (BOS / EOS where the tokenizer adds them)
  decoded        exact   per text: decode(ids_special)
  decoded_skip_special exact per text: decode(ids_special, skip_special_tokens=True)
  decoded_clean_up exact per text: decode(ids_special, clean_up_tokenization_spaces=True) (5.x ignores
                         it on a BPE model: recorded, not assumed)
  round_trip_text exact  per text: decode(ids) - what the round trip gives, promised or not
  return_types   exact   call -> type name of its return (tok(str) / tok(list) / return_tensors /
                         encode / decode of a list of ids and of a list of lists / batch_decode)
 references, computed in the run (the same library by another route):
  round_trip_lossless  exact  decode(encode(x)) == x for every text, where the pipeline promises it
                              (`round_trip_promise`: byte-level pre-tokenizer and decoder, no
                              normalizer); skipped with the reason where it does not
  skip_special_as_specified exact skip_special_tokens=True equals decoding the ids with every
                              all_special_ids entry dropped by hand
  clean_up_as_specified exact decoded_clean_up equals the `tokenizers` library's decode of the same
                              ids with the clean-up rule the version declares, applied by the harness
                              (harness/engine/detokenize.py: skipped on a BPE model where the version
                              has PR #44915's guard attribute unset, the WordPiece rule elsewhere):
                              a first run sees the guard lost (`x != y` -> `x!= y`)
  default_clean_up_as_configured exact decode without clean_up_tokenization_spaces equals decode with
                              the checkpoint's tokenizer_config.json value passed explicitly (unset:
                              the tokenizer's attribute) - #42898's class, a default that ignores the file
  batch_encode_equals_single exact tok(list).input_ids == [tok(x).input_ids for x]
  batch_decode_equals_single exact batch_decode(rows, skip_special_tokens=True) and decode(rows, ...)
                              == [decode(row, skip_special_tokens=True) for row]; decode(rows) only where
                              the version decodes a batch (4.57 raises TypeError: `return_types` records it)
 the `tokenizers` library reading the checkpoint's own files as the expected side (`library_references`;
 the tokenizer zoo's cases too; `not checkable` with the reason for a tokenizer with neither a
 tokenizer.json nor GPT-2's slow files):
  encode_as_tokenizers_lib exact ids, tokens, offsets of every text, with and without special tokens
  decode_as_tokenizers_lib exact decode(ids_special, skip_special_tokens=False / True, no clean-up)
  stream_as_decode     exact TextStreamer's pieces joined (and the library's DecodeStream joined) against
                             the library's decode with the special tokens skipped
 padding (`padding`; the tokenizer zoo's cases too): a batch as users build it
  padded         exact   tok(PAD_PROMPTS, padding=True) with the tokenizer's own side and padding_side="left" /
                         "right" at call time: ids and mask (no pad token: what that raised, then pad = eos)
  padding_as_specified exact each side's batch equals harness/engine/padding.py's padding of the `tokenizers`
                         library's encode of each prompt alone: tokenizer_config.json's pad token (else its
                         eos), the side asked, else its padding_side, else "right" (transformers' documented
                         default) - padding_side ignored at call time (PR #33385's class) is seen on a first run

**Chat templates.** `<model>.chat`: the zoo tokenizer loaded (`AutoTokenizer.from_pretrained`) from
its files beside harness/fixtures/chat_template.jinja - a Llama-3-shaped template: a system turn that
lists the tools, alternating user / assistant turns closed by eos, an assistant header on
add_generation_prompt; a user model's case renders its own template (none: recorded, then skipped; one
that refuses the system turn: the refusal recorded as `system_turn_refused`, the rest without it).
The conversation (`MESSAGES`): system, user, assistant, user; `TOOLS`: one function schema, passed
where apply_chat_template takes `tools`.

  supports_tools exact (capability) apply_chat_template takes tools
  template       exact   sha256 of the template text rendered (the fixture's, or the user's own)
  system_turn_refused exact a user's template that raised on the conversation: the error (then rendered
                         without the system turn)
  rendered       exact   tokenize=False with / without add_generation_prompt, and with tools
  ids            exact   the default tokenized call's input_ids (add_generation_prompt=True)
  return_types   exact   tokenize=False / True (default) / return_dict=False / True -> type name (v5:
                         BatchEncoding by default, list with return_dict=False)
  supports_sanitize_control_tokens exact (capability) apply_chat_template takes sanitize_control_tokens
                         (5.24.0; not 5.13.1 / 5.14.0)
  control_tokens_in_content exact a user message holding the eos + bos text: the special ids of its
                         tokenized chat (the content's text becomes control tokens by default)
  tokens         tokens  generate() greedy on the ids: `CHAT_TOKENS` new tokens, with margins
  text           exact   the new tokens decoded (follows tokens)
 references, computed in the run:
  template_loaded      exact  the loaded tokenizer's chat_template is the fixture file's text
  ids_equal_rendered   exact  the ids equal encoding the rendered text without special tokens, and
                              return_dict=False / True give the same ids
  generation_prompt_appended exact the text without the generation prompt is a prefix of the text
                              with it, and what follows is the template's assistant header
                              (`HEADER`; a user's template: some text when it reads
                              add_generation_prompt, none when it does not)
  messages_in_order    exact  every message's content (the system's too) occurs in the rendered text,
                              in the conversation's order
  sanitized_content_is_text exact with sanitize_control_tokens=True the chat's special ids are those of
                              the same chat without the eos + bos text (the template's own only);
                              skipped where the version lacks the argument
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from harness.engine.detokenize import BPE_GUARD, Oracle, cleaned_up_as_specified
from harness.engine.padding import pad_rows
from harness.schema import Case, Observation
from harness.subjects import hf
from harness.subjects.hf_text import (
    chat_ids,
    chat_tokenizer,
    configured_clean_up,
    decode_ids,
    encode_detail,
    is_error,
    padded_batches,
    pipeline,
    render_chat,
    streamed,
    supports_sanitize,
    supports_tools,
    tokenize_texts,
)

TEXTS: dict[str, str] = {
    "plain": "Hello world",
    "leading-space": " leading space",
    "doubled-spaces": "two  spaces   three",
    "trailing-space": "trailing space ",
    "newlines-tabs": "line one\nline two\n\n\tindented\r\n",
    "special-inside": "special <s> inside </s> text",
    "unicode": "caf\u00e9 na\u00efve \u2013 \u65e5\u672c\u8a9e \U0001f917",
    "numbers": "3.14159 1,234,567 -42 2026",
    "code": "def f(x, y):\n    return x != y  # twice\n",
    "punctuation": "Hello , world . It 's here !",
    "empty": "",
}

TEMPLATE_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "chat_template.jinja"
HEADER = "<|start_header_id|>assistant<|end_header_id|>\n\n"  # the fixture's generation prompt
CHAT_TOKENS = 8
# a batch of three lengths (the zoo corpus' words; no added or special token inside)
PAD_PROMPTS = ("Hello", "The little fox ran to the river.", "Once upon a time a girl had a red ball and she played.")
MESSAGES: tuple[dict[str, str], ...] = (
    {"role": "system", "content": "You are a storyteller for children."},
    {"role": "user", "content": "Tell me about Anna."},
    {"role": "assistant", "content": "Anna had a red ball."},
    {"role": "user", "content": "What did she do with it?"},
)
TOOLS: tuple[dict[str, Any], ...] = (
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a town today.",
        "parameters": {"type": "object", "properties": {"town": {"type": "string", "description": "The town."}},
                       "required": ["town"]}}},
)


# ----------------------------------------------------------------------------------------------
# pure logic


def _has(stage: Any, name: str) -> bool:
    return stage == name or (isinstance(stage, list) and name in stage)


def round_trip_promise(stages: dict[str, Any]) -> str:
    """'' when the pipeline promises decode(encode(x)) == x for any text: a byte-level pre-tokenizer
    and decoder (every byte has a token, and the decoder maps them back) and no normalizer (nothing
    rewritten before the split); else why it does not."""
    if not stages:
        return "the tokenizer has no `tokenizers` backend to read its pipeline from"
    if stages.get("normalizer") is not None:
        return f"its normalizer {stages['normalizer']} may rewrite the text before encoding"
    if not (_has(stages.get("pre_tokenizer"), "ByteLevel") and _has(stages.get("decoder"), "ByteLevel")):
        return (f"its pre-tokenizer {stages.get('pre_tokenizer')} / decoder {stages.get('decoder')} are not byte-level: "
                "a text outside its vocabulary need not come back")
    return ""


def contents_in_order(text: str, contents: Sequence[str]) -> bool:
    """Every content (stripped) occurs in `text`, each after the one before it."""
    pos = 0
    for content in contents:
        found = text.find(content.strip(), pos)
        if found < 0:
            return False
        pos = found + len(content.strip())
    return True


def appended(with_prompt: str, without: str) -> dict[str, Any]:
    """{"prefix": `without` starts `with_prompt`, "appended": the rest (None when not a prefix)}."""
    prefix = with_prompt.startswith(without)
    return {"prefix": prefix, "appended": with_prompt[len(without):] if prefix else None}


def expected_generation_prompt(seen: dict[str, Any], header: str | None, reads_flag: bool) -> dict[str, Any]:
    """What `appended` must give: the prompt-less text as a prefix, followed by `header` (a template
    whose header is known: the fixture's); else by some text when the template reads
    add_generation_prompt, by nothing when it does not (a Llama-2-style template has no header)."""
    if header is not None:
        return {"prefix": True, "appended": header}
    if not reads_flag:
        return {"prefix": True, "appended": ""}
    return {"prefix": True, "appended": seen["appended"] or "(the template reads add_generation_prompt: some text)"}


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ----------------------------------------------------------------------------------------------
# tokenizers


def tokenizer(zoo: Any, case: Case) -> Observation:
    obs = Observation()
    tok = zoo.load(case.model).tokenizer
    configured = configured_clean_up(zoo.directory(case.model))
    got = tokenize_texts(tok, TEXTS, configured)
    stages = pipeline(tok)
    obs.add("setup", got.setup)
    obs.add("pipeline", stages)
    obs.add("ids", got.ids)
    obs.add("ids_special", got.ids_special)
    obs.add("decoded", got.decoded)
    obs.add("decoded_skip_special", got.skip_special)
    obs.add("decoded_clean_up", got.clean_up)
    obs.add("round_trip_text", got.round_trip)
    obs.add("return_types", got.types)
    why = round_trip_promise(stages)
    if why:
        obs.skipped("round_trip_lossless", "exact", f"{case.model}'s tokenizer does not promise a lossless round "
                                                    f"trip: {why}")
    else:
        obs.reference("round_trip_lossless", got.round_trip, {k: TEXTS[k] for k in got.round_trip},
                      implementations_differ=False)
    obs.reference("skip_special_as_specified", got.skip_special, got.special_dropped, implementations_differ=False)
    clean_up_as_specified(obs, zoo.directory(case.model), tok, got)
    obs.reference("default_clean_up_as_configured", got.decoded, got.clean_up_as_set,
                  expected_extras={"tokenizer_config": configured}, implementations_differ=False)
    obs.reference("batch_encode_equals_single", got.batch_ids, [got.ids_special[k] for k in TEXTS],
                  implementations_differ=False)
    singles = [got.skip_special[k] for k in TEXTS if k in got.skip_special]
    observed, expected = {"batch_decode": got.batch_decoded, "decode": got.list_decoded}, {"batch_decode": singles}
    if is_error(got.list_decoded):  # decode of a batch is v5's API (4.57: TypeError): the refusal is `return_types`'
        del observed["decode"]       # record, compared across versions; batch_decode must still equal the singles
    else:
        expected["decode"] = singles
    obs.reference("batch_decode_equals_single", observed, expected, implementations_differ=False)
    directory = zoo.directory(case.model)
    oracle = library_oracle(directory)
    if isinstance(oracle, str):
        for name in LIBRARY_REFERENCES:
            obs.skipped(name, "exact", oracle, category="not-checkable")
    else:
        library_references(obs, tok, oracle, TEXTS, encoded_texts(tok, TEXTS))
    padding(obs, tok, directory, oracle if not isinstance(oracle, str) else None)
    return obs


# the references whose expected side is the `tokenizers` library reading the checkpoint's own files
LIBRARY_REFERENCES = ("encode_as_tokenizers_lib", "decode_as_tokenizers_lib", "stream_as_decode")


def library_oracle(directory: Any) -> Oracle | str:
    """The `tokenizers` library's reading of a checkpoint's tokenizer files (harness/engine/detokenize.py
    `Oracle.of`: tokenizer.json, or GPT-2's slow files), or why there is none."""
    directory = Path(directory)
    if (directory / "tokenizer.json").is_file() or all((directory / f).is_file() for f in ("vocab.json", "merges.txt")):
        return Oracle.of(directory)
    return (f"{directory} has neither a tokenizer.json nor GPT-2's vocab.json + merges.txt for the `tokenizers` "
            "library to read (a SentencePiece .model alone: no oracle here)")


def encoded_texts(tok: Any, texts: dict[str, str]) -> dict[str, Any]:
    """Per text, transformers' encode without and with the special tokens ({ids, tokens, offsets} or an
    error), the ids with them, and TextStreamer's pieces of those ids (special tokens skipped, clean-up
    off) - what `library_references` judges and the tokenizer zoo records as fields."""
    plain = {k: encode_detail(tok, t, False) for k, t in texts.items()}
    special = {k: encode_detail(tok, t, True) for k, t in texts.items()}
    ids_special = {k: v["ids"] for k, v in special.items() if not is_error(v)}
    pieces = {k: streamed(tok, ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
              for k, ids in ids_special.items()}
    joined = {k: ("".join(p) if isinstance(p, list) else p) for k, p in pieces.items()}
    return {"plain": plain, "special": special, "ids_special": ids_special, "pieces": pieces, "joined": joined}


def library_references(obs: Observation, tok: Any, oracle: Oracle, texts: dict[str, str], got: dict[str, Any]) -> None:
    """The `tokenizers` library's own answers as the expected side (transformers never runs there):
      encode_as_tokenizers_lib  ids, tokens, offsets with and without the special tokens
      decode_as_tokenizers_lib  decode(ids_special, skip_special_tokens=False / True, no clean-up)
      stream_as_decode          TextStreamer's pieces joined, and the library's DecodeStream joined,
                                against the library's decode with the special tokens skipped"""
    obs.reference("encode_as_tokenizers_lib", {"plain": got["plain"], "special": got["special"]},
                  {"plain": {k: oracle.encode(t, False) for k, t in texts.items()},
                   "special": {k: oracle.encode(t, True) for k, t in texts.items()}}, implementations_differ=False)
    raw = {str(s): {k: decode_ids(tok, ids, skip_special_tokens=s, clean_up_tokenization_spaces=False)
                    for k, ids in got["ids_special"].items()} for s in (False, True)}
    obs.reference("decode_as_tokenizers_lib", raw,
                  {str(s): {k: oracle.decode(ids, s) for k, ids in got["ids_special"].items()} for s in (False, True)},
                  implementations_differ=False)
    lib_skip = {k: oracle.decode(ids, True) for k, ids in got["ids_special"].items()}
    obs.reference("stream_as_decode", {"TextStreamer": got["joined"],
                                       "DecodeStream": {k: "".join(oracle.stream(ids, True))
                                                        for k, ids in got["ids_special"].items()}},
                  {"TextStreamer": lib_skip, "DecodeStream": lib_skip}, implementations_differ=False)


def clean_up_as_specified(obs: Observation, directory: Any, tok: Any, got: Any) -> None:
    """decode(ids_special, clean_up_tokenization_spaces=True) against the `tokenizers` library's decode
    of the same ids with the version's declared clean-up rule applied by the harness
    (harness/engine/detokenize.py `cleaned_up_as_specified`): the guard that skips it on a BPE model is
    read from the tokenizer's attribute, the model type from tokenizer.json - the decode wrapper judged
    runs on neither side."""
    if not (Path(directory) / "tokenizer.json").is_file():
        obs.skipped("clean_up_as_specified", "exact", f"{directory} has no tokenizer.json for the `tokenizers` "
                    "library to decode with", category="not-checkable")
        return
    oracle = Oracle.of(directory)
    model_type = type(oracle.backend.model).__name__
    guard = getattr(tok, BPE_GUARD, None)
    want = {k: cleaned_up_as_specified(oracle.decode(ids), model_type, guard)
            for k, ids in got.ids_special.items() if isinstance(ids, list)}
    obs.reference("clean_up_as_specified", got.clean_up, want, expected_extras={"model": model_type, "guard": guard},
                  implementations_differ=False)


def padding(obs: Observation, tok: Any, directory: Any, oracle: Oracle | None) -> None:
    """`padded`: a batch of `PAD_PROMPTS` as users build it (harness/subjects/hf_text.py `padded_batches`);
    `padding_as_specified`: each side's batch against the harness's own padding of the `tokenizers`
    library's encode of each prompt alone - the pad id of tokenizer_config.json's pad_token (else its
    eos_token: the users' `pad_token = eos_token`), on the side asked, else the config's padding_side,
    else "right" (PreTrainedTokenizerBase's documented default), mask 1 on the prompt's ids, 0 on the pads."""
    got = padded_batches(tok, PAD_PROMPTS)
    obs.add("padded", got)
    if oracle is None:
        obs.skipped("padding_as_specified", "exact", f"{directory} has no tokenizer.json for the `tokenizers` "
                    "library to encode with", category="not-checkable")
        return
    config = json.loads((Path(directory) / "tokenizer_config.json").read_text(encoding="utf-8"))
    pad = _content(config.get("pad_token")) or _content(config.get("eos_token"))
    pad_id = oracle.backend.token_to_id(pad) if pad else None
    if pad_id is None:
        obs.skipped("padding_as_specified", "exact", f"{Path(directory).name}'s tokenizer_config.json names no pad or "
                    "eos token the vocabulary holds: nothing to pad with")
        return
    rows = [oracle.encode(p, True)["ids"] for p in PAD_PROMPTS]
    sides = {"default": config.get("padding_side") or "right", "left": "left", "right": "right"}
    obs.reference("padding_as_specified", {k: got[k] for k in sides},
                  {k: dict(zip(("input_ids", "attention_mask"), pad_rows(rows, pad_id, side), strict=True))
                   for k, side in sides.items()},
                  expected_extras={"pad_id": pad_id, "default_side": sides["default"]}, implementations_differ=False)


def _content(token: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: the text, or {"content": text, ...}."""
    return token.get("content") if isinstance(token, dict) else token


# ----------------------------------------------------------------------------------------------
# chat templates


def control_tokens(obs: Observation, tok: Any) -> None:
    """A user message whose content holds the tokenizer's eos and bos text (`injected`): the special
    ids of its default tokenized chat (the content's text becomes control tokens), and, where
    apply_chat_template takes sanitize_control_tokens, that with it the chat holds exactly the
    special ids of the same chat with that text left out (the template's own)."""
    marker = "".join(t for t in (tok.eos_token, tok.bos_token) if t) or "".join(tok.all_special_tokens[:2])
    supported = supports_sanitize()
    obs.add("supports_sanitize_control_tokens", supported, kind="capability")
    if not marker:
        obs.skipped("sanitized_content_is_text", "exact", "the tokenizer has no special tokens to put in a message")
        return
    special = set(tok.all_special_ids)

    def controls(ids: Any) -> Any:
        return [i for i in ids if i in special] if isinstance(ids, list) else ids

    injected, plain = [{"role": "user", "content": f"Say {marker} now"}], [{"role": "user", "content": "Say  now"}]
    obs.add("control_tokens_in_content", {"marker": marker, "special_ids": controls(chat_ids(tok, injected))})
    if not supported:
        obs.skipped("sanitized_content_is_text", "exact",
                    f"transformers {hf.version()}'s apply_chat_template has no sanitize_control_tokens")
        return
    obs.reference("sanitized_content_is_text", controls(chat_ids(tok, injected, sanitize_control_tokens=True)),
                  controls(chat_ids(tok, plain)), implementations_differ=False)


def chat(zoo: Any, case: Case) -> Observation:
    obs = Observation()
    lm = zoo.load(case.model)
    own = bool(case.param("own"))
    if own:
        tok, template = lm.tokenizer, lm.tokenizer.chat_template
        obs.add("has_chat_template", template is not None, kind="capability")
        if template is None:
            return obs.stop(f"{case.model}'s tokenizer has no chat template")
        if not isinstance(template, str):  # a dict of named templates: the default one is rendered
            template = template.get("default", next(iter(template.values())))
    else:
        template = TEMPLATE_FILE.read_text()
        tok, error = chat_tokenizer(zoo.directory(case.model), template)
        if error is not None:
            obs.add("error", error)
            return obs.stop(f"the chat fixture's tokenizer did not load: {error['type']}: {error['message']}")
        obs.reference("template_loaded", sha256(tok.chat_template or ""), sha256(template),
                      implementations_differ=False)
    tools = supports_tools()
    obs.add("supports_tools", tools, kind="capability")
    obs.add("template", sha256(template))
    messages = MESSAGES
    got = render_chat(tok, messages, TOOLS if tools else None)
    if own and is_error(got.rendered["generation_prompt"]):  # a template that refuses a system turn (Gemma's)
        obs.add("system_turn_refused", got.rendered["generation_prompt"]["error"])
        messages = MESSAGES[1:]
        got = render_chat(tok, messages, TOOLS if tools else None)
    obs.add("rendered", got.rendered)
    obs.add("ids", got.ids)
    obs.add("return_types", got.types)
    with_prompt, without = got.rendered["generation_prompt"], got.rendered["no_generation_prompt"]
    if is_error(with_prompt) or is_error(without):
        return obs.stop(f"the template did not render: {(with_prompt if is_error(with_prompt) else without)['error']}")
    encoded = tok(with_prompt, add_special_tokens=False)["input_ids"]
    obs.reference("ids_equal_rendered", {"default": got.ids, **got.ids_by_return_dict},
                  {"default": encoded, "False": encoded, "True": encoded}, implementations_differ=False)
    seen = appended(with_prompt, without)
    obs.reference("generation_prompt_appended", seen,
                  expected_generation_prompt(seen, None if own else HEADER, "add_generation_prompt" in template),
                  implementations_differ=False)
    obs.reference("messages_in_order", contents_in_order(with_prompt, [m["content"] for m in messages]), True,
                  implementations_differ=False)
    control_tokens(obs, tok)
    if not isinstance(got.ids, list) or not got.ids or not all(isinstance(i, int) for i in got.ids):
        return obs.stop(f"apply_chat_template gave no ids to generate from: {got.ids!r}"[:300])
    ran = hf.generate(lm.model, torch.tensor([got.ids], device=zoo.device), CHAT_TOKENS)
    obs.add("generate_error", ran.error)
    if ran.error is None:
        obs.add("tokens", ran.tokens, kind="tokens", margins=ran.margins)
        obs.add("text", tok.decode(ran.tokens), follows="tokens")
    return obs
