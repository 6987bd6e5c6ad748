"""The text around generate(), per version: each distinct tokenizer's encode / decode of a text set
that stresses the known failure classes (spaces, newlines, special tokens in text, unicode, numbers,
code), the round trip, skip_special_tokens, clean_up_tokenization_spaces and the batch calls' return
types; a chat template rendered (system turn, alternating turns, generation prompt, tools),
tokenized, its return types, and what generate() makes of it (tables: harness/cases/text.py
`tokenizers`, `chats`; fields: harness/designs/text.py); the tokenizer zoo's real families (a
SentencePiece, a byte-level, an added-token tokenizer) against the `tokenizers` library's own
encode / decode and the prefix-space contract, and the families' chat templates (tables:
`zoo_tokenizers`, `zoo_chats`; fields: harness/designs/tokenizer_zoo.py).
"""

import pytest

from harness import cases
from harness.designs import text, tokenizer_zoo


@pytest.mark.cases(table=cases.tokenizers)
def test_tokenizer(case, golden, zoo):
    golden.check_all(text.tokenizer(zoo, case))


@pytest.mark.cases(table=cases.chats)
def test_chat(case, golden, zoo):
    golden.check_all(text.chat(zoo, case))


@pytest.mark.cases(table=cases.zoo_tokenizers)
def test_zoo_tokenizer(case, golden, zoo):
    golden.check_all(tokenizer_zoo.zoo_tokenizer(zoo, case))


@pytest.mark.cases(table=cases.zoo_chats)
def test_zoo_chat(case, golden, zoo):
    golden.check_all(tokenizer_zoo.zoo_chat(zoo, case))
