"""When generate() stops and what it streams, per version: an eos list, stop strings (hit and never
hit), max_length vs max_new_tokens, min_new_tokens, the pad token of a batch whose rows stop apart
(with the criteria that stopped each row); TextStreamer and TextIteratorStreamer on plain and
assisted generation against the tokenizer's decode of the returned ids (tables: harness/cases/
`stopping`, `streaming`; fields: harness/designs/stopping.py).
"""

import pytest

from harness import cases
from harness.designs import stopping


@pytest.mark.cases(table=cases.stopping)
def test_stopping(case, golden, zoo):
    golden.check_all(stopping.stop(zoo, case))


@pytest.mark.cases(table=cases.streaming)
def test_streaming(case, golden, zoo):
    golden.check_all(stopping.stream(zoo, case))
