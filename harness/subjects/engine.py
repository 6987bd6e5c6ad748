"""The reference engine (harness/engine/, torch only) as the expected side of a case.

- `decode_case(model, assistant, case, prompt)`: the engine's own draft -> verify -> commit loop
  on the case's path, with the same draft schedule transformers runs;
- `cache_spec(config)`, `windows`, `lengths`: what the reference dispatcher and caches
  (harness/engine/cache.py) say a checkpoint's layers should be and hold;
- `rounding_witness(zoo, name)`: how far the run's low-precision dtype alone moves the model's logits,
  on the engine (harness/engine/witness.py): what the case's low-precision allowances scale with.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from harness.engine.cache import LINEAR, RecurrentCache, build_caches, cache_spec_of, visible
from harness.engine.decode import Decoded, Step, decode
from harness.engine.drafters import (
    AssistantDrafter,
    Drafter,
    EarlyExitDrafter,
    MtpDrafter,
    PromptLookupDrafter,
    early_exit_model,
)
from harness.engine.teacher_forced import Forced
from harness.engine.witness import UNIT_ROUNDOFF
from harness.engine.witness import rounding_witness as witness_of
from harness.schema import Case, Observation
from harness.subjects.oracle import EOS

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

STATIC_MAX_LEN = 256

# layer kind -> (dynamic, static) layer class transformers 5.24 builds for it
REFERENCE_CLASSES = {
    "full_attention": ("DynamicLayer", "StaticLayer"),
    "sliding_attention": ("DynamicSlidingWindowLayer", "StaticSlidingWindowLayer"),
    "chunked_attention": ("DynamicSlidingWindowLayer", "StaticSlidingWindowLayer"),
    LINEAR: ("LinearAttentionLayer", "LinearAttentionLayer"),  # a fixed-size state: static or not alike
}


def drafter_for(case: Case, target, assistant) -> Drafter | None:
    if case.path in ("assisted", "ensemble"):
        return AssistantDrafter(assistant)
    if case.path == "prompt_lookup":
        return PromptLookupDrafter(eos_token_id=EOS)
    if case.path == "mtp":
        return MtpDrafter(target)
    if case.path == "early_exit":
        return EarlyExitDrafter(target)
    return None


def decoded_data(d: Decoded) -> dict[str, Any]:
    """A `Decoded` as plain data (what the answer cache stores)."""
    return {"tokens": list(d.tokens), "target_forwards": d.target_forwards, "margins": list(d.margins),
            "steps": [[list(s.draft), s.accepted, s.bonus, list(s.tokens)] for s in d.steps]}


def decoded_of(data: dict[str, Any]) -> Decoded:
    return Decoded(tokens=list(data["tokens"]), target_forwards=int(data["target_forwards"]),
                   margins=list(data["margins"]),
                   steps=[Step(tuple(draft), accepted, bonus, tuple(tokens)) for draft, accepted, bonus, tokens
                          in data["steps"]])


def decode_cached(zoo: Zoo, case: Case, prompt: list[int]) -> Decoded:
    """`decode_case` for a case of the zoo, through its answer cache."""
    def compute() -> dict[str, Any]:
        assistant = zoo.oracle.model(case.assistant) if case.assistant else None
        return decoded_data(decode_case(zoo.oracle.model(case.model), assistant, case, prompt))

    args = {"case": dataclasses.asdict(case), "prompt": list(prompt)}
    return decoded_of(zoo.oracle.answer("decode", (case.model, case.assistant), args, compute))


def logits_cached(zoo: Zoo, name: str, tokens: list[int]) -> torch.Tensor:
    """The engine's logits [T, V] over `tokens` from position 0 (no cache), through the answer cache."""
    def compute() -> torch.Tensor:
        t = torch.tensor(tokens)
        return zoo.oracle.model(name).forward(t, torch.arange(len(tokens)), None).logits.detach().clone()

    return zoo.oracle.answer("logits", (name,), {"tokens": list(tokens)}, compute)


