"""Findings: outcomes with one suite-independent cause grouped (harness/checking/findings.py)."""

from dataclasses import replace

from harness.checking.findings import cause, group_findings, headline, normalise
from harness.schema import Category, Outcome, Results, Status

CROP = "raises now: ValueError: Assisted decoding requires a cache that can be cropped"


def out(case, field="error", status="regression", category="broken", detail=CROP, suite="outputs", kind="exact"):
    return Outcome(suite, case, field, kind, Status(status), detail, category)


def test_normalise_masks_numbers_case_ids_and_env_keys_not_identifiers():
    a = normalise("raises now: IndexError: index_copy_(): index 43 is out of bounds for dimension 2 with size 43")
    b = normalise("raises now: IndexError: index_copy_(): index 106 is out of bounds for dimension 2 with size 106")
    assert a == b and "index_copy_" in a and "43" not in a
    assert normalise("seen in m.plain.short-0 only", ["m.plain.short-0"]) == "seen in <case> only"
    assert normalise("recorded in tf5.14.0-torch2.13.0-cpu-x86_64-fp32 but") == "recorded in <env> but"
    assert normalise("keys[1]: 'past' -> 'cache'") == normalise("keys[3]: 'past' -> 'cache'")


def test_same_cause_across_cases_and_suites_is_one_finding():
    outcomes = [out(f"m{i}.assisted.static") for i in range(13)]
    outcomes += [out("case-a", detail="raises now: IndexError: index 43 is out of bounds ... size 43"),
                 out("case-b", suite="caches", detail="raises now: IndexError: index 106 is out of bounds ... size 106")]
    findings = group_findings(outcomes)
    assert [len(f.cases) for f in findings] == [13, 2]
    assert findings[1].cases == ["outputs/case-a", "caches/case-b"]
    assert findings[1].example.endswith("size 43")  # the real text, not the mask
    assert headline(findings) == "2 distinct findings (2 regression)"


def test_different_field_status_or_category_are_different_findings():
    base = out("case-a")
    keys = {cause(o) for o in (base, out("case-a", field="text"), out("case-a", status="changed"),
                                out("case-a", category="error-changed"))}
    assert len(keys) == 4


def test_passes_are_not_findings_and_order_is_regression_then_changed_missing_then_rest():
    outcomes = [out("case-n", field="tokens", status="new", category="", detail="no baseline record"),
                out("case-c", status="changed", category="fixed", detail="generates now"),
                out("case-p", status="pass", category="tie-flip", detail="tie-flip"),
                out("case-m", field="text", status="missing", category="missing-field", detail="recorded in X"),
                out("case-r", field="layers", detail="root[1]: 'sliding' -> 'chunked'", category="real-change")]
    findings = group_findings(outcomes)
    assert [f.status.value for f in findings] == ["regression", "changed", "missing", "new"]
    assert all(o.status is not Status.PASS for f in findings for o in f.outcomes)


def test_fields_a_crashing_case_no_longer_observes_follow_its_error_finding():
    outcomes = [out("case-a"), out("case-b"),
                out("case-a", field="tokens", status="missing", category="missing-field", detail="recorded in X"),
                out("case-b", field="tokens", status="missing", category="missing-field", detail="recorded in X"),
                out("case-c", field="tokens", status="missing", category="missing-field", detail="recorded in X")]
    findings = group_findings(outcomes)
    assert len(findings) == 2
    assert len(findings[0].follows) == 2 and "(+2 fields no longer observed)" in findings[0].sentence()
    assert findings[1].cases == ["outputs/case-c"]  # a missing field with no crash is its own finding
    every = [o for f in findings for o in f.outcomes + f.follows]
    assert sorted(map(id, every)) == sorted(map(id, outcomes))


def test_new_fields_of_one_record_are_one_finding_naming_the_fields():
    outcomes = [out("case-a", field=f, status="new", category="", detail="no baseline record") for f in ("tokens", "text")]
    (finding,) = group_findings(outcomes)
    assert finding.fields == ["tokens", "text"]
    assert finding.sentence() == "new in 2 fields (tokens, text) of 1 case: no baseline record"


def test_sentence_is_one_line_cut_to_width():
    finding = group_findings([out("case-a", detail="x" * 500 + "\nsecond line")])[0]
    line = finding.sentence(width=100)
    assert "\n" not in line and line.startswith("regression (broken) in `error` of 1 case: ") and line.endswith("...")


