"""Token ids -> text without transformers: the `tokenizers` library reading the checkpoint's own
tokenizer.json, decoding with the special tokens kept (what `tokenizer.decode` does by default).

The stopping and streaming oracles (harness/engine/stopping.py) match stop strings and build the
text a streamer must hand out on this decode, so a defect in transformers' decode, streamer or
stop-string code does not move the expected side. `Decoder.of(directory)` says why not when it
cannot stand in for the library's decode: no tokenizer.json (a slow-only tokenizer), or a
tokenizer_config.json asking for `clean_up_tokenization_spaces` (a rewrite transformers applies,
version by version, after the pipeline - not the pipeline's own decode).

`Oracle.of(directory)`: the same file's encode (ids, tokens, offsets), decode with and without the
special tokens, and its incremental decode (`tokenizers.decoders.DecodeStream`) - the oracle of the
tokenizer zoo's fields; for a directory with GPT-2's slow files only (vocab.json + merges.txt), the
pipeline those files define, built here (`Oracle.of_gpt2_files`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Decoder:
    backend: Any  # tokenizers.Tokenizer

    @classmethod
    def of(cls, directory: Path | str) -> Decoder | str:
        """The decoder of a checkpoint directory, or the reason there is none."""
        directory = Path(directory)
        path = directory / "tokenizer.json"
        if not path.is_file():
            return f"{directory} has no tokenizer.json for the `tokenizers` library to decode with"
        config = directory / "tokenizer_config.json"
        if config.is_file() and json.loads(config.read_text(encoding="utf-8")).get("clean_up_tokenization_spaces"):
            return (f"{config} sets clean_up_tokenization_spaces: transformers rewrites the decoded text after "
                    "the pipeline, which tokenizer.json does not state")
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_file(str(path)))

    def __call__(self, ids: list[int]) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=False)


GPT2_FILES = ("vocab.json", "merges.txt")  # a byte-level BPE tokenizer shipped as slow files only


@dataclass
class Oracle:
    """A tokenizer.json read by the `tokenizers` library alone: the expected side of the tokenizer
    zoo's fields (harness/designs/tokenizer_zoo.py). transformers builds its tokenizer from the same
    file, but through its own class (v5 rebuilds the pipeline from the class's code and the file's
    vocabulary), its own added-token table and its own decode wrapper; none of that runs here."""

    backend: Any  # tokenizers.Tokenizer

    @classmethod
    def of(cls, directory: Path | str) -> Oracle:
        """The directory's tokenizer.json; where it ships only GPT-2's slow files, `of_gpt2_files`."""
        from tokenizers import Tokenizer

        directory = Path(directory)
        if not (directory / "tokenizer.json").is_file() and all((directory / f).is_file() for f in GPT2_FILES):
            return cls.of_gpt2_files(directory)
        return cls(Tokenizer.from_file(str(directory / "tokenizer.json")))

    @classmethod
    def of_gpt2_files(cls, directory: Path | str) -> Oracle:
        """GPT-2's slow files (vocab.json + merges.txt) read as their format defines the pipeline,
        built here from that definition, not by transformers' converter (4.57's `GPT2Converter`, 5.x's
        tokenizers backend): byte-level BPE with the merges ranked by their line order in merges.txt, the
        byte-level pre-tokenizer with GPT-2's split and tokenizer_config.json's add_prefix_space (default
        false), the byte-level decoder, no template (GPT-2 adds no special token), and the added tokens
        of tokenizer_config.json's added_tokens_decoder with their flags."""
        from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

        directory = Path(directory)
        config_path = directory / "tokenizer_config.json"
        config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
        tok = Tokenizer(models.BPE.from_file(str(directory / "vocab.json"), str(directory / "merges.txt")))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=bool(config.get("add_prefix_space", False)))
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        for index, t in sorted((config.get("added_tokens_decoder") or {}).items(), key=lambda kv: int(kv[0])):
            added = AddedToken(t["content"], single_word=t.get("single_word", False), lstrip=t.get("lstrip", False),
                               rstrip=t.get("rstrip", False), normalized=t.get("normalized", not t.get("special")),
                               special=bool(t.get("special")))
            (tok.add_special_tokens if added.special else tok.add_tokens)([added])
            if tok.token_to_id(t["content"]) != int(index):
                raise ValueError(f"{config_path}: added token {t['content']!r} is id {index} there, "
                                 f"{tok.token_to_id(t['content'])} in vocab.json")
        return cls(tok)

    def encode(self, text: str, add_special_tokens: bool = True) -> dict[str, Any]:
        """{ids, tokens, offsets} of `text`: tokens as the vocabulary names each id (what
        convert_ids_to_tokens promises - an Encoding's own `tokens` hold the matched text instead, `" <mask>"`
        for an lstrip token), offsets as [start, end] character spans."""
        enc = self.backend.encode(text, add_special_tokens=add_special_tokens)
        return {"ids": list(enc.ids), "tokens": [self.backend.id_to_token(i) for i in enc.ids],
                "offsets": [list(o) for o in enc.offsets]}

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.backend.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

    def stream(self, ids: list[int], skip_special_tokens: bool = False) -> list[str]:
        """The pieces `tokenizers.decoders.DecodeStream` hands out, one step per id ('' where a step
        holds its text back: an incomplete UTF-8 sequence, a prefix space still undecided)."""
        from tokenizers.decoders import DecodeStream

        stream = DecodeStream(skip_special_tokens=skip_special_tokens)
        return [stream.step(self.backend, int(i)) or "" for i in ids]


# what `clean_up_tokenization_spaces=True` rewrites after the pipeline's decode: the WordPiece-era rule
# (a space before punctuation and English contractions dropped), written here from its definition
CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
            (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))
# the attribute by which a version declares that it skips that rule on a BPE model (transformers PR #44915:
# the rule deletes real spaces in byte-level BPE text, `x != y` -> `x!= y`); absent where no version skips it
BPE_GUARD = "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"


def clean_up(text: str) -> str:
    for before, after in CLEAN_UP:
        text = text.replace(before, after)
    return text


def cleaned_up_as_specified(decoded: str, model_type: str, guard: bool | None) -> str:
    """The text a decode with clean_up_tokenization_spaces=True must give, from the pipeline's own
    decode: the version's declared rule - a BPE model whose version declares the guard (`guard` is the
    tokenizer's BPE_GUARD attribute: None where the version has none) keeps the pipeline's text unless
    the guard is set; every other model, and every version without the guard, gets `clean_up`."""
    return decoded if model_type == "BPE" and guard is False else clean_up(decoded)
