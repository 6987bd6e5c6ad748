"""Distribution bias of one verification step: the installed verifier against exact probabilities.

At a fixed context, the target's next-token distribution p and the assistant's q come from
the reference engine. One verification step with a one-token draft x ~ q emits its first
token with the exact distribution (harness.engine.verify.step_distribution)

    P(x) = min(q(x), v(x)) + (1 - sum min(q, v)) * [p(x) - q(x)]+ / sum [p - q]+,
    v = w*p + (1-w)*q  (v = p without an ensemble weight: lossless),

which equals v itself; so the bias is TV(P, p) = (1-w) * TV(q, p), computed, not estimated.
The suite draws N steps through the installed transformers' own verifier
(`generation.utils._speculative_sampling`, seeded) and records the emitted-token counts
as a `distribution` field with the exact probabilities: a G-test of fit decides, at the
run's per-test alpha (family-wise alpha over the run, see harness/plugin.py); with N = 3000
and the lumped support used here (tokens with P >= 1e-3, the rest as one bin) the test has
power >= 0.8 against TV >= 0.05 (stats.samples_needed). The acceptance count is tested
against the exact acceptance probability sum_x min(q(x), v(x)) with a two-sided binomial test.
"""

from __future__ import annotations

import inspect
from functools import cache

import pytest
import torch
from scipy.stats import binomtest

from harness import stats
from harness.engine import verify
from harness.fixtures import load, prompts

DRAWS = 3000
SEED = 1234
WEIGHTS = (None, 0.3, 0.7)
MIN_P = 1e-3
CONTEXT_SUFFIX = " she felt"


@cache
def step_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """Target and assistant next-token probabilities (fp64) at a branching point of the grammar:
    after prompt short-2 + " she felt" the next word is one of six feelings."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(load.MODELS_DIR / "llama-target" / "tokenizer.json"))
    ids = torch.tensor(tok.encode(prompts.BY_ID["short-2"].text + CONTEXT_SUFFIX).ids)
    logits = {}
    for name in ("llama-target", "llama-assistant"):
        model = load.load_reference(name)
        logits[name] = model.forward(ids, torch.arange(len(ids)), None).logits[-1].double()
    return torch.softmax(logits["llama-target"], -1), torch.softmax(logits["llama-assistant"], -1)


def installed_verifier():
    """transformers' one-step verifier as f(draft_token, q_logits, p_logits, w) -> (first token, accepted)."""
    from transformers.generation import utils

    fn = getattr(utils, "_speculative_sampling", None)
    if fn is None:
        return None
    params = inspect.signature(fn).parameters

    def run(draft: int, q_logits: torch.Tensor, p_logits: torch.Tensor, w: float | None) -> tuple[int, int]:
        kwargs = {}
        if "is_done_candidate" in params:
            kwargs["is_done_candidate"] = False
        if w is not None:
            kwargs["assistant_ensemble_weight"] = w
        # one drafted position; the target scores it and the bonus position (same row: only
        # the first emitted token is counted)
        new_logits = torch.stack([p_logits, p_logits])[None]
        tokens, n_matches = fn(torch.tensor([[0, draft]]), q_logits[None, None], 1, new_logits, **kwargs)
        return int(tokens[0, 0]), int(n_matches)

    return run, "assistant_ensemble_weight" in params


def lumped(probs: torch.Tensor) -> tuple[list[int], dict[str, float]]:
    keep = [int(i) for i in torch.nonzero(probs >= MIN_P).flatten()]
    expected = {str(i): float(probs[i]) for i in keep}
    expected["other"] = max(0.0, 1.0 - sum(expected.values()))
    return keep, expected


@pytest.mark.parametrize("w", WEIGHTS, ids=lambda w: "lossless" if w is None else f"w{w}")
def test_one_step_distribution(w, golden):
    found = installed_verifier()
    if w is not None:
        supported = found is not None and found[1]
        golden.check("supports_assistant_ensemble_weight", supported, kind="capability")
        if not supported:
            pytest.skip("the installed transformers has no assistant_ensemble_weight in _speculative_sampling")
    if found is None:
        pytest.skip("the installed transformers has no _speculative_sampling")
    run = found[0]
    p, q = step_inputs()
    exact = verify.step_distribution(p, q, w)
    accept_exact = verify.acceptance_probability(p, q, w)
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
    golden.reference("first_token_vs_exact", counts, counts, kind="distribution",
                     observed_extras={"expected": expected}, expected_extras={"expected": expected})
    golden.check("acceptance", {"k": accepted, "n": DRAWS}, kind="rate")
    alpha = golden.session.test_alpha if hasattr(golden, "session") else 0.01
    test = binomtest(accepted, DRAWS, accept_exact)
    ci = test.proportion_ci(1 - alpha)
    emitted = torch.tensor([counts[str(i)] for i in keep] + [counts["other"]], dtype=torch.float64) / DRAWS
    tv_measured = stats.tv_distance(emitted.tolist(), [float(p[i]) for i in keep] + [1 - float(p[keep].sum())])
    tv_upper = stats.tv_upper_bound([counts[k] for k in expected], [float(p[int(k)]) if k != "other" else
                                                                    1 - float(p[keep].sum()) for k in expected], alpha)
    status = "pass" if test.pvalue >= alpha else "regression"
    golden.outcome(
        "acceptance_vs_exact", status, kind="rate", category="bias" if w is not None else "",
        detail=f"accepted {accepted}/{DRAWS} = {accepted / DRAWS:.4f}; exact {accept_exact:.4f} (binomial p = {test.pvalue:.3g})",
        diff={"w": 1.0 if w is None else w,  # lossless = the w -> 1 limit (v = p)
              "series": "one-step verifier",
              "tv_exact": verify.step_bias(p, q, w), "tv_measured": tv_measured, "tv_ci": [0.0, tv_upper],
              "acceptance_exact": accept_exact, "acceptance_measured": accepted / DRAWS,
              "acceptance_ci": [ci.low, ci.high], "p_value": test.pvalue, "alpha": alpha},
    )
