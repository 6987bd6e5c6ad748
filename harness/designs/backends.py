"""Attention backends and checkpoint loading of the installed transformers, per model
(suites/test_backends.py). A vocabulary above 4096 keeps each position's top 256 logits (`logits`)
and compares on 256 shared columns (`eager_vs_sdpa`, `logits_vs_engine`; harness/subjects/hf_cache.py).

  flags
    loaded_as_env          ref    the parameters' dtype and device equal the env key's - a user model's
                                  own dtype where it has one, which its record's env says (a run can never
                                  record fp32 data under a bf16 key); also kept as an extra of
                                  default_attn_implementation
    supports               capability  the class's _supports_sdpa / _supports_flash_attn /
                                       _supports_flex_attn / _supports_attention_backend /
                                       _can_compile_fullgraph (a flag that appears or vanishes is
                                       reported as feature added / removed)
    linear_attention_kernels capability  models with linear-attention layers: whether the installed
                                  version finds the fused kernels (flash-linear-attention's gated delta
                                  rule, causal_conv1d) or runs its torch fallback
  checkpoint, first the attention backend beside the logits it computes (one test, so a change of the
  backend is judged with the logits: `mechanism_of`)
    default_attn_implementation exact  config._attn_implementation after a plain from_pretrained; the
                                  mechanism of `logits` (extra ``mechanism_of``): a change of it while
                                  the logits moved to the engine's values is that fix (Gemma 2 refusing
                                  5.14.0's SDPA, which dropped its soft-cap), any other change a regression
    default_attn_as_declared ref  default_attn_implementation equals what the checkpoint and the class
                                  declare (`declared_default_attn`: config.json's attn_implementation, else
                                  "sdpa" where the class has _supports_sdpa, else "eager"): a first run sees
                                  a default chosen against the declaration (eager-instead-of-sdpa); a
                                  flipped declaration moves both sides - `supports` against the baseline
    sdpa_prefill (prompt "long-0", prefill through DynamicCache and StaticCache; every call of
  torch.nn.functional.scaled_dot_product_attention recorded by wrapping it)
    sdpa_prefill           exact  per cache: number of calls and the distinct call signatures
                                  (attn_mask None or its dtype/shape, is_causal, q/k shapes,
                                  enable_gqa) with how many layers made each; the mechanism of `logits`
                                  too (the same rule), checked by sdpa_mask_vs_reference (extra
                                  ``checked_by``: no SDPA call left to check because of that fix is fixed)
    sdpa_mask_vs_reference ref    no call's mask (attn_mask, or is_causal's top-left triangle) differs
                                  from the reference visibility rule for its layer's kind
                                  (harness/subjects/engine.py `mask_problems`; calls are the attention
                                  layers', in order; linear-attention layers make none)
    attention_as_defined   ref    the attention function each layer called (eager_attention_forward, or the
                                  interface its implementation maps to), replayed in fp32 with the layer's
                                  own keywords on its last query and the keys it may see, equals the float64
                                  definition with config.json's scale and soft-cap (elements beyond 64 u_fp32
                                  max|definition| per layer: 0); a soft-capped model's query scaled so its top
                                  score is the cap - a cap dropped is seen in every dtype
  eager_vs_sdpa
    attn_load_error        exact  per implementation (eager, sdpa): None (loaded) or the error loading
                                  raised - recorded every time, so a load error gone is fixed, one appearing
                                  broken (an outcome field, harness/checking/compare.py `_outcome_transition`),
                                  judged by its oracle eager_vs_sdpa: loading now while that fails is
                                  broken, refusing now what failed it in the baseline is fixed
    eager_vs_sdpa          ref    logits of the whole prompt under attn_implementation="eager" and
                                  "sdpa" agree within fp32 tolerance
  checkpoint, then the load itself
    loading_info           exact  missing / unexpected / mismatched keys reported by from_pretrained (an
                                  outcome: none listed is a clean load; problems gone are fixed, appearing broken)
                                  (the committed checkpoint is hash-checked, so what can change is how
                                  the installed version maps its tensor names; layer indices folded)
    state_dict_keys        exact  the loaded model's state_dict names
    logits                 tensor logits at the first and last position of "long-0": a checkpoint saved by
                                  the baseline version must load into the installed one with the same logits;
                                  its oracle is the reference engine (`logits_vs_engine`): a change toward it
                                  is fixed, away from it broken (harness/checking/oracles.py)
    logits_vs_engine       ref    ... and equal the reference engine's (families it implements; through
                                  linear-attention layers at `tensor_recurrent_ulps`)
    resaved_keys           exact  names save_pretrained writes with the installed version (a rename
                                  like GPTNeoX embed_out -> lm_head shows up as a changed field)
    resave_roundtrip       ref    reloading that save gives bit-identical logits and loses no key
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from harness.engine.attention import attention, attention_scores
from harness.engine.cache import LINEAR, has_linear_attention, visible
from harness.schema import Case, Observation
from harness.subjects import engine, fold_keys, observe
from harness.subjects.hf import from_pretrained, linear_attention_kernels, loaded_as
from harness.subjects.hf_attention import attention_calls, replay
from harness.subjects.hf_cache import attn_implementation, logits, narrowed, prefill_sdpa_calls, top_values

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

PROMPT = "long-0"
STATIC_HEADROOM = 8
FLAGS = ("_supports_sdpa", "_supports_flash_attn", "_supports_flex_attn", "_supports_attention_backend",
         "_can_compile_fullgraph")
LOGIT_POSITIONS = 2  # evenly spaced positions of the prompt whose logits are recorded (first, last)


def flags(zoo: Zoo, case: Case, device: str) -> Observation:
    obs = Observation()
    lm = zoo.load(case.model)
    # the run's dtype and device are real: the loaded parameters must be in the env key's numerics
    obs.reference("loaded_as_env", loaded_as(lm.model), {"dtype": zoo.checkpoints.dtype_of(case.model), "device": device},
                  implementations_differ=False)
    cls = type(lm.model)
    values = {flag: getattr(cls, flag, None) for flag in FLAGS}
    present = {k: v for k, v in values.items() if isinstance(v, bool)}
    obs.add("supports", present, kind="capability",
            **({"not_bool": {k: repr(v) for k, v in values.items() if k not in present}}
               if len(present) < len(values) else {}))
    if zoo.checkpoints.stateful(case.model):
        obs.add("linear_attention_kernels", linear_attention_kernels(), kind="capability")
    return obs


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


def sdpa_prefill(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    lm = zoo.load(case.model)
    ids = zoo.prompt_ids(case.model, PROMPT)
    prompt_len = ids.shape[1]
    try:
        ref = engine.cache_spec(zoo.checkpoints.config_json(case.model))
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
            problems[name] = engine.mask_problems(calls, [t for t, _ in kinds], [w for _, w in kinds], prompt_len)
    obs.add("sdpa_prefill", observed, attn_implementation=attn_implementation(lm.model), mechanism_of="logits",
            checked_by="sdpa_mask_vs_reference")
    if ref is None:
        obs.skipped("sdpa_mask_vs_reference", "exact", no_rule)
    elif not problems:
        obs.skipped("sdpa_mask_vs_reference", "exact", f"no SDPA calls to check (attention implementation "
                    f"{attn_implementation(lm.model)!r}; see sdpa_prefill)")
    else:
        obs.reference("sdpa_mask_vs_reference", problems, {name: [] for name in problems},
                      expected_extras={"layer_types": sorted(set(ref["layer_types"]))})
    return obs


def attention_as_defined(obs: Observation, zoo: Zoo, case: Case, model: Any, ids: torch.Tensor) -> None:
    """attention_as_defined: the attention function each layer of the default model called in an
    uncached forward of the prompt (its modeling module's eager_attention_forward or the interface
    its attn_implementation maps to; harness/subjects/hf_attention.py) replayed in float32 with the
    layer's own keywords on that layer's last query and the keys the reference visibility rule gives it
    (no mask needed), against the float64 definition (harness/engine/attention.py) with the scale and
    soft-cap of config.json as the reference engine reads them. Where the model soft-caps its scores
    the query is scaled so that the largest score is the cap - the cap then halves the gaps between the
    top scores, far beyond any rounding - so a cap dropped by the function or by the layer's call
    (Gemma 2 on SDPA, which has no cap) is seen in every run dtype: the replay is fp32 whatever the
    model's dtype. Counted: elements beyond 64 u_fp32 max|definition| per layer, 0 expected."""
    name = "attention_as_defined"
    reference = zoo.oracle.model(case.model)
    if reference is None:
        obs.skipped(name, "exact", zoo.oracle.gap(case.model))
        return
    spec = engine.cache_spec(zoo.checkpoints.config_json(case.model))
    layers = [(t, w) for t, w in zip(spec["layer_types"], engine.windows(spec), strict=True) if t != LINEAR]
    rec = attention_calls(model, ids)
    if len(rec.calls) != len(layers):
        obs.skipped(name, "exact", f"not checkable: {len(rec.calls)} attention-function calls seen for "
                    f"{len(layers)} attention layers (hooked: {', '.join(rec.hooked) or 'none'}; "
                    f"{'; '.join(rec.missing) or 'nothing missing'})", "not-checkable")
        return
    cfg = reference.cfg
    scale, cap = 1.0 / math.sqrt(cfg.attn_scale_dim or cfg.head_dim), cfg.attn_softcap
    beyond, worst, boosts = [], 0.0, []
    for call, (kind, size) in zip(rec.calls, layers, strict=True):
        keys = call.k.shape[2]
        seen = visible(kind, [keys - 1], list(range(keys)), size)[0]
        q = call.q[:, :, -1:].double()
        k, v = call.k[:, :, seen].double(), call.v[:, :, seen].double()
        boost = 1.0
        if cap is not None:  # the largest score scaled to the cap
            top = float(attention_scores(q, k, scale).abs().max())
            boost = cap / top if top > 0 else 1.0
        q32, k32, v32 = (q * boost).float(), k.float(), v.float()
        want = attention(q32, k32, v32, scale=scale, softcap=cap).transpose(1, 2)
        got = replay(call, q32, k32, v32).double()
        bound = 64 * 2.0 ** -24 * float(want.abs().max())
        err = (got - want).abs() if got.shape == want.shape else torch.full_like(want, float("inf"))
        beyond.append(int((err > bound).sum()))
        worst = max(worst, float(err.max()) / max(float(want.abs().max()), 1e-30))
        boosts.append(round(boost, 4))
    obs.reference(name, {"beyond_bound": beyond}, {"beyond_bound": [0] * len(beyond)},
                  observed_extras={"max_rel_err": worst, "query_scaled_by": boosts, "functions":
                                   sorted({c.fn.__name__ for c in rec.calls})},
                  expected_extras={"scale": scale, "softcap": cap}, implementations_differ=False)