def exit_logits_cached(zoo: Zoo, name: str, tokens: list[int]) -> torch.Tensor:
    """The engine's early-exit logits [T, V] of model `name` over `tokens` (its first
    `early_exit_layer` layers, final norm, head; no cache), through the answer cache."""
    def compute() -> torch.Tensor:
        t = torch.tensor(tokens)
        return early_exit_model(zoo.oracle.model(name)).forward(t, torch.arange(len(tokens)), None).logits.detach().clone()

    return zoo.oracle.answer("exit-logits", (name,), {"tokens": list(tokens)}, compute)


WITNESS_PROMPT = "long-0"  # held-out real text (harness/zoo/prompts.py): ~80 tokens


def rounding_witness(zoo: Zoo, name: str) -> float | None:
    """The engine's rounding witness of model `name` in the dtype the run loads it in (harness/engine/
    witness.py): its logits over the held-out prompt in that dtype against its fp32 logits, at the
    columns a reference compares (`narrowed`). None in fp32 / fp64, for a name that is no model's,
    or where the engine does not implement the family (`Zoo.oracle.gap`). Tokenized by the `tokenizers` library from the checkpoint's
    tokenizer.json (no library model is loaded for it); through the answer cache."""
    from harness.engine.model import Model
    from harness.subjects.hf import TORCH_DTYPES
    from harness.subjects.hf_cache import narrowed
    from harness.zoo.prompts import BY_ID

    dtype = TORCH_DTYPES.get(zoo.checkpoints.dtype_of(name))
    if dtype not in UNIT_ROUNDOFF or not zoo.checkpoints.is_model(name) or zoo.oracle.gap(name):
        return None
    directory = zoo.checkpoints.directory(name)
    tokens = witness_tokens(directory, BY_ID[WITNESS_PROMPT].text)
    if not tokens:
        return None
    full = logits_cached(zoo, name, tokens)

    def compute() -> torch.Tensor:
        low = Model.load(directory, dtype=dtype, mapped=zoo.checkpoints.large(name))
        return low.forward(torch.tensor(tokens), torch.arange(len(tokens)), None).logits.float().detach().clone()

    low = zoo.oracle.answer("logits-low", (name,), {"tokens": tokens, "dtype": str(dtype)}, compute)
    observed, expected = narrowed(low, full)
    return witness_of(torch.tensor(observed), torch.tensor(expected), UNIT_ROUNDOFF[dtype])


def witness_tokens(directory: Any, text: str) -> list[int]:
    """`text` as the `tokenizers` library encodes it with the checkpoint's tokenizer.json ([] without one)."""
    from pathlib import Path

    from tokenizers import Tokenizer

    path = Path(directory) / "tokenizer.json"
    return Tokenizer.from_file(str(path)).encode(text).ids if path.is_file() else []


def mtp_draft_logprobs(zoo: Zoo, name: str, context: list[int]) -> torch.Tensor:
    """The engine's MTP head's log-probabilities [1, V] for the token after `context`: a fresh head fed
    the trunk's hidden states of `context` (no cache), through the answer cache - the draft an MTP
    drafter must propose from that context (log-probabilities: their differences are the logits')."""
    def compute() -> torch.Tensor:
        target = zoo.oracle.model(name)
        hidden = target.forward(torch.tensor(context), torch.arange(len(context)), None).hidden
        draft = MtpDrafter(target).propose(list(context), 1, hidden=hidden, sample=False, generator=None)
        return torch.log(draft.q.float()).detach().clone()

    return zoo.oracle.answer("mtp-draft", (name,), {"tokens": list(context)}, compute)


def forced_reference(obs: Observation, name: str, tokens: list[int], forced: Forced, labels: list[str],
                     **expected_extras: Any) -> None:
    """Reference `name`: the library's `tokens` against the engine's teacher-forced choices (harness/
    engine/teacher_forced.py), one single-token row per step so that the tie rule (harness/checking/
    compare.py `compare_tokens`) judges each step alone; `labels` name the rows in its detail."""
    obs.reference(name, [[int(t)] for t in tokens], [[b] for b in forced.best], kind="tokens",
                  observed_extras={"row_labels": labels},
                  expected_extras={"margins": [[g] for g in forced.gaps], "scales": [[x] for x in forced.scales],
                                   "row_labels": labels, **expected_extras})


