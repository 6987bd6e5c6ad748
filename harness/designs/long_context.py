"""Long context (suites/test_long_context.py; table: harness/cases/ `long_context`): RoPE scaling
past the pretraining length, and a sliding window past its size inside a padded batch - the bugs
that only show at far positions (the Llama 3.1 RoPE scaling of 4.43.0, PR #32330's unscaled
inv_freq, #37574 / PR #38046's sliding-window cache update, PR #35681's mask slicing with padding).

**`<model>.far`** (llama-rope-llama3, llama-rope-yarn: llama-target's shape, RoPE scaled by 4 from an
original_max_position_embeddings of 32). Greedy generate() of the 83-token prompt "long-0" and 20
new tokens: every step runs past 2.5 x the pretraining length, the last at position 102 (3.2 x).
The oracle is the reference engine (harness/engine/model.py `scaled_inv_freq`, `attention_factor`:
llama3's wavelength bands and YaRN's ramp and attention factor, from the papers' formulas), fed the
same tokens:

  positions         exact   {original_max, prompt_tokens, last_position}: where the case runs
  rope              exact   the loaded rotary embedding's rope_type and its cos/sin scaling
                            (attention_scaling, 6 digits)
  inv_freq          tensor  its inverse frequencies, as transformers built them on load
  tokens            tokens  the new tokens, with top-2 margins
 references, computed in the run:
  inv_freq_vs_engine          tensor  inv_freq equals the engine's scaled frequencies
  attention_scaling_vs_engine tensor  [attention_scaling] equals the engine's attention factor
  step_logits_vs_engine       tensor  every step's raw logits (the decode path, through the KV cache)
                                      equal the engine's logits at those positions over the same tokens
                                      (steps up to the first eos, if one comes)
  tokens_vs_engine            tokens  the tokens equal the engine's greedy choice at each step (a flip at
                                      a near-tie is a tie-flip)
 information (never a check): scaling_effect - how far the engine's logits at these positions move
 when the scaling is dropped (max |diff|, the steps whose argmax changes): what the checks can see.

**`<model>.legacy-key`**: the same checkpoint with its config.json in transformers 4.x's form
(`rope_scaling`, `rope_theta` beside it; no `rope_parameters`) - llama3 with its type under
`rope_type` (Llama 3.1's config.json), yarn under `type` (the key before 4.43, as Qwen2.5's
long-context recipe still publishes it) - linked in the test's tmp dir and loaded with no arguments.
Which keys a version reads is the observation:

  rope, inv_freq            as above
  rope_equals_as_shipped    ref exact   the loaded rope_type and scaling equal the as-shipped load's
  inv_freq_equals_as_shipped ref tensor inv_freq equals the as-shipped load's (same library)
  prompt_logits_vs_engine   ref tensor  the prompt's logits at positions >= original_max equal the engine's

**`mistral-sliding.batch-past-window`** (every layer a 16-token sliding window): "long-0" (83 tokens)
and "long-1" cut to 48 tokens, left-padded into one batch, 12 greedy tokens each - both rows decode
past the window, the shorter one behind 35 pads.

  setup             exact   {prompt_tokens per row, pads per row, window}
  error             exact   the exception the batch raised, or None
  tokens            tokens  the new tokens per row, with margins
 references, computed in the run:
  batch_equals_solo         tokens  each row's tokens equal the row generated alone (a padded batch runs
                                    other kernel shapes: a flip at a near-tie is a tie-flip)
  batch_logits_vs_solo      tensor  each row's step scores equal its solo run's, up to the first step
                                    where the tokens part (the scores after it follow other tokens)
  batch_logits_vs_engine    tensor  each row's step logits equal the engine's over the row's own prompt
                                    and tokens (no pads: the oracle of what the mask must do), up to the
                                    row's first eos
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from harness.checking.compare import first_divergence
from harness.engine.model import Model, attention_factor, scaled_inv_freq
from harness.engine.padding import LEFT, pad_rows
from harness.schema import Case, Observation
from harness.subjects import engine
from harness.subjects.hf import from_pretrained, top2_margin, top2_scale
from harness.subjects.hf_cache import narrowed
from harness.subjects.hf_long_context import Rotary, forward_logits, greedy, rotary

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

ATTENTION_DIGITS = 6
# a reference to a quantity computed in fp32 in any run (inv_freq, attention factors): fp32 tolerance
FP32_SCALARS = {"observed_extras": {"dtype": "fp32"}, "expected_extras": {"dtype": "fp32"}}


# ----------------------------------------------------------------------------------------------
# pure logic


def legacy_config(config: dict[str, Any], type_key: str = "rope_type") -> dict[str, Any]:
    """config.json as transformers 4.x wrote it: the RoPE dict under `rope_scaling` (its theta moved
    beside it as `rope_theta`), no `rope_parameters`; its type under `type_key` ("rope_type", or
    "type": the key before 4.43)."""
    out = {k: v for k, v in config.items() if k != "rope_parameters"}
    rope = dict(config.get("rope_parameters") or {})
    if "rope_theta" in rope:
        out["rope_theta"] = rope.pop("rope_theta")
    if "rope_type" in rope:
        rope[type_key] = rope.pop("rope_type")
    out["rope_scaling"] = rope
    return out


def step_positions(prompt_len: int, steps: int) -> list[int]:
    """The position of the token each generate() step's scores are computed at: the prompt's last,
    then each new token's but the last."""
    return list(range(prompt_len - 1, prompt_len - 1 + steps))


