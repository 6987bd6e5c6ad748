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
 references, computed in the run:
  round_trip_lossless  exact  decode(encode(x)) == x for every text and probe, where the checkpoint's
                              files promise it - read from the files by the harness (harness/engine/bpe.py
                              `Reader.round_trip_promise`: no normalizer, byte-level pre-tokenizer and
                              decoder, all 256 byte symbols, no added token that strips whitespace), never
                              from the loaded pipeline a fault may have changed; skipped with the files'
                              reason where they do not promise it
  skip_special_as_specified exact skip_special_tokens=True equals decoding the ids with every
                              all_special_ids entry dropped by hand (the same library by another route)
  clean_up_as_specified exact decoded_clean_up equals the harness's decode of the same ids (its reading
                              of the files, bpe.py) with the clean-up rule the version declares, applied by
                              the harness (harness/engine/detokenize.py: skipped on a BPE model where the
                              version has PR #44915's guard attribute unset, the WordPiece rule elsewhere):
                              a first run sees the guard lost (`x != y` -> `x!= y`)
  default_clean_up_as_configured exact decode without clean_up_tokenization_spaces equals decode with
                              the checkpoint's tokenizer_config.json value passed explicitly (unset:
                              the tokenizer's attribute) - #42898's class, a default that ignores the file
  batch_encode_equals_single exact tok(list).input_ids == [tok(x).input_ids for x]
  batch_decode_equals_single exact batch_decode(rows, skip_special_tokens=True) and decode(rows, ...)
                              == [decode(row, skip_special_tokens=True) for row]; decode(rows) only where
                              the version decodes a batch (4.57 raises TypeError: `return_types` records it)
 the checkpoint's own files read and run by the harness as the expected side (`library_references`,
 harness/engine/bpe.py via detokenize.py `Oracle`: neither transformers nor the `tokenizers` library its
 fast tokenizer runs; the names are the file format's, kept so the records stay; the tokenizer zoo's
 cases too), on `TEXTS` and `PROBES` (texts only the references read: they tell apart pipelines the
 recorded texts cannot - an NFKC normalizer slipped in, a split regex lost); `not checkable` for a
 tokenizer with neither a tokenizer.json nor GPT-2's slow files, `not checked` naming the component for
 one whose files use what the reader does not implement:
  encode_as_tokenizers_lib exact ids, tokens, offsets of every text, with and without special tokens; a
                             text whose answer is exactly `KNOWN_DEVIATION`'s (5.x resetting the
                             strip flags of added tokens tokenizer_config.json names as bare strings,
                             read by the same reader) is held to it and listed as the information
                             `known_upstream_deviation` - issue 58 item 8: the reader, like 4.57.6,
                             honours `<mask>`'s lstrip, so the deviation is transformers' own
  decode_as_tokenizers_lib exact decode(ids_special, skip_special_tokens=False / True, no clean-up)
  stream_as_decode     exact TextStreamer's pieces joined (and the reader's incremental decode joined)
                             against the reader's decode with the special tokens skipped
 padding (`padding`; the tokenizer zoo's cases too): a batch as users build it
  padded         exact   tok(PAD_PROMPTS, padding=True) with the tokenizer's own side and padding_side="left" /
                         "right" at call time: ids and mask (no pad token: what that raised, then pad = eos)
  padding_as_specified exact each side's batch equals harness/engine/padding.py's padding of the harness's
                         encode of each prompt alone (bpe.py): tokenizer_config.json's pad token (else its
                         eos), the side asked, else its padding_side, else "right" (transformers' documented
                         default) - padding_side ignored at call time (PR #33385's class) is seen on a first run

**Chat templates.** `<model>.chat`: the zoo tokenizer loaded (`AutoTokenizer.from_pretrained`) from
its files beside harness/zoo/chat_template.jinja - a Llama-3-shaped template: a system turn that
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
from typing import TYPE_CHECKING, Any

import torch

from harness.engine.detokenize import BPE_GUARD, NoOracle, Oracle, cleaned_up_as_specified
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

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

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

TEMPLATE_FILE = Path(__file__).resolve().parents[1] / "zoo" / "chat_template.jinja"
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


# texts the tokenizer references read besides `TEXTS`, never recorded as fields (so adding one changes no
# record): each tells apart pipelines that `TEXTS` cannot with a 512-id vocabulary - compatibility
# characters NFKC rewrites (a normalizer slipped into the load loses them), contractions glued to a word
# (the Llama-3 / GPT-2 split cuts `'re`, `'d` off; with the split lost the merges run across), digit runs
# and blank runs (the split's `\p{N}{1,3}` and whitespace alternatives)
PROBES: dict[str, str] = {
    "compat-chars": "\ufb01ne \u2460 x\u00b2 \uff21\uff22\uff23 \u2026 \u216b \u338f caf\u00e9",
    "glued-contractions": "Before'dawn, Lena went to the'station with a'red ball. ONE'DAY IT'LL rain",
    "digit-runs": "1234567 00042 3.14159 2026-05-09",
    "blank-runs": "a    b\n\n\n  c \t\t d\r\n\r\ne   ",
}
# the one upstream deviation the design declares known, found with the harness's own reader of the files
# (issue 58 item 8: transformers 4.57.6 honours the flags, as the files' definition does; 5.0.0 - 5.24.0
# do not): bounded to its releases and its mechanism (`strip_flags_reset`), so a first run on an empty
# store can pass while every other deviation of the same texts still fails
KNOWN_DEVIATION = {
    "since_major": 5,
    "what": ("transformers 5.x re-adds an added token that tokenizer_config.json names as a bare string under "
             "additional_special_tokens with lstrip = rstrip = False, whatever tokenizer.json and "
             "added_tokens_decoder declare (RoBERTa's `<mask>` keeps the space before it: `x <mask> y`)"),
    "issue": ("the class of transformers #26536 (AddedToken flags lost on load from file), PR #23909 (\"losing the "
              "information on rstrip and lstrip for any of the added tokens\") and #33371 (fast vs slow mismatch "
              "for special tokens with lstrip/rstrip)"),
}


# ----------------------------------------------------------------------------------------------
# pure logic


def strip_flags_reset(directory: Any, version: str) -> dict[str, dict[str, bool]]:
    """`KNOWN_DEVIATION`'s mechanism read from the checkpoint's files: {token: {"lstrip": False,
    "rstrip": False}} for each added token whose files give it lstrip or rstrip and that
    tokenizer_config.json also names as a bare string under additional_special_tokens - on a
    transformers of the releases it is known in (5.x); {} elsewhere."""
    if int(version.split(".")[0]) < KNOWN_DEVIATION["since_major"]:
        return {}
    path = Path(directory) / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    named = {t for t in config.get("additional_special_tokens") or () if isinstance(t, str)}
    flagged = {t.get("content") for t in (config.get("added_tokens_decoder") or {}).values()
               if t.get("lstrip") or t.get("rstrip")}
    spec = Path(directory) / "tokenizer.json"
    if spec.is_file():
        flagged |= {t["content"] for t in json.loads(spec.read_text(encoding="utf-8")).get("added_tokens", [])
                    if t.get("lstrip") or t.get("rstrip")}
    return {t: {"lstrip": False, "rstrip": False} for t in sorted(named & flagged)}


def _known_deviation(obs: Observation, oracle: Oracle, directory: Any, texts: dict[str, str], got: dict[str, Any],
                     expected: dict[str, dict[str, Any]]) -> None:
    """Where transformers' encode of a text differs from the files' reading but equals, exactly, the
    reading with `KNOWN_DEVIATION`'s mechanism applied (the same reader, the flags it resets), that
    text's expected value is the known one and the text is listed as information; any other
    difference - on that text or another - stays for `encode_as_tokenizers_lib` to fail."""
    changes = strip_flags_reset(directory, hf.version()) if directory is not None else {}
    if not changes:
        return
    known = oracle.with_added(changes)
    explained = []
    for part, add in (("plain", False), ("special", True)):
        for key, text in texts.items():
            seen = got[part].get(key)
            if seen == expected[part][key]:
                continue
            answer = known.encode(text, add)
            if seen == answer:
                expected[part][key] = answer
                explained.append(f"{part}.{key}")
    if explained:
        obs.info("known_upstream_deviation",
                 f"{KNOWN_DEVIATION['what']} ({', '.join(sorted(changes))}): {len(explained)} encodings differ "
                 f"from the files' reading exactly as that deviation does ({', '.join(explained[:6])}"
                 f"{', ...' if len(explained) > 6 else ''}); {KNOWN_DEVIATION['issue']}",
                 diff={"tokens": changes, "texts": explained}, category="known-deviation")


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


def tokenizer(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    tok = zoo.load(case.model).tokenizer
    directory = zoo.checkpoints.directory(case.model)
    configured = configured_clean_up(directory)
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
    oracle = library_oracle(directory)
    probes = encoded_texts(tok, PROBES)
    round_trip_reference(obs, case.model, oracle, tok, got.round_trip, TEXTS, probes)
    obs.reference("skip_special_as_specified", got.skip_special, got.special_dropped, implementations_differ=False)
    clean_up_as_specified(obs, oracle, tok, got)
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
    if isinstance(oracle, NoOracle):
        for name in LIBRARY_REFERENCES:
            obs.skipped(name, "exact", oracle.reason, category=oracle.category)
    else:
        library_references(obs, tok, oracle, TEXTS, encoded_texts(tok, TEXTS), directory, probes)
    padding(obs, tok, directory, oracle)
    return obs


# the references whose expected side is the checkpoint's own files read by the harness (the names are the
# file format's, the `tokenizers` library's; that library no longer runs on the expected side)
LIBRARY_REFERENCES = ("encode_as_tokenizers_lib", "decode_as_tokenizers_lib", "stream_as_decode")


def library_oracle(directory: Any) -> Oracle | NoOracle:
    """The harness's reading of a checkpoint's tokenizer files (harness/engine/detokenize.py
    `Oracle.of` over harness/engine/bpe.py: tokenizer.json, or GPT-2's slow files), or why there is
    none (`NoOracle`: no files - not checkable; a component the reader lacks, named - not checked)."""
    try:
        return Oracle.of(directory)
    except NoOracle as e:
        return e


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


def _with_probes(got: dict[str, Any], probes: dict[str, Any] | None) -> dict[str, Any]:
    """The recorded texts' answers followed by the probes' (references only: no field records a probe)."""
    if not probes:
        return got
    return {part: {**got[part], **{f"probe:{k}": v for k, v in probes[part].items()}} for part in got}


def library_references(obs: Observation, tok: Any, oracle: Oracle, texts: dict[str, str], got: dict[str, Any],
                       directory: Any = None, probes: dict[str, Any] | None = None) -> None:
    """The checkpoint's files read by the harness (harness/engine/bpe.py, never transformers nor the
    `tokenizers` library it runs) as the expected side, on every text and every probe (`PROBES`):
      encode_as_tokenizers_lib  ids, tokens, offsets with and without the special tokens; a text whose
                                answer is exactly a declared known upstream deviation's (`KNOWN_DEVIATION`,
                                this version's, read by the same reader) is held to that answer and listed
                                as information (`known_upstream_deviation`), never silently passed
      decode_as_tokenizers_lib  decode(ids_special, skip_special_tokens=False / True, no clean-up)
      stream_as_decode          TextStreamer's pieces joined, and the reader's incremental decode joined,
                                against the reader's decode with the special tokens skipped"""
    all_texts = {**texts, **{f"probe:{k}": v for k, v in PROBES.items()}} if probes else texts
    got = _with_probes(got, probes)
    expected = {"plain": {k: oracle.encode(t, False) for k, t in all_texts.items()},
                "special": {k: oracle.encode(t, True) for k, t in all_texts.items()}}
    _known_deviation(obs, oracle, directory, all_texts, got, expected)
    obs.reference("encode_as_tokenizers_lib", {"plain": got["plain"], "special": got["special"]}, expected,
                  implementations_differ=False)
    raw = {str(s): {k: decode_ids(tok, ids, skip_special_tokens=s, clean_up_tokenization_spaces=False)
                    for k, ids in got["ids_special"].items()} for s in (False, True)}
    obs.reference("decode_as_tokenizers_lib", raw,
                  {str(s): {k: oracle.decode(ids, s) for k, ids in got["ids_special"].items()} for s in (False, True)},
                  implementations_differ=False)
    skipped = {k: oracle.decode(ids, True) for k, ids in got["ids_special"].items()}
    obs.reference("stream_as_decode", {"TextStreamer": got["joined"],
                                       "DecodeStream": {k: "".join(oracle.stream(ids, True))
                                                        for k, ids in got["ids_special"].items()}},
                  {"TextStreamer": skipped, "DecodeStream": skipped}, implementations_differ=False)


def round_trip_reference(obs: Observation, model: str, oracle: Oracle | NoOracle, tok: Any,
                         round_trip: dict[str, Any], texts: dict[str, str], probes: dict[str, Any]) -> None:
    """`round_trip_lossless`: decode(encode(x)) == x for every text and probe, where the checkpoint's
    files promise it (read by the harness: bpe.py `Reader.round_trip_promise` - never the loaded
    pipeline, which a fault may have changed); skipped with the files' reason elsewhere."""
    if isinstance(oracle, NoOracle):
        obs.skipped("round_trip_lossless", "exact", oracle.reason, category=oracle.category)
        return
    why = oracle.round_trip_promise()
    if why:
        obs.skipped("round_trip_lossless", "exact", f"{model}'s tokenizer files do not promise a lossless round trip: "
                                                    f"{why}")
        return
    observed = dict(round_trip)
    observed.update({f"probe:{k}": decode_ids(tok, v["ids"]) for k, v in probes["plain"].items() if not is_error(v)})
    wanted = {**texts, **{f"probe:{k}": t for k, t in PROBES.items()}}
    obs.reference("round_trip_lossless", observed, {k: wanted[k] for k in observed}, implementations_differ=False)


def clean_up_as_specified(obs: Observation, oracle: Oracle | NoOracle, tok: Any, got: Any) -> None:
    """decode(ids_special, clean_up_tokenization_spaces=True) against the harness's reading of the
    checkpoint's files (harness/engine/bpe.py) decoding the same ids, with the version's declared
    clean-up rule applied by the harness (harness/engine/detokenize.py `cleaned_up_as_specified`): the
    guard that skips it on a BPE model is read from the tokenizer's attribute, the model type from the
    files - the decode wrapper judged runs on neither side."""
    if isinstance(oracle, NoOracle):
        obs.skipped("clean_up_as_specified", "exact", oracle.reason, category=oracle.category)
        return
    guard = getattr(tok, BPE_GUARD, None)
    want = {k: cleaned_up_as_specified(oracle.decode(ids), oracle.model_type, guard)
            for k, ids in got.ids_special.items() if isinstance(ids, list)}
    obs.reference("clean_up_as_specified", got.clean_up, want,
                  expected_extras={"model": oracle.model_type, "guard": guard}, implementations_differ=False)


def padding(obs: Observation, tok: Any, directory: Any, oracle: Oracle | NoOracle | None) -> None:
    """`padded`: a batch of `PAD_PROMPTS` as users build it (harness/subjects/hf_text.py `padded_batches`);
    `padding_as_specified`: each side's batch against the harness's own padding of its reading of the
    checkpoint's files (harness/engine/bpe.py) encoding each prompt alone - the pad id of
    tokenizer_config.json's pad_token (else its eos_token: the users' `pad_token = eos_token`), on the
    side asked, else the config's padding_side, else "right" (PreTrainedTokenizerBase's documented
    default), mask 1 on the prompt's ids, 0 on the pads."""
    got = padded_batches(tok, PAD_PROMPTS)
    obs.add("padded", got)
    if oracle is None or isinstance(oracle, NoOracle):
        why = oracle.reason if oracle is not None else f"{directory} has no tokenizer files for the harness to read"
        obs.skipped("padding_as_specified", "exact", why,
                    category=oracle.category if oracle is not None else "not-checkable")
        return
    config = json.loads((Path(directory) / "tokenizer_config.json").read_text(encoding="utf-8"))
    pad = _content(config.get("pad_token")) or _content(config.get("eos_token"))
    pad_id = oracle.token_to_id(pad) if pad else None
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


def chat(zoo: Zoo, case: Case) -> Observation:
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
        tok, error = chat_tokenizer(zoo.checkpoints.directory(case.model), template)
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
