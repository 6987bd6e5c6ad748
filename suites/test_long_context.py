"""Long context, per version: the rope-scaled fixtures (llama3, yarn) generating past
original_max_position_embeddings against the reference engine's scaled RoPE, each also loaded from a
transformers 4.x config (`rope_scaling`), and a sliding-window model decoding past its window in
a left-padded batch against each row alone and the engine (table: harness/cases/ `long_context`;
fields: harness/designs/long_context.py).
"""

import pytest

from harness import cases
from harness.designs import long_context


@pytest.mark.cases(table=cases.long_context)
def test_long_context(case, golden, zoo, tmp_path):
    golden.check_all(long_context.observe(zoo, case, tmp_path))