def last_logits(zoo: Zoo, name: str, tokens: list[int]) -> torch.Tensor:
    """The engine's logits [1, V] at the last position of `tokens` (no cache), on the CPU: the oracle
    of a first step's scores (outputs, batching, loading)."""
    return logits_cached(zoo, name, tokens)[len(tokens) - 1:].cpu()


def decode_case(target, assistant, case: Case, prompt: list[int]) -> Decoded:
    """Greedy (or ensemble-greedy) decoding of the case by the reference engine."""
    mode = "ensemble_greedy" if case.weight is not None else "greedy"
    return decode(target, prompt, case.new_tokens, drafter=drafter_for(case, target, assistant),
                  k=case.draft_tokens or 1, mode=mode, w=case.weight,
                  static_max_len=STATIC_MAX_LEN if case.cache == "static" else None, eos_token_id=EOS)


def cache_spec(config: dict[str, Any]) -> dict[str, Any]:
    """`cache_spec_of(config.json)`; GPT-BigCode's config.json names the layer count `n_layer`
    (its config class maps num_hidden_layers onto it), so that alias is resolved here."""
    if "num_hidden_layers" not in config and "n_layer" in config:
        config = {**config, "num_hidden_layers": config["n_layer"]}
    return cache_spec_of(config)


def windows(spec: dict[str, Any]) -> list[int | None]:
    """Per layer: the window transformers' layer should use (chunk size for chunked layers)."""
    return [spec["sliding_window"] if t == "sliding_attention" else spec["attention_chunk_size"]
            if t == "chunked_attention" else None for t in spec["layer_types"]]


def lengths(spec: dict[str, Any], updates: list[int]) -> list[tuple[list[int | None], list[int]]]:
    """Run the reference caches (no slack) through `updates` (tokens per forward) with dummy
    keys; after each update: (seq_len per layer, key slots a next query still needs per layer).
    A linear-attention layer has no sequence dimension: seq_len None, no key slots (its state is
    fixed-size; see `state_shapes`)."""
    caches = build_caches(spec["layer_types"], spec["sliding_window"], spec["attention_chunk_size"])
    out = []
    for n in updates:
        for c in caches:
            if isinstance(c, RecurrentCache):
                c.update([None] * n)  # the length is all this run follows; the states are dummies
                continue
            s = c.seq_len
            k = torch.zeros(1, n, 1)
            c.update(k, k, torch.arange(s, s + n))
        out.append(([None if isinstance(c, RecurrentCache) else c.seq_len for c in caches],
                     [0 if isinstance(c, RecurrentCache) else c.held for c in caches]))
    return out


def state_shapes(config: dict[str, Any], layer_types: list[str]) -> list[dict[str, list[list[int]]] | None]:
    """Per layer, batch 1: the conv and recurrent state shapes a linear-attention layer needs
    (the gated delta rule, harness/engine/delta_rule.py): the conv window [1, channels, K] over
    q|k|v channels, the memory [1, value heads, key dim, value dim]; None for attention layers.
    (The engine keeps K - 1 conv inputs; transformers keeps the kernel's K, the newest K - 1 of
    which are the same.)"""
    c = config.get("text_config", config)
    out: list[dict[str, list[list[int]]] | None] = []
    for t in layer_types:
        if t != LINEAR:
            out.append(None)
            continue
        kh, vh = c["linear_num_key_heads"], c["linear_num_value_heads"]
        dk, dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        out.append({"conv_states": [[1, 2 * kh * dk + vh * dv, c["linear_conv_kernel_dim"]]],
                    "recurrent_states": [[1, vh, dk, dv]]})
    return out


