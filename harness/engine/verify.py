"""Verification of one speculative step, and the exact distribution of what it emits.

Pure functions, batch size 1, torch only (never transformers). The formula of each verifier
sits in its docstring, next to the code that implements it.

Shapes (k = number of drafted tokens, V = vocabulary size):

- ``draft: LongTensor[k]``      the drafted token ids x_0 .. x_{k-1}
- ``q: Tensor[k, V]``           q[i] = the drafter's distribution it drew x_i from
- ``p: Tensor[k + 1, V]``       p[i] = the target's distribution at drafted position i, given the
                                 prefix and x_0 .. x_{i-1}; row k is the *bonus* position (the
                                 target's distribution after all k drafts).

All are probabilities (rows sum to 1), not logits. Every verifier returns a `Verdict`: the
number of accepted drafts ``n`` and the emitted tokens ``x_0 .. x_{n-1}, y`` where ``y`` is the
correction (rejection at position n < k) or the bonus token (n == k).

Ensemble weight ``w`` in the open interval (0, 1) (transformers' ``assistant_ensemble_weight``,
DIVERSE, arXiv:2604.07622) replaces the verification target at *drafted* positions by

    v_i = w * p_i + (1 - w) * q_i

while the bonus position still uses p_k. Reference: transformers 5.24.0
``generation/utils.py`` ``_speculative_sampling`` (line 4444) and the greedy branch of
``_assisted_decoding`` (lines 4114-4148).

The exact-distribution functions (`step_distribution`, `acceptance_probability`,
`emitted_distribution`) compute in float64 so the harness can compare observed counts with
*computed* probabilities instead of estimated ones.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "Verdict",
    "greedy_verify",
    "match_sample",
    "speculative_sample",
    "ensemble_sample",
    "ensemble_greedy",
    "ensemble_greedy_choices",
    "ensemble_greedy_on_scores",
    "ensemble_target",
    "step_distribution",
    "acceptance_probability",
    "tv_distance",
    "step_bias",
    "emitted_distribution",
]


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one draft.

    accepted: number of draft tokens accepted (0 .. k).
    tokens:   the emitted tokens, ``draft[:accepted] + [one more]``; always ``accepted + 1`` long.
    bonus:    True when all k drafts were accepted and the last token came from the bonus row p[k].
    fallback: True when the ensemble residual ``[p - q]+`` was numerically zero and the
              correction token was drawn from p instead (ensemble sampling only).
    """

    accepted: int
    tokens: list[int]
    bonus: bool = False
    fallback: bool = False


# --------------------------------------------------------------------------------------------
# input checks


def _check(draft: torch.Tensor, q: torch.Tensor | None, p: torch.Tensor) -> int:
    """Validate shapes; return k."""
    if draft.dim() != 1 or draft.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"draft must be a 1-D integer tensor [k], got shape {tuple(draft.shape)} {draft.dtype}")
    k = draft.shape[0]
    if p.dim() != 2 or p.shape[0] != k + 1:
        raise ValueError(f"p must have shape [k + 1, V] = [{k + 1}, V], got {tuple(p.shape)}")
    V = p.shape[1]
    if q is not None and (q.dim() != 2 or q.shape[0] != k or q.shape[1] != V):
        raise ValueError(f"q must have shape [k, V] = [{k}, {V}], got {tuple(q.shape)}")
    if k and not all(0 <= t < V for t in draft.tolist()):
        raise ValueError(f"draft token ids must lie in [0, {V}), got {draft.tolist()}")
    return k


def _check_weight(w: float) -> float:
    # GenerationConfig validates assistant_ensemble_weight to the open interval (0, 1).
    if not isinstance(w, (int, float)) or not 0.0 < float(w) < 1.0:
        raise ValueError(f"ensemble weight w must lie in the open interval (0, 1), got {w!r}")
    return float(w)


def _leading_true(mask: torch.Tensor) -> int:
    """Number of leading True entries (transformers: ``((~m).cumsum(-1) < 1).sum()``)."""
    n = 0
    for ok in mask.tolist():
        if not ok:
            break
        n += 1
    return n


def _verdict(draft: torch.Tensor, n: int, last: int, k: int, fallback: bool = False) -> Verdict:
    return Verdict(accepted=n, tokens=[int(t) for t in draft[:n].tolist()] + [int(last)], bonus=n == k,
                   fallback=fallback)


# --------------------------------------------------------------------------------------------
# greedy verifiers


