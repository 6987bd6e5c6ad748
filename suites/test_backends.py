"""Attention backends and checkpoint loading of the installed transformers, per zoo model.

Cases: one per zoo model (`_common.MODEL_CASES`: Llama x2, Mistral, Qwen2, Llama4, Glm4Moe,
GPTNeoX, GPTBigCode). Fields per case:

  test_attention_flags
    supports               capability  the class's _supports_sdpa / _supports_flash_attn /
                                       _supports_flex_attn / _supports_attention_backend /
                                       _can_compile_fullgraph (a flag that appears or vanishes is
                                       reported as feature added / removed)
    default_attn_implementation exact  config._attn_implementation after a plain from_pretrained
  test_sdpa_prefill (prompt "long-0", prefill through DynamicCache and StaticCache; every call of
  torch.nn.functional.scaled_dot_product_attention recorded by wrapping it)
    sdpa_prefill           exact  per cache: number of calls and the distinct call signatures
                                  (attn_mask None or its dtype/shape, is_causal, q/k shapes,
                                  enable_gqa) with how many layers made each
    sdpa_mask_vs_reference ref    the mask each call applies (attn_mask, or is_causal's top-left
                                  triangle) equals the reference visibility rule
                                  (harness/engine/cache.py `visible`) for that layer's kind
  test_eager_vs_sdpa
    eager_vs_sdpa          ref    logits of the whole prompt under attn_implementation="eager" and
                                  "sdpa" agree within fp32 tolerance
  test_checkpoint
    checkpoint_keys        exact  tensor names in the committed model.safetensors (saved by the
                                  baseline version at build time; layer indices folded, see
                                  `fold_keys`)
    loading_info           exact  missing / unexpected / mismatched keys reported by from_pretrained
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

import contextlib
import copy
import re

import pytest
import torch
from _common import (  # noqa: F401 - one_intra_op_thread is an autouse fixture
    checkpoint_dir,
    forward,
    from_pretrained,
    loaded,
    model_params,
    observe,
    one_intra_op_thread,
    prompt_ids,
    reference_model,
    reference_spec,
)

from harness.engine.cache import visible

PROMPT = "long-0"
STATIC_HEADROOM = 8
FLAGS = ("_supports_sdpa", "_supports_flash_attn", "_supports_flex_attn", "_supports_attention_backend",
         "_can_compile_fullgraph")
LOGIT_POSITIONS = 2  # evenly spaced positions of the prompt whose logits are recorded (first, last)


@pytest.mark.parametrize("case", model_params())
def test_attention_flags(case, golden):
    lm = loaded(case.model)
    cls = type(lm.model)
    flags = {flag: getattr(cls, flag, None) for flag in FLAGS}
    present = {k: v for k, v in flags.items() if isinstance(v, bool)}
    golden.check("supports", present, kind="capability",
                 **({"not_bool": {k: repr(v) for k, v in flags.items() if k not in present}}
                    if len(present) < len(flags) else {}))
    golden.check("default_attn_implementation", getattr(lm.model.config, "_attn_implementation", None),
                 model_class=cls.__name__)


# ----------------------------------------------------------------------------------------------
# which SDPA call the prefill makes


@contextlib.contextmanager
def record_sdpa(sink: list[dict]):
    """Wrap torch.nn.functional.scaled_dot_product_attention; append each call's arguments."""
    functional = torch.nn.functional
    original = functional.scaled_dot_product_attention

    def wrapper(*args, **kwargs):
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")
        bound = dict(zip(names, args, strict=False)) | kwargs
        sink.append({"q": bound["query"].shape, "k": bound["key"].shape, "attn_mask": bound.get("attn_mask"),
                     "is_causal": bool(bound.get("is_causal", False)), "enable_gqa": bound.get("enable_gqa")})
        return original(*args, **kwargs)

    functional.scaled_dot_product_attention = wrapper
    try:
        yield sink
    finally:
        functional.scaled_dot_product_attention = original


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


@pytest.mark.parametrize("case", model_params())
def test_sdpa_prefill(case, golden):
    from transformers import DynamicCache, StaticCache

    lm = loaded(case.model)
    ids = prompt_ids(case.model, PROMPT)
    prompt_len = ids.shape[1]
    ref = reference_spec(case.model)
    sizes = [ref["sliding_window"] if t == "sliding_attention" else ref["attention_chunk_size"]
             for t in ref["layer_types"]]
    observed, problems = {}, {}
    for name, make in (("dynamic", lambda: DynamicCache(config=lm.model.config)),
                       ("static", lambda: StaticCache(config=lm.model.config,
                                                      max_cache_len=prompt_len + STATIC_HEADROOM))):
        calls: list[dict] = []
        with record_sdpa(calls):
            _, err = observe(lambda make=make: forward(lm.model, ids, make()))
        observed[name] = {**_distinct(calls), **({"error": err} if err else {})}
        if err is None and calls:
            problems[name] = _check_masks(calls, ref["layer_types"], sizes, prompt_len)
    golden.check("sdpa_prefill", observed, attn_implementation=lm.model.config._attn_implementation)
    if not problems:
        golden.outcome("sdpa_mask_vs_reference", "skipped", "exact",
                       f"no SDPA calls to check (attention implementation "
                       f"{lm.model.config._attn_implementation!r}; see sdpa_prefill)", "not-applicable")
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


