"""The text around generate(), per version: each distinct tokenizer's encode / decode of a text set
that stresses the known failure classes (spaces, newlines, special tokens in text, unicode, numbers,
code), the round trip, skip_special_tokens, clean_up_tokenization_spaces and the batch calls' return
types; a chat template rendered (system turn, alternating turns, generation prompt, tools),
tokenized, its return types, and what generate() makes of it (tables: harness/cases.py
`tokenizers`, `chats`; fields: harness/designs/text.py).
"""

import pytest

from harness import cases
from harness.designs import text


@pytest.mark.cases(table=cases.tokenizers)
def test_tokenizer(case, golden, zoo):
    golden.check_all(text.tokenizer(zoo, case))


@pytest.mark.cases(table=cases.chats)
def test_chat(case, golden, zoo):
    golden.check_all(text.chat(zoo, case))