def test_one_exception_raised_now_by_many_calls_is_one_finding_wherever_the_baseline_stood():
    """Issue 62: 5.17.0 refuses a static cache for assisted generation - a new crash in 28 cases that
    generated in 5.14.0 (broken) and another exception in 4 that failed there otherwise (error-changed,
    two wordings): one cause, one finding; a different exception stays apart."""
    from dataclasses import replace

    from harness.schema import Category

    refusal = {"type": "ValueError", "message": "assisted generate is not supported with Static cache classes"}
    new = [replace(out(f"m.assisted.static.{i}", detail=f"raises now: ValueError: {refusal['message']}"),
                   diff={"old": None, "new": refusal}) for i in range(3)]
    other = [replace(out(f"m.prompt_lookup.static.{i}", status="changed", category="error-changed",
                         detail=f"fails in K too, not the upgrade's; now raises ValueError: {refusal['message']} "
                                f"(was IndexError: x{i})"),
                     diff={"old": {"type": "IndexError", "message": f"x{i}"}, "new": refusal}) for i in range(2)]
    apart = replace(out("m.plain.static.0", detail="raises now: KeyError: 'k'"),
                    diff={"old": None, "new": {"type": "KeyError", "message": "'k'"}})
    findings = group_findings([*new, *other, apart])
    assert len(findings) == 2
    merged = next(f for f in findings if len(f.cases) == 5)
    assert merged.status is Status.REGRESSION and "one exception raised now" in merged.cause
    assert merged.category == Category.BROKEN.value and "ValueError" in merged.cause


def test_one_cases_oracles_reading_its_tokens_part_at_one_step_are_one_finding():
    """5.25's prompt lookup on Qwen3.5: equals_plain_greedy, equals_reference_engine and steps_as_engine
    all read the token at step 8 - one observation, one finding; another step or case stays apart."""
    from harness.checking.findings import Findings

    def ref(field: str, case: str = "m.prompt_lookup.dynamic.short-0.greedy", step: int = 8) -> Outcome:
        return Outcome("outputs", case, field, "tokens", Status.REGRESSION,
                       f"tokens differ from step {step}: expected [294] vs observed [303]", Category.REAL_CHANGE,
                       against="reference")

    results = Results({"transformers": "5.25.0"}, {"transformers": "5.24.0"},
                      [ref("equals_plain_greedy"), ref("equals_reference_engine"), ref("steps_as_engine"),
                       ref("steps_as_engine", step=3, case="m.assisted.dynamic.short-0.greedy")])
    found = Findings.of(results).grouped
    merged = [f for f in found if len(f.outcomes) == 3]
    assert len(merged) == 1 and "part from their oracles at step 8" in merged[0].cause
    assert len([f for f in found if f.status is Status.REGRESSION]) == 2


def test_one_exception_gone_from_several_fields_is_one_fix():
    """5.14's sliding-window crop error gone from the rollback and from the same rollback called
    without arguments: one `fixed` finding, not two."""
    from harness.checking.findings import Findings

    old = {"type": "ValueError", "message": "Cannot `crop` a `DynamicSlidingWindowLayer`"}

    def fixed(field: str, case: str) -> Outcome:
        return Outcome("caches", case, field, "exact", Status.CHANGED, f"generates now; raised {old['type']}: ...",
                       Category.FIXED, {"old": old, "new": None})

    outcomes = [fixed(f, c) for f in ("rollback_error", "rollback_default_call_error") for c in ("a", "b")]
    grouped = Findings.of(Results({}, {}, outcomes)).grouped
    assert len(grouped) == 1 and grouped[0].cause.startswith("one exception gone: `ValueError")


