"""Cross-check of the reference verifiers with the installed transformers (tests may import
transformers; the engine never does). Skipped when transformers is not importable or has no
ensemble weight (5.13.x).

`speculative_sample` / `ensemble_sample` draw in the same order and shapes as transformers'
``_speculative_sampling`` (k uniforms, then one multinomial), so with the same generator state
they must emit the same tokens, not merely the same distribution.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from harness.engine.verify import ensemble_sample, speculative_sample

gen_utils = pytest.importorskip("transformers.generation.utils")
_speculative_sampling = gen_utils._speculative_sampling
_PARAMS = inspect.signature(_speculative_sampling).parameters


def _theirs(ids, cand_logits, k, new_logits, w):
    kwargs = {}
    if "is_done_candidate" in _PARAMS:  # 5.14 and older: stopping handled inside
        kwargs["is_done_candidate"] = False
    if w is not None:
        if "assistant_ensemble_weight" not in _PARAMS:
            pytest.skip("installed transformers has no assistant_ensemble_weight")
        kwargs["assistant_ensemble_weight"] = w
    tokens, n = _speculative_sampling(ids, cand_logits, k, new_logits, **kwargs)
    return tokens[0].tolist(), int(n)


@pytest.mark.parametrize("w", [None, 0.4])
def test_draw_for_draw_equal_to_transformers(w):
    V, mismatches, rejections = 7, [], 0
    for seed in range(40):
        g = torch.Generator().manual_seed(seed)
        k = int(torch.randint(1, 5, (1,), generator=g))
        cand_logits = torch.randn(1, k, V, generator=g) * 2
        new_logits = torch.randn(1, k + 1, V, generator=g) * 2
        q = cand_logits.softmax(dim=-1)
        draft = torch.multinomial(q[0], 1, generator=g).squeeze(1)
        ids = torch.cat([torch.tensor([[3, 4]]), draft[None]], dim=1)  # prompt + candidates

        torch.manual_seed(1000 + seed)
        their_tokens, their_n = _theirs(ids, cand_logits, k, new_logits, w)
        ours_g = torch.Generator().manual_seed(1000 + seed)
        p = new_logits.softmax(dim=-1)[0]
        ours = (speculative_sample(draft, q[0], p, ours_g) if w is None
                else ensemble_sample(draft, q[0], p, w, ours_g))
        rejections += ours.accepted < k
        if (ours.tokens, ours.accepted) != (their_tokens, their_n):
            mismatches.append((seed, ours, their_tokens, their_n))
    assert not mismatches, mismatches[:3]
    assert 0 < rejections < 40  # both branches (correction and bonus) were exercised