def greedy_verify(draft: torch.Tensor, p: torch.Tensor) -> Verdict:
    """Greedy verification (transformers' "assisted generation", do_sample=False).

        y_i = argmax_x p_i(x)                       for i = 0 .. k
        n   = max { j : draft[i] == y_i for all i < j }
        emit draft[:n] + [y_n]                      (y_n is the correction, or the bonus if n == k)

    Tie rule: ``torch.argmax`` returns the *first* index among equal maxima. transformers takes
    argmax over the logits; argmax over probabilities is the same except when two distinct
    logits round to the same softmax value (then the first index wins here).
    """
    k = _check(draft, None, p)
    y = p.argmax(dim=-1)
    n = _leading_true(draft == y[:k])
    return _verdict(draft, n, int(y[n]), k)


def ensemble_target(p: torch.Tensor, q: torch.Tensor, w: float) -> torch.Tensor:
    """v = w * p + (1 - w) * q, the ensemble verification distribution (row-wise, same shape as q).

    ``p`` is given for the same positions as ``q`` (pass ``p[:k]``). Computed in the order
    transformers uses: ``w * p_probs + (1.0 - w) * q_probs``.
    """
    w = _check_weight(w)
    return w * p + (1.0 - w) * q


def ensemble_greedy(draft: torch.Tensor, q: torch.Tensor, p: torch.Tensor, w: float) -> Verdict:
    """Greedy verification with a static ensemble weight (transformers 5.24.0
    ``_assisted_decoding``, generation/utils.py:4133-4148, do_sample=False with
    ``assistant_ensemble_weight`` and candidate logits):

        v_i = w * p_i + (1 - w) * q_i               for drafted positions i = 0 .. k-1
        y_i = argmax_x v_i(x)                       for i < k
        y_k = argmax_x p_k(x)                       (bonus position: the target alone)
        n   = max { j : draft[i] == y_i for all i < j }
        emit draft[:n] + [y_n]

    So at a rejection (n < k) the correction token is ``argmax v_n`` (not ``argmax p_n``), and
    only the bonus token is the target's own argmax. Tie rule: first index (torch.argmax).
    """
    k = _check(draft, q, p)
    y = ensemble_greedy_choices(q, p, w)
    n = _leading_true(draft == y[:k])
    return _verdict(draft, n, int(y[n]), k)


def ensemble_greedy_choices(q: torch.Tensor, p: torch.Tensor, w: float) -> torch.Tensor:
    """y_i of `ensemble_greedy` at the first m = len(p) positions (m <= k + 1): argmax v_i where a draft
    was proposed (i < k), argmax p_k at the bonus position."""
    k, m = q.shape[0], p.shape[0]
    y = [ensemble_target(p[:min(m, k)], q[:min(m, k)], w).argmax(dim=-1)]
    return torch.cat(y + [p[k:m].argmax(dim=-1)]) if m > k else y[0]


def ensemble_greedy_on_scores(p_scores: torch.Tensor, q_scores: torch.Tensor, emitted: Sequence[int], w: float,
                              ulps: float = 4.0) -> list[int]:
    """The ensemble-greedy rule's token at each position a step emitted, from the numbers the verifier
    itself had: ``p_scores`` [m, V] the target's processed scores at the m emitted positions (m <= k + 1),
    ``q_scores`` [k, V] the drafter's scores it verified against (the candidate logits). In float32, in
    the verifier's own order, so the rule and the library see the same values:

        p_i = softmax(p_scores[i]),  q_i = softmax(q_scores[i]),  v_i = w p_i + (1 - w) q_i
        y_i = argmax v_i  (i < k),    y_k = argmax p_scores[k]

    Where the emitted token is within `ulps` float32 units of the best (|v| at a drafted position, |z| of
    the scores at the bonus one) the two tie to the rounding of one softmax kernel and the emitted token
    is taken (the rule allows either). No other allowance: any wider gap is a decision the rule would
    not make at any dtype - the library's own p and q are compared, not a second model's."""
    k, m = q_scores.shape[0], len(emitted)
    p32, q32 = p_scores[:m].float(), q_scores.float()
    scored = [ensemble_target(torch.softmax(p32[:min(m, k)], -1), torch.softmax(q32[:min(m, k)], -1), w)]
    if m > k:
        scored.append(p32[k:m])
    rows = torch.cat(scored)
    tiny = torch.finfo(torch.float32).eps * ulps
    out = []
    for row, token in zip(rows, emitted, strict=True):
        best = int(row.argmax())
        tied = float(row[best] - row[int(token)]) <= tiny * float(row.abs().max())
        out.append(int(token) if tied else best)
    return out


