"""Batch invariance: each prompt generated alone vs inside a padded batch of prompts of clearly
different lengths (suites/test_batching.py; table: harness/cases/ `batching`).

One generate() per case on a batch the harness pads itself (`pad_rows`: the prompts' ids, the pad
token in front - left padding, what a decoder-only model needs - or behind - right padding, which
transformers does not support for decoder-only generation: it warns, refuses or silently differs,
and which is recorded), and, as the oracle, the same library's run of each prompt alone (computed
in the run, same path, same settings). The checks (`check`):

  greedy        left-padded, greedy: every row must generate what its prompt generates alone
  sample        left-padded, seeded sampling: the tokens are recorded (a batch draws from the
                generator in another order, so they are not the solo run's); the distribution check
                is the first step's processed scores of each row against its solo run's - it detects
                a processor / warper or a forward whose output for a row depends on its batch-mates
                or on pad columns, not a sampler drawing wrongly (the sampling suite's)
  right-padded  right-padded, greedy: recorded as data - the warning, the error, each row's first
                divergence from its solo run (no check against the solo run: unsupported by contract)
  tokenizer-padded
                greedy on the batch as users build it: `tok(texts, padding=True, padding_side="left")`
                (a tokenizer without a pad token gets its eos as one, as users set it), checked like
                greedy - and the batch itself against the padding rule
  assisted, prompt_lookup
                left-padded, greedy, on a speculative path: transformers 5.x refuses a batch
                ("assisted generate is only supported for batch_size = 1") - the refusal is the
                record; a version that accepts one is checked like greedy

What reached the model is recorded by wrapping its forward for the call: the 2D attention mask
and the position ids of every call. Per row, `real_positions` keeps the position id of each real
(unmasked) query token in the order the calls saw them, and `mask_runs` the mask of each call as
runs of equal values ([[0, 63], [1, 20]]: 63 pads, then 20 tokens).

  setup         exact    the prompts' lengths, the padding side, the pad token id, the rows
  error         exact    the batched call's exception (a path's refusal of a batch), or None
  tokenizer_batch exact  tokenizer-padded: the ids and mask the tokenizer built (and the pad it used)
  padding_warned exact   whether transformers warned about the padding (logger or warnings)
  warnings      exact    the padding warnings' text; presentation - a reworded warning is `changed`
  tokens        tokens   new tokens per row, with top-2 margins
  first_logits  tensor   each row's first-step processed scores
  positions     exact    per row: the position id each real token reached forward with, in order
                         (None: forward received no position ids)
  mask_runs     exact    per row, per forward call: the attention mask as runs
  solo_divergence exact  right-padded: per row, the first step where the row leaves its solo stream
                         (None: it does not); follows tokens
 references, computed in the run (the engine; the solo runs; greedy, sample and an accepting speculative path):
  first_logits_vs_engine tensor greedy (not right-padded): each row's first-step scores equal the
                               engine's logits at its prompt's last position (the prompt alone, no
                               cache, no pads; the same top-256 columns for a large vocabulary -
                               `narrowed`), within the cross-implementation tolerance; `first_logits`
                               names it as its oracle, so a batched first step moving to the engine's
                               values is fixed (5.14.0's SDPA dropping Gemma 2's soft-cap, undone in
                               5.24.0), away from them broken; none where the engine has no such model
  tokens_as_solo       tokens  per row: the batched tokens equal the solo run's (tie-aware: a batch
                               changes the reduction shapes, so a near-tie may flip) - greedy only
  first_logits_as_solo tensor  per row: the first step's scores within the dtype's tolerance of the
                               solo run's (the distribution check of the sample check)
  scores_as_solo       tensor  greedy: every step's scores, over the steps every row shares a prefix
                               with its solo run (`comparable_steps`) - a decode step that goes wrong
                               after a right first step shows here before any token flips
  positions_as_solo    exact   per row: the real tokens' position ids equal the solo run's - a
                               left-padded row counts from its first real token, not from the pads
  mask_as_solo         exact   per row and call: the mask with its leading pads dropped equals the
                               solo run's (`attended`: all ones; no mask at all counts as all ones
                               over the call's keys) - the pads are masked, and only the pads
  tokenizer_batch_as_rule exact tokenizer-padded: the tokenizer's batch equals the harness's padding
                               (harness/engine/padding.py: its pad, on the left, mask 1 on real ids)
                               of the prompts' ids - a padding_side asked at call time and not used
                               (PR #33385 / #33847's class) hands generate() a right-padded batch
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from harness.checking.compare import first_divergence
from harness.engine.padding import LEFT, RIGHT, pad_rows
from harness.schema import Case, Observation
from harness.subjects import engine, hf
from harness.subjects.hf_batching import BatchRun, Forward, batch_run
from harness.subjects.hf_cache import narrowed, top_values

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

REFERENCE_CHECKS = ("greedy", "sample", "tokenizer-padded", "assisted", "prompt_lookup")  # left-padded: checked against solo runs


# ----------------------------------------------------------------------------------------------
# pure logic


def runs(values: Sequence[int]) -> list[list[int]]:
    """Runs of equal values: [0, 0, 1, 1, 1] -> [[0, 2], [1, 3]]."""
    out: list[list[int]] = []
    for v in values:
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([int(v), 1])
    return out


def without_leading_pads(row_runs: list[list[int]]) -> list[list[int]]:
    """A row's mask runs with a leading run of zeros (left padding) dropped."""
    return row_runs[1:] if row_runs and row_runs[0][0] == 0 else row_runs