def test_references_lost_to_the_exception_raised_now_follow_it():
    """5.17 against the 5.24 records: generate_batch raises MemoryError without psutil, and every
    in-run reference of those cases cannot run - one finding, whatever byte counts the calls quote."""
    from harness.checking.findings import Findings

    new = {"type": "MemoryError", "message": "Memory footprint 1157120 is more than available memory 0"}
    crash = Outcome("continuous", "m.cb.greedy", "error", "exact", Status.REGRESSION,
                    f"raises now: {new['type']}: {new['message']}", Category.BROKEN, {"old": None, "new": new})
    lost = [Outcome("continuous", case, field, "exact", Status.REGRESSION,
                    f"ran in KEY (pass: identical) and cannot run now: {why}", Category.REFERENCE_LOST,
                    against="reference")
            for case, field, why in (("m.cb.greedy", "tokens_as_engine", f"generate_batch raised {new['type']}: "
                                      f"{new['message']}"),
                                     ("m.cb.requests", "draws_as_engine", "a request failed: Memory footprint 1157632 "
                                      "is more than available memory 0"))]
    other = Outcome("continuous", "m.cb.sample", "in_support", "exact", Status.REGRESSION,
                    "ran in KEY (pass: identical) and cannot run now: a request failed: another error",
                    Category.REFERENCE_LOST, against="reference")
    grouped = Findings.of(Results({}, {}, [crash, *lost, other])).grouped
    merged = [f for f in grouped if f.cause.startswith("one exception raised now")]
    assert len(merged) == 1 and {o.field for o in merged[0].outcomes} == {"error", "tokens_as_engine", "draws_as_engine"}
    assert len(grouped) == 2


def test_fields_skipped_because_the_step_raised_follow_that_exception():
    """5.17 against the 5.14 records: the sliding-window rollback raises a RuntimeError (another
    exception than 5.14's crop error: error-changed) and rollback_vs_fresh, which needs that rollback,
    is skipped quoting it (with the layers it ran on after it) - one finding; the requests of a
    continuous batch failing with a MemoryError per request (a failure held as words) and the fields
    skipped because a request failed or generate_batch raised it, whatever byte counts they quote - one
    finding; a skip for another reason stays apart."""
    from harness.checking.findings import Findings

    new = {"type": "RuntimeError", "message": "The size of tensor a (86) must match the size of tensor b (18)"}
    rollback = [Outcome("caches", m, field, "exact", Status.CHANGED,
                        f"fails in K too, not the upgrade's; now raises {new['type']}: {new['message']} (was ValueError: x)",
                        Category.ERROR_CHANGED, {"old": {"type": "ValueError", "message": "x"}, "new": new})
                for m in ("a", "b") for field in ("rollback_error", "rollback_default_call_error")]
    skipped = [Outcome("caches", m, "rollback_vs_fresh", "tensor", Status.SKIPPED,
                       f"crop/rollback after a rejected 3-token draft raised {new['type']}: {new['message']} (layers {ls})",
                       Category.UNSUPPORTED) for m, ls in (("a", "['DynamicLayer']"), ("b", "['Dynamic', 'Sliding']"))]
    requests = Outcome("continuous", "m.cb.requests", "request_errors", "exact", Status.CHANGED,
                       "fails in K too, not the upgrade's; now fails otherwise (request_errors.0): 'Memory footprint "
                       "1157632 is more than available memory 0' (was 'no finished result')", Category.ERROR_CHANGED,
                       {"old": "no finished result", "new": "Memory footprint 1157632 is more than available memory 0"})
    not_checked = [Outcome("continuous", case, field, "exact", Status.SKIPPED, why, Category.NOT_CHECKED)
                   for case, field, why in (("m.cb.requests", "in_support", "a request failed: Memory footprint 1157632 "
                                             "is more than available memory 0"),
                                            ("m.cb.greedy", "tokens_as_engine", "generate_batch raised MemoryError: "
                                             "Memory footprint 1157120 is more than available memory 0"))]
    apart = Outcome("caches", "c", "rollback_vs_fresh", "tensor", Status.SKIPPED,
                    "crop(-3) raised nothing but did not roll the linear-attention layers back", Category.UNSUPPORTED)
    grouped = Findings.of(Results({}, {}, [*rollback, *skipped, requests, *not_checked, apart])).grouped
    assert len(grouped) == 3
    crash = next(f for f in grouped if f.cause.startswith("one exception raised now: `RuntimeError"))
    assert {o.field for o in crash.outcomes} == {"rollback_error", "rollback_default_call_error", "rollback_vs_fresh"}
    assert crash.status is Status.CHANGED and crash.category == Category.ERROR_CHANGED.value
    memory = next(f for f in grouped if f.cause.startswith("one failure now: `Memory footprint"))
    assert {o.field for o in memory.outcomes} == {"request_errors", "in_support", "tokens_as_engine"}
    assert [f for f in grouped if f.outcomes == [apart]]


