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
    states_restored_by_crop        capability  linear-attention layers: whether crop put each layer's
                                          states (conv window, recurrent memory) back to what they were
                                          before the draft (a state it starts restoring is a feature added)
    engine_rollback_vs_fresh       ref    the reference engine's own rollback (truncation; the snapshot
                                          for a recurrent state) on the same draft, against the fresh run
A vocabulary above 4096 compares logits on 256 shared columns (hf_cache.py `narrowed`). A config
whose layer kinds the reference dispatcher has no rule for skips the *_vs_reference fields with
the reason, and still records every observed field.

A version whose sliding layers cannot be cropped records rollback_supported = False with the
error and skips the rest with the reason (5.13 / 5.14: ValueError once the window is full). A crop
that raises nothing but leaves a linear-attention layer's recurrent state (every version: the
state holds the rejected draft) is rollback_supported = False too, with the logit difference.
"""

from __future__ import annotations

import pytest
import torch

from harness.engine.cache import LINEAR
from harness.fixtures.cases import model_cases
from harness.subjects import engine, observe
from harness.subjects.hf_cache import (
    bytes_by_class,
    capacity,
    crop_run,
    dynamic_layer_classes,
    elements_by_class,
    fresh_run,
    held,
    layer_classes,
    narrowed,
    new_caches,
    prefill_and_decode,
    restored_states,
    seq_length,
    state_shapes,
    window,
)

PROMPT = "long-0"
DECODE_STEPS = 4
DRAFT = 3
FOLLOW = 2  # greedy steps after the correct token, compared too
# a crop that restores a recurrent state leaves the same state the fresh run has, so the same
# computations follow, in any dtype; one that leaves the draft in it is far off (qwen3_5-linear,
# "long-0": 6.2 in 5.13 / 5.14, where crop keeps both states; 0.065 in 5.24, which crops the conv
# window but not the recurrent memory)
RESTORED_RTOL, RESTORED_ATOL = 1e-4, 1e-4
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
                      "static_capacity": [None if t == LINEAR else max_len if w is None else min(max_len, w)
                                          for w, t in zip(expected_windows, ref["layer_types"], strict=True)]},
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
    shapes = state_shapes(dynamic)
    if any(shapes):  # linear-attention layers: a fixed-size state instead of keys and values
        golden.check("state_shapes", shapes)
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
    if any(shapes):
        golden.reference("state_shapes_vs_reference", shapes,
                         engine.state_shapes(zoo.config_json(case.model), ref["layer_types"]))
    windows = engine.windows(ref)
    problems = []
    for stage, got, need, seq in (("prefill", after_prefill["held"], need_p, ref_seq_p),
                                  ("decode", held_after, need_d, ref_seq_d)):
        for i, (h, n, w) in enumerate(zip(got, need, windows, strict=True)):
            bound = 0 if seq[i] is None else seq[i] if w is None else min(seq[i], w)  # None: no key slots
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
    fresh, feed, draft, before_draft = fresh_run(lm.model, ids, DRAFT, FOLLOW)
    result, err = observe(lambda: crop_run(lm.model, ids, draft, feed))
    classes = sorted(set(dynamic_layer_classes(lm.model)))
    extras = {"error": err} if err else {}
    restored = result is not None
    if result is not None and any(before_draft):  # linear-attention states: did crop put them back?
        golden.check("states_restored_by_crop", restored_states(result[2], before_draft), kind="capability")
        extras["max_abs_diff_vs_fresh"] = float((result[0] - fresh).abs().max())
        restored = torch.allclose(result[0], fresh, rtol=RESTORED_RTOL, atol=RESTORED_ATOL)
    golden.check("rollback_supported", err is None and restored, kind="capability", **extras)
    _engine_rollback(case, golden, zoo, ids, draft, feed, fresh)
    if err is not None or not restored:
        reason = (f"crop/rollback after a rejected {DRAFT}-token draft raised {err['type']}: {err['message']} "
                  f"(layers {classes})" if err is not None else
                  f"crop(-{DRAFT}) raised nothing but did not roll the linear-attention layers back: their recurrent "
                  f"state still holds the rejected draft, and the logits after the rollback differ from a fresh run "
                  f"by {extras['max_abs_diff_vs_fresh']:.3g} (layers {classes}; the reference engine rolls back by "
                  f"snapshot: engine_rollback_vs_fresh)")
        golden.outcome("rollback_vs_fresh", "skipped", "tensor", reason, "unsupported")
        pytest.skip(reason)
    rolled, state, _ = result
    golden.check("rollback", state)
    golden.reference("rollback_vs_fresh", *narrowed(rolled, fresh), kind="tensor", implementations_differ=False)
    reference = zoo.reference(case.model)
    if reference is None:
        golden.outcome("rollback_vs_engine", "skipped", "tensor", zoo.engine_gap(case.model), "not-applicable")
        return
    tokens = torch.cat([ids[0].cpu(), torch.tensor(feed)])
    expected = reference.forward(tokens, torch.arange(tokens.shape[0]), None).logits[-len(feed):]
    golden.reference("rollback_vs_engine", *narrowed(rolled, expected), kind="tensor")


def _engine_rollback(case, golden, zoo, ids, draft: list[int], feed: list[int], fresh: torch.Tensor) -> None:
    """engine_rollback_vs_fresh: the reference engine's own rollback (rewind: truncation for KV
    caches, the snapshot before the draft for recurrent states) run on the same prompt, wrong
    draft and fed tokens, against transformers' fresh run - what a rollback on this model must
    give, whether or not the installed transformers can do it."""
    reference = zoo.reference(case.model)
    if reference is None:
        golden.outcome("engine_rollback_vs_fresh", "skipped", "tensor", zoo.engine_gap(case.model), "not-applicable")
        return
    prompt = ids[0].cpu()
    caches = reference.new_caches(slack=DRAFT)
    reference.forward(prompt, torch.arange(len(prompt)), caches)
    reference.forward(torch.tensor(draft), torch.arange(len(prompt), len(prompt) + DRAFT), caches)
    for cache in caches:
        cache.rewind(DRAFT)
    rows = [reference.forward(torch.tensor([t]), torch.tensor([len(prompt) + i]), caches).logits[-1]
            for i, t in enumerate(feed)]
    golden.reference("engine_rollback_vs_fresh", *narrowed(fresh, torch.stack(rows)), kind="tensor")
