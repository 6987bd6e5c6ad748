"""Findings grouped by cause (harness/checking/findings.py `by_cause`, harness/checking/causes.py):
the outcomes are made by the comparers from values built here, then placed on cases."""

from __future__ import annotations

from dataclasses import replace

from harness.checking.compare import compare_field
from harness.checking.findings import group_findings
from harness.schema import Category, Field, Outcome, Status


def judged(case: str, name: str, kind: str, old, new, suite: str = "contracts") -> Outcome:
    return replace(compare_field(name, Field(kind, new), Field(kind, old)), suite=suite, case=case)


def _removed_value() -> list[Outcome]:
    """cache_implementation="dynamic_full" removed: declared and accepted lose it, and the staged
    run of that value now raises."""
    staged = {"dynamic_full": {"stage": "ran", "cache": "DynamicCache"}, "static": {"stage": "ran"}}
    now = {"dynamic_full": {"stage": "init", "raises": "ValueError"}, "static": {"stage": "ran"}}
    case = "genconfig-values-cache_implementation"
    return [judged(case, "declared", "capability", ["dynamic_full", "static"], ["static"]),
            judged(case, "accepted", "capability", {"dynamic_full": True, "static": True}, {"static": True}),
            judged(case, "stages", "exact", staged, now)]


def test_a_removed_value_and_what_names_it_are_one_finding():
    outcomes = _removed_value()
    assert {o.status for o in outcomes} == {Status.CHANGED, Status.REGRESSION}
    findings = group_findings(outcomes)
    assert len(findings) == 1
    (f,) = findings
    assert f.status is Status.REGRESSION and set(f.fields) == {"declared", "accepted", "stages"}
    assert f.sentence().startswith("one cause, `dynamic_full` no longer honoured (removed or ignored): regression")


def test_a_model_s_attention_backend_explains_its_numeric_differences_only():
    model = "gemma2-softcap"
    attention = judged(model, "default_attn_implementation", "exact", "eager", "sdpa", "backends")
    logits = [judged(f"{model}.plain.dynamic.short-{i}.greedy", "first_logits", "tensor", [1.0, 2.0 + i],
                     [1.5, 2.0 + i], "outputs") for i in range(2)]
    other = judged("llama-target.plain.dynamic.short-0.greedy", "first_logits", "tensor", [1.0], [2.0], "outputs")
    error = judged(f"{model}.assisted.static.short-0.greedy", "error", "exact", None,
                   {"type": "ValueError", "message": "not supported with Static cache classes"}, "outputs")
    findings = group_findings([attention, *logits, other, error])
    merged = [f for f in findings if f.cause]
    assert len(merged) == 1 and set(merged[0].fields) == {"default_attn_implementation", "first_logits"}
    assert len(merged[0].cases) == 3
    assert len(findings) == 3  # llama-target's difference and the error are causes of their own


def test_unrelated_differences_stay_apart():
    a = judged("api-x", "signature", "exact", [["a", "POSITIONAL_OR_KEYWORD", "<required>"]],
               [["b", "POSITIONAL_OR_KEYWORD", "<required>"]])
    b = judged("generation-config-keys", "keys", "capability", ["x", "y"], ["x"])
    assert [f.cause for f in group_findings([a, b])] == ["", ""]


def test_a_keyword_ignored_now_and_its_rename_are_one_finding():
    ignored = judged("forward-cache-keyword", "fills_cache", "capability", {"cache": "accepted"}, {"cache": "ignored"})
    keys = judged("forward-cache-keyword", "output_keys", "exact", ["logits", "cache"], ["logits", "past_key_values"])
    (f,) = group_findings([ignored, keys])
    assert f.cause == "`cache` no longer honoured (removed or ignored)" and set(f.fields) == {"fills_cache", "output_keys"}


def test_a_backend_that_loads_now_is_the_attention_cause_of_its_model():
    """Gemma 2 under 5.20 against 5.24: SDPA loads (5.24 refused it) and its logits move - one cause."""
    model = "gemma2-softcap"
    refused = {"eager": None, "sdpa": {"type": "ValueError", "message": "does not support sdpa"}}
    loads = replace(compare_field("attn_load_error", Field("exact", {"eager": None, "sdpa": None}, {"outcome": "each"}),
                                  Field("exact", refused)), suite="backends", case=model)
    logits = judged(f"{model}.plain.dynamic.short-0.greedy", "first_logits", "tensor", [1.0, 2.0], [1.5, 2.0],
                    "outputs")
    merged = [f for f in group_findings([loads, logits]) if f.cause]
    assert len(merged) == 1 and set(merged[0].fields) == {"attn_load_error", "first_logits"}