def test_one_sampler_mechanism_gone_from_its_white_box_fields_is_one_fix():
    """5.17's MTP drafts drawn from the processed q (H9's fix): exact_draft, exact_acceptance,
    exact_residual and exact_emitted of two cases were each fixed, the baseline naming one mechanism -
    one finding; another mechanism, or the same one still there (known-deviation), stays apart."""
    from harness.checking.compare import compare_field
    from harness.checking.findings import Findings
    from harness.schema import Field

    why = ["the acceptance test used another q than the draft was drawn from (TV 0.024)"]

    def deviation(tv: float, mechanism: list[str]) -> Field:
        return Field("deviation", {"tv": tv, "positions": 8}, {"detectable_tv": 1e-5, "mechanism": mechanism,
                                                               "worst_at": "call 0 step 1"})

    outcomes = [replace(compare_field(f, deviation(1e-7, []), deviation(0.02, why)), suite="sampling", case=c)
                for f in ("exact_draft", "exact_acceptance", "exact_residual", "exact_emitted") for c in ("a", "b")]
    other = replace(compare_field("exact_emitted", deviation(1e-7, []), deviation(0.2, ["the drafter's processors"])),
                    suite="sampling", case="c")
    grouped = Findings.of(Results({}, {}, [*outcomes, other])).grouped
    assert all(o.category is Category.FIXED for o in [*outcomes, other])
    assert len(grouped) == 2
    merged = next(f for f in grouped if len(f.outcomes) == 8)
    assert merged.cause.startswith("one mechanism of the sampler: the acceptance test used another q")


def test_a_checkpoint_that_loads_now_is_one_fix_with_what_follows_from_it():
    """5.17 loads glm4moe-mtp-dense's MTP head (its weights were missing in 5.14): the load contract's
    `load` fixed, its `expected` keys and `use_mtp` following it, the outputs cases of that model
    generating now (their old error the same RuntimeError) and their fields recorded for the first time
    (new) - one finding; another model's fix and a new field elsewhere stay apart."""
    from harness.checking.findings import Findings

    old = {"type": "RuntimeError", "message": "The following MtpModel weights are missing from m-dense"}
    contract = "mtp-checkpoint-m-dense"
    outcomes = [
        Outcome("contracts", contract, "load", "exact", Status.CHANGED, "works now (load); failed before: {...}",
                Category.FIXED, {"old": {"raises": "RuntimeError", "missing": {"w": "0"}}, "new": {"raises": None}}),
        Outcome("contracts", contract, "expected", "exact", Status.CHANGED, "follows the fix of load (works now); here",
                Category.FIXED),
        Outcome("contracts", contract, "use_mtp", "capability", Status.CHANGED, "added ran", Category.FEATURE_ADDED,
                {"added": ["ran"], "removed": []}),
        *[Outcome("outputs", f"m-dense.mtp.dynamic.{p}", "error", "exact", Status.CHANGED,
                  f"generates now; raised {old['type']}: {old['message']}", Category.FIXED, {"old": old, "new": None})
          for p in ("short", "long")],
        *[Outcome("outputs", f"m-dense.mtp.dynamic.{p}", f, "tokens", Status.NEW, "no baseline record")
          for p in ("short", "long") for f in ("tokens", "drafts")],
    ]
    apart = [Outcome("outputs", "m.plain.dynamic.short", "error", "exact", Status.CHANGED,
                     "generates now; raised RuntimeError: another", Category.FIXED,
                     {"old": {"type": "RuntimeError", "message": "another"}, "new": None}),
             Outcome("latency", "n.generate", "generate_plain", "latency", Status.NEW, "no baseline record")]
    grouped = Findings.of(Results({}, {}, [*outcomes, *apart])).grouped
    merged = [f for f in grouped if f.cause.startswith("the load of m-dense")]
    assert len(merged) == 1 and len(merged[0].outcomes) == len(outcomes)
    assert merged[0].status is Status.CHANGED and merged[0].category == Category.FIXED.value
    assert len(grouped) == 3


