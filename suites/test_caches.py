"""Layer-typed KV caches of the installed transformers, per zoo model, against the reference
dispatcher and cache rules (harness/engine/cache.py) and against the golden record.

Cases: one per zoo model and one per user model (`harness.fixtures.cases.model_cases`), prompt "long-0"
(83 tokens: more than five 16-token windows / chunks, so sliding and chunked layers must evict; a user
model's layer types come from its own config.json). Fields per case:

  test_layer_dispatch
    dynamic_layers, static_layers  exact  per-layer classes of DynamicCache(config=...) /
                                          StaticCache(config=..., max_cache_len=...) (or the error)
    layer_windows                  exact  per-layer `sliding_window` of the dynamic layers (None: full)
                                          and `max_cache_len` (slots) of the static layers
    *_vs_reference                 ref    the classes / windows the reference dispatcher maps the
                                          config's layer_types / sliding_window /
                                          attention_chunk_size to (full -> DynamicLayer /
                                          StaticLayer; sliding, chunked -> *SlidingWindowLayer; the
                                          window is sliding_window or the chunk size; a static
                                          windowed layer holds min(max_cache_len, window) slots)
  test_lengths_and_bytes (prefill, then DECODE_STEPS greedy steps)
    seq_len_after_prefill, held_after_prefill, seq_len_after_decode, held_after_decode
                                   exact  per layer: get_seq_length() and key slots held
    static_seq_len_after_decode, static_buffer_len
                                   exact  the same for StaticCache
    cache_elements                 exact  key+value elements per layer class, dynamic and static (the
                                          layout, whatever the dtype; the bytes ride along as an extra)
    seq_len_vs_reference           ref    get_seq_length() equals the reference caches' length
    held_vs_reference              ref    every layer holds what the next query needs (reference
                                          rule) and a windowed layer at most its window
    static_vs_dynamic              ref    decode logits through StaticCache equal DynamicCache's
  test_rollback (prompt + a wrong 3-token draft, crop it, feed the correct token + 2 more)
    rollback_supported             capability  crop worked for every layer type (extras: error)
    rollback                       exact  per-layer seq_len / held after the crop
    rollback_vs_fresh              ref    logits after rollback equal a fresh run without the draft
    rollback_vs_engine             ref    ... and the reference engine's logits (families it has)
A vocabulary above 4096 compares logits on 256 shared columns (hf_cache.py `narrowed`). A config
whose layer kinds the reference dispatcher has no rule for skips the *_vs_reference fields with
the reason, and still records every observed field.

A version whose sliding layers cannot be cropped records rollback_supported = False with the
error and skips the rest with the reason (5.13 / 5.14: ValueError once the window is full).
"""

from __future__ import annotations

import pytest
import torch

from harness.fixtures.cases import model_cases
from harness.subjects import engine, observe
from harness.subjects.hf_cache import (
    bytes_by_class,
    capacity,
    dynamic_layer_classes,
    elements_by_class,
    held,
    layer_classes,
    narrowed,
    new_caches,
    prefill_and_decode,
    rollback,
    seq_length,
    window,
)

PROMPT = "long-0"
DECODE_STEPS = 4
DRAFT = 3
FOLLOW = 2  # greedy steps after the correct token, compared too
STATIC_HEADROOM = 8


def reference_spec(golden, zoo, name: str, fields: tuple[str, ...]):
    """The reference dispatcher's view of the model's config, or None - each field in `fields`
    then skipped with the reason (a config whose layer kinds it has no rule for)."""
    try:
        return engine.cache_spec(zoo.config_json(name))
    except ValueError as exc:
        for field in fields:
            golden.outcome(field, "skipped", "exact", f"no reference rule for {name}'s layers: {exc}", "not-applicable")
        return None


@pytest.mark.cases(table=model_cases)
def test_layer_dispatch(case, golden, zoo):
    lm = zoo.load(case.model)
    prompt_len = zoo.prompt_ids(case.model, PROMPT).shape[1]
    dynamic, dyn_err, static, st_err = new_caches(lm.model, prompt_len + STATIC_HEADROOM)
    dyn_classes = layer_classes(dynamic) if dynamic is not None else {"error": dyn_err}
    st_classes = layer_classes(static) if static is not None else {"error": st_err}
    golden.check("dynamic_layers", dyn_classes)
    golden.check("static_layers", st_classes)
    max_len = prompt_len + STATIC_HEADROOM
    windows = {"dynamic": [window(layer) for layer in dynamic.layers] if dynamic is not None else None,
               "static_capacity": [capacity(layer) for layer in static.layers] if static is not None else None}
    golden.check("layer_windows", windows)
    ref = reference_spec(golden, zoo, case.model, ("dynamic_layers_vs_reference", "static_layers_vs_reference",
                                                   "layer_windows_vs_reference"))
    if ref is None:
        return
    expected_dyn = [engine.REFERENCE_CLASSES[t][0] for t in ref["layer_types"]]
    expected_st = [engine.REFERENCE_CLASSES[t][1] for t in ref["layer_types"]]
    golden.reference("dynamic_layers_vs_reference", dyn_classes, expected_dyn,
                     expected_extras={"layer_types": ref["layer_types"]})
    golden.reference("static_layers_vs_reference", st_classes, expected_st,
                     expected_extras={"layer_types": ref["layer_types"]})
    expected_windows = engine.windows(ref)
    golden.reference("layer_windows_vs_reference", windows,
                     {"dynamic": expected_windows,
                      "static_capacity": [max_len if w is None else min(max_len, w) for w in expected_windows]},
                     expected_extras={"layer_types": ref["layer_types"], "sliding_window": ref["sliding_window"],
                                      "attention_chunk_size": ref["attention_chunk_size"], "max_cache_len": max_len})


