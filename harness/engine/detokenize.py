"""Token ids -> text without transformers: the `tokenizers` library reading the checkpoint's own
tokenizer.json, decoding with the special tokens kept (what `tokenizer.decode` does by default).

The stopping and streaming oracles (harness/engine/stopping.py) match stop strings and build the
text a streamer must hand out on this decode, so a defect in transformers' decode, streamer or
stop-string code does not move the expected side. `Decoder.of(directory)` says why not when it
cannot stand in for the library's decode: no tokenizer.json (a slow-only tokenizer), or a
tokenizer_config.json asking for `clean_up_tokenization_spaces` (a rewrite transformers applies,
version by version, after the pipeline - not the pipeline's own decode).
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