def test_a_static_case_that_raises_now_says_its_baseline_fell_back_to_a_dynamic_cache():
    """5.17 refuses a static cache for assisted generation; 5.14 generated there on a DynamicCache (with
    a warning) - what worked before was not the static cache asked, and the finding says so."""
    from harness.checking.core import Rules, missing_fields
    from harness.checking.findings import Findings
    from harness.schema import Field, Record
    from harness.settings.config import Thresholds

    new = {"type": "ValueError", "message": "assisted generate is not supported with Static cache classes"}
    case = "m.assisted.static.short-0.greedy"
    crash = Outcome("outputs", case, "error", "exact", Status.REGRESSION, f"raises now: ValueError: {new['message']}",
                    Category.BROKEN, {"old": None, "new": new})
    record = Record("outputs", case, {}, {"error": Field("exact", None), "cache_ran_on": Field("exact", "dynamic"),
                                          "tokens": Field("tokens", [[1, 2]])})
    lost = missing_fields(record, {"error"}, Rules(alpha=0.01, thresholds=Thresholds(), env={}), crashed="ValueError")
    finding = Findings.of(Results({}, {}, [crash, *lost])).grouped[0]
    assert len(finding.follows) == 2
    assert "in the baseline 1 of these cases ran on a dynamic cache, not the static one asked" in finding.sentence(400)


def test_a_crash_takes_its_cases_lost_capabilities_references_and_the_warning_quoting_it():
    """5.17 against the 5.24 records: the sliding-window rollback raises a RuntimeError now - the case's
    rollback_supported capability gone and its rollback_vs_fresh reference lost follow it; the continuous
    requests failing with a MemoryError log it as a warning - that warning follows it too. A capability
    lost with no crash in its case takes the references that need it (sanitize_control_tokens)."""
    from harness.checking.findings import Findings

    new = {"type": "RuntimeError", "message": "The size of tensor a (86) must match the size of tensor b (18)"}
    crash = [Outcome("caches", m, "rollback_error", "exact", Status.REGRESSION,
                     f"raises now: {new['type']}: {new['message']}", Category.BROKEN, {"old": None, "new": new})
             for m in ("a", "b")]
    gone = [Outcome("caches", m, "rollback_supported", "capability", Status.CHANGED, "removed rollback_supported",
                    Category.FEATURE_REMOVED, {"added": [], "removed": ["rollback_supported"]}) for m in ("a", "b")]
    memory = {"type": "MemoryError", "message": "Memory footprint 1157120 is more than available memory 0"}
    requests = [Outcome("continuous", "r", "error", "exact", Status.REGRESSION,
                        f"raises now: MemoryError: {memory['message']}", Category.BROKEN, {"old": None, "new": memory}),
                Outcome("continuous", "r", "warnings", "exact", Status.CHANGED, "root: 0 -> 1 items: [] -> [\"Error in "
                        "generation loop: Memory footprint 1157632 is m...", Category.PRESENTATION_CHANGED,
                        {"deepdiff": {"iterable_item_added": {"root[0]": "Error in generation loop: Memory footprint "
                                                                         "1157632 is more than available memory 0"}}})]
    chat = [Outcome("text", "c", "supports_sanitize_control_tokens", "capability", Status.CHANGED,
                    "removed supports_sanitize_control_tokens", Category.FEATURE_REMOVED,
                    {"added": [], "removed": ["supports_sanitize_control_tokens"]}),
            Outcome("text", "c", "sanitized_content_is_text", "exact", Status.REGRESSION,
                    "ran in K (pass: identical) and cannot run now: apply_chat_template has no sanitize_control_tokens",
                    Category.REFERENCE_LOST, against="reference")]
    unrelated = Outcome("caches", "a", "api", "exact", Status.CHANGED, "added X.y", Category.REAL_CHANGE)
    grouped = Findings.of(Results({}, {}, [*crash, *gone, *requests, *chat, unrelated])).grouped
    assert len(grouped) == 4
    rollback = next(f for f in grouped if "RuntimeError" in f.cause)
    assert set(rollback.fields) == {"rollback_error", "rollback_supported"} and rollback.status is Status.REGRESSION
    assert set(next(f for f in grouped if "MemoryError" in f.cause).fields) == {"error", "warnings"}
    assert next(f for f in grouped if "`supports_sanitize_control_tokens` lost" in f.cause).cases == ["text/c"]


