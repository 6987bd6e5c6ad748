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

Below `Sampling`, every other processor a generation config can ask for, each a pure function of one
row z and its context c (its math in its docstring), and `Processor`, one resolved entry of a
pipeline (harness/engine/pipeline.py builds the list from a generation config): `apply` runs a list
in its order, `chain_probs` softmaxes the result. Written from the papers and the settings'
definitions (vLLM / gpt-fast style), never from transformers' code:

    sequence_bias / bad_words          z_x += b for a biased sequence ending in x after c's tail (-inf: banned)
    no_repeat_ngram (n)                ban x if (last n - 1 of c, x) already occurs in c
    encoder_no_repeat_ngram (n)        ban x if (last n - 1 of c, x) is an n-gram of the prompt
    encoder_repetition_penalty (r)     CTRL's penalty inverted on the prompt's tokens
    min_length / min_new_tokens        end tokens banned while |c| < min_length (P + min_new_tokens)
    forced_bos / forced_eos            only that token allowed at |c| = 1 / max_length - 1
    remove_invalid_values              NaN -> 0, +-inf -> the dtype's largest finite values
    exponential_decay_length_penalty   z_e += |z_e| (f^(|c| - start) - 1) past start = P + s
    suppress_tokens / begin_suppress   banned always / at |c| = P only
    typical_p, epsilon_cutoff,         the entropy-based filters (Meister et al. 2022; Hewitt et al. 2022)
    eta_cutoff, top_h
    renormalize_logits                 z <- log_softmax(z)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Sampling:
    """What `generate(do_sample=True, ...)` is asked for; None/1.0 = that filter is off."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    # any other generation setting, (name, value) with lists as tuples (hashable): generate() gets it,
    # `process` refuses it - its processor is a `Processor` of a pipeline (harness/engine/pipeline.py)
    extra: tuple[tuple[str, Any], ...] = ()

    def kwargs(self) -> dict[str, Any]:
        """The generate() keyword arguments that ask for these settings (only the active ones)."""
        out = {k: v for k, v in asdict(self).items()
               if k != "extra" and v is not None and not (k == "temperature" and v == 1.0)}
        return {**out, **{k: _listed(v) for k, v in self.extra}}

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.kwargs().items()) or "no processors"


def _listed(v: Any) -> Any:
    return [_listed(x) for x in v] if isinstance(v, tuple) else v


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
    """The processed logits (filtered tokens at -inf), float32. ValueError: settings with `extra` (a
    pipeline's `apply` computes those)."""
    if s.extra:
        raise ValueError(f"settings beyond Sampling's five ({', '.join(k for k, _ in s.extra)}): apply their pipeline")
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


def probs(logits: torch.Tensor, context: Sequence[int], s: Any) -> torch.Tensor:
    """The distribution a sampler with settings `s` draws the next token from (float32). A sequence
    of settings is a processor chain as a library really built it: each applied in turn, in its
    order, repeats included (e.g. a drafter that gets the temperature twice samples at T^2); its
    entries are `Sampling`s or pipeline `Processor`s (below)."""
    if isinstance(s, Sampling):
        return torch.softmax(process(logits, context, s), dim=-1)
    z = logits.detach().to(torch.float32)
    for step in s:
        z = process(z, context, step) if isinstance(step, Sampling) else apply(z, context, [step])
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


# ----------------------------------------------------------------------------------------------
# every processor a generation config can ask for, one row of logits z (V,) after a context c
# (c = the prompt and the tokens generated so far; |c| its length). Each returns new logits, float32;
# "-inf" bans a token. Parameters that depend on the prompt (its length P, its tokens) are resolved
# when the pipeline is built (harness/engine/pipeline.py), so every function sees (z, c) only.


def sequence_bias(z: torch.Tensor, ctx: Sequence[int], biases: Sequence[tuple[Sequence[int], float]]) -> torch.Tensor:
    """z_x += sum of b over the biased sequences s = (s_1 .. s_m) with s_m = x whose prefix s_<m is the
    end of c (m = 1: always; a prefix longer than c never matches). A bias of -inf bans (bad words)."""
    out = z.clone()
    for seq, b in biases:
        prefix = tuple(seq[:-1])
        if len(prefix) <= len(ctx) and tuple(ctx[len(ctx) - len(prefix):]) == prefix:
            out[seq[-1]] = out[seq[-1]] + b
    return out


def bad_words(z: torch.Tensor, ctx: Sequence[int], words: Sequence[Sequence[int]]) -> torch.Tensor:
    """Ban x whenever emitting it would complete a bad word w: w_<m is the end of c and w_m = x."""
    return sequence_bias(z, ctx, [(w, float("-inf")) for w in words])


def no_repeat_ngram(z: torch.Tensor, ctx: Sequence[int], n: int) -> torch.Tensor:
    """Ban x if the n-gram (c_{|c|-n+2} .. c_|c|, x) already occurs in c (Paulus et al. 2017): with
    g = the last n - 1 tokens of c, every x that followed an earlier occurrence of g. |c| < n: nothing."""
    out, ctx = z.clone(), list(ctx)
    if len(ctx) < n:
        return out
    tail = tuple(ctx[len(ctx) - n + 1:]) if n > 1 else ()
    banned = {ctx[i + n - 1] for i in range(len(ctx) - n + 1) if tuple(ctx[i:i + n - 1]) == tail}
    if banned:
        out[sorted(banned)] = float("-inf")
    return out


def prompt_ngrams(prompt: Sequence[int], n: int) -> tuple[tuple[int, ...], ...]:
    """Every n-gram of the prompt, sorted (the encoder n-grams a decoder-only model's prompt gives)."""
    return tuple(sorted({tuple(prompt[i:i + n]) for i in range(len(prompt) - n + 1)}))


def encoder_no_repeat_ngram(z: torch.Tensor, ctx: Sequence[int], ngrams: Sequence[Sequence[int]]) -> torch.Tensor:
    """Ban x if (the last n - 1 tokens of c, x) is one of the prompt's n-grams (copying n-grams of the
    input is forbidden; the model's prompt is its encoder input)."""
    out = z.clone()
    if not ngrams:
        return out
    n = len(ngrams[0])
    tail = tuple(ctx[len(ctx) - n + 1:]) if n > 1 else ()
    banned = sorted({g[-1] for g in ngrams if tuple(g[:-1]) == tail})
    if banned and len(ctx) >= n - 1:
        out[banned] = float("-inf")
    return out


def encoder_repetition_penalty(z: torch.Tensor, prompt: Sequence[int], penalty: float) -> torch.Tensor:
    """The hallucination penalty: the inverse of CTRL's on the prompt's tokens - for x in the prompt,
    z_x <- z_x * r if z_x > 0 else z_x / r (r > 1 makes the input's tokens more likely)."""
    return repetition_penalty(z, prompt, 1.0 / penalty)


def ban_eos_before(z: torch.Tensor, ctx: Sequence[int], length: int, eos: Sequence[int]) -> torch.Tensor:
    """min_length / min_new_tokens: every end token banned while |c| < length (min_new_tokens: length = P
    + min_new_tokens)."""
    out = z.clone()
    if len(ctx) < length and eos:
        out[list(eos)] = float("-inf")
    return out


def force_at(z: torch.Tensor, ctx: Sequence[int], length: int, tokens: Sequence[int]) -> torch.Tensor:
    """forced_bos (length 1) / forced_eos (length max_length - 1): when |c| = length, every token but
    `tokens` is banned and those get logit 0."""
    if len(ctx) != length:
        return z.clone()
    out = torch.full_like(z, float("-inf"))
    out[list(tokens)] = 0.0
    return out


def remove_inf_nan(z: torch.Tensor) -> torch.Tensor:
    """NaN -> 0, +inf -> the dtype's largest finite value, -inf -> its smallest."""
    info = torch.finfo(z.dtype)
    out = torch.where(torch.isnan(z), torch.zeros_like(z), z)
    out = torch.where(z == float("inf"), torch.full_like(z, info.max), out)
    return torch.where(z == float("-inf"), torch.full_like(z, info.min), out)


def exponential_decay_length(z: torch.Tensor, ctx: Sequence[int], start: int, factor: float,
                             eos: Sequence[int]) -> torch.Tensor:
    """After |c| = start (P + the configured start index), the end tokens' logits grow exponentially:
    z_e <- z_e + |z_e| (factor^(|c| - start) - 1) for e in eos, while |c| > start (a non-finite z_e
    stays as it is)."""
    out = z.clone()
    if len(ctx) > start and eos:
        e = list(eos)
        penalty = out[e].abs() * (factor ** (len(ctx) - start) - 1)
        out[e] = out[e] + torch.where(torch.isfinite(out[e]), penalty, torch.zeros_like(penalty))
    return out


def suppress(z: torch.Tensor, tokens: Sequence[int]) -> torch.Tensor:
    """suppress_tokens: `tokens` banned at every step."""
    out = z.clone()
    if tokens:
        out[list(tokens)] = float("-inf")
    return out


def suppress_at(z: torch.Tensor, ctx: Sequence[int], tokens: Sequence[int], begin: int) -> torch.Tensor:
    """begin_suppress_tokens: `tokens` banned at the first generated position only (|c| = begin = P)."""
    return suppress(z, tokens) if len(ctx) == begin else z.clone()


def _entropy(logp: torch.Tensor) -> torch.Tensor:
    p = logp.exp()
    return -(torch.where(p > 0, p * logp, torch.zeros_like(p))).sum()


def typical_mask(z: torch.Tensor, mass: float) -> torch.Tensor:
    """Locally typical sampling (Meister et al. 2022): with H = -sum p log p, rank tokens by
    s_x = |-log p_x - H| ascending; keep the shortest prefix of that ranking whose mass is >= `mass`
    (every token with s equal to the last kept one's too)."""
    logp = torch.log_softmax(z, dim=-1)
    s = (-logp - _entropy(logp)).abs()
    order = torch.argsort(s, stable=True)
    cum = torch.cumsum(logp.exp()[order], dim=0)
    last = min(int((cum < mass).sum()), z.numel() - 1)
    keep = s <= s[order[last]]
    keep[order[0]] = True
    return keep


def epsilon_mask(z: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Epsilon sampling (Hewitt et al. 2022): keep x iff p_x >= epsilon (the most likely token always)."""
    p = torch.softmax(z, dim=-1)
    return (p >= epsilon) | (z >= z.max())


def eta_mask(z: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Eta sampling (Hewitt et al. 2022): keep x iff p_x >= eta = min(epsilon, sqrt(epsilon) exp(-H))
    (the most likely token always)."""
    logp = torch.log_softmax(z, dim=-1)
    eps = torch.tensor(epsilon, dtype=z.dtype)
    eta = torch.minimum(eps, eps.sqrt() * torch.exp(-_entropy(logp)))
    return (logp.exp() >= eta) | (z >= z.max())


def top_h_mask(z: torch.Tensor, top_h: float, top_n: int = 100) -> torch.Tensor:
    """Top-H: among the top_n most likely tokens, renormalised to p', with tau = top_h * H(p'), keep
    them in order of probability while the running sum of -p'_x log p'_x is <= tau (the first always)."""
    n = min(int(top_n), z.numel())
    top = torch.topk(z, n)
    logp = torch.log_softmax(top.values, dim=-1)
    terms = -logp.exp() * logp
    kept = torch.cumsum(terms, dim=0) <= top_h * terms.sum()
    kept[0] = True
    keep = torch.zeros(z.numel(), dtype=torch.bool)
    keep[top.indices] = kept
    return keep


@dataclass(frozen=True)
class Processor:
    """One processor of a pipeline: its `name` (a key of APPLY) and its parameters, resolved (no
    prompt-relative value left). Floats are held at 7 significant digits, so a value stored in
    float32 by one side reads the same as the config's Python float."""

    name: str
    params: tuple[tuple[str, Any], ...] = ()

    @staticmethod
    def of(name: str, **params: Any) -> Processor:
        return Processor(name, tuple(sorted((k, _canonical(v)) for k, v in params.items())))

    def __getitem__(self, key: str) -> Any:
        return dict(self.params)[key]

    def spec(self) -> list[Any]:
        """As plain data: [name, {param: value}] (tuples as lists)."""
        return [self.name, {k: _plain(v) for k, v in self.params}]


def _canonical(v: Any) -> Any:
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        return float(f"{v:.7g}")
    if isinstance(v, (list, tuple)):
        return tuple(_canonical(x) for x in v)
    raise TypeError(f"processor parameter of type {type(v).__name__}: {v!r}")


def _plain(v: Any) -> Any:
    return [_plain(x) for x in v] if isinstance(v, tuple) else v


def _keep1(p: Processor) -> None:
    if p.params and dict(p.params).get("keep", 1) != 1:
        raise ValueError(f"{p.name} with min_tokens_to_keep {p['keep']}: the engine keeps 1 (batch-1 sampling)")


def _filter(mask):
    def apply(z: torch.Tensor, ctx: Sequence[int], p: Processor, key: str) -> torch.Tensor:
        _keep1(p)
        return _masked(z, mask(z, p[key]))
    return apply


APPLY: dict[str, Any] = {
    "sequence_bias": lambda z, c, p: sequence_bias(z, c, p["biases"]),
    "encoder_repetition_penalty": lambda z, c, p: encoder_repetition_penalty(z, p["prompt"], p["penalty"]),
    "repetition_penalty": lambda z, c, p: repetition_penalty(z, list(c)[p["ignore"]:], p["penalty"]),
    "no_repeat_ngram": lambda z, c, p: no_repeat_ngram(z, c, p["n"]),
    "encoder_no_repeat_ngram": lambda z, c, p: encoder_no_repeat_ngram(z, c, p["ngrams"]),
    "bad_words": lambda z, c, p: bad_words(z, c, p["words"]),
    "min_length": lambda z, c, p: ban_eos_before(z, c, p["length"], p["eos"]),
    "min_new_tokens": lambda z, c, p: ban_eos_before(z, c, p["start"] + p["n"], p["eos"]),
    "forced_bos": lambda z, c, p: force_at(z, c, 1, (p["token"],)),
    "forced_eos": lambda z, c, p: force_at(z, c, p["max_length"] - 1, p["eos"]),
    "remove_invalid_values": lambda z, c, p: remove_inf_nan(z),
    "exponential_decay_length_penalty": lambda z, c, p: exponential_decay_length(z, c, p["start"], p["factor"],
                                                                                 p["eos"]),
    "suppress_tokens": lambda z, c, p: suppress(z, p["tokens"]),
    "begin_suppress_tokens": lambda z, c, p: suppress_at(z, c, p["tokens"], p["begin"]),
    "temperature": lambda z, c, p: z / p["temperature"],
    "top_h": lambda z, c, p: _masked(z, top_h_mask(z, p["top_h"], p["top_n"])),
    "top_k": lambda z, c, p: _filter(top_k_mask)(z, c, p, "top_k"),
    "top_p": lambda z, c, p: _filter(top_p_mask)(z, c, p, "top_p"),
    "min_p": lambda z, c, p: _filter(min_p_mask)(z, c, p, "min_p"),
    "typical_p": lambda z, c, p: _filter(typical_mask)(z, c, p, "typical_p"),
    "epsilon_cutoff": lambda z, c, p: _filter(epsilon_mask)(z, c, p, "epsilon"),
    "eta_cutoff": lambda z, c, p: _filter(eta_mask)(z, c, p, "epsilon"),
    "renormalize_logits": lambda z, c, p: torch.log_softmax(z, dim=-1),
}
# the processors that only move logits (no token banned by a cut): ties among tokens are theirs
TRANSFORMS = ("sequence_bias", "encoder_repetition_penalty", "repetition_penalty", "exponential_decay_length_penalty")


def apply(logits: torch.Tensor, ctx: Sequence[int], chain: Sequence[Processor]) -> torch.Tensor:
    """The logits after every processor of `chain`, in order (float32). ValueError: a processor the
    engine does not implement (its name says which)."""
    z = logits.detach().to(torch.float32)
    for p in chain:
        if p.name not in APPLY:
            raise ValueError(f"processor {p.name} {dict(p.params)} has no engine counterpart")
        z = APPLY[p.name](z, ctx, p)
    return z


def chain_probs(logits: torch.Tensor, ctx: Sequence[int], chain: Sequence[Processor]) -> torch.Tensor:
    """The distribution a sampler with the processor list `chain` draws from after `ctx` (float32)."""
    return torch.softmax(apply(logits, ctx, chain), dim=-1)


def tie_values(logits: torch.Tensor, ctx: Sequence[int], chain: Sequence[Processor]) -> torch.Tensor:
    """The logits after the chain's TRANSFORMS only: tokens equal here are tied for every cut."""
    return apply(logits, ctx, [p for p in chain if p.name in TRANSFORMS])
