"""Attention backends and checkpoint loading of the installed transformers, per zoo model.

Cases: one per zoo model (`harness.fixtures.cases.model_cases`: Llama x2, Mistral, Qwen2, Llama4, Glm4Moe,
GPTNeoX, GPTBigCode, Gemma2) and one per user model. A vocabulary above 4096 keeps each position's top 256
logits (`logits`) and compares on 256 shared columns (`eager_vs_sdpa`, `logits_vs_engine`;
harness/subjects/hf_cache.py). Fields per case:

  test_attention_flags
    loaded_as_env          ref    the parameters' dtype and device equal the env key's - a user model's
                                  own dtype where it has one, which its record's env says (a run can never
                                  record fp32 data under a bf16 key); also kept as an extra of
                                  default_attn_implementation
    supports               capability  the class's _supports_sdpa / _supports_flash_attn /
                                       _supports_flex_attn / _supports_attention_backend /
                                       _can_compile_fullgraph (a flag that appears or vanishes is
                                       reported as feature added / removed)
    default_attn_implementation exact  config._attn_implementation after a plain from_pretrained
    linear_attention_kernels capability  models with linear-attention layers: whether the installed
                                  version finds the fused kernels (flash-linear-attention's gated delta
                                  rule, causal_conv1d) or runs its torch fallback
  test_sdpa_prefill (prompt "long-0", prefill through DynamicCache and StaticCache; every call of
  torch.nn.functional.scaled_dot_product_attention recorded by wrapping it)
    sdpa_prefill           exact  per cache: number of calls and the distinct call signatures
                                  (attn_mask None or its dtype/shape, is_causal, q/k shapes,
                                  enable_gqa) with how many layers made each
    sdpa_mask_vs_reference ref    the mask each call applies (attn_mask, or is_causal's top-left
                                  triangle) equals the reference visibility rule
                                  (harness/engine/cache.py `visible`) for that layer's kind (calls are
                                  the attention layers', in order; linear-attention layers make none)
  test_eager_vs_sdpa
    eager_vs_sdpa          ref    logits of the whole prompt under attn_implementation="eager" and
                                  "sdpa" agree within fp32 tolerance
  test_checkpoint
    loading_info           exact  missing / unexpected / mismatched keys reported by from_pretrained
                                  (the committed checkpoint is hash-checked, so what can change is
                                  how the installed version maps its tensor names; layer indices
                                  folded, see `fold_keys`)
    state_dict_keys        exact  the loaded model's state_dict names
    logits                 tensor logits at the first and last position of "long-0": a checkpoint saved by the
                                  baseline version must load into the installed one with the same
                                  logits (a silently dropped weight shows up here)
    logits_vs_engine       ref    ... and equal the reference engine's (families it implements)
    resaved_keys           exact  names save_pretrained writes with the installed version (a rename
                                  like GPTNeoX embed_out -> lm_head shows up as a changed field)
    resave_roundtrip       ref    reloading that save gives bit-identical logits
"""

from __future__ import annotations

import copy

import pytest
import torch

from harness.engine.cache import LINEAR, visible
from harness.fixtures.cases import model_cases
from harness.subjects import engine, fold_keys, observe
from harness.subjects.hf import from_pretrained, linear_attention_kernels, loaded_as
from harness.subjects.hf_cache import attn_implementation, logits, narrowed, prefill_sdpa_calls, top_values

PROMPT = "long-0"
STATIC_HEADROOM = 8
FLAGS = ("_supports_sdpa", "_supports_flash_attn", "_supports_flex_attn", "_supports_attention_backend",
         "_can_compile_fullgraph")
LOGIT_POSITIONS = 2  # evenly spaced positions of the prompt whose logits are recorded (first, last)


@pytest.mark.cases(table=model_cases)
def test_attention_flags(case, golden, zoo, harness_env):
    lm = zoo.load(case.model)
    # the run's dtype and device are real: the loaded parameters must be in the env key's numerics
    golden.reference("loaded_as_env", loaded_as(lm.model),
                     {"dtype": zoo.dtype_of(case.model), "device": harness_env.device.split(":")[0]},
                     implementations_differ=False)
    cls = type(lm.model)
    flags = {flag: getattr(cls, flag, None) for flag in FLAGS}
    present = {k: v for k, v in flags.items() if isinstance(v, bool)}
    golden.check("supports", present, kind="capability",
                 **({"not_bool": {k: repr(v) for k, v in flags.items() if k not in present}}
                    if len(present) < len(flags) else {}))
    golden.check("default_attn_implementation", attn_implementation(lm.model),
                 model_class=cls.__name__, loaded_as=loaded_as(lm.model))
    if zoo.stateful(case.model):
        golden.check("linear_attention_kernels", linear_attention_kernels(), kind="capability")