def next_token_probs(model, prompt: list[int], sampling) -> Any:
    """ctx -> the engine's processed next-token distribution after `ctx` (prompt + emitted
    tokens), memoised; the prompt is prefilled once and each context's extra tokens are run on
    top of it and rewound (harness/engine/processors.py applies `sampling`)."""
    from harness.engine.processors import probs

    caches = model.new_caches(slack=16)
    last = model.forward(torch.tensor(prompt), torch.arange(len(prompt)), caches).logits[-1]
    memo: dict[tuple[int, ...], torch.Tensor] = {}

    def p(ctx: tuple[int, ...]) -> torch.Tensor:
        if ctx not in memo:
            extra = list(ctx[len(prompt):])
            logits = last
            if extra:
                logits = model.forward(torch.tensor(extra), torch.arange(len(prompt), len(ctx)), caches).logits[-1]
                for cache in caches:
                    cache.rewind(len(extra))
            memo[ctx] = probs(logits, ctx, sampling)
        return memo[ctx]

    return p


def held_problems(spec: dict[str, Any], stages: list[tuple[str, list[int], list[int], list[int | None]]]) -> list[str]:
    """The reference rule for what a cache layer holds: after each stage (name, held key slots per
    layer, slots the next query needs per layer, the reference seq_len per layer), every layer holds
    at least what the next query needs, a windowed layer at most its window, and a layer without a
    sequence (linear attention, seq_len None) no key slots. The problems ([] = none)."""
    problems = []
    for stage, got, need, seq in stages:
        for i, (h, n, w) in enumerate(zip(got, need, windows(spec), strict=True)):
            bound = 0 if seq[i] is None else seq[i] if w is None else min(seq[i], w)
            if not n <= h <= bound:
                problems.append(f"{stage} layer {i} ({spec['layer_types'][i]}): holds {h}, needs >= {n}, "
                                f"at most {bound}")
    return problems


def effective_mask(call: dict) -> torch.Tensor:
    """[Tq, Tk] bool: what query i may see of key j in one recorded SDPA call (batch 0, head 0)."""
    q, k = call["q"], call["k"]
    tq, tk = q[-2], k[-2]
    mask = call["attn_mask"]
    if mask is None:
        if call["is_causal"]:  # SDPA's is_causal is the top-left aligned triangle
            return torch.ones(tq, tk, dtype=torch.bool).tril()
        return torch.ones(tq, tk, dtype=torch.bool)
    m = torch.broadcast_to(mask, (q[0], q[1], tq, tk))[0, 0]
    if m.dtype == torch.bool:
        return m
    return m > torch.finfo(m.dtype).min / 2


def mask_problems(calls: list[dict], layer_types: list[str], sizes: list[int | None], prompt_len: int) -> list[str]:
    """The reference visibility rule (harness/engine/cache.py `visible`) against the masks a prefill
    from an empty cache applied, one SDPA call per attention layer in order: queries are positions
    0..L-1 and key slot j holds position j (slots >= L are unwritten buffer, never visible). The
    problems ([] = every call masks exactly as the rule for its layer's kind)."""
    if len(calls) != len(layer_types):
        return [f"{len(calls)} SDPA calls for {len(layer_types)} layers: cannot assign calls to layers"]
    problems = []
    for i, (call, kind, size) in enumerate(zip(calls, layer_types, sizes, strict=True)):
        tq, tk = call["q"][-2], call["k"][-2]
        if tq != prompt_len or tk < prompt_len:
            problems.append(f"layer {i}: q length {tq}, k length {tk} for a {prompt_len}-token prefill")
            continue
        mask = effective_mask(call)
        got = mask[:, :prompt_len]
        want = visible(kind, torch.arange(prompt_len), torch.arange(prompt_len), size)
        if not torch.equal(got, want) or bool(mask[:, prompt_len:].any()):
            bad = (got != want).nonzero().tolist()
            where = f"first at q={bad[0][0]}, k={bad[0][1]}" if bad else "sees unwritten slots"
            problems.append(f"layer {i} ({kind}): mask differs from the reference rule ({where}; "
                            f"attn_mask {'None' if call['attn_mask'] is None else 'tensor'}, "
                            f"is_causal {call['is_causal']})")
    return problems
