"""The tokenizer zoo through the installed transformers (suites/test_text.py; tables: harness/cases/text.py
`zoo_tokenizers`, `zoo_chats`; tokenizers: harness/zoo/tokzoo.py): each real family's pipeline
on a text set made for it, and the families' chat templates rendered, tokenized and generated from
with llama-target's weights (the zoo tokenizers keep its 512-id vocabulary).

**`<tok>.tokenizer`** - per text of `texts(family)` (the text suite's `TEXTS`, plus special tokens
at the start and inside, byte-fallback characters, digits, whitespace runs, and the added-token
variants for tok-added):

  setup          exact   the class transformers chose, special tokens, add_prefix_space / legacy /
                         add_bos_token / padding_side / clean_up attributes
  pipeline       exact   the backend's normalizer / pre-tokenizer / decoder / model types
  encoded        exact   per text: ids, tokens, offsets without special tokens
  encoded_special exact  per text: the same with the default add_special_tokens (BOS by template)
  decoded        exact   per text: decode(ids_special) as called by default (clean-up as configured)
  decoded_skip_special exact per text: decode(ids_special, skip_special_tokens=True)
  round_trip_text exact  per text: decode(ids) (no special tokens added)
  padded         exact   `tok(PAD_PROMPTS, padding=True)` with the tokenizer's own side and with
                         padding_side="left" / "right" at call time: ids and attention mask (a tokenizer
                         without a pad token: what that call raised, then the batch with pad = eos, as users do)
  streamed       exact   per text: the text TextStreamer hands out for ids_special, one id at a time
                         (the pieces shown beside it, not compared: where they break is a version's choice);
                         its oracle is `stream_as_decode`, and `encoded` / `encoded_special`'s is
                         `encode_as_tokenizers_lib`: a change toward the files' answer is fixed (5.14.0 -> 5.24.0's TextStreamer keeping the space after a newline),
                         away from it broken (harness/checking/oracles.py)
 references (the expected side runs neither transformers nor the `tokenizers` library its fast
 tokenizer runs: the checkpoint's files are read by the harness, harness/engine/bpe.py, through
 harness/engine/detokenize.py `Oracle`; every reference below reads `PROBES` too):
  encode_as_tokenizers_lib exact ids, tokens, offsets (with and without special tokens) equal the
                         harness's reading of the same tokenizer.json (the name is the file format's);
                         for tok-slow-bpe, which ships GPT-2's slow files only (vocab.json + merges.txt)
                         and is converted by transformers at load, the pipeline those files define
                         (bpe.py `gpt2_spec`); tok-added on 5.x: `<mask>` / `<tool_call>` losing their
                         lstrip / rstrip is the declared `KNOWN_DEVIATION` (harness/designs/text.py),
                         shown as `known_upstream_deviation`
  decode_as_tokenizers_lib exact decode(ids_special, skip_special_tokens=False / True,
                         clean_up_tokenization_spaces=False) equals the reader's decode of the same ids
                         (clean-up is transformers' rewrite after the pipeline: `decoded` records it)
  stream_as_decode     exact the streamed pieces joined equal the reader's decode with the special tokens
                         skipped, and the reader's own incremental decode joined equals it too
  round_trip_lossless  exact decode(encode(x)) == x where the files promise it (read by the reader:
                         harness/designs/text.py `round_trip_reference`); skipped elsewhere
  padding_as_specified exact each side's batch equals the harness's padding (harness/engine/padding.py) of
                         the reader's encode of each prompt alone: tokenizer_config.json's pad token (else
                         its eos), the side asked, else its padding_side, else "right"; mask 1 on real ids
  prefix_space_contract exact (SentencePiece family) the pieces transformers encodes equal the harness's
                         own reading of Metaspace(prepend_scheme="first") (harness/engine/spm_contract.py):
                         one prefix space, none after a special token
  skip_special_contract exact (SentencePiece family) decode(ids_special, skip_special_tokens=True) equals
                         the contract's decode: no space left behind a skipped special token (#25073)

**`<tok>.chat.<template>`** - a family's template (harness/zoo/chat_<template>.jinja) beside the
tokenizer's files; the text suite's conversation, and one ending with an assistant message:

  rendered       exact   with / without the generation prompt, with tools (llama3, chatml), the
                         continued conversation with continue_final_message=True
  ids            exact   the default tokenized call's ids (add_generation_prompt=True); ids_continued
  bos_count      exact   how many BOS ids the tokenized chat holds, and `tok(rendered)` (the rendered text
                         encoded with the default add_special_tokens, as users do): a template that writes
                         bos_token, on a tokenizer whose post-processor adds one, shows its second BOS there
  tokens / text  tokens  generate() greedy from the ids with llama-target's weights: `CHAT_TOKENS` new tokens
 references:
  bos_as_rendered      exact the BOS ids of the tokenized chat are as many as the rendered text writes
                         bos_token (the harness counts the text; apply_chat_template must add none)
  ids_as_tokenizers_lib exact the tokenized chat equals the harness's encode (bpe.py) of the rendered
                         text without special tokens
  generation_prompt_appended exact the prompt-less text is a prefix and what follows is the family's
                         header (`HEADERS`; Mistral's template has none)
  continue_final_message_open exact the continued render ends with the final message's content (no
                         end-of-turn after it)
  messages_in_order    exact every content occurs in the rendered text in order (the system message
                         where the family's rule puts it: `ORDER`)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from harness.designs.text import (
    LIBRARY_REFERENCES,
    MESSAGES,
    PROBES,
    TEXTS,
    TOOLS,
    contents_in_order,
    encoded_texts,
    library_oracle,
    library_references,
    padding,
    round_trip_reference,
)
from harness.engine import spm_contract
from harness.engine.detokenize import NoOracle, Oracle
from harness.schema import Case, Observation
from harness.subjects import hf
from harness.subjects.hf_text import (
    decode_ids,
    encode_detail,
    is_error,
    load_tokenizer,
    pipeline,
    render_family,
    tokenizer_setup,
)
from harness.zoo import tokzoo
from harness.zoo.specs import PACKAGE_ROOT

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

SERVING_MODEL = "llama-target"  # whose weights generate through the zoo tokenizers (vocabulary 512)
CHAT_TOKENS = 8
HEADERS = {"llama3": "<|start_header_id|>assistant<|end_header_id|>\n\n", "chatml": "<|im_start|>assistant\n",
           "gemma": "<start_of_turn>model\n", "mistral": ""}
CONTINUED: tuple[dict[str, str], ...] = MESSAGES[:3]  # ends with the assistant's "Anna had a red ball."
# the order the conversation's contents appear in (indices into MESSAGES): Mistral's system-prompt rule
# puts the system message before the last user message
ORDER = {"mistral": (1, 2, 0, 3)}


def template_file(name: str) -> Any:
    return PACKAGE_ROOT / "zoo" / f"chat_{name}.jinja"


def texts(family: str, specials: list[str], bos: str | None) -> dict[str, str]:
    """The text suite's `TEXTS` plus the cases a real family's pipeline treats specially."""
    first = bos or specials[0]
    out = dict(TEXTS)
    out.update({
        "special-start": f"{first} Hello",
        "special-start-nospace": f"{first}Hello there",
        "special-inside-family": f"one {specials[0]} two {specials[-1]}three",
        "byte-fallback": "Stra\u00dfe \u2211 \U0001d518 \x07bell \u00a0nbsp",
        "digits": "12345 1234567890 3.5e-7 0007",
        "whitespace-runs": "a   b\t\t c \n\n\n d    ",
    })
    if family == "added":
        out.update({f"added-{i}": text for i, text in enumerate((
            "x <mask> y", "<tool_call>  {\"a\": 1}</tool_call>", "[NAME] met <|fim_middle|> here",
            "<think>inner</think> out", "<|im_start|>user\nhi<|im_end|>"))})
    return out


def _specials(tok: Any) -> list[str]:
    return [str(t) for t in tok.all_special_tokens]


def _by_text(values: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: (v[key] if isinstance(v, dict) and key in v else v) for k, v in values.items()}


def zoo_tokenizer(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    directory = zoo.checkpoints.tokenizer_directory(case.model)
    tok, error = load_tokenizer(directory)
    if error is not None:
        obs.add("load_error", error)
        return obs.stop(f"{case.model} did not load: {error['type']}: {error['message']}")
    family = tokzoo.BY_NAME[case.model].family
    oracle = library_oracle(directory)
    specials = _specials(tok)
    stages = pipeline(tok)
    cases_ = texts(family, specials, tok.bos_token)
    got = encoded_texts(tok, cases_)
    plain, special, ids_special = got["plain"], got["special"], got["ids_special"]
    obs.add("setup", tokenizer_setup(tok))
    obs.add("pipeline", stages)
    obs.add("encoded", plain, oracle="encode_as_tokenizers_lib")
    obs.add("encoded_special", special, oracle="encode_as_tokenizers_lib")
    obs.add("decoded", {k: decode_ids(tok, ids) for k, ids in ids_special.items()})
    skip = {k: decode_ids(tok, ids, skip_special_tokens=True) for k, ids in ids_special.items()}
    obs.add("decoded_skip_special", skip)
    round_trip = {k: decode_ids(tok, v["ids"]) for k, v in plain.items() if not is_error(v)}
    obs.add("round_trip_text", round_trip)
    obs.add("streamed", got["joined"], show={"pieces": got["pieces"]},  # where the pieces break is a version's choice
            oracle="stream_as_decode")
    probes = encoded_texts(tok, PROBES)
    if isinstance(oracle, NoOracle):
        for name in LIBRARY_REFERENCES:
            obs.skipped(name, "exact", oracle.reason, category=oracle.category)
    else:
        library_references(obs, tok, oracle, cases_, got, directory, probes)
    round_trip_reference(obs, case.model, oracle, tok, round_trip, cases_, probes)
    padding(obs, tok, directory, oracle)
    if family == "sentencepiece":
        skip = {k: decode_ids(tok, ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
                for k, ids in ids_special.items()}
        _spm_contract(obs, tok, cases_, plain, skip, specials)
    else:
        for name in ("prefix_space_contract", "skip_special_contract"):
            obs.skipped(name, "exact", f"{case.model} is not of the SentencePiece family (no prefix-space contract)")
    return obs


def _spm_contract(obs: Observation, tok: Any, cases_: dict[str, str], plain: dict[str, Any],
                  skip: dict[str, Any], specials: list[str]) -> None:
    """The prefix-space contract on the pieces and on the skip-special decode (both with clean-up off)."""
    observed = {k: spm_contract.pieces_text(v["tokens"]) for k, v in plain.items() if not is_error(v)}
    obs.reference("prefix_space_contract", observed,
                  {k: spm_contract.expected_pieces(cases_[k], specials) for k in observed},
                  implementations_differ=False)
    bos = tok.bos_token if getattr(tok, "add_bos_token", True) else None
    obs.reference("skip_special_contract", skip,
                  {k: spm_contract.expected_decode(cases_[k], specials, True, bos) for k in skip},
                  implementations_differ=False)


# ----------------------------------------------------------------------------------------------
# chat templates


def zoo_chat(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    name = case.param("template")
    template = template_file(name).read_text()
    directory = zoo.checkpoints.tokenizer_directory(case.model)
    tok, error = load_tokenizer(directory, template)
    if error is not None:
        obs.add("load_error", error)
        return obs.stop(f"{case.model} with the {name} template did not load: {error['type']}: {error['message']}")
    tools = TOOLS if name in ("llama3", "chatml") else None
    got = render_family(tok, MESSAGES, tools, CONTINUED)
    obs.add("rendered", got["rendered"])
    obs.add("ids", got["ids"])
    obs.add("ids_continued", got["ids_continued"])
    with_prompt, without = got["rendered"]["generation_prompt"], got["rendered"]["no_generation_prompt"]
    if is_error(with_prompt) or is_error(without) or not isinstance(got["ids"], list):
        return obs.stop(f"the {name} template did not render or tokenize: {with_prompt!r}"[:300])
    bos_id = tok.bos_token_id
    retokenized = encode_detail(tok, with_prompt, True)  # the user's path: tok(rendered), special tokens added
    retokenized = retokenized["ids"] if not is_error(retokenized) else retokenized
    obs.add("bos_count", {k: (ids.count(bos_id) if bos_id is not None else 0) if isinstance(ids, list) else None
                          for k, ids in (("ids", got["ids"]), ("ids_continued", got["ids_continued"]),
                                         ("tok(rendered)", retokenized))})
    _chat_references(obs, tok, got, name, library_oracle(directory))
    lm = zoo.load(SERVING_MODEL)
    ran = hf.generate(lm.model, torch.tensor([got["ids"]], device=zoo.device), CHAT_TOKENS)
    obs.add("generate_error", ran.error)
    if ran.error is None:
        obs.add("tokens", ran.tokens, kind="tokens", margins=ran.margins)
        obs.add("text", tok.decode(ran.tokens), follows="tokens")
    return obs


def _chat_references(obs: Observation, tok: Any, got: dict[str, Any], name: str, oracle: Oracle | NoOracle) -> None:
    rendered = got["rendered"]
    with_prompt, without = rendered["generation_prompt"], rendered["no_generation_prompt"]
    bos_text, bos_id = tok.bos_token, tok.bos_token_id
    chats = {"ids": (got["ids"], with_prompt), "ids_continued": (got["ids_continued"], rendered["continue_final_message"])}
    counts = {k: ids.count(bos_id) for k, (ids, _) in chats.items() if isinstance(ids, list) and bos_id is not None}
    obs.reference("bos_as_rendered", counts,
                  {k: chats[k][1].count(bos_text) if isinstance(chats[k][1], str) else None for k in counts},
                  implementations_differ=False)
    if isinstance(oracle, NoOracle):
        obs.skipped("ids_as_tokenizers_lib", "exact", oracle.reason, category=oracle.category)
    else:
        obs.reference("ids_as_tokenizers_lib", {k: ids for k, (ids, _) in chats.items()},
                      {k: oracle.encode(text, False)["ids"] if isinstance(text, str) else text
                       for k, (_, text) in chats.items()}, implementations_differ=False)
    obs.reference("generation_prompt_appended", with_prompt[len(without):] if with_prompt.startswith(without) else None,
                  HEADERS[name], implementations_differ=False)
    final = CONTINUED[-1]["content"].strip()
    cont = rendered["continue_final_message"]
    obs.reference("continue_final_message_open", isinstance(cont, str) and cont.rstrip().endswith(final), True,
                  implementations_differ=False)
    order = ORDER.get(name, range(len(MESSAGES)))
    obs.reference("messages_in_order", contents_in_order(with_prompt, [MESSAGES[i]["content"] for i in order]), True,
                  implementations_differ=False)