@pytest.mark.cases(table=model_cases)
def test_lengths_and_bytes(case, golden, zoo):
    lm = zoo.load(case.model)
    ids = zoo.prompt_ids(case.model, PROMPT)
    prompt_len = ids.shape[1]
    dynamic, dyn_err, static, st_err = new_caches(lm.model, prompt_len + STATIC_HEADROOM)
    if dynamic is None or static is None:
        golden.check("cache_construction_error", {"dynamic": dyn_err, "static": st_err})
        pytest.skip(f"cannot build the caches: {dyn_err or st_err}")
    run, err = observe(lambda: prefill_and_decode(lm.model, ids, dynamic, DECODE_STEPS))
    if err is not None:
        golden.check("dynamic_run_error", err)
        pytest.skip(f"forward through DynamicCache raised {err['type']}: {err['message']}")
    dyn_logits, after_prefill = run
    seq_after = [seq_length(x) for x in dynamic.layers]
    held_after = [held(x) for x in dynamic.layers]
    golden.check("seq_len_after_prefill", after_prefill["seq_len"])
    golden.check("held_after_prefill", after_prefill["held"])
    golden.check("seq_len_after_decode", seq_after)
    golden.check("held_after_decode", held_after)

    st_run, st_run_err = observe(lambda: prefill_and_decode(lm.model, ids, static, DECODE_STEPS))
    if st_run_err is None:
        golden.check("static_seq_len_after_decode", [seq_length(x) for x in static.layers])
        golden.check("static_buffer_len", [held(x) for x in static.layers])
        golden.reference("static_vs_dynamic", *narrowed(torch.stack(st_run[0]), torch.stack(dyn_logits)),
                         kind="tensor", implementations_differ=False)
    else:
        golden.check("static_run_error", st_run_err)
    golden.check("cache_elements", {"dynamic": elements_by_class(dynamic),
                                    "static": elements_by_class(static) if st_run_err is None else None},
                 bytes={"dynamic": bytes_by_class(dynamic), "static": bytes_by_class(static) if st_run_err is None else None})

    # the reference: lengths of the reference caches after the same updates, and the window bound
    ref = reference_spec(golden, zoo, case.model, ("seq_len_vs_reference", "held_vs_reference"))
    if ref is None:
        return
    (ref_seq_p, need_p), (ref_seq_d, need_d) = [
        engine.lengths(ref, [prompt_len] + [1] * DECODE_STEPS)[i] for i in (0, DECODE_STEPS)]
    golden.reference("seq_len_vs_reference", {"prefill": after_prefill["seq_len"], "decode": seq_after},
                     {"prefill": ref_seq_p, "decode": ref_seq_d})
    windows = engine.windows(ref)
    problems = []
    for stage, got, need, seq in (("prefill", after_prefill["held"], need_p, ref_seq_p),
                                  ("decode", held_after, need_d, ref_seq_d)):
        for i, (h, n, w) in enumerate(zip(got, need, windows, strict=True)):
            bound = seq[i] if w is None else min(seq[i], w)
            if not n <= h <= bound:
                problems.append(f"{stage} layer {i} ({ref['layer_types'][i]}): holds {h}, needs >= {n}, "
                                f"at most {bound}")
    detail = ("; ".join(problems[:4]) if problems else
              f"every layer holds what the next query needs and windowed layers at most their window "
              f"(after decode: held {held_after}, needed {need_d})")
    golden.outcome("held_vs_reference", "regression" if problems else "pass", "exact", detail,
                   "real-change" if problems else "", {"held": held_after, "needed": need_d, "windows": windows})


@pytest.mark.cases(table=model_cases)
def test_rollback(case, golden, zoo):
    lm = zoo.load(case.model)
    ids = zoo.prompt_ids(case.model, PROMPT)
    result, err = observe(lambda: rollback(lm.model, ids, DRAFT, FOLLOW))
    golden.check("rollback_supported", err is None, kind="capability", **({"error": err} if err else {}))
    if err is not None:
        reason = (f"crop/rollback after a rejected {DRAFT}-token draft raised {err['type']}: {err['message']} "
                  f"(layers {sorted(set(dynamic_layer_classes(lm.model)))})")
        golden.outcome("rollback_vs_fresh", "skipped", "tensor", reason, "unsupported")
        pytest.skip(reason)
    fresh, rolled, state, feed = result
    golden.check("rollback", state)
    golden.reference("rollback_vs_fresh", *narrowed(rolled, fresh), kind="tensor", implementations_differ=False)
    reference = zoo.reference(case.model)
    if reference is None:
        golden.outcome("rollback_vs_engine", "skipped", "tensor", zoo.engine_gap(case.model), "not-applicable")
        return
    tokens = torch.cat([ids[0].cpu(), torch.tensor(feed)])
    expected = reference.forward(tokens, torch.arange(tokens.shape[0]), None).logits[-len(feed):]
    golden.reference("rollback_vs_engine", *narrowed(rolled, expected), kind="tensor")
