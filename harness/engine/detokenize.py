"""Token ids -> text, and text -> ids, without transformers.

`Decoder.of(directory)` (the stopping suite's): the `tokenizers` library reading the checkpoint's own
tokenizer.json, decoding with the special tokens kept (what `tokenizer.decode` does by default). The
stopping and streaming oracles (harness/engine/stopping.py) match stop strings and build the text a
streamer must hand out on this decode, so a defect in transformers' decode, streamer or stop-string
code does not move the expected side. It says why not when it cannot stand in for the library's
decode: no tokenizer.json (a slow-only tokenizer), or a tokenizer_config.json asking for
`clean_up_tokenization_spaces` (a rewrite transformers applies, version by version, after the
pipeline - not the pipeline's own decode).

`Oracle.of(directory)` (the text suite's): the tokenizer files read and run by the harness itself
(harness/engine/bpe.py, no `tokenizers`): the encode (ids, tokens, offsets), decode with and without
the special tokens, the incremental decode, the round trip the files promise; for a directory with
GPT-2's slow files only (vocab.json + merges.txt), the pipeline those files define. `NoOracle` says
why there is none (no files; a component the reader does not implement, named).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.engine.bpe import GPT2_FILES, Reader, Unsupported


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


class NoOracle(Exception):
    """No reading of a checkpoint's tokenizer files to judge by, and why (`category`: not-checkable
    where there are no files to read, not-checked where the reader lacks a component they use)."""

    def __init__(self, reason: str, category: str) -> None:
        super().__init__(reason)
        self.reason, self.category = reason, category


@dataclass
class Oracle:
    """A checkpoint's tokenizer files read and run by the harness (harness/engine/bpe.py `Reader`):
    the expected side of the text suite's tokenizer references (harness/designs/text.py,
    harness/designs/tokenizer_zoo.py). Neither transformers nor the `tokenizers` library runs here -
    transformers' fast tokenizer runs that library, so an oracle built on it would repeat its bugs
    (an NFKC normalizer slipped into the load, a split regex lost) as expected values."""

    reader: Reader

    @classmethod
    def of(cls, directory: Path | str) -> Oracle:
        """The directory's tokenizer.json, or GPT-2's slow files (vocab.json + merges.txt) where it
        ships only those, read as their format defines the pipeline (bpe.py `gpt2_spec`: not by
        transformers' converter); `NoOracle` saying why there is none."""
        directory = Path(directory)
        if not (directory / "tokenizer.json").is_file() and not all((directory / f).is_file() for f in GPT2_FILES):
            raise NoOracle(f"{directory} has neither a tokenizer.json nor GPT-2's vocab.json + merges.txt for the "
                           "harness to read (a SentencePiece .model alone: no oracle here)", "not-checkable")
        try:
            return cls(Reader.of(directory))
        except Unsupported as e:
            raise NoOracle(f"{directory.name}'s tokenizer uses {e}, which the harness's reader "
                           "(harness/engine/bpe.py) does not implement", "not-checked") from e

    def with_added(self, changes: dict[str, dict[str, bool]]) -> Oracle:
        """The same files with some added tokens' flags changed ({content: {flag: value}})."""
        return Oracle(self.reader.with_added(changes))

    def encode(self, text: str, add_special_tokens: bool = True) -> dict[str, Any]:
        """{ids, tokens, offsets} of `text`: tokens as the vocabulary names each id (what
        convert_ids_to_tokens promises - not the matched text, `" <mask>"` for an lstrip token), offsets
        as [start, end] character spans."""
        enc = self.reader.encode(text, add_special_tokens)
        return {"ids": list(enc.ids), "tokens": [self.reader.id_to_token(i) for i in enc.ids],
                "offsets": [list(o) for o in enc.offsets]}

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.reader.decode([int(i) for i in ids], skip_special_tokens)

    def stream(self, ids: list[int], skip_special_tokens: bool = False) -> list[str]:
        """The pieces of the incremental decode, one step per id ('' where a step holds its text back:
        an incomplete UTF-8 sequence, a prefix space still undecided)."""
        return self.reader.stream([int(i) for i in ids], skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.reader.token_to_id(token)

    @property
    def model_type(self) -> str:
        return str((self.reader.spec.get("model") or {}).get("type", "BPE"))

    def round_trip_promise(self) -> str:
        """'' when the files promise decode(encode(x)) == x; else why not (bpe.py `Reader.round_trip_promise`)."""
        return self.reader.round_trip_promise()


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
