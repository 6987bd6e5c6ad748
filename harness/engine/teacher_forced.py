"""A greedy stream judged step by step along its own prefix (teacher-forced).

Comparing a greedy stream with the reference's own stream stops at the first divergence: after a
near-tie flips, the two continue from different prefixes. Teacher-forcing has no such end. One
forward of the reference over prompt + row gives, at every step i, the reference's logits after the
row's own prefix; the row's token there must be the reference's best up to the rounding of the two
logits compared:

    z_i   = chain(logits[prompt_length - 1 + i], context = prompt + row[:i])
    best_i = argmax z_i
    gap_i  = z_i[best_i] - z_i[row[i]]                       (0 where the row took the best)
    scale_i = |z_i[best_i]| + |z_i[row[i]]| + 2 rms(z_i)      (where they differ; else top2_scale)

A step with gap_i beyond the step's tie epsilon (the checking core's `tie_eps_at` on scale_i) is a
token the reference would not choose from that prefix whatever the rounding: another request's token,
a processor not applied, a state not decayed - at every step of the row, not only before its first
near-tie.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .decode import top2_margin, top2_scale
from .processors import Processor, apply
from .verify import ensemble_target


@dataclass
class Forced:
    best: list[int]  # per step: the reference's argmax after the row's prefix
    gaps: list[float]  # per step: how far below that best the row's own token is (0: it is the best)
    scales: list[float | None]  # per step: the rounding scale of the two logits compared (None: the dtype's fixed)

    @staticmethod
    def join(parts: Sequence[Forced]) -> Forced:
        """Several rows' (or steps') verdicts as one, in order."""
        return Forced([b for f in parts for b in f.best], [g for f in parts for g in f.gaps],
                      [x for f in parts for x in f.scales])


def teacher_forced(logits: torch.Tensor, prompt_length: int, row: Sequence[int],
                   chain: Sequence[Processor] = (), context: Sequence[int] | None = None) -> Forced:
    """`logits` [T, V]: the reference's logits over prompt + row (T >= prompt_length + len(row) - 1);
    `context`: prompt + row, for the processors that read it (a repetition penalty)."""
    out = Forced([], [], [])
    for i, token in enumerate(row):
        ctx = list(context[:prompt_length + i]) if context is not None else []
        z = apply(logits[prompt_length - 1 + i], ctx, chain)
        best = int(torch.argmax(z))
        out.best.append(best)
        if best == int(token):
            out.gaps.append(top2_margin(z))
            out.scales.append(top2_scale(z))
        else:
            out.gaps.append(float(z[best] - z[int(token)]))
            out.scales.append(float(z[best].abs() + z[int(token)].abs() + 2 * z.pow(2).mean().sqrt()))
    return out


def ensemble_step(p_logits: torch.Tensor, q_logits: torch.Tensor, context_length: int, draft: Sequence[int],
                  emitted: Sequence[int], w: float) -> Forced:
    """One ensemble-greedy verification step judged on the tokens it emitted (harness/engine/verify.py
    `ensemble_greedy`, teacher-forced on the library's own drafts):

        p_i = softmax(target logits after context + draft[:i])      i = 0 .. k
        q_i = softmax(drafter logits after context + draft[:i])     i = 0 .. k-1
        y_i = argmax (w p_i + (1 - w) q_i)   for i < k;   y_k = argmax p_k

    and each emitted token e_i (the accepted drafts, then the correction or bonus token) must be y_i.
    `p_logits` / `q_logits`: [T, V] over context + draft. Gaps are in log-probability of the mixture
    (of p alone at the bonus position): a logit's rounding moves its log-probability by as much, so
    the tie rule's fixed epsilon of the dtype applies (no scale is given)."""
    k = len(draft)
    rows = [context_length - 1 + i for i in range(k + 1)]
    p = torch.softmax(p_logits[rows].float(), dim=-1)
    q = torch.softmax(q_logits[rows[:k]].float(), dim=-1)
    v = torch.cat([ensemble_target(p[:k], q, w), p[k:]]).clamp_min(1e-30).log()
    out = Forced([], [], [])
    for i, token in enumerate(emitted[:k + 1]):
        best = int(torch.argmax(v[i]))
        out.best.append(best)
        top = torch.topk(v[i], 2).values
        out.gaps.append(float(top[0] - top[1]) if best == int(token) else float(v[i][best] - v[i][int(token)]))
        out.scales.append(None)
    return out