# --------------------------------------------------------------------------------------------
# sampling verifiers


def match_sample(draft: torch.Tensor, p: torch.Tensor, generator: torch.Generator) -> Verdict:
    """Sampling without drafter probabilities (e.g. prompt lookup with do_sample=True;
    transformers 5.24.0 generation/utils.py:4130-4132 and 4145-4148):

        y_i ~ p_i  independently for i = 0 .. k     (one torch.multinomial over the k+1 rows)
        n   = max { j : draft[i] == y_i for all i < j }
        emit draft[:n] + [y_n]

    Lossless: every emitted token *is* a target sample y_i given the accepted prefix.
    """
    k = _check(draft, None, p)
    y = torch.multinomial(p, num_samples=1, generator=generator).squeeze(1)
    n = _leading_true(draft == y[:k])
    return _verdict(draft, n, int(y[n]), k)


def _sample_verify(draft, q, p, w, generator) -> Verdict:
    k = _check(draft, q, p)
    q_i = q.gather(1, draft.view(k, 1)).view(k)
    p_i = p[:k].gather(1, draft.view(k, 1)).view(k)
    if w is None:
        ratio = p_i / q_i
    else:
        ratio = 1.0 - w + w * (p_i / q_i)
    # k uniforms in one call, then one multinomial: the order and shapes transformers uses
    # (torch.rand_like(probability_ratio), then torch.multinomial(p_prime, 1)).
    r = torch.rand(k, generator=generator, dtype=ratio.dtype, device=ratio.device)
    n = _leading_true(r <= ratio)
    fallback = False
    if n < k:
        residual = torch.clamp(p[n] - q[n], min=0)
        total = residual.sum()
        if w is not None and total <= torch.finfo(residual.dtype).tiny:
            residual, fallback = p[n], True
        elif total <= 0:
            raise ValueError(
                f"speculative_sample: draft {int(draft[n])} at position {n} was rejected but the residual "
                "[p - q]+ is zero (p and q are equal up to rounding); transformers would fail in "
                "torch.multinomial here"
            )
        else:
            residual = residual / total
        last = torch.multinomial(residual, num_samples=1, generator=generator)
    else:
        last = torch.multinomial(p[k], num_samples=1, generator=generator)
    return _verdict(draft, n, int(last), k, fallback)


def speculative_sample(
    draft: torch.Tensor, q: torch.Tensor, p: torch.Tensor, generator: torch.Generator
) -> Verdict:
    """Lossless speculative sampling (Leviathan et al. 2023, algorithm 1; transformers 5.24.0
    ``_speculative_sampling``, generation/utils.py:4444-4507, ``assistant_ensemble_weight=None``):

        r_i ~ U[0, 1)  (k draws, one call)
        accept x_i  iff  r_i <= p_i(x_i) / q_i(x_i),   n = number of leading accepts
        n < k:  y ~ norm([p_n - q_n]+)          (correction; [a]+ = max(a, 0))
        n = k:  y ~ p_k                         (bonus)
        emit x_0 .. x_{n-1}, y

    Each emitted token is distributed exactly as the target's next token given the accepted
    prefix (see `step_distribution`, `emitted_distribution`). ``r <= ratio`` (not ``<``) as in
    transformers: a draft with p_i(x) = 0 is accepted only when r == 0 exactly (probability 2^-24
    in float32). Every random draw uses ``generator``; with the same generator state and the same
    float32 p, q this reproduces transformers' draws (tests/test_verify_vs_transformers.py).
    A rejection with a zero residual cannot happen in exact arithmetic; if rounding produces one,
    a ValueError is raised (transformers fails inside torch.multinomial).

    Version note: 5.24 always draws the correction/bonus and crops the emitted tokens for EOS /
    max_length afterwards (generation/utils.py:4153-4165). 5.13.1 / 5.14.0 passed
    ``is_done_candidate`` into ``_speculative_sampling`` (5.14.0 utils.py:4045-4049, 5.13.1
    utils.py:3970-3974): when every draft was accepted and the candidates already hit a stop
    condition, they returned the drafts with n - 1 and drew *no* bonus token, so the global
    RNG stream after such a step differs from 5.24. That cropping belongs to the decode loop.
    """
    return _sample_verify(draft, q, p, None, generator)


