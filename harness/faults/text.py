"""Catalogue faults of tokenizers, chat templates and the tokenizer zoo (suites/test_text.py).

Each `Fault` row names what it breaks, the `Catch` that must report it and the upstream bug it
is modelled on; harness/faults/catalogue.py joins every family's `FAULTS`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.faults.patches import Catch, Fault, Wrap, edit
from harness.faults.targets import GPT2_TOK, TOK, TOK_BACKEND


def _skip_special_on_text(decode: Callable[..., Any]) -> Callable[..., Any]:
    """skip_special_tokens applied to the decoded text (each special token's content cut out of it)
    instead of to the ids: the space the next piece carries stays behind (`"<s> Hello"` -> `" Hello"`)."""
    import functools

    @functools.wraps(decode)
    def wrapped(self: Any, token_ids: Any, skip_special_tokens: bool = False, *args: Any, **kwargs: Any) -> Any:
        text = decode(self, token_ids, False, *args, **kwargs)
        if skip_special_tokens and isinstance(text, str):
            for special in sorted(map(str, self.all_special_tokens), key=len, reverse=True):
                text = text.replace(special, "")
        return text
    return wrapped


def _byte_level_decoder_lost(init: Callable[..., Any]) -> Callable[..., Any]:
    """A tokenizer rebuilt at load keeps its byte-level pieces but loses the ByteLevel decoder (a
    plain Fuse in its place): decode prints the pieces' byte characters, `Ġ` for a space, `Ċ` for a newline."""
    import functools

    @functools.wraps(init)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        backend = getattr(self, "_tokenizer", None)
        if backend is not None and type(backend.decoder).__name__ == "ByteLevel":
            from tokenizers import decoders

            backend.decoder = decoders.Fuse()
    return wrapped


def _prefix_space_by_default(init: Callable[..., Any]) -> Callable[..., Any]:
    """GPT2Tokenizer's add_prefix_space defaulting to True: a config that names none gets a prefix space."""
    import functools

    @functools.wraps(init)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("add_prefix_space", True)
        init(self, *args, **kwargs)
    return wrapped


def _on_the_loaded_backend(change: Callable[[Any], None]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A wrapper of TokenizersBackend.__init__ that applies `change` to the `tokenizers` pipeline the
    tokenizer has just built (from tokenizer.json, or from the class's own code in v5), before any
    encode: the pipeline transformers runs differs from the checkpoint's files, silently."""
    import functools

    def wrap(init: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(init)
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            backend = getattr(self, "_tokenizer", None)
            if backend is not None:
                change(backend)
        return wrapped
    return wrap


def _nfkc_slipped_in(backend: Any) -> None:
    """NFKC put in front of the pipeline's own normalizer (or alone where it has none): `ﬁ` -> `fi`,
    `①` -> `1`, `x²` -> `x2`, a no-break space -> a space - the text is rewritten before it is split."""
    from tokenizers import normalizers

    own = backend.normalizer
    backend.normalizer = normalizers.NFKC() if own is None else normalizers.Sequence([normalizers.NFKC(), own])


def _split_regex_as_literal(backend: Any) -> None:
    """Every Split pre-tokenizer's Regex pattern read as a literal String, which never matches: with
    ByteLevel(use_regex=False) after it each text is one piece, and the merges run across what the
    split kept apart (`Before'dawn`: `'d` is no longer cut off)."""
    import json

    from tokenizers import Tokenizer

    data = json.loads(backend.to_str())

    def literal(stage: Any) -> bool:
        if not isinstance(stage, dict):
            return False
        if stage.get("type") == "Split" and isinstance(stage.get("pattern"), dict) and "Regex" in stage["pattern"]:
            stage["pattern"] = {"String": stage["pattern"]["Regex"]}
            return True
        return any([literal(s) for s in stage.get("pretokenizers") or ()])

    if literal(data.get("pre_tokenizer")):
        backend.pre_tokenizer = Tokenizer.from_str(json.dumps(data)).pre_tokenizer


def _byte_fallback_lost(backend: Any) -> None:
    """The BPE model's byte_fallback off: a character outside the vocabulary is no longer its UTF-8
    bytes' <0xXX> tokens but the unknown token, or nothing where the model has none (v5's
    LlamaTokenizer builds its BPE without an unk_token): `café 🤗` -> `caf`."""
    model = backend.model
    if type(model).__name__ == "BPE" and getattr(model, "byte_fallback", False):
        model.byte_fallback = False


FAULTS: tuple[Fault, ...] = (
    # tokenizers (suites/test_text.py: a text set encoded and decoded, against the same tokenizer's single calls) --
    Fault("batch-decode-ignores-skip-special-tokens", "tokenizers",
          "decode of a batch (a list of id lists, and batch_decode, which forwards to it) drops skip_special_tokens: "
          "special tokens stay in every batch-decoded text while a single decode removes them",
          Catch("text", "llama-target.tokenizer", "batch_decode_equals_single"),
          (edit(TOK, "PreTrainedTokenizerBase.decode",
                ("token_ids=seq,\n                skip_special_tokens=skip_special_tokens,",
                 "token_ids=seq,\n                skip_special_tokens=False,")),),
          notes="modelled on transformers #10202 (\"Fast Tokenizers instantiated via vocab/merge files do not respect "
                "skip_special_tokens=True\") and #44811 / PR #44820 (\"fix(whisper): respect skip_special_tokens in "
                "batch_decode\": batched input ignored the flag) in the one loop v5's decode runs for a batch"),
    Fault("bpe-clean-up-strips-spaces", "tokenizers",
          "the BPE guard of TokenizersBackend._decode loses its `not`: clean_up_tokenization_spaces=True runs the "
          "WordPiece clean-up on byte-level BPE text again, deleting real spaces (`x != y` -> `x!= y`, ` ,` -> `,`)",
          Catch("text", "llama-target.tokenizer", "decoded_clean_up"),
          (edit(TOK_BACKEND, "TokenizersBackend._decode",
                ("and not self.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output",
                 "and self.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output")),),
          notes="undoes transformers PR #44915 (\"skip `clean_up_tokenization` for BPE tokenizers\": Llama 3 configs "
                "set clean_up_tokenization_spaces=true and decode turned `x != y` into `x!= y`) - the space damage in "
                "decoded code behind #31890 (\"[Severe Bug] Performance Degradation Starting from v4.42.*\": extra / "
                "lost spaces cut BigCodeBench scores) and sglang #1510 (HumanEval spaces dropped by the clean-up)"),
    # chat templates (suites/test_text.py: a Llama-3-shaped template rendered, tokenized, generated from) -------
    Fault("chat-generation-prompt-dropped", "chat",
          "apply_chat_template no longer passes add_generation_prompt to the template: the assistant header is "
          "never appended, and generate() continues the user's turn",
          Catch("text", "llama-target.chat", "generation_prompt_appended"),
          (edit(TOK, "PreTrainedTokenizerBase.apply_chat_template",
                ("add_generation_prompt=add_generation_prompt,\n        **template_kwargs,", "**template_kwargs,")),),
          notes="modelled on transformers #30893 (\"add_generation_prompt=False in Tokenizer.apply_chat_template has no "
                "effect\") and #27926 (\"Can't get add_generation_prompt to work correctly in apply_chat_template\"): "
                "the flag not reaching the rendered text"),
    Fault("chat-sanitize-keyword-removed", "chat",
          "apply_chat_template no longer takes sanitize_control_tokens (the parameter and its code path removed, "
          "**kwargs kept): a caller's sanitize_control_tokens=True lands in the template's kwargs and is silently "
          "ignored, so special-token text in a user message becomes control tokens again",
          Catch("text", "llama-target.chat", "sanitized_content_is_text"),
          (edit(TOK, "PreTrainedTokenizerBase.apply_chat_template",
                ("sanitize_control_tokens: bool = False,", ""),
                ("if sanitize_control_tokens:", "if False:"),
                ("sanitize_control_tokens=sanitize_control_tokens,", "sanitize_control_tokens=False,")),),
          notes="a keyword removed in a release while **kwargs swallows it, the way vllm #17805 removed "
                "`trust_remote_code` from its chat-template helper and broke ray #52975 (fixed by vllm #18098), and "
                "as mlx-lm #1221 notes, \"the HF Jinja path silently ignores unknown kwargs\": the reference that "
                "needs the keyword cannot run; against a baseline where it ran that is `reference-lost`, on a first "
                "run `not checked` (a regression only under --strict)"),
    Fault("chat-template-returns-ids-list", "chat",
          "apply_chat_template(tokenize=True) returns a list of ids by default again instead of v5's BatchEncoding",
          Catch("text", "llama-target.chat", "return_types"),
          (edit(TOK, "PreTrainedTokenizerBase.apply_chat_template",
                ("return_dict: bool = True,", "return_dict: bool = False,")),),
          notes="re-creates what transformers PR #42567 fixed (\"[V5] Return a BatchEncoding dict from "
                "apply_chat_template by default again\": PR #41626's v5 default was clobbered in the tokenizer "
                "refactor) - the return type every caller indexes (trl #4448, vllm #33372 adapted to it)"),
    # the tokenizer zoo (suites/test_text.py: real families against the harness's own reading of their files,
    # harness/engine/bpe.py, and the SentencePiece prefix-space contract, harness/designs/tokenizer_zoo.py) ------
    Fault("decode-space-after-skipped-special", "tokenizers",
          "skip_special_tokens=True cuts the special tokens' text out of the decoded string instead of dropping "
          "their ids before the decoder: the space the next SentencePiece piece carries is left behind "
          "(`<s> Hello world` -> ` Hello world`)",
          Catch("text", "tok-spm.tokenizer", "skip_special_contract"),
          (Wrap(TOK_BACKEND, "TokenizersBackend._decode", _skip_special_on_text),),
          notes="modelled on transformers #25073 (\"Slow Tokenizer adds whitespace after special token\": the legacy "
                "SentencePiece prefix-space class) and the same class in #29453 and tokenizers #1237 (as issue 37 "
                "lists them): a space left behind a skipped special token"),
    Fault("chat-template-second-bos", "chat",
          "apply_chat_template(tokenize=True) encodes the rendered text with add_special_tokens=True: a template "
          "that writes bos_token itself gets a second BOS from the tokenizer's template post-processor",
          Catch("text", "tok-spm.chat.mistral", "bos_as_rendered"),
          (edit(TOK, "PreTrainedTokenizerBase.apply_chat_template",
                ("max_length=max_length,\n            add_special_tokens=False,",
                 "max_length=max_length,\n            add_special_tokens=True,")),),
          notes="modelled on the double-BOS class: sgl-project/sglang PR #888 (\"Fix the double BOS problem in the HF "
                "chat template\": the rendered chat encoded again), deepseek-ai/DeepSeek-R1 #151 (\"Duplicate bos tokens "
                "after using tokenizer.apply_chat_template and tokenize\") and vllm-project/vllm PR #27517 (\"fix: "
                "double bos token\") - here inside apply_chat_template's own tokenization"),
    Fault("byte-level-decoder-lost", "tokenizers",
          "a ByteLevel-BPE tokenizer rebuilt at load loses its ByteLevel decoder: decode prints the byte pieces "
          "(`HelloĠworld`, `Ċ` for a newline), silently",
          Catch("text", "tok-bytelevel.tokenizer", "decode_as_tokenizers_lib"),
          (Wrap(TOK_BACKEND, "TokenizersBackend.__init__", _byte_level_decoder_lost),),
          notes="modelled on transformers #48206 (5.15.1: a ByteLevel-BPE tokenizer rebuilt by AutoTokenizer strips "
                "every space on encode and prints Ġ/Ċ on decode, silently) - the decode half"),
    Fault("legacy-prefix-space-after-special", "tokenizers",
          "the legacy flag is read inverted when the SentencePiece pre-tokenizer is built (prepend_scheme "
          "\"always\" for legacy=False): every segment after a special token gets a prefix space "
          "(`<s>Hello` -> `<s> ▁Hello`)",
          Catch("text", "tok-spm.tokenizer", "prefix_space_contract"),
          (edit(TOK, "_get_prepend_scheme", ('if not getattr(original_tokenizer, "legacy", True):',
                                             'if getattr(original_tokenizer, "legacy", True):')),),
          notes="modelled on transformers #31890 (\"[Severe Bug] Performance Degradation Starting from v4.42.*\": extra "
                "spaces from add_prefix_space / legacy) and #25073's legacy=True behaviour (a prefix space after every "
                "special token)"),
    Fault("gpt2-prefix-space-default-true", "tokenizers",
          "a GPT-2-style tokenizer shipped as slow files only (vocab.json + merges.txt, no add_prefix_space in its "
          "config) is built at load with add_prefix_space=True: every text gets a leading space piece "
          "(`Hello` -> `ĠHello`), other ids from the first word on, silently",
          Catch("text", "tok-slow-bpe.tokenizer", "encode_as_tokenizers_lib"),
          (Wrap(GPT2_TOK, "GPT2Tokenizer.__init__", _prefix_space_by_default),),
          notes="re-creates the v5 regression transformers PR #42481 fixed (\"Fix gpt2 tokenizer `add_prefix_space` "
                "default value\": the rebuilt GPT2Tokenizer defaulted to True) - the v5 conversion path of issue 37 "
                "(#45701 / PR #44255, #44448: a slow tokenizer's pipeline rebuilt at load from the wrong source). The "
                "oracle builds GPT-2's pipeline from the two files as their format defines it, add_prefix_space "
                "false unless tokenizer_config.json says otherwise (harness/engine/bpe.py `gpt2_spec`)"),
    Fault("padding-side-kwarg-ignored", "tokenizers",
          "tok(prompts, padding=True, padding_side=...) pads on the tokenizer's own side whatever the call asks: a "
          "left-padded batch for generate() comes back right-padded, silently",
          Catch("text", "tok-spm.tokenizer", "padding_as_specified"),
          (edit(TOK_BACKEND, "TokenizersBackend.set_truncation_and_padding",
                ('"direction": padding_side if padding_side is not None else self.padding_side,',
                 '"direction": self.padding_side,')),),
          notes="modelled on transformers PR #33385 (\"Enable padding_side as call time kwargs\": processors took "
                "padding_side and did not use it when tokenizing) and #33847 (\"Llava processor changing padding side "
                "of tokenizer has no effect\": the init value won over the one asked); a right-padded batch makes "
                "generate() continue after pad ids. The oracle pads the harness's own encode of each prompt (the "
                "files read by harness/engine/bpe.py) by the rule (harness/engine/padding.py)"),
    # the pipeline transformers runs differs from the files (issue 58 item 7: each passed every reference while the
    # expected side was the `tokenizers` library, which that pipeline runs; the harness's reader of the files,
    # harness/engine/bpe.py, sees each on a first run) ----------------------------------------------------------
    Fault("nfkc-normalizer-slipped-in", "tokenizers",
          "an NFKC normalizer slipped into the pipeline built at load (in front of the file's own, or alone): "
          "compatibility characters are rewritten before the split (`ﬁne` -> `fine`, `x²` -> `x2`, `①` -> `1`), "
          "the text is lost on the round trip and the ids differ, silently",
          Catch("text", "llama-target.tokenizer", "round_trip_lossless"),
          (Wrap(TOK_BACKEND, "TokenizersBackend.__init__", _on_the_loaded_backend(_nfkc_slipped_in)),),
          notes="modelled on a normalizer the loaded pipeline has and the file does not: transformers PR #44255 "
                "(\"[vllm + v5 fix] handle TokenizersBackend fallback properly for v5\": 22 converters whose v5 "
                "`_tokenizer` differed from v4's, the normalizers first among them), PR #28436's review (a fast class "
                "mapped to add NFC normalization the file lacks) and google/sentencepiece #329 (NFKC rewriting text "
                "and breaking reversibility). The round trip's promise is read from the files by the harness "
                "(bpe.py `Reader.round_trip_promise`); read from the loaded pipeline it skipped itself here"),
    Fault("llama3-split-regex-lost", "tokenizers",
          "the Llama-3 Split pre-tokenizer's regex is read as a literal string at load and never matches: with "
          "ByteLevel(use_regex=False) after it each text is one piece, so the merges run across what the split "
          "keeps apart (`Before'dawn`, `the'station`: other ids), silently",
          Catch("text", "tok-bytelevel.tokenizer", "encode_as_tokenizers_lib"),
          (Wrap(TOK_BACKEND, "TokenizersBackend.__init__", _on_the_loaded_backend(_split_regex_as_literal)),),
          notes="modelled on ggml-org/llama.cpp PR #29211 (a released tokenizer.json whose Split patterns are "
                "serialized as literal `String`s that never match: \"the effective behavior ... is plain byte-level BPE "
                "over the entire input\"), meta-pytorch/tokenizers PR #198 (the file's split setting ignored: \"a real "
                "train/serve skew that changes the emitted token-ids\"), ggml-org/llama.cpp #3502 (the file's "
                "pre_tokenizer not honoured: other ids) and generative-computing/mellea #947 (v5 building a tokenizer "
                "from other files than tokenizer.json: other ids for numbers and punctuation). The 512-id vocabulary "
                "has no merge across the split's cuts on the recorded texts; the probe `glued-contractions` "
                "(harness/designs/text.py `PROBES`) has"),
    Fault("byte-fallback-lost", "tokenizers",
          "the SentencePiece-style BPE model is built without byte_fallback: a character outside the vocabulary "
          "is no longer its UTF-8 bytes' <0xXX> tokens but dropped (v5's LlamaTokenizer has no unk_token in its "
          "BPE) - `café 🤗 Straße` loses `é`, the emoji and `ß`, silently",
          Catch("text", "tok-spm.tokenizer", "encode_as_tokenizers_lib"),
          (Wrap(TOK_BACKEND, "TokenizersBackend.__init__", _on_the_loaded_backend(_byte_fallback_lost)),),
          notes="modelled on huggingface/swift-transformers #387 / PR #388 (\"UnigramTokenizer ignores byte_fallback, "
                "emitting <unk> for out-of-vocabulary characters\"), ggml-org/llama.cpp #28862 (\"UGM tokenizer ignores "
                "byte_fallback and emits UNK\") and transformers #28096 (LlamaTokenizer slow vs fast differing on "
                "unknown characters); the harness's reader keeps the file's byte_fallback (bpe.py `BPE`)"),
)