def until_eos(tokens: list[int], eos: list[int]) -> int:
    """How many of a row's steps count: up to and including its first eos (a batch pads the row after
    it, and the engine is not asked about pads)."""
    return next((i + 1 for i, t in enumerate(tokens) if t in eos), len(tokens))


def eos_of(model: Any) -> list[int]:
    value = model.generation_config.eos_token_id
    return [] if value is None else [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def agreeing_steps(a: list[int], b: list[int]) -> int:
    """How many steps' scores of two greedy runs are comparable: up to and including the first step
    where their tokens differ (all of them when they agree)."""
    where = first_divergence(a, b)
    return len(a) if where is None else where + 1


def argmax_changes(a: torch.Tensor, b: torch.Tensor) -> list[int]:
    """The rows (steps) where two [T, V] logit tensors have different argmax."""
    return [i for i, (x, y) in enumerate(zip(a.argmax(-1).tolist(), b.argmax(-1).tolist(), strict=True)) if x != y]


def rope_fields(obs: Observation, got: Rotary) -> None:
    obs.add("rope", {"rope_type": got.rope_type, "attention_scaling": round(got.attention_scaling, ATTENTION_DIGITS)})
    obs.add("inv_freq", got.inv_freq, kind="tensor")


# ----------------------------------------------------------------------------------------------
# the engine's side


def _unscaled(reference: Model) -> Model:
    """The same weights with plain RoPE: what the positions would see without scaling."""
    return Model(dataclasses.replace(reference.cfg, rope_scaling=None), reference.w, reference.path)


def engine_logits(zoo: Zoo, name: str, tokens: list[int], scaled: bool = True) -> torch.Tensor:
    if scaled:
        return engine.logits_cached(zoo, name, tokens)
    reference = zoo.oracle.model(name)

    def compute() -> torch.Tensor:
        t = torch.tensor(tokens)
        return _unscaled(reference).forward(t, torch.arange(len(tokens)), None).logits.detach().clone()

    return zoo.oracle.answer("logits-unscaled-rope", (name,), {"tokens": list(tokens)}, compute)


def engine_rope(reference: Model) -> tuple[list[float], float]:
    cfg = reference.cfg
    return scaled_inv_freq(cfg.rotary_dim, cfg.rope_theta, cfg.rope_scaling).tolist(), attention_factor(cfg.rope_scaling)


# ----------------------------------------------------------------------------------------------
# cases


def observe(zoo: Zoo, case: Case, tmp: Path) -> Observation:
    check = case.param("check")
    if check == "far":
        return far(zoo, case)
    if check == "legacy-key":
        return legacy_key(zoo, case, tmp)
    return batch_past_window(zoo, case)


def far(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    lm = zoo.load(case.model)
    reference = zoo.oracle.model(case.model)
    prompt = zoo.prompt_ids(case.model, case.prompt)[0].tolist()
    scaling = reference.cfg.rope_scaling
    obs.add("positions", {"original_max": scaling.original_max, "prompt_tokens": len(prompt),
                          "last_position": len(prompt) + case.new_tokens - 1})
    got = rotary(lm.model)
    rope_fields(obs, got)
    ours_freq, ours_factor = engine_rope(reference)
    # frequencies and the attention factor are computed in fp32 whatever the run's dtype (the RoPE
    # init and the engine both work in fp32): compared at fp32 tolerance (harness/checking/rounding.py)
    obs.reference("inv_freq_vs_engine", got.inv_freq, ours_freq, kind="tensor", **FP32_SCALARS)
    obs.reference("attention_scaling_vs_engine", [got.attention_scaling], [ours_factor], kind="tensor",
                  **FP32_SCALARS)
    pad = lm.model.config.pad_token_id or 0
    run = zoo.memo(("long-context-greedy", case.model, tuple(prompt), case.new_tokens),
                   lambda: greedy(lm.model, *pad_rows([prompt], pad, LEFT), case.new_tokens, pad))
    obs.add("error", run.error)
    if run.error is not None:
        return obs.stop(f"generate() raised {run.error['type']}: {run.error['message']}")
    obs.add("tokens", run.tokens, kind="tokens", margins=run.margins)
    n = until_eos(run.tokens[0], eos_of(lm.model))
    tokens, scores, margins = run.tokens[0][:n], torch.tensor(run.scores[0][:n]), [run.margins[0][:n]]
    scales = [run.scales[0][:n]]
    full = engine_logits(zoo, case.model, prompt + tokens)
    at = step_positions(len(prompt), len(tokens))
    expected = full[at]
    obs.reference("step_logits_vs_engine", *narrowed(scores, expected), kind="tensor")
    ours = expected.argmax(-1).tolist()
    obs.reference("tokens_vs_engine", [tokens], [ours], kind="tokens",
                  observed_extras={"margins": margins, "scales": scales},
                  expected_extras={"margins": [[top2_margin(row) for row in expected]],
                                   "scales": [[top2_scale(row) for row in expected]]})
    plain = engine_logits(zoo, case.model, prompt + tokens, scaled=False)[at]
    obs.info("scaling_effect", f"dropping the {scaling.rope_type} scaling moves the engine's logits at positions "
                               f"{at[0]}-{at[-1]} by up to {float((plain - expected).abs().max()):.3g} and changes the "
                               f"argmax at {len(argmax_changes(plain, expected))} of {len(at)} steps",
             {"max_abs_diff": float((plain - expected).abs().max()), "argmax_changes": argmax_changes(plain, expected)})
    return obs


def legacy_key(zoo: Zoo, case: Case, tmp: Path) -> Observation:
    obs = Observation()
    source = zoo.checkpoints.directory(case.model)
    target = tmp / f"{case.model}.legacy-key"
    target.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        if path.name != "config.json":
            (target / path.name).symlink_to(path.resolve())
    config = legacy_config(json.loads((source / "config.json").read_text(encoding="utf-8")), case.param("type_key"))
    (target / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    model, _ = from_pretrained(target, dtype=zoo.checkpoints.dtype_of(case.model), device=zoo.device)
    got, shipped = rotary(model), rotary(zoo.load(case.model).model)
    rope_fields(obs, got)
    obs.reference("rope_equals_as_shipped", {"rope_type": got.rope_type, "attention_scaling": got.attention_scaling},
                  {"rope_type": shipped.rope_type, "attention_scaling": shipped.attention_scaling},
                  implementations_differ=False)
    obs.reference("inv_freq_equals_as_shipped", got.inv_freq, shipped.inv_freq, kind="tensor",
                  implementations_differ=False, **FP32_SCALARS)
    prompt = zoo.prompt_ids(case.model, case.prompt)[0].tolist()
    far_from = zoo.oracle.model(case.model).cfg.rope_scaling.original_max
    ours = engine_logits(zoo, case.model, prompt)[far_from:]
    obs.reference("prompt_logits_vs_engine", *narrowed(forward_logits(model, prompt)[far_from:], ours), kind="tensor")
    return obs


def batch_past_window(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    lm = zoo.load(case.model)
    first, second = case.param("prompts")
    rows = [zoo.prompt_ids(case.model, first)[0].tolist(), zoo.prompt_ids(case.model, second)[0].tolist()]
    rows[1] = rows[1][:case.param("cut")]
    pad = lm.model.config.pad_token_id or 0
    width = max(len(r) for r in rows)
    obs.add("setup", {"prompt_tokens": [len(r) for r in rows], "pads": [width - len(r) for r in rows],
                      "window": zoo.checkpoints.config_json(case.model).get("sliding_window")})
    batch = greedy(lm.model, *pad_rows(rows, pad, LEFT), case.new_tokens, pad)
    obs.add("error", batch.error)
    if batch.error is not None:
        return obs.stop(f"the padded batch raised {batch.error['type']}: {batch.error['message']}")
    obs.add("tokens", batch.tokens, kind="tokens", margins=batch.margins)
    solo = [zoo.memo(("long-context-greedy", case.model, tuple(r), case.new_tokens),
                     lambda r=r: greedy(lm.model, *pad_rows([r], pad, LEFT), case.new_tokens, pad)) for r in rows]
    failed = next((s.error for s in solo if s.error is not None), None)
    if failed is not None:
        obs.skipped("batch_equals_solo", "tokens", f"a row alone raised {failed['type']}: {failed['message']}")
    else:
        obs.reference("batch_equals_solo", batch.tokens, [s.tokens[0] for s in solo], kind="tokens",
                      observed_extras={"margins": batch.margins, "scales": batch.scales},
                      expected_extras={"margins": [s.margins[0] for s in solo], "scales": [s.scales[0] for s in solo]})
        keep = [agreeing_steps(b, s.tokens[0]) for b, s in zip(batch.tokens, solo, strict=True)]
        observed = torch.cat([torch.tensor(batch.scores[r][:k]) for r, k in enumerate(keep)])
        expected = torch.cat([torch.tensor(s.scores[0][:k]) for s, k in zip(solo, keep, strict=True)])
        obs.reference("batch_logits_vs_solo", *narrowed(observed, expected), kind="tensor")
    if zoo.oracle.model(case.model) is None:
        obs.skipped("batch_logits_vs_engine", "tensor", zoo.oracle.gap(case.model))
        return obs
    counted = [until_eos(t, eos_of(lm.model)) for t in batch.tokens]
    ours = torch.cat([engine_logits(zoo, case.model, r + t[:k])[step_positions(len(r), k)]
                      for r, t, k in zip(rows, batch.tokens, counted, strict=True)])
    observed = torch.cat([torch.tensor(s[:k]) for s, k in zip(batch.scores, counted, strict=True)])
    obs.reference("batch_logits_vs_engine", *narrowed(observed, ours), kind="tensor")
    return obs