def test_a_fix_takes_what_its_cases_report_now_but_not_their_other_causes():
    """5.19 fixes 5.14's sliding-window crop error: rollback_supported added and the rollback's fields
    recorded for the first time follow the fix; gemma2's references failing in the baseline too (its
    soft-cap, another cause) in the same case stay apart."""
    from harness.checking.findings import Findings

    old = {"type": "ValueError", "message": "Cannot `crop` a `DynamicSlidingWindowLayer`"}
    fixes = [Outcome("caches", m, field, "exact", Status.CHANGED, f"generates now; raised ValueError: {old['message']}",
                     Category.FIXED, {"old": old, "new": None}) for m in ("a", "b")
             for field in ("rollback_error", "rollback_default_call_error")]
    reports = [Outcome("caches", m, "rollback_supported", "capability", Status.CHANGED, "added rollback_supported",
                       Category.FEATURE_ADDED, {"added": ["rollback_supported"], "removed": []}) for m in ("a", "b")]
    recorded = [Outcome("caches", m, "rollback", "exact", Status.NEW, "no baseline record") for m in ("a", "b")]
    known = Outcome("caches", "a", "engine_rollback_vs_fresh", "tensor", Status.CHANGED,
                    "fails in K too, not the upgrade's: 1525/1536 elements beyond tolerance", Category.KNOWN_FAILURE,
                    against="reference")
    grouped = Findings.of(Results({}, {}, [*fixes, *reports, *recorded, known])).grouped
    assert len(grouped) == 2
    fix = next(f for f in grouped if f.cause.startswith("one exception gone"))
    assert set(fix.fields) == {"rollback_error", "rollback_default_call_error", "rollback_supported", "rollback"}


def test_a_presenters_changes_and_the_timed_fields_one_reason_left_unjudged_are_one_finding_each():
    """5.24's streamer cuts its pieces otherwise in three cases (three different diffs): one finding; the
    latency fields not judged because the machine was not in its recorded state: one finding, whatever
    ratio each quotes; a distribution not checked stays apart."""
    from harness.checking.findings import Findings

    pieces = [Outcome("stopping", c, "pieces", "exact", Status.CHANGED, f"TextIteratorStreamer[{i}]: 'a{i}' -> 'b'",
                      Category.PRESENTATION_CHANGED) for i, c in enumerate(("p", "q", "r"))]
    timed = [Outcome("latency", c, f, "latency", Status.SKIPPED, f"not judged: the calibration took x{r} its recorded "
                     f"time{' (busy)' if r > 1 else ''}", Category.NOT_JUDGED)
             for c, f, r in (("l.decode", "decode_dynamic", 0.6), ("l.generate", "generate_plain", 1.56))]
    drawn = Outcome("outputs", "s", "distribution", "distribution", Status.SKIPPED, "not checked: n = 600",
                    Category.NOT_CHECKED)
    grouped = Findings.of(Results({}, {}, [*pieces, *timed, drawn])).grouped
    assert len(grouped) == 3
    assert next(f for f in grouped if f.fields == ["pieces"]).cases == ["stopping/p", "stopping/q", "stopping/r"]
    assert len(next(f for f in grouped if f.cause == "timed fields not-judged").outcomes) == 2


def test_the_fields_a_declared_upstream_failure_leaves_unchecked_are_one_finding():
    """Continuous batching without psutil (a declared known upstream failure, in the baseline as now):
    generate_batch's MemoryError and the requests' 'no finished result' leave fields unchecked in four
    cases - one finding naming the declared failure; a skip in a case without it stays apart."""
    from harness.checking.findings import Findings

    info = [Outcome("continuous", c, "known_upstream_failure", "exact", Status.INFO, "3 of 3 failed as a known "
                    "upstream failure does: without psutil the CPU's memory breakdown is all 0 (get_device...)",
                    Category.KNOWN_FAILURE) for c in ("g", "s", "r")]
    skipped = [Outcome("continuous", c, f, "exact", Status.SKIPPED, why, Category.NOT_CHECKED)
               for c, f, why in (("g", "tokens_as_engine", "generate_batch raised MemoryError: Memory footprint 1"),
                                 ("s", "in_support", "generate_batch raised MemoryError: Memory footprint 2"),
                                 ("r", "draws_as_engine", "a request failed: no finished result for this request"))]
    apart = Outcome("continuous", "x", "in_support", "exact", Status.SKIPPED, "not checked: n = 10", Category.NOT_CHECKED)
    grouped = Findings.of(Results({}, {}, [*info, *skipped, apart])).grouped
    assert len(grouped) == 2
    assert grouped[0].cause.startswith("a known upstream failure: without psutil the CPU's memory breakdown is all 0")
    assert len(grouped[0].outcomes) == 3