# ----------------------------------------------------------------------------------------------
# which SDPA call the prefill makes


def _summary(call: dict) -> dict:
    mask = call["attn_mask"]
    return {
        "attn_mask": None if mask is None else {"dtype": str(mask.dtype).removeprefix("torch."),
                                                "shape": list(mask.shape)},
        "is_causal": call["is_causal"],
        "q": list(call["q"]),
        "k": list(call["k"]),
        "enable_gqa": call["enable_gqa"],
    }


def _distinct(calls: list[dict]) -> dict:
    """{"calls": n, "distinct": [{...signature, "layers": count}]} in order of first occurrence."""
    seen: list[dict] = []
    for call in calls:
        s = _summary(call)
        for entry in seen:
            if entry["call"] == s:
                entry["count"] += 1
                break
        else:
            seen.append({"call": s, "count": 1})
    return {"calls": len(calls), "distinct": [{**e["call"], "layers": e["count"]} for e in seen]}


def _effective_mask(call: dict) -> torch.Tensor:
    """[Tq, Tk] bool: what query i may see of key j in this call (batch 0, head 0)."""
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


def _check_masks(calls: list[dict], layer_types: list[str], sizes: list[int | None], prompt_len: int) -> list[str]:
    """Problems (empty: all calls agree with `visible`). Prefill from an empty cache: the queries
    are positions 0..L-1 and key slot j holds position j (slots >= L are unwritten buffer)."""
    if len(calls) != len(layer_types):
        return [f"{len(calls)} SDPA calls for {len(layer_types)} layers: cannot assign calls to layers"]
    problems = []
    for i, (call, kind, size) in enumerate(zip(calls, layer_types, sizes, strict=True)):
        tq, tk = call["q"][-2], call["k"][-2]
        if tq != prompt_len or tk < prompt_len:
            problems.append(f"layer {i}: q length {tq}, k length {tk} for a {prompt_len}-token prefill")
            continue
        got = _effective_mask(call)[:, :prompt_len]
        want = visible(kind, torch.arange(prompt_len), torch.arange(prompt_len), size)
        beyond = _effective_mask(call)[:, prompt_len:]
        if not torch.equal(got, want) or bool(beyond.any()):
            bad = (got != want).nonzero().tolist()
            where = f"first at q={bad[0][0]}, k={bad[0][1]}" if bad else "sees unwritten slots"
            problems.append(f"layer {i} ({kind}): mask differs from the reference rule ({where}; "
                            f"attn_mask {'None' if call['attn_mask'] is None else 'tensor'}, "
                            f"is_causal {call['is_causal']})")
    return problems


@pytest.mark.cases(table=model_cases)
def test_sdpa_prefill(case, golden, zoo):
    lm = zoo.load(case.model)
    ids = zoo.prompt_ids(case.model, PROMPT)
    prompt_len = ids.shape[1]
    try:
        ref = engine.cache_spec(zoo.config_json(case.model))
    except ValueError as exc:  # a user model whose layer kinds the reference dispatcher has no rule for
        ref, no_rule = None, f"no reference rule for {case.model}'s layers: {exc}"
    observed, problems = {}, {}
    for name in ("dynamic", "static"):
        calls, err = prefill_sdpa_calls(lm.model, ids, name, prompt_len + STATIC_HEADROOM)
        observed[name] = {**_distinct(calls), **({"error": err} if err else {})}
        if err is None and calls and ref is not None:
            # window or chunk per attention layer (None: full, which needs none); linear-attention
            # layers make no attention call
            kinds = [(t, w) for t, w in zip(ref["layer_types"], engine.windows(ref), strict=True) if t != LINEAR]
            problems[name] = _check_masks(calls, [t for t, _ in kinds], [w for _, w in kinds], prompt_len)
    golden.check("sdpa_prefill", observed, attn_implementation=attn_implementation(lm.model))
    if ref is None:
        golden.outcome("sdpa_mask_vs_reference", "skipped", "exact", no_rule, "not-applicable")
        return
    if not problems:
        golden.outcome("sdpa_mask_vs_reference", "skipped", "exact",
                       f"no SDPA calls to check (attention implementation "
                       f"{attn_implementation(lm.model)!r}; see sdpa_prefill)", "not-applicable")
        return
    flat = [f"{name}: {p}" for name, ps in problems.items() for p in ps]
    checked = ", ".join(problems)
    golden.outcome("sdpa_mask_vs_reference", "regression" if flat else "pass", "exact",
                   "; ".join(flat[:3]) if flat else
                   f"every prefill SDPA call ({checked}) masks exactly as the reference rule for its layer "
                   f"({', '.join(sorted(set(ref['layer_types'])))})",
                   "real-change" if flat else "", {"problems": flat})


