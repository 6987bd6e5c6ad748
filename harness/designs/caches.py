"""What the installed transformers' KV caches do with one model (suites/test_caches.py), against
the reference dispatcher and caches (harness/engine/cache.py) and the golden record.

Prompt "long-0" (83 tokens: more than five 16-token windows / chunks, so sliding and chunked layers
must evict; a user model's layer types come from its own config.json). Three observations per case,
one record:

  dispatch (layer classes)
    dynamic_layers, static_layers  exact  per-layer classes of DynamicCache(config=...) /
                                          StaticCache(config=..., max_cache_len=...) (or the error)
    layer_windows                  exact  per-layer `sliding_window` of the dynamic layers (None: full)
                                          and `max_cache_len` (slots) of the static layers
    *_vs_reference                 ref    the classes / windows the reference dispatcher maps the
                                          config's layer_types / sliding_window / attention_chunk_size
                                          to (full -> DynamicLayer / StaticLayer; sliding, chunked ->
                                          *SlidingWindowLayer; the window is sliding_window or the chunk
                                          size; a static windowed layer holds min(max_cache_len, window) slots)
  lengths (prefill, then DECODE_STEPS greedy steps)
    seq_len_after_prefill, held_after_prefill, seq_len_after_decode, held_after_decode
                                   exact  per layer: get_seq_length() and key slots held
    state_shapes                   exact  linear-attention layers: conv / recurrent state shapes
    static_seq_len_after_decode, static_buffer_len
                                   exact  the same for StaticCache
    cache_elements                 exact  key+value elements per layer class, dynamic and static (the
                                          layout, whatever the dtype; the bytes ride along as an extra)
    seq_len_vs_reference           ref    get_seq_length() equals the reference caches' length; a
                                          linear-attention layer may report none (None, up to 5.24) or the
                                          tokens it processed (5.25), any other number fails (`as_reported`)
    state_shapes_vs_reference      ref    the state shapes the config implies
    held_vs_reference              ref    no problem under the reference rule: every layer holds what the
                                          next query needs and a windowed layer at most its window
                                          (harness/subjects/engine.py `held_problems`)
    static_vs_dynamic              ref    decode logits through StaticCache equal DynamicCache's (two code
                                          paths: fp32 rounding of another summation order allowed)
  rollback (prompt + a wrong 3-token draft, crop it, feed the correct token + 2 more)
    rollback_call                  exact  how past recording is switched on, as the version's own
                                          speculative decoding does (hf_cache.py `recording_call`: 5.25's
                                          linear-attention layers take recurrent_states_to_keep = the
                                          draft length; {} before) - presentation: a new argument is
                                          `changed`, what it breaks is the next field
    rollback_default_call_error    exact  the same rollback with activate_past_recording() called without
                                          arguments, as code written for 5.24 calls it (5.25: TypeError at
                                          the crop, its default None compared with an int); where the
                                          version takes no argument it is rollback_error
    rollback_supported             capability  crop worked for every layer type
    rollback_error                 exact  the exception crop/rollback raised, or None: a crop that raises
                                          where it ran before is `broken` (a regression, by the exact
                                          comparer's error rule), one that stops raising is `fixed`
    rollback                       exact  per-layer seq_len / held after the crop
    rollback_vs_fresh              ref    logits after rollback equal a fresh run without the draft
    rollback_vs_engine             ref    ... and the reference engine's logits (families it has); composed
                                          of rollback_vs_fresh and engine_rollback_vs_fresh: failing as the
                                          latter fails in a baseline that could not crop, it is that known
                                          failure (harness/checking/oracles.py COMPOSED)
    states_restored_by_crop        capability  linear-attention layers: whether crop put each layer's
                                          states (conv window, recurrent memory) back (a state it
                                          starts restoring is a feature added)
    engine_rollback_vs_fresh       ref    the reference engine's own rollback (truncation; the snapshot
                                          for a recurrent state) on the same draft, against the fresh run
A vocabulary above 4096 compares logits on 256 shared columns (hf_cache.py `narrowed`). A config
whose layer kinds the reference dispatcher has no rule for skips the *_vs_reference fields with
the reason, and still records every observed field. A version whose sliding layers cannot be
cropped records rollback_supported = False, the error in rollback_error, and stops with the reason
(5.13 / 5.14: ValueError once the window is full); so does a crop that raises nothing but leaves a
linear-attention layer's recurrent state (every version: the state holds the rejected draft).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from harness.engine.cache import LINEAR
from harness.schema import Case, Observation
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
    recording_call,
    restored_states,
    seq_length,
    state_shapes,
    window,
)

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

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


def reference_spec(obs: Observation, zoo: Zoo, name: str, fields: tuple[str, ...]) -> dict[str, Any] | None:
    """The reference dispatcher's view of the model's config, or None - each field in `fields`
    then skipped with the reason (a config whose layer kinds it has no rule for)."""
    try:
        return engine.cache_spec(zoo.checkpoints.config_json(name))
    except ValueError as exc:
        for f in fields:
            obs.skipped(f, "exact", f"no reference rule for {name}'s layers: {exc}")
        return None


def dispatch(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    lm = zoo.load(case.model)
    max_len = zoo.prompt_ids(case.model, PROMPT).shape[1] + STATIC_HEADROOM
    dynamic, dyn_err, static, st_err = new_caches(lm.model, max_len)
    dyn_classes = layer_classes(dynamic) if dynamic is not None else {"error": dyn_err}
    st_classes = layer_classes(static) if static is not None else {"error": st_err}
    obs.add("dynamic_layers", dyn_classes)
    obs.add("static_layers", st_classes)
    windows = {"dynamic": [window(layer) for layer in dynamic.layers] if dynamic is not None else None,
               "static_capacity": [capacity(layer) for layer in static.layers] if static is not None else None}
    obs.add("layer_windows", windows)
    ref = reference_spec(obs, zoo, case.model, ("dynamic_layers_vs_reference", "static_layers_vs_reference",
                                                "layer_windows_vs_reference"))
    if ref is None:
        return obs
    types = ref["layer_types"]
    obs.reference("dynamic_layers_vs_reference", dyn_classes, [engine.REFERENCE_CLASSES[t][0] for t in types],
                  expected_extras={"layer_types": types})
    obs.reference("static_layers_vs_reference", st_classes, [engine.REFERENCE_CLASSES[t][1] for t in types],
                  expected_extras={"layer_types": types})
    expected_windows = engine.windows(ref)
    obs.reference("layer_windows_vs_reference", windows,
                  {"dynamic": expected_windows,
                   "static_capacity": [None if t == LINEAR else max_len if w is None else min(max_len, w)
                                       for w, t in zip(expected_windows, types, strict=True)]},
                  expected_extras={"layer_types": types, "sliding_window": ref["sliding_window"],
                                   "attention_chunk_size": ref["attention_chunk_size"], "max_cache_len": max_len})
    return obs


def lengths(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    lm = zoo.load(case.model)
    ids = zoo.prompt_ids(case.model, PROMPT)
    prompt_len = ids.shape[1]
    dynamic, dyn_err, static, st_err = new_caches(lm.model, prompt_len + STATIC_HEADROOM)
    if dynamic is None or static is None:
        obs.add("cache_construction_error", {"dynamic": dyn_err, "static": st_err})
        return obs.stop(f"cannot build the caches: {dyn_err or st_err}")
    run, err = observe(lambda: prefill_and_decode(lm.model, ids, dynamic, DECODE_STEPS))
    if err is not None:
        obs.add("dynamic_run_error", err)
        return obs.stop(f"forward through DynamicCache raised {err['type']}: {err['message']}")
    dyn_logits, after_prefill = run
    seq_after = [seq_length(x) for x in dynamic.layers]
    held_after = [held(x) for x in dynamic.layers]
    shapes = state_shapes(dynamic)
    if any(shapes):  # linear-attention layers: a fixed-size state instead of keys and values
        obs.add("state_shapes", shapes)
    obs.add("seq_len_after_prefill", after_prefill["seq_len"])
    obs.add("held_after_prefill", after_prefill["held"])
    obs.add("seq_len_after_decode", seq_after)
    obs.add("held_after_decode", held_after)

    st_run, st_run_err = observe(lambda: prefill_and_decode(lm.model, ids, static, DECODE_STEPS))
    if st_run_err is None:
        obs.add("static_seq_len_after_decode", [seq_length(x) for x in static.layers])
        obs.add("static_buffer_len", [held(x) for x in static.layers])
        # two code paths of the library (a static buffer attended through a mask over its whole length
        # vs a growing cache): the same math summed in another order, so they round differently
        obs.reference("static_vs_dynamic", *narrowed(torch.stack(st_run[0]), torch.stack(dyn_logits)),
                      kind="tensor")
    else:
        obs.add("static_run_error", st_run_err)
    obs.add("cache_elements", {"dynamic": elements_by_class(dynamic),
                               "static": elements_by_class(static) if st_run_err is None else None},
            bytes={"dynamic": bytes_by_class(dynamic), "static": bytes_by_class(static) if st_run_err is None else None})

    # the reference: lengths of the reference caches after the same updates, and the window bound
    ref = reference_spec(obs, zoo, case.model, ("seq_len_vs_reference", "held_vs_reference"))
    if ref is None:
        return obs
    (ref_seq_p, need_p), (ref_seq_d, need_d) = [
        engine.lengths(ref, [prompt_len] + [1] * DECODE_STEPS)[i] for i in (0, DECODE_STEPS)]
    obs.reference("seq_len_vs_reference", {"prefill": after_prefill["seq_len"], "decode": seq_after},
                  {"prefill": as_reported(after_prefill["seq_len"], ref_seq_p, prompt_len),
                   "decode": as_reported(seq_after, ref_seq_d, prompt_len + DECODE_STEPS)})
    if any(shapes):
        obs.reference("state_shapes_vs_reference", shapes,
                      engine.state_shapes(zoo.checkpoints.config_json(case.model), ref["layer_types"]))
    problems = engine.held_problems(ref, [("prefill", after_prefill["held"], need_p, ref_seq_p),
                                          ("decode", held_after, need_d, ref_seq_d)])
    obs.reference("held_vs_reference", problems, [],
                  observed_extras={"held": held_after, "needed": need_d, "windows": engine.windows(ref)})
    return obs


def as_reported(observed: list[int | None], expected: list[int | None], processed: int) -> list[int | None]:
    """The reference lengths with each linear-attention layer's (the reference's None: no sequence
    dimension) as the layer reports it when that is allowed: no length (None, up to 5.24) or the
    tokens it has processed (5.25's get_seq_length); any other number stays against None and fails."""
    return [o if e is None and o in (None, processed) else e for o, e in zip(observed, expected, strict=True)]


def rollback(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    lm = zoo.load(case.model)
    ids = zoo.prompt_ids(case.model, PROMPT)
    fresh, feed, draft, before_draft = fresh_run(lm.model, ids, DRAFT, FOLLOW)
    call = recording_call(lm.model, DRAFT)  # the version's own API: 5.25 asks how many states to keep
    result, err = observe(lambda: crop_run(lm.model, ids, draft, feed, call))
    obs.add("rollback_call", call, presentation=True)
    # what a caller written for the releases before gets: the same rollback with no arguments
    default_err = observe(lambda: crop_run(lm.model, ids, draft, feed))[1] if call else err
    obs.add("rollback_default_call_error", default_err)
    classes = sorted(set(dynamic_layer_classes(lm.model)))
    extras: dict[str, Any] = {}
    restored = result is not None
    if result is not None and any(before_draft):  # linear-attention states: did crop put them back?
        obs.add("states_restored_by_crop", restored_states(result[2], before_draft), kind="capability")
        extras["max_abs_diff_vs_fresh"] = float((result[0] - fresh).abs().max())
        restored = torch.allclose(result[0], fresh, rtol=RESTORED_RTOL, atol=RESTORED_ATOL)
    obs.add("rollback_supported", err is None and restored, kind="capability", **extras)
    obs.add("rollback_error", err)  # the comparer's error rule: crop raising where it ran before is `broken`
    obs.merge(engine_rollback(zoo, case, ids, draft, feed, fresh))
    if err is not None or not restored:
        reason = (f"crop/rollback after a rejected {DRAFT}-token draft raised {err['type']}: {err['message']} "
                  f"(layers {classes})" if err is not None else
                  f"crop(-{DRAFT}) raised nothing but did not roll the linear-attention layers back: their recurrent "
                  f"state still holds the rejected draft, and the logits after the rollback differ from a fresh run "
                  f"by {extras['max_abs_diff_vs_fresh']:.3g} (layers {classes}; the reference engine rolls back by "
                  f"snapshot: engine_rollback_vs_fresh)")
        obs.skipped("rollback_vs_fresh", "tensor", reason, "unsupported")
        return obs.stop(reason)
    rolled, state, _ = result
    obs.add("rollback", state)
    obs.reference("rollback_vs_fresh", *narrowed(rolled, fresh), kind="tensor", implementations_differ=False)
    reference = zoo.oracle.model(case.model)
    if reference is None:
        obs.skipped("rollback_vs_engine", "tensor", zoo.oracle.gap(case.model))
        return obs
    expected = engine.logits_cached(zoo, case.model, [*ids[0].tolist(), *feed])[-len(feed):]
    obs.reference("rollback_vs_engine", *narrowed(rolled, expected), kind="tensor")
    return obs


def engine_rollback(zoo: Zoo, case: Case, ids: torch.Tensor, draft: list[int], feed: list[int],
                    fresh: torch.Tensor) -> Observation:
    """engine_rollback_vs_fresh: the reference engine's own rollback (rewind: truncation for KV
    caches, the snapshot before the draft for recurrent states) run on the same prompt, wrong
    draft and fed tokens, against transformers' fresh run - what a rollback on this model must
    give, whether or not the installed transformers can do it."""
    obs = Observation()
    reference = zoo.oracle.model(case.model)
    if reference is None:
        obs.skipped("engine_rollback_vs_fresh", "tensor", zoo.oracle.gap(case.model))
        return obs
    prompt = ids[0].cpu()

    def rewound() -> torch.Tensor:
        caches = reference.new_caches(slack=DRAFT)
        reference.forward(prompt, torch.arange(len(prompt)), caches)
        reference.forward(torch.tensor(draft), torch.arange(len(prompt), len(prompt) + DRAFT), caches)
        for cache in caches:
            cache.rewind(DRAFT)
        return torch.stack([reference.forward(torch.tensor([t]), torch.tensor([len(prompt) + i]), caches).logits[-1]
                            for i, t in enumerate(feed)])

    rows = zoo.oracle.answer("rollback", (case.model,), {"prompt": prompt.tolist(), "draft": list(draft),
                                                         "feed": list(feed)}, rewound)
    obs.reference("engine_rollback_vs_fresh", *narrowed(fresh, rows), kind="tensor")
    return obs
