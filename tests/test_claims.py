"""Release notes, checked (harness/checking/claims.py): claims against a comparison's outcomes."""

from pathlib import Path

import pytest

from harness.checking.claims import (
    NOT_OBSERVABLE,
    NOT_OBSERVED,
    OBSERVED,
    ClaimsError,
    evaluate,
    load_claims,
    markdown_lines,
)
from harness.report import render_html
from harness.schema import Outcome, Results, Status

ROOT = Path(__file__).resolve().parents[1]


def out(suite, case, field, status="changed", category="feature-added", detail="", diff=None):
    return Outcome(suite, case, field, "capability", Status(status), detail, category, diff or {})


CLAIMS = {"title": "Toy 1.1", "claims": [
    {"id": "lm-head", "text": "embed_out -> lm_head", "evidence": [
        {"suite": "backends", "case": "neox-*", "field": "state_dict_keys", "expect": {"detail": "lm_head.weight: added"}}]},
    {"id": "backend-flag", "text": "a new flag", "evidence": [
        {"suite": "backends", "case": "bigcode", "field": "supports", "expect": {"category": ["feature-added"]}}]},
    {"id": "kernel", "text": "a kernel nobody records", "evidence": [
        {"suite": "backends", "case": "*", "field": "kernel_name"}]},
    {"id": "probe", "text": "a new probe raises", "evidence": [
        {"suite": "contracts", "case": "p", "field": "result", "expect": {"status": ["new"], "new": "ValueError"}}]},
]}


def test_each_claim_is_observed_not_observed_or_not_observable():
    outcomes = [
        out("backends", "neox-contract", "state_dict_keys", "regression", "real-change",
            "embed_out.weight: removed (was ''); lm_head.weight: added ''"),
        out("backends", "bigcode", "supports", "pass", "", "unchanged"),  # recorded, did not change
        out("contracts", "p", "result", "new", "", "no baseline record", {"new": '{"raises": "ValueError"}'}),
        out("outputs", "m.assisted", "error", "regression", "broken", "raises now: ValueError: cannot crop"),
    ]
    report = evaluate(CLAIMS, outcomes)
    assert {r.id: r.verdict for r in report.rows} == {
        "lm-head": OBSERVED, "backend-flag": NOT_OBSERVED, "kernel": NOT_OBSERVABLE, "probe": OBSERVED}
    assert report.rows[0].evidence == "backends/neox-*/state_dict_keys: 1/1 case(s) as claimed (regression)"
    assert report.rows[2].evidence == "backends/*/kernel_name: no such field"
    # the crash is in no claim: listed, as its finding's sentence; the covered regression is not
    assert report.uncovered == ("regression (broken) in `error` of 1 case: raises now: ValueError: cannot crop",)


def test_an_evidence_entry_that_is_not_met_makes_the_claim_not_observed():
    claims = {"claims": [{"id": "two", "text": "t", "evidence": [
        {"suite": "s", "case": "a", "field": "f", "expect": {"detail": "x: 1 -> 2"}},
        {"suite": "s", "case": "b", "field": "f", "expect": {"detail": "y: 1 -> 2"}}]}]}
    outcomes = [out("s", "a", "f", detail="x: 1 -> 2"), out("s", "b", "f", detail="y: 1 -> 3")]
    (row,) = evaluate(claims, outcomes).rows
    assert row.verdict == NOT_OBSERVED and "0/1" in row.evidence


def test_markdown_lists_claims_and_uncovered_findings():
    lines = markdown_lines(evaluate(CLAIMS, [out("s", "c", "f", detail="added z")]))
    text = "\n".join(lines)
    assert "| **lm-head**: embed_out -> lm_head | not observable on this zoo |" in text
    assert "### Not in the release notes (1)" in text and "- changed (feature-added) in `f` of 1 case: added z" in text


def test_bad_claims_files_are_one_line_errors_naming_the_file(tmp_path):
    path = tmp_path / "c.json"
    for content, message in (("{", "cannot read claims"), ('{"claims": []}', "non-empty 'claims' list"),
                             ('{"claims": [{"id": "a", "text": "t"}]}', "needs a non-empty 'evidence' list"),
                             ('{"claims": [{"id": "a", "text": "t", "evidence": [{"suite": "s"}]}]}',
                              "needs string 'suite', 'case' and 'field'"),
                             ('{"claims": [{"id": "a", "text": "t", "evidence": [{"suite": "s", "case": "c", '
                              '"field": "f", "expect": {"valu": 1}}]}]}', r"unknown expect key\(s\) valu")):
        path.write_text(content)
        with pytest.raises(ClaimsError, match=message) as info:
            load_claims(path)
        assert str(info.value).startswith(str(path))


def test_the_committed_5_14_claims_file_loads_and_names_the_release_notes_claims():
    claims = load_claims(ROOT / "docs" / "claims" / "transformers-5.14.json")
    ids = {c["id"] for c in claims["claims"]}
    assert {"mtp-generate-path", "ensemble-weight", "ensemble-greedy", "static-cache-sdpa-prefill",
            "layer-types-cache-dispatch", "gptneox-lm-head", "gptbigcode-attention-backend"} <= ids


def test_report_html_shows_findings_then_claims():
    outcomes = [out("backends", "neox-contract", "state_dict_keys", "regression", "real-change", "lm_head.weight: added ''")]
    results = Results(env={}, baseline_env={}, outcomes=outcomes)
    html = render_html(results, evaluate(CLAIMS, outcomes))
    assert html.index('id="findings"') < html.index('id="claims"') < html.index('id="suites"')
    assert "1 distinct finding (1 regression)" in html
    assert 'data-claim="lm-head" data-verdict="observed"' in html



def test_the_committed_v5_migration_claims_file_loads_and_names_the_guide_claims():
    claims = load_claims(ROOT / "docs" / "claims" / "transformers-5.0.json")
    ids = {c["id"] for c in claims["claims"]}
    assert {"tokenizers-backend", "decode-unified", "encode-plus", "dynamic-weight-loading", "default-cache-by-model",
            "generation-params-not-in-config", "output-aliases-removed"} <= ids