def _row(rows: list[list[int]] | None, r: int) -> list[int] | None:
    if rows is None:
        return None
    return rows[r] if len(rows) > 1 else rows[0]  # one row broadcasts over the batch


def real_positions(forwards: Sequence[Forward], r: int) -> list[int] | None:
    """Row r's position id of each real query token, over the calls in order: a call's query is
    its last len(position_ids) columns, a real token one whose attention mask is 1 there (no
    mask: all are real). None when some call received no position ids."""
    out: list[int] = []
    for f in forwards:
        pos = _row(f.position_ids, r)
        if pos is None:
            return None
        mask = _row(f.attention_mask, r)
        query_mask = mask[-len(pos):] if mask is not None and len(mask) >= len(pos) else [1] * len(pos)
        out += [p for p, m in zip(pos, query_mask, strict=True) if m]
    return out


def mask_runs(forwards: Sequence[Forward], r: int) -> list[list[list[int]] | None]:
    """Row r's attention mask of each call, as runs (None: the call received no mask)."""
    return [None if (m := _row(f.attention_mask, r)) is None else runs(m) for f in forwards]


def padded_to(row: Sequence[int], length: int, pad: int) -> list[int]:
    """A solo run's tokens as a batch row of `length` holds them: a row that stopped early (eos) is
    filled with the pad token."""
    return list(row) + [pad] * (length - len(row))


def attended(forwards: Sequence[Forward], r: int) -> list[list[list[int]] | None]:
    """Row r's mask of each call as the keys it lets attention see: the runs with leading pads
    dropped; a call that received no mask attends to all of its keys ([[1, key_length]]; 5.24 drops
    an all-ones mask before forward). None where neither is known."""
    out: list[list[list[int]] | None] = []
    for f, m in zip(forwards, mask_runs(forwards, r), strict=True):
        out.append(without_leading_pads(m) if m is not None else None if f.key_length is None
                   else [[1, f.key_length]])
    return out


def comparable_steps(rows: Sequence[Sequence[int]], solos: Sequence[Sequence[int]]) -> int:
    """How many leading steps of every row were scored after the same prefix as its solo run: up
    to and including a row's first divergence (its scores there still follow the same prefix;
    after it they do not), and no further than a solo run that stopped (eos)."""
    steps = [len(s) if (d := first_divergence(list(r[:len(s)]), list(s))) is None else d + 1
             for r, s in zip(rows, solos, strict=True)]
    return min(steps, default=0)


