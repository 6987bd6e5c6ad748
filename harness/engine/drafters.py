"""Drafters: propose k tokens after a context, with their draft distributions q when they have any.

Every drafter is a `Drafter`: given the committed context x_0 .. x_{n-1},
    propose(context, k, hidden=, sample=, generator=) -> Draft(tokens = x_n .. x_{n+j-1}, q [j, V] or None)
with j <= k (j = 0: nothing to draft, decode takes a plain step). A drafter with
`needs_hidden` reads the target's final hidden states `hidden[t] = h_t` of the committed tokens,
so decode asks it only after the target's first pass.

- `AssistantDrafter`: a smaller model with its own layer-typed caches. It keeps its cache in
  step with the committed context (rewinds the tokens the target rejected, feeds the ones it
  has not seen) and drafts k tokens greedily or by sampling from its softmax.
- `MtpDrafter`: the MTP head of a GLM-4.5- or Mellum-style checkpoint. At position t+1 it sees
  the trunk's final hidden state h_t and the token x_{t+1}:
      e = enorm(embed(x_{t+1})),  g = hnorm(h_t),  z = eh_proj([e; g])
      z = decoder_block(z) (own KV cache),  logits = lm_head(post_norm(z))
  and proposes x_{t+2}. One MTP layer drafts one token per step. The block is the family's
  decoder layer: GLM-4.5 a MoE full-attention layer at `model.layers.<N>.*`; Mellum a layer of
  kind `mtp_layer_types[0]` (sliding window here) at `mtp.layers.0.*` (`MtpNames`).
- `EarlyExitDrafter`: self-speculation (LayerSkip, arXiv 2404.16710; transformers'
  `assistant_early_exit=E`): the target's own first E layers, then its final norm and head,
      q(x | ctx) = softmax(lm_head(norm(h_E(ctx)))),  E = `early_exit_layer(L)` = L // 2,
  drafting as an assistant does (its own cache over those E layers, rewound to the committed
  context). The verification is the target's as for any drafter: greedy output equals greedy decoding.
- `PromptLookupDrafter`: n-gram match in the context (largest n first, first match from the
  left, up to k following tokens, cut before an end token); no draft probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

import torch
import torch.nn.functional as F

from .cache import LayerCache, build_caches
from .model import Model, block, rms_norm


@dataclass
class Draft:
    tokens: list[int]
    q: torch.Tensor | None  # [len(tokens), V] draft probabilities, or None (prompt lookup)


class Drafter(Protocol):
    needs_hidden: bool  # propose() reads `hidden`: decode calls it only once the target has run

    def propose(self, context: list[int], k: int, *, hidden: torch.Tensor | None, sample: bool,
                generator: torch.Generator | None) -> Draft:
        """At most k tokens after `context`; sample from the draft distribution or take its argmax."""
        ...


def _pick(logits: torch.Tensor, sample: bool, generator: torch.Generator | None) -> tuple[int, torch.Tensor]:
    probs = torch.softmax(logits.float(), dim=-1)
    token = int(torch.multinomial(probs, 1, generator=generator)) if sample else int(logits.argmax())
    return token, probs


class AssistantDrafter:
    needs_hidden = False

    def __init__(self, model: Model, static_max_len: int | None = None, slack: int = 8):
        self.model = model
        self.caches: list[LayerCache] = model.new_caches(static_max_len=static_max_len, slack=slack)
        self.seen: list[int] = []  # tokens whose keys/values are in self.caches

    def _sync(self, context: list[int]) -> torch.Tensor:
        """Rewind to the common prefix with `context`, feed the rest; return last logits."""
        common = 0
        for a, b in zip(self.seen, context[:-1], strict=False):
            if a != b:
                break
            common += 1
        if common < len(self.seen):
            for cache in self.caches:
                cache.rewind(len(self.seen) - common)
            self.seen = self.seen[:common]
        new = context[common:]
        out = self.model.forward(torch.tensor(new), torch.arange(common, len(context)), self.caches)
        self.seen = list(context)
        return out.logits[-1]

    def propose(self, context: list[int], k: int, *, hidden: torch.Tensor | None, sample: bool,
                generator: torch.Generator | None) -> Draft:
        logits = self._sync(context)
        tokens, probs = [], []
        for i in range(k):
            token, p = _pick(logits, sample, generator)
            tokens.append(token)
            probs.append(p)
            if i + 1 < k:
                n = len(self.seen)
                logits = self.model.forward(torch.tensor([token]), torch.tensor([n]), self.caches).logits[-1]
                self.seen.append(token)
        return Draft(tokens, torch.stack(probs))


def early_exit_layer(num_layers: int) -> int:
    """The layer an early-exit case drafts from: half the trunk (at least one layer). transformers is
    given the same number (`assistant_early_exit`), read from its own config."""
    return max(1, num_layers // 2)


def early_exit_model(target: Model) -> Model:
    """The target cut after `early_exit_layer` of its layers (`Model.truncated`): what drafts."""
    return target.truncated(early_exit_layer(target.cfg.num_layers))


class EarlyExitDrafter(AssistantDrafter):
    """The target's first `early_exit_layer` layers as its own assistant (`early_exit_model`)."""

    def __init__(self, target: Model, static_max_len: int | None = None, slack: int = 8):
        super().__init__(early_exit_model(target), static_max_len=static_max_len, slack=slack)


