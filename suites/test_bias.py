"""Distribution bias of one verification step: the installed verifier against exact probabilities.

At a fixed context, the target's next-token distribution p and the assistant's q come from
the reference engine. One verification step with a one-token draft x ~ q emits its first
token with the exact distribution (harness.engine.verify.step_distribution)

    P(x) = min(q(x), v(x)) + (1 - sum min(q, v)) * [p(x) - q(x)]+ / sum [p - q]+,
    v = w*p + (1-w)*q  (v = p without an ensemble weight: lossless),

which equals v itself; so the bias is TV(P, p) = (1-w) * TV(q, p), computed, not estimated.
The suite draws N steps through the installed transformers' own verifier
(`generation.utils._speculative_sampling`, seeded, via harness/subjects/hf.py) and records:
  first_token           distribution  emitted-token counts with the exact probabilities (record)
  first_token_vs_exact  distribution  G-test of fit against the exact probabilities (reference)
  acceptance            rate          accepted drafts k/N (record)
  acceptance_vs_exact   rate          binomial test of k/N against sum_x min(q(x), v(x)) (reference)
All four are decided by the comparers at the run's per-test alpha, Holm within the case
(harness/checking.py); the suite decides nothing itself. Lumped support: tokens with P >= 1e-3,
the rest as one bin.
"""

from __future__ import annotations

from functools import cache

import pytest
import torch

from harness import stats
from harness.engine import verify
from harness.fixtures import prompts
from harness.subjects import hf

DRAWS = 3000
SEED = 1234
WEIGHTS = (None, 0.3, 0.7)
MIN_P = 1e-3
CONTEXT_SUFFIX = " she felt"


@cache
def step_inputs(zoo: hf.Zoo) -> tuple[torch.Tensor, torch.Tensor]:
    """Target and assistant next-token probabilities (fp64) at a branching point of the grammar:
    after prompt short-2 + " she felt" the next word is one of six feelings."""
    tok = zoo.load("llama-target").tokenizer
    ids = torch.tensor(tok(prompts.BY_ID["short-2"].text + CONTEXT_SUFFIX).input_ids)
    probs = []
    for name in ("llama-target", "llama-assistant"):
        logits = zoo.reference(name).forward(ids, torch.arange(len(ids)), None).logits[-1].double()
        probs.append(torch.softmax(logits, -1))
    return probs[0], probs[1]


def lumped(probs: torch.Tensor) -> tuple[list[int], dict[str, float]]:
    keep = [int(i) for i in torch.nonzero(probs >= MIN_P).flatten()]
    expected = {str(i): float(probs[i]) for i in keep}
    expected["other"] = max(0.0, 1.0 - sum(expected.values()))
    return keep, expected


@pytest.mark.parametrize("w", WEIGHTS, ids=lambda w: "lossless" if w is None else f"w{w}")
def test_one_step_distribution(w, golden, zoo):
    found = hf.speculative_sampling()
    if w is not None:
        supported = found is not None and found[1]
        golden.check("supports_assistant_ensemble_weight", supported, kind="capability")
        if not supported:
            pytest.skip("the installed transformers has no assistant_ensemble_weight in _speculative_sampling")
    if found is None:
        pytest.skip("the installed transformers has no _speculative_sampling")
    run = found[0]
    p, q = step_inputs(zoo)
    exact = verify.step_distribution(p, q, w)
    keep, expected = lumped(exact)
    seed = SEED + WEIGHTS.index(w)  # independent draws per test (the run's false-alarm bound assumes nothing more)
    gen = torch.Generator().manual_seed(seed)
    drafts = torch.multinomial(q.float(), DRAWS, replacement=True, generator=gen).tolist()
    torch.manual_seed(seed)  # _speculative_sampling draws from torch's global generator
    q_logits, p_logits = q.float().log(), p.float().log()
    counts = {k: 0 for k in expected}
    accepted = 0
    for draft in drafts:
        token, n = run(draft, q_logits, p_logits, w)
        counts[str(token) if token in keep else "other"] += 1
        accepted += n
    golden.check("first_token", counts, kind="distribution", expected=expected)
    golden.reference("first_token_vs_exact", counts, expected, kind="distribution",
                     observed_extras={"expected": expected}, expected_extras={"expected": expected})
    golden.check("acceptance", {"k": accepted, "n": DRAWS}, kind="rate")
    golden.reference("acceptance_vs_exact", {"k": accepted, "n": DRAWS}, {"p": verify.acceptance_probability(p, q, w)},
                     kind="rate")
    emitted = [counts[str(i)] for i in keep] + [counts["other"]]
    target = [float(p[i]) for i in keep] + [1 - float(p[keep].sum())]
    interval = stats.binomial_test(accepted, DRAWS, verify.acceptance_probability(p, q, w), 1 - golden.alpha)
    golden.outcome(
        "bias_vs_target", "pass", kind="exact", category="bias" if w is not None else "",
        detail=f"exact TV(emitted, target) = {verify.step_bias(p, q, w):.4f} (w = {w}); the fit is decided by "
               "first_token_vs_exact",
        diff={"w": 1.0 if w is None else w,  # lossless = the w -> 1 limit (v = p)
              "series": "one-step verifier", "tv_exact": verify.step_bias(p, q, w),
              "tv_measured": stats.tv_distance(emitted, target),
              "tv_ci": [0.0, stats.tv_upper_bound(emitted, target, golden.alpha)],
              "acceptance_exact": verify.acceptance_probability(p, q, w), "acceptance_measured": accepted / DRAWS,
              "acceptance_ci": [interval.low, interval.high]},
    )