# ----------------------------------------------------------------------------------------------
# eager vs sdpa


def _with_attn(zoo, name: str, impl: str):
    default = zoo.load(name)
    if attn_implementation(default.model) == impl:
        return default.model, None
    lm, err = observe(lambda: zoo.load(name, impl))
    return (lm.model if lm else None), err


@pytest.mark.cases(table=model_cases)
def test_eager_vs_sdpa(case, golden, zoo):
    ids = zoo.prompt_ids(case.model, PROMPT)
    eager, e_err = _with_attn(zoo, case.model, "eager")
    sdpa, s_err = _with_attn(zoo, case.model, "sdpa")
    if e_err or s_err:
        golden.check("attn_load_error", {"eager": e_err, "sdpa": s_err})
        reason = f"cannot load with {'eager' if e_err else 'sdpa'}: {(e_err or s_err)['message']}"
        golden.outcome("eager_vs_sdpa", "skipped", "tensor", reason, "unsupported")
        pytest.skip(reason)
    golden.reference("eager_vs_sdpa", *narrowed(logits(sdpa, ids), logits(eager, ids)), kind="tensor")


# ----------------------------------------------------------------------------------------------
# checkpoint loading


def _safetensor_keys(path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


def _positions(n: int) -> list[int]:
    return sorted({round(i * (n - 1) / (LOGIT_POSITIONS - 1)) for i in range(LOGIT_POSITIONS)})


@pytest.mark.cases(table=model_cases)
def test_checkpoint(case, golden, tmp_path, zoo):
    lm = zoo.load(case.model)
    ids = zoo.prompt_ids(case.model, PROMPT)
    positions = _positions(ids.shape[1])
    full = logits(lm.model, ids)
    golden.check("loading_info", {k: fold_keys(v) if k.endswith("keys") else v for k, v in lm.info.items()})
    golden.check("state_dict_keys", fold_keys(lm.model.state_dict().keys()))
    golden.check("logits", top_values(full[positions]), kind="tensor", positions=positions, prompt=PROMPT)
    reference = zoo.reference(case.model)
    if reference is None:
        golden.outcome("logits_vs_engine", "skipped", "tensor", zoo.engine_gap(case.model), "not-applicable")
    else:
        expected = reference.forward(ids[0].cpu(), torch.arange(ids.shape[1]), None).logits
        golden.reference("logits_vs_engine", *narrowed(full, expected), kind="tensor")

    resaved = tmp_path / "resaved"
    # save a copy: save_pretrained turns config.dtype into a str in place (5.13 - 5.24), after
    # which 5.24's MtpModel.from_pretrained fails (use_mtp: "'str' object has no attribute
    # 'is_floating_point'") - the shared model must stay as loaded
    _, err = observe(lambda: copy.deepcopy(lm.model).save_pretrained(str(resaved)))
    if err is not None:
        golden.check("resave_error", err)
        golden.outcome("resave_roundtrip", "skipped", "exact", f"save_pretrained raised {err['type']}: "
                       f"{err['message']}", "unsupported")
        return
    files = sorted(p.name for p in resaved.glob("*.safetensors"))
    keys = [k for f in files for k in _safetensor_keys(resaved / f)]
    golden.check("resaved_keys", fold_keys(keys), files=files)
    reloaded, err = observe(lambda: from_pretrained(resaved, dtype=zoo.dtype_of(case.model), device=zoo.device))
    if err is not None:
        golden.outcome("resave_roundtrip", "regression", "exact",
                       f"reloading its own save_pretrained output raised {err['type']}: {err['message']}",
                       "real-change", {"error": err})
        return
    model, info = reloaded
    again = logits(model, ids)
    max_err = float((again - full).abs().max())
    lost = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys") and v}
    same = torch.equal(again, full)
    golden.outcome("resave_roundtrip", "pass" if same and not lost else "regression", "exact",
                   "save_pretrained -> from_pretrained gives bit-identical logits" if same and not lost else
                   f"after save_pretrained -> from_pretrained: max abs logit change {max_err:.3g}; "
                   f"loading info {lost or 'clean'}", "" if same and not lost else "real-change",
                   {"max_abs_err": max_err, "loading_info": info})
