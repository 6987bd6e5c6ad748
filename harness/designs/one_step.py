"""One speculative verification step, drawn N times through a verifier, and the fields that check it.

The bias suite (suites/test_bias.py) runs this with transformers' own verifier; the simulated bug
controls (tests/test_bias_controls.py) run the very same code with buggy reference verifiers and
let the checking core decide, so "the suite detects bug X with probability P" is measured on the
suite's own code path.

At a context, the target's next-token distribution p and the assistant's q come from the
reference engine. One verification step with a one-token draft x ~ q emits its first token with
the exact distribution (harness.engine.verify.step_distribution)

    P(x) = min(q(x), v(x)) + (1 - sum min(q, v)) * [p(x) - q(x)]+ / sum [p - q]+,
    v = w*p + (1-w)*q  (v = p without an ensemble weight: lossless),

which equals v itself; so the bias is TV(P, p) = (1-w) * TV(q, p), computed, not estimated.

Contexts (`CONTEXTS`, found by `search_contexts`): a check only has teeth where a verifier bug
moves the emitted distribution. At acceptance ~0.98 (the old context, " she felt") almost every
step accepts the draft and a wrong rejection branch is invisible (TV <= 0.016). So the contexts
are token prefixes of the held-out prompts (harness.zoo.prompts; never seen in training)
where the lossless acceptance sum_x min(p, q) lies in `ACCEPTANCE_RANGE` (0.5 - 0.7), ranked by
how far the subtlest bug - the correction drawn from p instead of norm([p - q]+) - moves the
step: TV = (1 - acceptance) * TV(p, norm([p - q]+)). The top `len(CONTEXTS)` are kept (ties:
prompt order, then position). tests/test_bias_design.py re-runs the search and checks it still
returns `CONTEXTS`.

Sample size (`design`), at level = alpha / STAT_CHECKS (alpha = the run's per-test alpha; the case
has two statistical fields - one test per count vector: the emitted tokens' fit and the acceptance
count's binomial test, both against exact values - and Holm decides its smallest p-value at
alpha / 2, re-deciding - and re-bounding - a field at no less than that level), N is the larger of
  - `stats.samples_needed(tv_max, DESIGN_POWER, level, k)`: the G-test detects every distribution at TV
    >= tv_max with probability >= stats.DESIGN_POWER (k = bins with P > 0), and
  - the smallest N at which a correct verifier's check is not `not checked` (underpowered): the check's TV upper
    bound (`stats.tv_upper_bound`: TV(p^, P) + 1/2 * Weissman's L1 width at level) stays <= tv_max
    with probability >= `NULL_QUANTILE` (the empirical TV's quantile is simulated under P with a
    fixed seed, so N is deterministic),
rounded up to a multiple of 100. The second term is the larger one here (about 2x): Weissman's
bound is conservative.

Lumped support: tokens with P >= `MIN_P`, the rest as one bin ("other").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from harness.cases import ASSISTANT, CONTEXTS, TARGET, Context
from harness.checking import stats
from harness.engine import verify
from harness.schema import Case, Observation
from harness.zoo import prompts

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

SEED = 1234
MIN_P = 1e-3
NULL_QUANTILE = 0.99  # P(a correct verifier's check is marked not checked) <= 1 - NULL_QUANTILE
STAT_CHECKS = 2  # statistical fields per case (see `observe`): Holm decides the first one at alpha / 2
NULL_SIMULATIONS = 3000
NULL_SEED = 20240601
ACCEPTANCE_RANGE = (0.5, 0.7)
MIN_PREFIX = 4  # tokens; the first word pieces of a prompt are not a sentence context

Verifier = Callable[[int, torch.Tensor, torch.Tensor, "float | None"], tuple[int, int]]
"""f(draft_token, q_logits, p_logits, w) -> (first emitted token, accepted 0/1): the shape of
harness.subjects.hf.speculative_sampling()'s verifier."""


def case_seed(case: Case, salt: int = 0) -> int:
    """Independent draws per case (the run's false-alarm bound assumes nothing more); a run's seed
    salt (`--harness-seed-salt N`) shifts every case by 1000 x N, so a rerun draws fresh samples (the
    seeds are free here: the checks are statistical, the records are counts)."""
    return SEED + int(case.param("order")) + 1000 * salt


# ----------------------------------------------------------------------------------------------
# contexts