def test_a_backend_change_that_is_a_fix_is_one_finding_with_its_fixes():
    """5.14.0 -> 5.22.2: Gemma 2 refuses SDPA (which dropped its soft-cap) and loads eager; the
    attention fields are the fix's mechanism, the logits moved to the engine's: one finding, fixed.
    The same fixes beside a backend change that is a regression stay told apart."""
    model = "gemma2-softcap"

    def fixed(case: str, name: str, suite: str) -> Outcome:
        o = judged(case, name, "tensor", [1.0, 2.0], [1.5, 2.0], suite)
        return replace(o, status=Status.CHANGED, category=Category.FIXED, detail="moved to its oracle's value")

    mechanism = replace(judged(model, "default_attn_implementation", "exact", "sdpa", "eager", "backends"),
                        status=Status.CHANGED, category=Category.FIXED, detail="the mechanism of the fix of logits")
    logits = [fixed(model, "logits", "backends"), fixed(f"{model}.plain.dynamic.short-0.greedy", "first_logits", "outputs")]
    (f,) = [f for f in group_findings([mechanism, *logits]) if f.cause]
    assert f.status is Status.CHANGED and f.category == Category.FIXED.value
    assert set(f.fields) == {"default_attn_implementation", "logits", "first_logits"}
    silent = judged(model, "default_attn_implementation", "exact", "sdpa", "eager", "backends")  # a regression
    findings = group_findings([silent, *logits])
    assert [f.status for f in findings if f.category == Category.FIXED.value] == [Status.CHANGED, Status.CHANGED]


def test_a_signature_holding_two_changes_joins_neither_removed_names_group():
    """5.17 against the 5.24 records: create_chunked_causal_mask's signature renames `cache` and drops
    `block_sequence_ids` - two causes in one outcome, so the `cache` group (the sliding-window mask's
    rename, generate()'s output keys) does not take it; a signature renaming `cache` alone joins."""
    ignored = judged("forward-cache-keyword", "fills_cache", "capability", {"cache": "accepted"}, {"cache": "ignored"})
    keys = judged("forward-cache-keyword", "output_keys", "exact", ["logits", "cache"], ["logits", "past_key_values"])
    outcomes = [ignored, keys,
                replace(Outcome("contracts", "api-create_chunked_causal_mask", "signature", "exact", Status.REGRESSION,
                                "incompatible with the baseline's callers: parameter `past_key_values` renamed from "
                                "`cache`; parameter `block_sequence_ids` removed", Category.REAL_CHANGE),
                        diff={"changes": ["parameter `past_key_values` renamed from `cache`",
                                          "parameter `block_sequence_ids` removed (was positional or keyword)"]})]
    findings = group_findings(outcomes)
    merged = next(f for f in findings if f.cause)
    assert "contracts/api-create_chunked_causal_mask" not in merged.cases
    assert any(f.cases == ["contracts/api-create_chunked_causal_mask"] and not f.cause for f in findings)


def test_a_keyword_renamed_to_a_name_and_what_names_it_are_one_finding():
    """5.14.0 -> 5.24.0: the forward's `past_key_values` becomes `cache` - fills_cache gains `cache`, the
    output keys and generate()'s result name it - one finding."""
    added = judged("forward-cache-keyword", "fills_cache", "capability", {"past_key_values": "accepted"},
                   {"past_key_values": "accepted", "cache": "accepted"})
    keys = judged("forward-cache-keyword", "output_keys", "exact", ["logits", "past_key_values"], ["logits", "cache"])
    result = judged("generate-dict", "result", "exact", {"keys": ["sequences", "past_key_values"]},
                    {"keys": ["sequences", "cache"]})
    (f,) = group_findings([added, keys, result])
    assert f.cause == "`cache` introduced (added, or renamed to)" and set(f.fields) == {"fills_cache", "output_keys", "result"}


def test_an_exception_gone_and_the_request_failures_that_quoted_it_are_one_fix():
    """5.14.0 -> 5.24.0: generate_batch no longer raises MemoryError (continuous batching without psutil),
    and the requests that had failed ('no finished result', their loop logging the MemoryError) are served."""
    from harness.checking.findings import Findings
    from harness.schema import Results

    old = {"type": "MemoryError", "message": "Memory footprint 1157120 is more than available memory 0"}
    gone = [Outcome("continuous", c, "error", "exact", Status.CHANGED, f"generates now; raised MemoryError: {old['message']}",
                    Category.FIXED, {"old": old, "new": None}) for c in ("g", "s")]
    other = Outcome("latency", "serving", "continuous_error", "exact", Status.CHANGED,
                    f"generates now; raised MemoryError: {old['message'].replace('1157120', '1157632')}", Category.FIXED,
                    {"old": {**old, "message": old["message"].replace("1157120", "1157632")}, "new": None})
    served = Outcome("continuous", "r", "request_errors", "exact", Status.CHANGED, "works now (request_errors.0); failed "
                     "before: 'no finished result for this request'", Category.FIXED,
                     {"old": "no finished result for this request", "new": None})
    logged = Outcome("continuous", "r", "warnings", "exact", Status.CHANGED, "root: 2 -> 0 items", Category.PRESENTATION_CHANGED,
                     {"deepdiff": {"iterable_item_removed": {"root[0]": "Error in generation loop: Memory footprint 1157632 "
                                                                        "is more than available memory 0"}}})
    grouped = Findings.of(Results({}, {}, [*gone, other, served, logged])).grouped
    assert len(grouped) == 1 and grouped[0].cause.startswith("one exception gone: `MemoryError")
