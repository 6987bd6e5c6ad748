"""prefill -> draft -> verify -> commit/rewind: the whole decode loop on one screen.

    context = prompt;  caches = target's layer-typed caches
    logits  = target(prompt)                        # prefill
    while new tokens < max_new_tokens:
        draft, q = drafter.propose(context, k)       # nothing to draft: plain step
        p  = softmax(target([last] + draft))         # one target pass scores k+1 positions
        verdict = verify(draft, q, p)                # greedy / speculative / ensemble
        rewind target caches by the rejected drafts; context += verdict.tokens

The verifier sees p rows for positions n..n+k: row i is the target's distribution for the
token after context + draft[:i]. Every step is traced (drafted, accepted, bonus), so the
acceptance rate and the number of target passes come out of the same run as the tokens.
Sampling draws from an explicit `torch.Generator`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import verify
from .drafters import Drafter
from .model import Model

VERIFIERS = ("greedy", "sample", "ensemble_greedy", "ensemble_sample")


@dataclass(frozen=True)
class Step:
    draft: tuple[int, ...]  # the proposed tokens
    accepted: int  # how many of them the verifier kept
    bonus: bool  # all accepted and one more token came from the target's bonus row
    tokens: tuple[int, ...]  # emitted: draft[:accepted] + one target token

    @property
    def drafted(self) -> int:
        return len(self.draft)


@dataclass
class Decoded:
    tokens: list[int]  # new tokens only
    steps: list[Step] = field(default_factory=list)
    target_forwards: int = 0
    margins: list[float] = field(default_factory=list)  # per new token: top-1 minus top-2 target logit
    scales: list[float] = field(default_factory=list)  # per new token: `top2_scale` of the same logits

    @property
    def acceptance(self) -> tuple[int, int]:
        """(accepted, drafted) over the whole run."""
        return sum(s.accepted for s in self.steps), sum(s.drafted for s in self.steps)


def top2_margin(logits: torch.Tensor) -> float:
    top = torch.topk(logits.float(), 2).values
    return float(top[0] - top[1])


def top2_scale(logits: torch.Tensor) -> float:
    """|x1| + |x2| + 2 rms(x) of one step's logits x (x1, x2 its two largest): the magnitude the
    low-precision rounding of the top-2 margin x1 - x2 follows. Each logit's rounding error between
    two routes is at most c u (|x_i| + rms(x)) (harness/checking/rounding.py, the per-element rule),
    so the margin moves by at most c u times this (the tie rule of harness/checking/compare.py)."""
    x = logits.float()
    top = torch.topk(x, 2).values
    return float(top[0].abs() + top[1].abs() + 2 * x.pow(2).mean().sqrt())


def _verify(mode: str, draft: torch.Tensor, q: torch.Tensor | None, p: torch.Tensor, w: float | None,
            generator: torch.Generator | None) -> verify.Verdict:
    if mode == "greedy" or (mode == "ensemble_greedy" and q is None):
        return verify.greedy_verify(draft, p)
    if mode == "ensemble_greedy":
        return verify.ensemble_greedy(draft, q, p, w)
    if q is None:  # prompt lookup under sampling: accept while the target's sample matches
        return verify.match_sample(draft, p, generator)
    if mode == "ensemble_sample":
        return verify.ensemble_sample(draft, q, p, w, generator)
    return verify.speculative_sample(draft, q, p, generator)


def decode(target: Model, prompt: list[int], max_new_tokens: int, drafter: Drafter | None = None, k: int = 4,
           mode: str = "greedy", w: float | None = None, generator: torch.Generator | None = None,
           static_max_len: int | None = None, eos_token_id: int | None = None) -> Decoded:
    """Decode up to `max_new_tokens` after `prompt`. Like transformers' assisted decoding, the
    first target pass scores the prompt and the first draft together; a drafter that needs the
    target's hidden states (`needs_hidden`: MTP) drafts nothing until the target has run once."""
    if mode not in VERIFIERS:
        raise ValueError(f"unknown verifier {mode!r}; expected one of {VERIFIERS}")
    sample = mode.endswith("sample")
    caches = target.new_caches(static_max_len=static_max_len, slack=k + 1)
    context, cached = list(prompt), 0  # cached: tokens whose keys/values are in `caches`
    hidden = torch.empty(0, target.cfg.hidden_size)  # target's final hidden state per cached token
    result = Decoded(tokens=[])
    while len(result.tokens) < max_new_tokens:
        room = max_new_tokens - len(result.tokens) - 1
        ready = drafter is not None and room > 0 and (not drafter.needs_hidden or cached > 0)
        draft = drafter.propose(context, min(k, room), hidden=hidden, sample=sample, generator=generator) \
            if ready else None
        drafted = draft.tokens if draft is not None else []
        block = context[cached:] + drafted
        out = target.forward(torch.tensor(block), torch.arange(cached, cached + len(block)), caches)
        result.target_forwards += 1
        scored = out.logits[-(len(drafted) + 1):]  # row i: the token after context + drafted[:i]
        verdict = _verify(mode, torch.tensor(drafted, dtype=torch.long), draft.q if draft else None,
                          torch.softmax(scored, dim=-1), w, generator)
        rejected = len(drafted) - verdict.accepted
        for cache in caches:
            cache.rewind(rejected)
        hidden = torch.cat([hidden, out.hidden[: len(block) - rejected]])
        cached = len(context) + verdict.accepted
        result.margins += [top2_margin(row) for row in scored[: verdict.accepted + 1]]
        result.scales += [top2_scale(row) for row in scored[: verdict.accepted + 1]]
        result.steps.append(Step(tuple(drafted), verdict.accepted, verdict.bonus, tuple(verdict.tokens)))
        context += verdict.tokens
        result.tokens += verdict.tokens
        if eos_token_id is not None and eos_token_id in verdict.tokens:
            cut = result.tokens.index(eos_token_id) + 1
            result.tokens, result.margins, result.scales = result.tokens[:cut], result.margins[:cut], result.scales[:cut]
            break
    return result