def _with_attn(name: str, impl: str):
    default = loaded(name)
    if getattr(default.model.config, "_attn_implementation", None) == impl:
        return default.model, None
    lm, err = observe(lambda: loaded(name, impl))
    return (lm.model if lm else None), err


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids, use_cache=False).logits[0].float()


@pytest.mark.parametrize("case", model_params())
def test_eager_vs_sdpa(case, golden):
    ids = prompt_ids(case.model, PROMPT)
    eager, e_err = _with_attn(case.model, "eager")
    sdpa, s_err = _with_attn(case.model, "sdpa")
    if e_err or s_err:
        golden.check("attn_load_error", {"eager": e_err, "sdpa": s_err})
        reason = f"cannot load with {'eager' if e_err else 'sdpa'}: {(e_err or s_err)['message']}"
        golden.outcome("eager_vs_sdpa", "skipped", "tensor", reason, "unsupported")
        pytest.skip(reason)
    golden.reference("eager_vs_sdpa", _logits(sdpa, ids).tolist(), _logits(eager, ids).tolist(), kind="tensor")


# ----------------------------------------------------------------------------------------------
# checkpoint loading


_INDEX = re.compile(r"\.(\d+)\.")


def _ranges(indices: list[int]) -> str:
    out, start, prev = [], None, None
    for i in sorted(set(indices)):
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = prev = i
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(out)


def fold_keys(keys) -> dict[str, str]:
    """Tensor names with the first numeric index folded: {"model.layers.*.mlp.up_proj.weight":
    "0-45", "lm_head.weight": ""}; a renamed, added or dropped tensor changes a key or a range."""
    groups: dict[str, list[int]] = {}
    for key in keys:
        m = _INDEX.search(key)
        if m is None:
            groups.setdefault(key, [])
        else:
            groups.setdefault(key[: m.start()] + ".*." + key[m.end():], []).append(int(m.group(1)))
    return {k: _ranges(v) for k, v in sorted(groups.items())}


def _safetensor_keys(path) -> list[str]:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        return list(f.keys())


def _positions(n: int) -> list[int]:
    return sorted({round(i * (n - 1) / (LOGIT_POSITIONS - 1)) for i in range(LOGIT_POSITIONS)})


@pytest.mark.parametrize("case", model_params())
def test_checkpoint(case, golden, tmp_path):
    lm = loaded(case.model)
    directory = checkpoint_dir(case.model)
    ids = prompt_ids(case.model, PROMPT)
    positions = _positions(ids.shape[1])
    logits = _logits(lm.model, ids)
    golden.check("checkpoint_keys", fold_keys(_safetensor_keys(f"{directory}/model.safetensors")))
    golden.check("loading_info", {k: fold_keys(v) if k.endswith("keys") else v for k, v in lm.info.items()})
    golden.check("state_dict_keys", fold_keys(lm.model.state_dict().keys()))
    golden.check("logits", logits[positions].tolist(), kind="tensor", positions=positions, prompt=PROMPT)
    engine = reference_model(case.model)
    if engine is None:
        golden.outcome("logits_vs_engine", "skipped", "tensor",
                       f"the reference engine does not implement model_type {case.model_type!r}", "not-applicable")
    else:
        expected = engine.forward(ids[0], torch.arange(ids.shape[1]), None).logits
        golden.reference("logits_vs_engine", logits.tolist(), expected.tolist(), kind="tensor")

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
    reloaded, err = observe(lambda: from_pretrained(resaved))
    if err is not None:
        golden.outcome("resave_roundtrip", "regression", "exact",
                       f"reloading its own save_pretrained output raised {err['type']}: {err['message']}",
                       "real-change", {"error": err})
        return
    model, info = reloaded
    again = _logits(model, ids)
    max_err = float((again - logits).abs().max())
    lost = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys") and v}
    same = torch.equal(again, logits)
    golden.outcome("resave_roundtrip", "pass" if same and not lost else "regression", "exact",
                   "save_pretrained -> from_pretrained gives bit-identical logits" if same and not lost else
                   f"after save_pretrained -> from_pretrained: max abs logit change {max_err:.3g}; "
                   f"loading info {lost or 'clean'}", "" if same and not lost else "real-change",
                   {"max_abs_err": max_err, "loading_info": info})