def _with_attn(zoo: Zoo, name: str, impl: str):
    default = zoo.load(name)
    if attn_implementation(default.model) == impl:
        return default.model, None
    lm, err = observe(lambda: zoo.load(name, impl))
    return (lm.model if lm else None), err


def eager_vs_sdpa(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    ids = zoo.prompt_ids(case.model, PROMPT)
    eager, e_err = _with_attn(zoo, case.model, "eager")
    sdpa, s_err = _with_attn(zoo, case.model, "sdpa")
    # an outcome field: recorded whether or not loading fails (None: loaded), so a load error gone is
    # `fixed` and one appearing `broken` (compare_exact's outcome rule "each"), judged by its oracle
    # eager_vs_sdpa: SDPA loading now while that fails is broken (harness/checking/oracles.py OUTCOME_ORACLES)
    obs.add("attn_load_error", {"eager": e_err, "sdpa": s_err}, outcome="each")
    if e_err or s_err:
        reason = f"cannot load with {'eager' if e_err else 'sdpa'}: {(e_err or s_err)['message']}"
        obs.skipped("eager_vs_sdpa", "tensor", reason, "unsupported")
        return obs.stop(reason)
    obs.reference("eager_vs_sdpa", *narrowed(logits(sdpa, ids), logits(eager, ids)), kind="tensor")
    return obs


def _safetensor_keys(path: Path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


def routes_experts(config: Any) -> bool:
    """A mixture-of-experts model: each token's experts are a top-k choice over router scores, a
    discrete decision that low-precision rounding flips at a near-tied router score, moving that
    token's whole row of logits by more than the rounding of any one element (glm4moe-mtp in bf16:
    one of 83 positions off by up to 0.30). Its tensors are compared with the coarse low-precision
    allowance (harness/checking/compare.py `compare_tensor`, field extra ``routing``)."""
    for key in ("n_routed_experts", "num_experts", "num_local_experts"):
        if (getattr(config, key, 0) or 0) > 1:
            return True
    return False


def _positions(n: int) -> list[int]:
    return sorted({round(i * (n - 1) / (LOGIT_POSITIONS - 1)) for i in range(LOGIT_POSITIONS)})


def declared_default_attn(config: dict[str, Any], model: Any) -> dict[str, str]:
    """The attention implementation a plain from_pretrained must choose, from what the checkpoint and
    the model class declare (data, not the selection code judged): the config.json's own
    attn_implementation where it names one, else "sdpa" where the class declares `_supports_sdpa`
    (the documented default since 4.36, v5's too), else "eager"."""
    named = config.get("attn_implementation") or config.get("_attn_implementation")
    if named:
        return {"expected": str(named), "because": "config.json names it"}
    if getattr(model, "_supports_sdpa", False) is True:
        return {"expected": "sdpa", "because": f"{type(model).__name__}._supports_sdpa is True"}
    return {"expected": "eager", "because": f"{type(model).__name__} does not declare _supports_sdpa"}


def checkpoint(zoo: Zoo, case: Case, tmp: Path) -> Observation:
    obs = Observation()
    lm = zoo.load(case.model)
    ids = zoo.prompt_ids(case.model, PROMPT)
    positions = _positions(ids.shape[1])
    full = logits(lm.model, ids)
    # the attention backend the logits are computed with, observed beside them: its change while they
    # moved to the engine's values is that fix (`mechanism_of`, harness/checking/core.py)
    obs.add("default_attn_implementation", attn_implementation(lm.model),
            model_class=type(lm.model).__name__, loaded_as=loaded_as(lm.model), mechanism_of="logits")
    declared = declared_default_attn(zoo.checkpoints.config_json(case.model), lm.model)
    obs.reference("default_attn_as_declared", attn_implementation(lm.model), declared["expected"],
                  expected_extras={"because": declared["because"]}, implementations_differ=False)
    obs.merge(sdpa_prefill(zoo, case))
    attention_as_defined(obs, zoo, case, lm.model, ids)
    obs.add("loading_info", {k: fold_keys(v) if k.endswith("keys") else v for k, v in lm.info.items()},
            outcome="clean")  # a clean load (no key listed) is the outcome: problems gone are fixed
    obs.add("state_dict_keys", fold_keys(lm.model.state_dict().keys()))
    routing = {"routing": "experts"} if routes_experts(lm.model.config) else {}
    obs.add("logits", top_values(full[positions]), kind="tensor", positions=positions, prompt=PROMPT,
            oracle="logits_vs_engine", **routing)
    reference = zoo.oracle.model(case.model)
    if reference is None:
        obs.skipped("logits_vs_engine", "tensor", zoo.oracle.gap(case.model))
    else:
        # logits through a recurrent state, which two fp32 implementations accumulate in different orders:
        # compared at `tensor_recurrent_ulps` (harness/settings/config.py)
        recurrence = {"recurrence": "linear-attention"} if has_linear_attention(lm.model.config.to_dict()) else {}
        obs.reference("logits_vs_engine", *narrowed(full, engine.logits_cached(zoo, case.model, ids[0].tolist())),
                      kind="tensor", expected_extras={**routing, **recurrence})

    resaved = tmp / "resaved"
    # save a copy: save_pretrained turns config.dtype into a str in place (5.13 - 5.24), after
    # which 5.24's MtpModel.from_pretrained fails (use_mtp: "'str' object has no attribute
    # 'is_floating_point'") - the shared model must stay as loaded
    _, err = observe(lambda: copy.deepcopy(lm.model).save_pretrained(str(resaved)))
    if err is not None:
        obs.add("resave_error", err)
        obs.skipped("resave_roundtrip", "exact", f"save_pretrained raised {err['type']}: {err['message']}",
                    "unsupported")
        return obs
    files = sorted(p.name for p in resaved.glob("*.safetensors"))
    keys = [k for f in files for k in _safetensor_keys(resaved / f)]
    obs.add("resaved_keys", fold_keys(keys), files=files)
    reloaded, err = observe(lambda: from_pretrained(resaved, dtype=zoo.checkpoints.dtype_of(case.model), device=zoo.device))
    intact = {"identical_logits": True, "lost_keys": {}}
    if err is not None:
        obs.reference("resave_roundtrip", {"reload_error": err}, intact)
        return obs
    model, info = reloaded
    again = logits(model, ids)
    lost = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys") and v}
    obs.reference("resave_roundtrip", {"identical_logits": torch.equal(again, full), "lost_keys": lost}, intact,
                  observed_extras={"max_abs_err": float((again - full).abs().max())})
    return obs