def test_a_declared_upstream_failure_takes_the_exception_it_raises_in_other_cases_and_reachable_positions_merge():
    """5.17 against the 5.24 records: continuous batching without psutil raises MemoryError in the declared
    cases and in cb.beam / the serving latency case, which declare nothing - one finding under the declared
    failure; exact_emitted and exact_residual reaching fewer positions (every one exact) - one finding."""
    from harness.checking.findings import Findings

    new = {"type": "MemoryError", "message": "Memory footprint 1 is more than available memory 0"}
    info = Outcome("continuous", "g", "known_upstream_failure", "exact", Status.INFO, "1 of 1 failed as a known upstream "
                   "failure does: without psutil the memory breakdown is all 0 (...)", Category.KNOWN_FAILURE)
    crash = [Outcome(s, c, f, "exact", Status.REGRESSION, f"raises now: MemoryError: {new['message']}", Category.BROKEN,
                     {"old": None, "new": new}) for s, c, f in (("continuous", "g", "error"), ("continuous", "beam", "error"),
                                                                 ("latency", "serving", "continuous_error"))]
    lost = Outcome("continuous", "g", "requests", "exact", Status.REGRESSION, "one failure: no finished result",
                   Category.REFERENCE_LOST, against="reference")
    reach = [Outcome("sampling", "m", f, "deviation", Status.CHANGED, "fewer positions reachable: the hooks observed "
                     f"{n} positions, the baseline record {n + 1}; every sampled token observed", Category.COVERAGE_LOST,
                     {"tv": 0.0}) for f, n in (("exact_emitted", 16), ("exact_residual", 7))]
    apart = Outcome("continuous", "g", "tokens", "tokens", Status.REGRESSION, "tokens differ from step 3",
                    Category.REAL_CHANGE)
    grouped = Findings.of(Results({}, {}, [info, *crash, lost, *reach, apart])).grouped
    assert len(grouped) == 3
    crash_group = next(f for f in grouped if "MemoryError" in f.cause or "upstream" in f.cause)
    assert len(crash_group.outcomes) == 4 and apart not in crash_group.outcomes
    assert set(next(f for f in grouped if f.status is Status.CHANGED).fields) == {"exact_emitted", "exact_residual"}


def test_a_models_references_failing_in_the_baseline_and_in_cases_it_could_not_run_are_one_finding():
    """5.13.1 -> 5.14.0: Gemma 2's references fail in the baseline too (its SDPA soft-cap), and its
    assisted cases - crashing on crop in 5.13.1 - now run and fail the same references: one finding,
    still a regression (the baseline holds no verdict for those cases); another model's stays apart."""
    from harness.checking.findings import Findings

    def ref(case, field, status, category):
        return Outcome("outputs", case, field, "tensor", Status(status), f"510/512 elements beyond tolerance ({case[0]})",
                       category, against="reference")

    outcomes = [ref("g.plain.dynamic.short", "first_logits_vs_engine", "changed", Category.KNOWN_FAILURE),
                ref("g.plain.dynamic.short", "logits_vs_engine", "changed", Category.KNOWN_FAILURE),
                ref("g.assisted.dynamic.short", "first_logits_vs_engine", "regression", Category.REAL_CHANGE),
                ref("g.assisted.dynamic.short", "scores_as_engine", "regression", Category.REAL_CHANGE),
                ref("h.assisted.dynamic.short", "scores_as_engine", "regression", Category.REAL_CHANGE)]
    grouped = Findings.of(Results({}, {}, outcomes)).grouped
    assert len(grouped) == 2
    merged = next(f for f in grouped if f.cause)
    assert merged.models == ["g"] and len(merged.outcomes) == 4 and merged.status is Status.REGRESSION
    assert "cases the baseline could not run" in merged.cause