def ensemble_sample(
    draft: torch.Tensor, q: torch.Tensor, p: torch.Tensor, w: float, generator: torch.Generator
) -> Verdict:
    """Static-ensemble speculative sampling, weight w in (0, 1) (DIVERSE; transformers 5.24.0
    ``_speculative_sampling`` with ``assistant_ensemble_weight=w``, generation/utils.py:4470-4495):

        v_i = w * p_i + (1 - w) * q_i
        accept x_i  iff  r_i <= 1 - w + w * p_i(x_i) / q_i(x_i)      (= v_i/q_i when q_i > 0)
        n < k:  y ~ norm([p_n - q_n]+)     (= norm([v_n - q_n]+), since [v - q]+ = w [p - q]+)
                but if sum [p_n - q_n]+ <= finfo(dtype).tiny: y ~ p_n         (``fallback``)
        n = k:  y ~ p_k                    (bonus from the target alone, not from v)

    The emitted token at a drafted position is distributed as v (biased towards the drafter by
    TV(v, p) = (1 - w) TV(q, p)); the bonus token as p.
    """
    return _sample_verify(draft, q, p, _check_weight(w), generator)


# --------------------------------------------------------------------------------------------
# exact distributions


def _as_f64(x) -> torch.Tensor:
    return torch.as_tensor(x, dtype=torch.float64)


def _target(p_row: torch.Tensor, q_row: torch.Tensor, w: float | None) -> torch.Tensor:
    return p_row if w is None else _check_weight(w) * p_row + (1.0 - w) * q_row


def tv_distance(a, b) -> float:
    """Total variation distance TV(a, b) = 1/2 * sum_x |a(x) - b(x)| (float64)."""
    return float(0.5 * (_as_f64(a) - _as_f64(b)).abs().sum())


def acceptance_probability(p_row, q_row, w: float | None = None) -> float:
    """Probability that one draft x ~ q is accepted:

        alpha = sum_x q(x) min(1, v(x)/q(x)) = sum_x min(q(x), v(x)) = 1 - TV(q, v)

    with v = p (lossless, w None) or v = w p + (1 - w) q; for the ensemble this is
    1 - w TV(p, q) >= the lossless 1 - TV(p, q).
    """
    p_row, q_row = _as_f64(p_row), _as_f64(q_row)
    return float(torch.minimum(q_row, _target(p_row, q_row, w)).sum())


def _residual(p_row: torch.Tensor, q_row: torch.Tensor) -> torch.Tensor:
    """norm([p - q]+); p itself when the residual is (numerically) zero.

    Using p in the degenerate case matches transformers' ensemble fallback; for the lossless
    case the rejection mass multiplying it is then zero (up to rounding), so the choice does
    not change the distribution.
    """
    res = torch.clamp(p_row - q_row, min=0)
    total = res.sum()
    return p_row if total <= torch.finfo(torch.float64).tiny else res / total


def step_distribution(p_row, q_row, w: float | None = None) -> torch.Tensor:
    """Exact distribution of the first emitted token of one verification step, draft x ~ q:

        P(y) = min(q(y), v(y))                              accepted draft y
             + (1 - sum_x min(q(x), v(x))) * [p(y) - q(y)]+ / sum_x [p(x) - q(x)]+   rejection

    v = p when w is None (lossless), v = w p + (1 - w) q otherwise. Why it equals v:
    the rejection mass is 1 - sum min(q, v) = sum [v - q]+ = w * sum [p - q]+ (with w = 1 for
    the lossless case), and [v - q]+ = w [p - q]+, so the second term is exactly [v(y) - q(y)]+
    and min(q, v) + [v - q]+ = v. Hence P = p (lossless) and P = v (ensemble; bias
    TV(P, p) = TV(v, p) = (1 - w) TV(q, p)). Degenerate p == q: the rejection mass is 0 and the
    residual is replaced by p (transformers' fallback), so P = p = v. Computed in float64.
    """
    p_row, q_row = _as_f64(p_row), _as_f64(q_row)
    v = _target(p_row, q_row, w)
    accepted = torch.minimum(q_row, v)
    rejected = (1.0 - accepted.sum()).clamp(min=0.0)
    return accepted + rejected * _residual(p_row, q_row)


def step_bias(p_row, q_row, w: float | None = None) -> float:
    """TV(step_distribution(p, q, w), p): 0 for lossless, (1 - w) TV(q, p) for the ensemble."""
    return tv_distance(step_distribution(p_row, q_row, w), p_row)