def divergences(rows: Sequence[Sequence[int]], solos: Sequence[Sequence[int]]) -> list[int | None]:
    """Per row, the first step where it leaves its solo stream (None: it does not)."""
    return [first_divergence(list(a), list(b)) for a, b in zip(rows, solos, strict=True)]


# ----------------------------------------------------------------------------------------------
# observation


def pad_id(model: Any, tokenizer: Any) -> int:
    """The pad token a batch is padded with: the model's config, else the tokenizer's, else the
    first eos id of the generation config (what users set when a tokenizer has none)."""
    for value in (model.config.pad_token_id, tokenizer.pad_token_id, model.generation_config.eos_token_id):
        if isinstance(value, (list, tuple)):
            value = value[0] if value else None
        if value is not None:
            return int(value)
    return 0


def tokenizer_batch(tokenizer: Any, texts: list[str]) -> dict[str, Any]:
    """The batch `tokenizer(texts, padding=True, padding_side="left")` builds - on a copy given its eos
    as the pad token where it has none, as users set it: its ids, mask and pad id (or the call's error)."""
    import copy

    from harness.subjects import observe as observed

    tok = tokenizer
    if tok.pad_token is None:
        tok = copy.deepcopy(tokenizer)
        tok.pad_token = tok.eos_token
    got, err = observed(lambda: tok(texts, padding=True, padding_side="left"))
    if err is not None:
        return {"error": err}
    return {"input_ids": [list(map(int, r)) for r in got["input_ids"]],
            "attention_mask": [list(map(int, r)) for r in got["attention_mask"]], "pad_token_id": int(tok.pad_token_id)}


def _runner(zoo: Zoo, case: Case, pad: int):
    lm = zoo.load(case.model)
    assistant = zoo.load(case.assistant).model if case.assistant else None
    lookup = case.draft_tokens if case.path == "prompt_lookup" else None

    def run(ids: list[list[int]], mask: list[list[int]]) -> BatchRun:
        return batch_run(lm.model, torch.tensor(ids, device=zoo.device), torch.tensor(mask, device=zoo.device),
                         case.new_tokens, pad, do_sample=case.decoding == "sample", seed=case.seed,
                         assistant=assistant, prompt_lookup=lookup, draft_tokens=case.draft_tokens)
    return run


def _solo(zoo: Zoo, case: Case, prompt: str, ids: list[int], run: Any) -> BatchRun:
    """The prompt's run alone (same model, path, decoding, seed; shared by the cases that need it)."""
    key = ("batching-solo", case.model, prompt, case.path, case.decoding, case.seed, case.new_tokens, case.assistant,
           case.draft_tokens)
    return zoo.memo(key, lambda: run([ids], [[1] * len(ids)]))


