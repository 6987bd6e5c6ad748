"""The GGUF load contract, per version: SmolLM2-135M-Instruct's Q4_1 GGUF loaded by transformers'
`from_pretrained(folder, gguf_file=name)` - model and tokenizer - against the harness's own conversion
of the same file: the config, tensor by tensor, the tokenizer's ids / decode / special tokens, the
chat template and a rendered conversation, greedy tokens against the reference engine on the
converted weights (table: harness/cases/gguf.py; fields: harness/designs/gguf.py). The `real` extra
is optional: without it, or without the model in the cache and no way to fetch it, the case is
skipped (not observable) with the install line. Outside the quick tier (`harness check --budget full`).
"""

import pytest

from harness import cases
from harness.designs import gguf


@pytest.mark.cases(table=cases.gguf)
def test_gguf(case, golden, harness_env):
    golden.check_all(gguf.observe(case, harness_env.dtype, golden.rounding))
