"""The exact joint distribution of the first K tokens a sampling path emits, by enumeration.

`generate(do_sample=True, max_new_tokens=K)` returns K tokens (fewer when it emits the end
token). Their joint distribution is what an operator means by "this path samples from my
model": the harness compares counts of sampled K-tuples with these exact probabilities.

Plain sampling and every lossless speculative path (assisted, prompt lookup, MTP) must emit the
target's chain:

    P(z_1 .. z_K) = prod_t p(z_t | prompt, z_<t)                               (`target_joint`)

with p the *processed* next-token distribution (harness/engine/processors.py). A verifier with
a static ensemble weight w emits something else, and what it emits depends on how the K tokens
are cut into verification steps. `speculative_joint` follows the process itself, one emitted
token at a time, with the draft schedule transformers uses: a step that starts with r tokens
still to generate drafts k = min(D, r - 1) tokens (the drafter never drafts past max_length);
within a step, at drafted position i (context c):

    draft x ~ q(.|c); accept it with probability min(1, v(x)/q(x)),  v = w p + (1 - w) q
    (v = p when lossless), so P(emit z, continue the step)   = min(q(z), v(z))
                              P(emit z, end the step)        = (1 - sum_x min(q, v)(x)) * [p - q]+(z) / sum [p - q]+
    at position k (all k accepted; k = 0 is a plain step):  P(emit z, end the step) = p(z | c)

A step that ends starts the next one after the emitted tokens; the end token stops everything.
States that emitted the same tokens are merged level by level, so the work is one target and one
drafter distribution per distinct emitted prefix - not the V^(k+1) of enumerating drafts.
(tests/test_sampling_joint.py checks the lossless case against `target_joint` and against
`verify.emitted_distribution`, and derives the ensemble's closed form.)

Lumping: a tuple whose probability is below `min_mass` is not enumerated; all of them together
form one bin, ``OTHER``, whose probability is 1 - (the enumerated mass). A prefix whose total
probability is below `min_mass` is not expanded (no tuple below it can reach `min_mass`), so the
binning is a function of the tuple alone and observed tuples are binned by the same rule
(`Joint.bin_of`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

import torch

OTHER = "other"
Dist = Callable[[tuple[int, ...]], torch.Tensor]  # context (prompt + emitted) -> next-token probabilities


@dataclass(frozen=True)
class Joint:
    """Exact probabilities of the K-tuples (or shorter tuples ending in the end token) whose
    probability is >= min_mass; everything else is the OTHER bin."""

    cells: dict[tuple[int, ...], float]
    min_mass: float

    @property
    def other(self) -> float:
        return max(0.0, 1.0 - sum(self.cells.values()))

    @staticmethod
    def key(cell: tuple[int, ...]) -> str:
        return " ".join(str(t) for t in cell)

    def bin_of(self, tokens: Sequence[int]) -> str:
        cell = tuple(int(t) for t in tokens)
        return self.key(cell) if cell in self.cells else OTHER

    def probabilities(self) -> dict[str, float]:
        """{bin: probability}, the OTHER bin included (even when empty, so supports align)."""
        out = {self.key(c): p for c, p in sorted(self.cells.items(), key=lambda kv: -kv[1])}
        out[OTHER] = self.other
        return out

    def counts(self, samples: Sequence[Sequence[int]]) -> dict[str, int]:
        """Observed tuples binned like `probabilities` (every bin present, zeros included)."""
        out = dict.fromkeys(self.probabilities(), 0)
        for s in samples:
            out[self.bin_of(s)] += 1
        return out


def _f64(x) -> torch.Tensor:
    return torch.as_tensor(x, dtype=torch.float64)


Eos = int | Collection[int] | None  # the end token(s): a tuple ends at the first one


def _eos_set(eos: Eos) -> frozenset[int]:
    return frozenset() if eos is None else frozenset([eos]) if isinstance(eos, int) else frozenset(eos)


def _complete(seq: tuple[int, ...], K: int, eos: frozenset[int]) -> bool:
    return len(seq) >= K or (len(seq) > 0 and seq[-1] in eos)


def target_joint(p_fn: Dist, prompt: Sequence[int], K: int, *, eos: Eos, min_mass: float) -> Joint:
    """prod_t p(z_t | prompt, z_<t), enumerated down to `min_mass` (lossless paths, plain sampling)."""
    prompt, eos = tuple(int(t) for t in prompt), _eos_set(eos)
    cells: dict[tuple[int, ...], float] = {}
    level: dict[tuple[int, ...], float] = {(): 1.0}
    while level:
        nxt: dict[tuple[int, ...], float] = {}
        for seq, mass in level.items():
            row = _f64(p_fn(prompt + seq)) * mass
            for z in torch.nonzero(row >= min_mass).flatten().tolist():
                child = seq + (z,)
                (cells if _complete(child, K, eos) else nxt)[child] = float(row[z])
        level = nxt
    return Joint(cells, min_mass)


def _residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm([p - q]+), or p when it is (numerically) zero (transformers' fallback)."""
    res = torch.clamp(p - q, min=0)
    total = res.sum()
    return p if total <= torch.finfo(torch.float64).tiny else res / total


def speculative_joint(p_fn: Dist, q_fn: Dist, prompt: Sequence[int], K: int, draft_tokens: int, *,
                      w: float | None, eos: Eos, min_mass: float) -> Joint:
    """The joint of the first K emitted tokens of speculative sampling with drafter q (see the
    module docstring); `w` None = lossless, else the static ensemble weight."""
    prompt, eos = tuple(int(t) for t in prompt), _eos_set(eos)
    # a state: (emitted tokens, i = drafts accepted so far in this step, k = drafts of this step)
    # i == k means "the next token ends the step" (bonus, or a plain step when k == 0);
    # i is None means "a new step starts here"
    State = tuple[tuple[int, ...], int | None, int]
    cells: dict[tuple[int, ...], float] = {}
    level: dict[State, float] = {((), None, 0): 1.0}
    while level:
        nxt: dict[State, float] = {}
        for (seq, i, k), mass in level.items():
            if i is None:  # a new step: drafts k = min(D, r - 1) tokens
                i, k = 0, max(0, min(draft_tokens, K - len(seq) - 1))
            ctx = prompt + seq
            p = _f64(p_fn(ctx))
            if i == k:
                moves = [(p, None)]
            else:
                q = _f64(q_fn(ctx))
                v = p if w is None else w * p + (1.0 - w) * q
                accept = torch.minimum(q, v)
                moves = [(accept, i + 1), ((1.0 - accept.sum()).clamp(min=0.0) * _residual(p, q), None)]
            for row, after in moves:
                row = row * mass
                for z in torch.nonzero(row > 0).flatten().tolist():
                    child = seq + (z,)
                    if _complete(child, K, eos):
                        cells[child] = cells.get(child, 0.0) + float(row[z])
                    else:
                        state = (child, after, k)
                        nxt[state] = nxt.get(state, 0.0) + float(row[z])
        # merge by emitted prefix: expand only prefixes whose total probability reaches min_mass
        totals: dict[tuple[int, ...], float] = {}
        for (seq, _, _), mass in nxt.items():
            totals[seq] = totals.get(seq, 0.0) + mass
        level = {s: m for s, m in nxt.items() if totals[s[0]] >= min_mass}
    return Joint({c: m for c, m in cells.items() if m >= min_mass}, min_mass)


def tv_by_bin(a: dict[str, float], b: dict[str, float]) -> float:
    """TV distance between two binned distributions (missing bins count as 0)."""
    return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))
