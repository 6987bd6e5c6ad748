"""Distribution bias of one verification step: the installed verifier against exact probabilities.

At several contexts where the assistant's draft is rejected often (lossless acceptance 0.5 - 0.7;
harness/designs/one_step.py `CONTEXTS`, found by `search_contexts`), the suite draws N one-draft steps
through the installed transformers' own verifier (`generation.utils._speculative_sampling`,
seeded, via harness/subjects/hf.py) for w in (lossless, 0.3, 0.7) and records, per case
"<lossless|w0.3|w0.7>.ctx<i>" (harness/designs/one_step.py `observe`):
  first_token           distribution  emitted-token counts with the exact probabilities (record)
  first_token_vs_exact  distribution  G-test of fit against the exact probabilities (reference)
  acceptance            rate          accepted drafts k/N (record)
  acceptance_vs_exact   rate          binomial test of k/N against sum_x min(q(x), v(x)) (reference)
  bias_vs_target        exact         the bias curve point (information)
All statistical fields are decided by the comparers at the run's per-test alpha, Holm within the
case (harness/checking/core.py); the suite decides nothing itself. N is sized per case at the run's
alpha (`golden.alpha`) by `one_step.design`: power >= 0.8 against every TV >= tv_max, and a correct
verifier's check is not `underpowered` (tests/test_bias_design.py). Simulated verifier bugs are
detected with probability >= 0.95 (tests/test_bias_controls.py).
"""

from __future__ import annotations

import pytest

from harness.designs import one_step
from harness.subjects import hf


@pytest.mark.parametrize(("w", "ctx"), one_step.CASES, ids=[one_step.case_id(*c) for c in one_step.CASES])
def test_one_step_distribution(w, ctx, golden, zoo, harness_config):
    found = hf.speculative_sampling()
    if w is not None:
        supported = found is not None and found[1]
        golden.check("supports_assistant_ensemble_weight", supported, kind="capability")
        if not supported:
            pytest.skip("the installed transformers has no assistant_ensemble_weight in _speculative_sampling")
    if found is None:
        pytest.skip("the installed transformers has no _speculative_sampling")
    context = one_step.CONTEXTS[ctx]
    p, q = one_step.step_inputs(zoo, context)
    plan = one_step.design(p, q, w, golden.alpha, harness_config.thresholds.tv_max)
    one_step.observe(golden, found[0], p, q, w, plan, one_step.case_seed(w, ctx),
                     series=f"one-step verifier, ctx{ctx} ({context.prompt}[:{context.length}])")
