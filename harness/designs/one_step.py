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
are token prefixes of the held-out prompts (harness.fixtures.prompts; never seen in training)
where the lossless acceptance sum_x min(p, q) lies in `ACCEPTANCE_RANGE` (0.5 - 0.7), ranked by
how far the subtlest bug - the correction drawn from p instead of norm([p - q]+) - moves the
step: TV = (1 - acceptance) * TV(p, norm([p - q]+)). The top `len(CONTEXTS)` are kept (ties:
prompt order, then position). tests/test_bias_design.py re-runs the search and checks it still
returns `CONTEXTS`.

Sample size (`design`), at level = alpha / STAT_CHECKS (alpha = the run's per-test alpha; Holm
within the case decides its smallest p-value at alpha / 4, and re-decides - and re-bounds - a
field at no less than that level), N is the larger of
  - `stats.samples_needed(tv_max, POWER, level, k)`: the G-test detects every distribution at TV
    >= tv_max with probability >= POWER (k = bins with P > 0), and
  - the smallest N at which a correct verifier's check is not `underpowered`: the check's TV upper
    bound (`stats.tv_upper_bound`: TV(p^, P) + 1/2 * Weissman's L1 width at level) stays <= tv_max
    with probability >= `NULL_QUANTILE` (the empirical TV's quantile is simulated under P with a
    fixed seed, so N is deterministic),
rounded up to a multiple of 100. The second term is the larger one here (about 2x): Weissman's
bound is conservative.

Lumped support: tokens with P >= `MIN_P`, the rest as one bin ("other").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from harness.checking import stats
from harness.engine import verify
from harness.fixtures import prompts

SEED = 1234
WEIGHTS = (None, 0.3, 0.7)
MIN_P = 1e-3
POWER = 0.8
NULL_QUANTILE = 0.99  # P(a correct verifier's check is marked underpowered) <= 1 - NULL_QUANTILE
STAT_CHECKS = 4  # statistical fields per case (see `observe`): Holm decides the first one at alpha / 4
NULL_SIMULATIONS = 3000
NULL_SEED = 20240601
ACCEPTANCE_RANGE = (0.5, 0.7)
MIN_PREFIX = 4  # tokens; the first word pieces of a prompt are not a sentence context
TARGET, ASSISTANT = "llama-target", "llama-assistant"

# m of a default `pytest suites` run (tests using `golden`), so alpha / m is the per-test alpha the
# suite is sized for; tests/test_bias_design.py checks it against a real collection.

DEFAULT_RUN_TESTS = 326
DEFAULT_RUN_ALPHA = 0.01  # [tool.harness] alpha (default)

Verifier = Callable[[int, torch.Tensor, torch.Tensor, "float | None"], tuple[int, int]]
"""f(draft_token, q_logits, p_logits, w) -> (first emitted token, accepted 0/1): the shape of
harness.subjects.hf.speculative_sampling()'s verifier."""


@dataclass(frozen=True)
class Context:
    """The first `length` tokens of held-out prompt `prompt` (tokenized by the llama-target
    tokenizer, no special tokens added by it)."""

    prompt: str
    length: int


CONTEXTS = (Context("long-1", 70), Context("long-0", 80), Context("long-1", 80))

# (w, context index); the case id is "<lossless|w0.3|w0.7>.ctx<i>", each with its own seed
CASES = tuple((w, i) for w in WEIGHTS for i in range(len(CONTEXTS)))


def case_id(w: float | None, ctx: int) -> str:
    return f"{'lossless' if w is None else f'w{w}'}.ctx{ctx}"


SEED_OFFSET_ENV = "HARNESS_SEED_OFFSET"  # an integer: fresh draws for a rerun (the decision's alpha is unchanged)


def seed_offset() -> int:
    """HARNESS_SEED_OFFSET (default 0): shifts every case's seed by 1000 x offset, so a rerun draws
    fresh samples; the seeds are free here (the checks are statistical, the records are counts)."""
    raw = os.environ.get(SEED_OFFSET_ENV, "").strip()
    try:
        return int(raw) if raw else 0
    except ValueError:
        raise ValueError(f"{SEED_OFFSET_ENV}={raw!r}: expected an integer") from None


def case_seed(w: float | None, ctx: int) -> int:
    """Independent draws per case (the run's false-alarm bound assumes nothing more)."""
    return SEED + CASES.index((w, ctx)) + 1000 * seed_offset()


# ----------------------------------------------------------------------------------------------
# contexts


def _distributions(zoo: Any, ids: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Target and assistant next-token probabilities (fp64) after every prefix of `ids`: [L, V]."""
    ids_t = torch.tensor(list(ids))
    out = []
    for name in (TARGET, ASSISTANT):
        logits = zoo.reference(name).forward(ids_t, torch.arange(len(ids_t)), None).logits.double()
        out.append(torch.softmax(logits, -1))
    return out[0], out[1]


def context_ids(zoo: Any, ctx: Context) -> list[int]:
    ids = zoo.load(TARGET).tokenizer(prompts.BY_ID[ctx.prompt].text).input_ids
    if not MIN_PREFIX <= ctx.length <= len(ids):
        raise ValueError(f"context {ctx} is not a prefix of prompt {ctx.prompt!r} ({len(ids)} tokens)")
    return list(ids[: ctx.length])


_INPUTS: dict[tuple[int, Context], tuple[torch.Tensor, torch.Tensor]] = {}


def step_inputs(zoo: Any, ctx: Context) -> tuple[torch.Tensor, torch.Tensor]:
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


def search_contexts(zoo: Any, count: int = len(CONTEXTS)) -> tuple[Context, ...]:
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
class Design:
    """How one case is checked: support, N and what N buys at the run's alpha."""

    keep: list[int]
    expected: dict[str, float]
    n: int
    alpha: float  # the run's per-test alpha
    level: float  # alpha / STAT_CHECKS: the level Holm may decide (and bound) a field at
    tv_max: float
    bins: int  # outcomes with P > 0 (the G-test's k)
    power: float  # G-test power at TV = tv_max at `level` (least favourable alternative)
    detectable_tv: float  # TV detected with probability POWER
    null_tv_upper: float  # NULL_QUANTILE of the TV upper bound for a correct verifier

    def extras(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "holm_level": self.level, "n": self.n, "power": self.power, "power_at_tv": self.tv_max,
                "detectable_tv": self.detectable_tv, "detectable_at_power": POWER}


def design(p: torch.Tensor, q: torch.Tensor, w: float | None, alpha: float, tv_max: float) -> Design:
    """N for one case at per-test level `alpha` (see the module docstring)."""
    exact = verify.step_distribution(p, q, w)
    keep, expected = lumped(exact)
    probs = list(expected.values())
    bins = max(sum(1 for x in probs if x > 0), 2)
    level = alpha / STAT_CHECKS
    n = stats.samples_needed(tv_max, power=POWER, alpha=level, k=bins)
    bound = null_tv_upper(probs, n, level)
    if bound > tv_max:  # both of the bound's terms shrink like 1/sqrt(n): start near the answer
        n = int(n * (bound / tv_max) ** 2 * 0.97)
    n = -(-n // 100) * 100  # multiples of 100
    while null_tv_upper(probs, n, level) > tv_max:
        n += 100
    while n > 100 and null_tv_upper(probs, n - 100, level) <= tv_max and n - 100 >= stats.samples_needed(
            tv_max, power=POWER, alpha=level, k=bins):
        n -= 100
    return Design(keep, expected, n, alpha, level, tv_max, bins, stats.gtest_power(n, tv_max, level, bins),
                  stats.detectable_tv(n, POWER, level, bins), null_tv_upper(probs, n, level))


# ----------------------------------------------------------------------------------------------
# drawing and checking


def draw(run: Verifier, p: torch.Tensor, q: torch.Tensor, w: float | None, plan: Design,
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


class Checks(Protocol):
    """What `observe` needs of harness.plugin.golden.Golden."""

    def check(self, name: str, value: Any, kind: str = ..., **extras: Any) -> Any: ...
    def reference(self, name: str, observed: Any, expected: Any, kind: str = ..., *,
                  observed_extras: dict[str, Any] | None = ..., expected_extras: dict[str, Any] | None = ...) -> Any: ...
    def outcome(self, name: str, status: Any, kind: str = ..., detail: str = ..., category: Any = ...,
                diff: dict[str, Any] | None = ...) -> Any: ...


def observe(golden: Checks, run: Verifier, p: torch.Tensor, q: torch.Tensor, w: float | None, plan: Design,
            seed: int, series: str = "one-step verifier") -> None:
    """Draw N steps and hand the fields to the comparers (the suite decides nothing itself):
      first_token           distribution  emitted-token counts with the exact probabilities (record)
      first_token_vs_exact  distribution  G-test of fit against the exact probabilities (reference)
      acceptance            rate          accepted drafts k/N (record)
      acceptance_vs_exact   rate          binomial test of k/N against sum_x min(q(x), v(x)) (reference)
      bias_vs_target        exact         the bias curve point (information, always pass)"""
    counts, accepted = draw(run, p, q, w, plan, seed)
    expected, n = plan.expected, plan.n
    golden.check("first_token", counts, kind="distribution", expected=expected, **plan.extras())
    golden.reference("first_token_vs_exact", counts, expected, kind="distribution",
                     observed_extras={"expected": expected, **plan.extras()}, expected_extras={"expected": expected})
    golden.check("acceptance", {"k": accepted, "n": n}, kind="rate")
    acceptance = verify.acceptance_probability(p, q, w)
    golden.reference("acceptance_vs_exact", {"k": accepted, "n": n}, {"p": acceptance}, kind="rate")
    emitted = [counts[str(i)] for i in plan.keep] + [counts["other"]]
    target = [float(p[i]) for i in plan.keep] + [1 - float(p[plan.keep].sum())]
    interval = stats.binomial_test(accepted, n, acceptance, 1 - plan.alpha)
    golden.outcome(
        "bias_vs_target", "pass", kind="exact", category="bias" if w is not None else "",
        detail=f"exact TV(emitted, target) = {verify.step_bias(p, q, w):.4f} (w = {w}); the fit is decided by "
               "first_token_vs_exact",
        diff={"w": 1.0 if w is None else w,  # lossless = the w -> 1 limit (v = p)
              "series": series, "tv_exact": verify.step_bias(p, q, w),
              "tv_measured": stats.tv_distance(emitted, target),
              "tv_ci": [0.0, stats.tv_upper_bound(emitted, target, plan.alpha)],
              "acceptance_exact": acceptance, "acceptance_measured": accepted / n,
              "acceptance_ci": [interval.low, interval.high], **plan.extras()},
    )
