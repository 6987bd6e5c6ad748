"""Sampling settings -> the next-token distribution a sampler draws from, written from the
definitions (not from transformers). Pure functions of (logits, context), batch size 1.

One `Sampling` holds the settings a caller passes to `generate(do_sample=True, ...)`; `probs`
applies them to one row of logits in the conventional order (the order of the settings below):

    repetition penalty  z_x <- z_x / r if z_x > 0 else z_x * r     for every x in the context
    temperature         z   <- z / T
    top-k               keep the k largest z (ties with the k-th value kept too)
    top-p (nucleus)     keep the smallest set of most likely tokens whose mass is >= top_p:
                        x is kept iff the mass of the tokens strictly more likely than x is < top_p
    min-p               keep x iff P(x) >= min_p * max_y P(y)
    probs               softmax over the kept tokens (the others get probability 0)

Each filter keeps at least one token. Every step runs in float32 (the dtype samplers use), so a
token sitting on a top-p or min-p boundary is decided the way a float32 sampler decides it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class Sampling:
    """What `generate(do_sample=True, ...)` is asked for; None/1.0 = that filter is off."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None

    def kwargs(self) -> dict[str, float | int]:
        """The generate() keyword arguments that ask for these settings (only the active ones)."""
        return {k: v for k, v in asdict(self).items() if v is not None and not (k == "temperature" and v == 1.0)}

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.kwargs().items()) or "no processors"


def repetition_penalty(logits: torch.Tensor, context: Sequence[int], penalty: float) -> torch.Tensor:
    """CTRL's penalty (Keskar et al. 2019): every token already in the context is made less likely."""
    out = logits.clone()
    seen = torch.tensor(sorted(set(int(t) for t in context)), dtype=torch.long)
    if seen.numel():
        z = out[seen]
        out[seen] = torch.where(z > 0, z / penalty, z * penalty)
    return out


def top_k_mask(logits: torch.Tensor, k: int) -> torch.Tensor:
    """True for the tokens top-k keeps (every token tied with the k-th largest value too)."""
    k = max(1, min(int(k), logits.numel()))
    return logits >= torch.topk(logits, k).values[-1]


def top_p_mask(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """True for the nucleus: x is kept iff the mass of the tokens ranked above x is < top_p."""
    probs = torch.softmax(logits, dim=-1)
    order = torch.argsort(probs, descending=True, stable=True)
    ranked = probs[order]
    above = torch.cumsum(ranked, dim=0) - ranked  # mass strictly ranked before each token
    keep_ranked = above < top_p
    keep_ranked[0] = True
    keep = torch.zeros_like(keep_ranked)
    keep[order] = keep_ranked
    return keep


def min_p_mask(logits: torch.Tensor, min_p: float) -> torch.Tensor:
    """True for the tokens whose probability is >= min_p times the most likely token's."""
    probs = torch.softmax(logits, dim=-1)
    keep = probs >= min_p * probs.max()
    keep[probs.argmax()] = True
    return keep


def _masked(logits: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    return logits.masked_fill(~keep, float("-inf"))


def process(logits: torch.Tensor, context: Sequence[int], s: Sampling) -> torch.Tensor:
    """The processed logits (filtered tokens at -inf), float32."""
    z = logits.detach().to(torch.float32)
    if s.repetition_penalty is not None and s.repetition_penalty != 1.0:
        z = repetition_penalty(z, context, s.repetition_penalty)
    if s.temperature != 1.0:
        z = z / s.temperature
    if s.top_k:
        z = _masked(z, top_k_mask(z, s.top_k))
    if s.top_p is not None and s.top_p < 1.0:
        z = _masked(z, top_p_mask(z, s.top_p))
    if s.min_p is not None:
        z = _masked(z, min_p_mask(z, s.min_p))
    return z


def probs(logits: torch.Tensor, context: Sequence[int], s: Sampling | Sequence[Sampling]) -> torch.Tensor:
    """The distribution a sampler with settings `s` draws the next token from (float32). A sequence
    of settings is a processor chain as a library really built it: each applied in turn, in its
    order, repeats included (e.g. a drafter that gets the temperature twice samples at T^2)."""
    if isinstance(s, Sampling):
        return torch.softmax(process(logits, context, s), dim=-1)
    z = logits.detach().to(torch.float32)
    for step in s:
        z = process(z, context, step)
    return torch.softmax(z, dim=-1)


def boundary_mass(logits: torch.Tensor, context: Sequence[int], s: Sampling, eps: float) -> float:
    """The probability mass whose fate a rounding of `eps` in the logits could flip: tokens within
    `eps` (in logit, before temperature) of a top-k, top-p or min-p cut, on either side, weighted by
    their softmax probability after penalty and temperature. 0 when no filter is active or every cut
    has a gap wider than eps."""
    z0 = logits.detach().to(torch.float32)
    if s.repetition_penalty is not None and s.repetition_penalty != 1.0:
        z0 = repetition_penalty(z0, context, s.repetition_penalty)
    z0 = z0 / s.temperature
    z, cuts = z0, []
    if s.top_k and s.top_k < z.numel():
        ranked = torch.sort(z, descending=True).values
        cuts.append(float(ranked[s.top_k - 1] + ranked[s.top_k]) / 2)
        z = _masked(z, top_k_mask(z, s.top_k))
    if s.top_p is not None and s.top_p < 1.0:
        keep = top_p_mask(z, s.top_p)
        dropped = ~keep & torch.isfinite(z)
        if dropped.any():
            cuts.append(float(z[keep].min() + z[dropped].max()) / 2)
        z = _masked(z, keep)
    if s.min_p is not None:
        cuts.append(float(z.max()) + float(torch.log(torch.tensor(s.min_p))))
    if not cuts:
        return 0.0
    near = torch.zeros_like(z0, dtype=torch.bool)
    for cut in cuts:
        near |= (z0 - cut).abs() < eps / s.temperature
    return float(torch.softmax(z0, dim=-1)[near].sum())