class PromptLookupDrafter:
    needs_hidden = False

    def __init__(self, max_ngram: int = 2, eos_token_id: int | None = None):
        self.max_ngram, self.eos = max_ngram, eos_token_id

    def propose(self, context: list[int], k: int, *, hidden: torch.Tensor | None, sample: bool,
                generator: torch.Generator | None) -> Draft:
        n_ctx = len(context)
        for n in range(min(self.max_ngram, n_ctx - 1), 0, -1):
            tail = context[-n:]
            for start in range(n_ctx - n + 1):
                if context[start : start + n] == tail and start + n < n_ctx:
                    tokens = context[start + n : min(start + n + k, n_ctx)]
                    if self.eos is not None and self.eos in tokens:
                        tokens = tokens[: tokens.index(self.eos)]
                    return Draft(tokens, None)
        return Draft([], None)


class _Shifted(LayerCache):
    """A cache whose first position is `offset` (the inner cache counts from 0)."""

    def __init__(self, inner: LayerCache, offset: int):
        self.inner, self.offset = inner, offset

    def update(self, k, v, positions):
        keys, values, k_pos = self.inner.update(k, v, positions - self.offset)
        return keys, values, k_pos + self.offset

    def rewind(self, n: int) -> None:
        self.inner.rewind(n)


@dataclass(frozen=True)
class MtpNames:
    """Where a checkpoint keeps its MTP layer: the decoder block's key prefix and the weights of
    enorm / hnorm / eh_proj / post_norm."""

    block: str
    enorm: str
    hnorm: str
    eh_proj: str
    post_norm: str

    @staticmethod
    def of(target: Model, index: int) -> MtpNames:
        if "mtp.fc.weight" in target.w:  # Mellum: outside the layer-index space
            return MtpNames("mtp.layers.0.", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
                            "mtp.fc.weight", "mtp.norm.weight")
        p = f"{target.prefix}layers.{index}."  # GLM-4.5: a layer past the trunk
        return MtpNames(p, p + "enorm.weight", p + "hnorm.weight", p + "eh_proj.weight", p + "shared_head.norm.weight")


class MtpDrafter:
    """Needs the trunk's final hidden states of the committed tokens (`hidden[t]` for position t)."""

    needs_hidden = True

    def __init__(self, target: Model, layer: int | None = None):
        cfg = target.cfg
        if cfg.num_mtp_layers < 1:
            raise ValueError(f"{target.path}: config has no num_mtp_layers; not an MTP checkpoint")
        self.target = target
        self.index = cfg.num_layers if layer is None else layer  # GLM-4.5 layout: model.layers.<N>.*
        self.names = MtpNames.of(target, self.index)
        n = self.names
        missing = [k for k in (n.enorm, n.hnorm, n.eh_proj, n.post_norm) if k not in target.w]
        if missing:
            raise ValueError(f"{target.path}: MTP weights missing from model.safetensors: {missing}")
        self.kind = cfg.mtp_layer_types[0] if cfg.mtp_layer_types else "full_attention"
        self.cfg = replace(cfg, layer_types=(self.kind,), rope_layers=(True,))  # one layer
        # the MTP layer's first position is 1
        self.cache = _Shifted(build_caches([self.kind], cfg.sliding_window, cfg.chunk_size)[0], 1)
        self.done = 0  # positions fed to the MTP layer: 1 .. self.done

    def propose(self, context: list[int], k: int, *, hidden: torch.Tensor | None, sample: bool,
                generator: torch.Generator | None) -> Draft:
        """Draft one token after `context` (x_0 .. x_{n-1}); `hidden` holds h_0 .. h_{n-2} at least."""
        if hidden is None:
            raise ValueError("MtpDrafter.propose needs the target's hidden states")
        n = len(context)
        start = self.done + 1  # next position to feed
        positions = torch.arange(start, n)
        tokens = torch.tensor(context[start:n])
        h = hidden[start - 1 : n - 1]
        w, names = self.target.w, self.names
        e = rms_norm(self.target.embed(tokens), w[names.enorm], self.cfg.eps)
        g = rms_norm(h, w[names.hnorm], self.cfg.eps)
        z = F.linear(torch.cat([e, g], dim=-1), w[names.eh_proj])
        z = block(z, positions, w, names.block, self.cfg, 0, self.kind, self.cache, use_moe=self.cfg.num_experts > 0)
        logits = self.target.head(rms_norm(z, w[names.post_norm], self.cfg.eps))
        self.done = n - 1
        token, probs = _pick(logits[-1], sample, generator)
        return Draft([token][:k], probs[None][:k])