def implied_emission(q_draw, accept: Mapping[int, float], residual: Mapping[int, torch.Tensor | None]) -> torch.Tensor:
    """The distribution of the token a verifier emits at one drafted position, from what it does with
    each possible draft y (observed by probing the verifier that ran, harness/subjects/hf_whitebox.py):

        P(z) = sum_y q(y) [A(y) 1{z = y} + (1 - A(y)) R(z | y)]

    q = the distribution the draft was drawn from, A(y) = P(accept y), R(. | y) = what a rejection
    of y draws from. With the textbook rule - A(y) = min(1, v(y) / q(y)), R = norm([p - q]+) - this
    is `step_distribution(p, q, w)` (v lossless or ensemble; tests/test_sampling_math.py). Every y
    with q(y) > 0 must be in `accept`; a rejection must have a residual. Float64."""
    q = _as_f64(q_draw)
    out = torch.zeros_like(q)
    missing = [y for y in torch.nonzero(q > 0).flatten().tolist() if y not in accept]
    if missing:
        raise ValueError(f"{len(missing)} draft tokens with q > 0 have no acceptance probability")
    for y, a in accept.items():
        out[y] += q[y] * a
        if a < 1.0:
            r = residual.get(y)
            if r is None:
                raise ValueError(f"a rejection of draft {y} draws nothing")
            out += q[y] * (1.0 - a) * _as_f64(r)
    return out


def emitted_distribution(
    p_fn: Callable[[tuple[int, ...]], Sequence[float] | torch.Tensor],
    q_fn: Callable[[tuple[int, ...]], Sequence[float] | torch.Tensor],
    prefix: Sequence[int],
    k: int,
    w: float | None = None,
) -> dict[tuple[int, ...], float]:
    """Exact distribution of the token sequence emitted by one verification step of a k-token
    draft (sampling verifiers), by enumeration (small V and k only: O(V^(k+1)) work).

    ``p_fn(ctx)`` / ``q_fn(ctx)`` give the target / drafter next-token distribution after the
    context tuple ``ctx``. With c_i = prefix + (x_0 .. x_{i-1}):

        x_i ~ q(. | c_i)                            drafted sequentially, i = 0 .. k-1
        accept x_i with prob min(1, v_i(x_i) / q_i(x_i)),  v_i = p(.|c_i) or w p(.|c_i) + (1-w) q(.|c_i)
        first rejection at i: emit x_0..x_{i-1}, y with y ~ norm([p(.|c_i) - q(.|c_i)]+)
        all accepted:         emit x_0..x_{k-1}, y with y ~ p(. | c_k)     (bonus from p)

    P(x_0..x_{i-1}, y) = prod_{j<i} min(q_j, v_j)(x_j) * [ (1 - sum min(q_i, v_i)) * residual_i(y) ]
    (the rejected draft is summed out: the residual does not depend on which draft was rejected).

    Lossless property (w None): for every emitted prefix s of length j and token z,
        P(emitted starts with s + (z,)) = P(emitted starts with s and is longer than j) * p(z | prefix + s),
    i.e. each emitted token follows the target's chain rule. With an ensemble weight the same
    holds with v(z | prefix + s) in place of p for j < k (p for the bonus, j = k).
    Returns {emitted tuple: probability} for the outcomes with positive probability (float64 sums).
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if w is not None:
        w = _check_weight(w)
    out: dict[tuple[int, ...], float] = {}

    def add(seq: tuple[int, ...], mass: torch.Tensor) -> None:
        for y, m in enumerate(mass.tolist()):
            if m > 0.0:
                key = seq + (y,)
                out[key] = out.get(key, 0.0) + m

    def walk(ctx: tuple[int, ...], emitted: tuple[int, ...], prob: float, i: int) -> None:
        p_row = _as_f64(p_fn(ctx))
        if i == k:
            add(emitted, prob * p_row)
            return
        q_row = _as_f64(q_fn(ctx))
        accept = torch.minimum(q_row, _target(p_row, q_row, w))  # joint P(draft x and accept x)
        add(emitted, prob * (1.0 - accept.sum()) * _residual(p_row, q_row))
        for x, a in enumerate(accept.tolist()):
            if a > 0.0:
                walk(ctx + (x,), emitted + (x,), prob * a, i + 1)

    walk(tuple(int(t) for t in prefix), (), 1.0, 0)
    return out