def _distributions(zoo: Zoo, ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Target and assistant next-token probabilities (fp64) after every prefix of `ids`: [L, V]."""
    from harness.subjects import engine

    out = [torch.softmax(engine.logits_cached(zoo, name, list(ids)).double(), -1) for name in (TARGET, ASSISTANT)]
    return out[0], out[1]


def context_ids(zoo: Zoo, ctx: Context) -> list[int]:
    ids = zoo.load(TARGET).tokenizer(prompts.BY_ID[ctx.prompt].text).input_ids
    if not MIN_PREFIX <= ctx.length <= len(ids):
        raise ValueError(f"context {ctx} is not a prefix of prompt {ctx.prompt!r} ({len(ids)} tokens)")
    return list(ids[: ctx.length])


_INPUTS: dict[tuple[int, Context], tuple[torch.Tensor, torch.Tensor]] = {}


def step_inputs(zoo: Zoo, ctx: Context) -> tuple[torch.Tensor, torch.Tensor]:
    """(p, q): target and assistant next-token probabilities (fp64) after the context."""
    key = (id(zoo), ctx)
    if key not in _INPUTS:
        p, q = _distributions(zoo, context_ids(zoo, ctx))
        _INPUTS[key] = (p[-1], q[-1])
    return _INPUTS[key]


def correction_from_p_tv(p: torch.Tensor, q: torch.Tensor) -> float:
    """TV between the lossless step and the same step with its correction drawn from p instead
    of norm([p - q]+): (1 - sum min(p, q)) * TV(p, norm([p - q]+))."""
    rejection = 1.0 - float(torch.minimum(p, q).sum())
    residual = torch.clamp(p - q, min=0)
    if float(residual.sum()) <= 0:
        return 0.0
    return rejection * verify.tv_distance(p, residual / residual.sum())


def search_contexts(zoo: Zoo, count: int = len(CONTEXTS)) -> tuple[Context, ...]:
    """The documented search behind `CONTEXTS` (see the module docstring)."""
    found = []
    for order, prompt in enumerate(prompts.PROMPTS):
        ids = zoo.load(TARGET).tokenizer(prompt.text).input_ids
        p, q = _distributions(zoo, ids)
        for length in range(MIN_PREFIX, len(ids) + 1):
            acceptance = float(torch.minimum(p[length - 1], q[length - 1]).sum())
            if ACCEPTANCE_RANGE[0] <= acceptance <= ACCEPTANCE_RANGE[1]:
                found.append((-correction_from_p_tv(p[length - 1], q[length - 1]), order, length, prompt.id))
    return tuple(Context(pid, length) for _, _, length, pid in sorted(found)[:count])


# ----------------------------------------------------------------------------------------------
# sample size


def lumped(probs: torch.Tensor) -> tuple[list[int], dict[str, float]]:
    keep = [int(i) for i in torch.nonzero(probs >= MIN_P).flatten()]
    expected = {str(i): float(probs[i]) for i in keep}
    expected["other"] = max(0.0, 1.0 - sum(expected.values()))
    return keep, expected


def null_tv_upper(expected: Sequence[float], n: int, alpha: float, quantile: float = NULL_QUANTILE) -> float:
    """The `quantile` of `stats.tv_upper_bound` for n draws from `expected` itself (a correct
    verifier): simulated TV(p^, P) quantile + the bound's fixed width."""
    probs = np.asarray(expected, dtype=float)
    probs = probs / probs.sum()
    rng = np.random.default_rng(NULL_SEED)
    counts = rng.multinomial(n, probs, size=NULL_SIMULATIONS)
    tv = 0.5 * np.abs(counts / n - probs).sum(axis=1)
    return float(np.quantile(tv, quantile)) + 0.5 * stats.l1_deviation_bound(n, probs.size, alpha)


@dataclass(frozen=True)
class Plan:
    """How one case is checked: the lumped support, its exact probabilities, the sample design,
    and the NULL_QUANTILE of the TV upper bound a correct verifier would report."""

    keep: list[int]
    expected: dict[str, float]
    design: stats.SampleDesign
    null_tv_upper: float

    @property
    def n(self) -> int:
        return self.design.n


def design(p: torch.Tensor, q: torch.Tensor, w: float | None, alpha: float, tv_max: float) -> Plan:
    """N for one case at per-test level `alpha` (see the module docstring)."""
    exact = verify.step_distribution(p, q, w)
    keep, expected = lumped(exact)
    probs = list(expected.values())
    plan = stats.SampleDesign.gtest(probs, alpha, STAT_CHECKS, tv_max, step=1)
    level, n = plan.level, plan.n
    bound = null_tv_upper(probs, n, level)
    if bound > tv_max:  # both of the bound's terms shrink like 1/sqrt(n): start near the answer
        n = int(n * (bound / tv_max) ** 2 * 0.97)
    n = -(-n // 100) * 100  # multiples of 100
    while null_tv_upper(probs, n, level) > tv_max:
        n += 100
    while n > 100 and null_tv_upper(probs, n - 100, level) <= tv_max and n - 100 >= plan.n:
        n -= 100
    return Plan(keep, expected, plan.with_n(n), null_tv_upper(probs, n, level))


# ----------------------------------------------------------------------------------------------
# drawing and checking


def draw(run: Verifier, p: torch.Tensor, q: torch.Tensor, w: float | None, plan: Plan,
         seed: int) -> tuple[dict[str, int], int]:
    """N one-draft steps through `run`: emitted-token counts on the lumped support, accepted drafts."""
    gen = torch.Generator().manual_seed(seed)
    drafts = torch.multinomial(q.float(), plan.n, replacement=True, generator=gen).tolist()
    torch.manual_seed(seed)  # _speculative_sampling draws from torch's global generator
    q_logits, p_logits = q.float().log(), p.float().log()
    counts = {k: 0 for k in plan.expected}
    keep = set(plan.keep)
    accepted = 0
    for draft in drafts:
        token, n = run(draft, q_logits, p_logits, w)
        counts[str(token) if token in keep else "other"] += 1
        accepted += n
    return counts, accepted


def observe(run: Verifier, p: torch.Tensor, q: torch.Tensor, w: float | None, plan: Plan,
            seed: int, series: str = "one-step verifier") -> Observation:
    """Draw N steps and hand the fields to the comparers (the design decides nothing itself), one
    test per count vector, each decided against its exact value in every run:
      first_token           distribution  emitted-token counts, G-test of fit against the exact
                                          probabilities (and those vs the baseline record's)
      acceptance            rate          accepted drafts k/N, binomial test against the exact
                                          acceptance probability sum_x min(q(x), v(x))
      bias_vs_target        info          the bias curve point (never a check)"""
    counts, accepted = draw(run, p, q, w, plan, seed)
    expected, n, extras = plan.expected, plan.n, plan.design.extras()
    obs = Observation()
    obs.add("first_token", counts, kind="distribution", expected=expected, **extras)
    acceptance = verify.acceptance_probability(p, q, w)
    obs.add("acceptance", {"k": accepted, "n": n}, kind="rate", expected=acceptance)
    emitted = [counts[str(i)] for i in plan.keep] + [counts["other"]]
    target = [float(p[i]) for i in plan.keep] + [1 - float(p[plan.keep].sum())]
    interval = stats.binomial_test(accepted, n, acceptance, 1 - plan.design.alpha)
    obs.info("bias_vs_target",
             f"exact TV(emitted, target) = {verify.step_bias(p, q, w):.4f} (w = {w}); the fit is decided by "
             "first_token",
             {"w": 1.0 if w is None else w,  # lossless = the w -> 1 limit (v = p)
              "series": series, "tv_exact": verify.step_bias(p, q, w),
              "tv_measured": stats.tv_distance(emitted, target),
              "tv_ci": [0.0, stats.tv_upper_bound(emitted, target, plan.design.alpha)],
              "acceptance_exact": acceptance, "acceptance_measured": accepted / n,
              "acceptance_ci": [interval.low, interval.high], **extras},
             category="bias" if w is not None else "")
    return obs


def observe_case(zoo: Zoo, case: Case, alpha: float, tv_max: float, salt: int = 0) -> Observation:
    """The bias suite's case through transformers' own verifier (harness/subjects/hf.py
    `speculative_sampling`): the installed version's capability first, then `observe`."""
    from harness.subjects import hf

    obs = Observation()
    w = case.weight
    found = hf.speculative_sampling()
    if w is not None:
        supported = found is not None and found[1]
        obs.add("supports_assistant_ensemble_weight", supported, kind="capability")
        if not supported:
            return obs.stop("the installed transformers has no assistant_ensemble_weight in _speculative_sampling")
    if found is None:
        return obs.stop("the installed transformers has no _speculative_sampling")
    ctx = int(case.param("ctx"))
    context = CONTEXTS[ctx]
    p, q = step_inputs(zoo, context)
    plan = design(p, q, w, alpha, tv_max)
    return obs.merge(observe(found[0], p, q, w, plan, case_seed(case, salt),
                             series=f"one-step verifier, ctx{ctx} ({context.prompt}[:{context.length}])"))