def observe(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    if not hf.requires(obs, hf.PATH_FEATURE.get(case.path), probe=lambda: zoo.path_probe(case)):
        return obs
    lm = zoo.load(case.model)
    check, names = case.param("check"), list(case.param("prompts"))
    prompts = [zoo.prompt_ids(case.model, p)[0].tolist() for p in names]
    pad = pad_id(lm.model, lm.tokenizer)
    side = RIGHT if check == "right-padded" else LEFT
    ids, mask = pad_rows(prompts, pad, side)
    if check == "tokenizer-padded":
        built = tokenizer_batch(lm.tokenizer, [zoo.checkpoints.prompt_text(case.model, p) for p in names])
        obs.add("tokenizer_batch", built)
        if "error" in built:
            return obs.stop(f"the tokenizer's padded batch raised {built['error']['type']}: {built['error']['message']}")
        pad = built["pad_token_id"]
        obs.reference("tokenizer_batch_as_rule", {k: built[k] for k in ("input_ids", "attention_mask")},
                      dict(zip(("input_ids", "attention_mask"), pad_rows(prompts, pad, LEFT), strict=True)),
                      implementations_differ=False)
        ids, mask = built["input_ids"], built["attention_mask"]
    run = _runner(zoo, case, pad)
    obs.add("setup", {"prompts": names, "prompt_tokens": [len(p) for p in prompts], "padding_side": side,
                      "pad_token_id": pad, "rows": len(ids), "new_tokens": case.new_tokens})
    got = run(ids, mask)
    obs.add("error", got.error)
    obs.add("padding_warned", bool(got.warnings))
    obs.add("warnings", got.warnings, presentation=True)
    if got.error is not None:
        return obs
    rows = range(len(ids))
    obs.add("tokens", got.rows, kind="tokens", margins=got.margins)
    # greedy (no processor touches the scores): the first step's scores are the model's logits at
    # each prompt's last position, which the engine computes alone from the prompt
    judged = case.decoding == "greedy" and check != "right-padded" and not zoo.oracle.gap(case.model)
    obs.add("first_logits", top_values([row[0] for row in got.scores]), kind="tensor",
            **({"oracle": "first_logits_vs_engine"} if judged else {}))
    if judged:
        ours = torch.cat([engine.last_logits(zoo, case.model, p) for p in prompts])
        obs.reference("first_logits_vs_engine", *narrowed(torch.tensor([row[0] for row in got.scores]), ours),
                      kind="tensor")
    positions = [real_positions(got.forwards, r) for r in rows]
    obs.add("positions", positions)
    obs.add("mask_runs", [mask_runs(got.forwards, r) for r in rows])

    solos = [_solo(zoo, case, name, p, run) for name, p in zip(names, prompts, strict=True)]
    failed = next((s.error for s in solos if s.error is not None), None)
    if failed is not None:
        for name, kind in (("tokens_as_solo", "tokens"), ("first_logits_as_solo", "tensor"),
                           ("positions_as_solo", "exact"), ("mask_as_solo", "exact")):
            obs.skipped(name, kind, f"a prompt's solo run raised {failed['type']}: {failed['message']}")
        return obs
    if check == "right-padded":
        obs.add("solo_divergence", divergences(got.rows, [padded_to(s.rows[0], len(r), pad)
                                                          for s, r in zip(solos, got.rows, strict=True)]),
                follows="tokens")
        return obs
    obs.reference("first_logits_as_solo", *narrowed(torch.tensor([row[0] for row in got.scores]),
                                                    torch.tensor([s.scores[0][0] for s in solos])), kind="tensor")
    if case.decoding == "greedy":
        expected = [padded_to(s.rows[0], len(r), pad) for s, r in zip(solos, got.rows, strict=True)]
        obs.reference("tokens_as_solo", got.rows, expected, kind="tokens",
                      observed_extras={"margins": got.margins, "scales": got.scales},
                      expected_extras={"margins": [s.margins[0] for s in solos], "scales": [s.scales[0] for s in solos]})
        steps = comparable_steps(got.rows, [s.rows[0] for s in solos])
        obs.reference("scores_as_solo", *narrowed(torch.tensor([row[:steps] for row in got.scores]),
                                                  torch.tensor([s.scores[0][:steps] for s in solos])), kind="tensor")
    else:
        obs.info("tokens_as_solo", "seeded sampling: a batch draws from the generator in another order than each "
                                   "prompt alone, so its tokens are not the solo runs' (the first step's scores are)")
    # a row whose solo run stopped (eos) is compared over the solo run's forward calls: after it the
    # batch goes on for the other rows, filling this one with pads (the stopping suite's pad_fill)
    solo_positions = [real_positions(s.forwards, 0) for s in solos]
    obs.reference("positions_as_solo", [None if p is None or e is None else p[:len(e)]
                                        for p, e in zip(positions, solo_positions, strict=True)],
                  solo_positions, implementations_differ=False)
    obs.reference("mask_as_solo", [attended(got.forwards, r)[:len(s.forwards)] for r, s in zip(rows, solos, strict=True)],
                  [attended(s.forwards, 0) for s in solos], implementations_differ=False)
    return obs
