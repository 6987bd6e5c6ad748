"""What a person reads: one test per item of issue 28's "Words" list (the layout ones - the sampling
table's N and headers on one line, no clipped chart label - are browser checks in
tests/test_report_browser.py), and the human list of what a run wrote."""

from __future__ import annotations

import re
from html import escape

import pytest

from harness.checking.compare import compare_field
from harness.checking.findings import group_findings, headline
from harness.checking.humane import change_detail, signature_lines
from harness.cli import build_parser, main
from harness.faults import FAULTS
from harness.report.page import render_html
from harness.report.sampling_table import sampling_rows
from harness.report.terminal import markdown_summary, print_summary
from harness.report.writes import writes_lines
from harness.schema import Category, Field, Outcome, Results, Status

R, KW, VAR = "POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY", "VAR_KEYWORD"


# ---- "signature findings do not name the parameter that was added or removed"

def test_a_signature_change_names_each_parameter_added_removed_renamed_or_redefaulted():
    old = [["self", R, "<required>"], ["max_length", R, "<required>"], ["layer_idx", R, 0], ["kwargs", VAR, "<required>"]]
    new = [["self", R, "<required>"], ["tokens_to_remove", R, "<required>"], ["layer_idx", R, None],
           ["cache", KW, None], ["kwargs", VAR, "<required>"]]
    assert signature_lines(old, new) == [
        "parameter `tokens_to_remove` renamed from `max_length`",
        "parameter `cache` added (keyword-only, default None)",
        "parameter `layer_idx` default 0 -> None",
    ]
    assert signature_lines(new, old)[1] == "parameter `cache` removed (was keyword-only, default None)"
    moved = signature_lines([["a", R, 1], ["b", R, 2]], [["b", R, 2], ["a", R, 1]])
    assert moved == ["parameters reordered: a, b -> b, a"]
    assert signature_lines([["a", R, 1]], [["a", KW, 1]]) == ["parameter `a` positional or keyword -> keyword-only"]
    # the finding's detail is these words, not "root: 9 -> 10 items: [[..."
    outcome = compare_field("signature", Field("exact", new), Field("exact", old))
    assert outcome.status is Status.REGRESSION and outcome.detail.startswith(
        "incompatible with the baseline's callers: parameter `tokens_to_remove` renamed")
    assert "items" not in outcome.detail and change_detail(["x"], ["y"]) == "root[0]: 'x' -> 'y'"


# ---- "`regression (expected-changed)` reads as a contradiction"

def test_a_changed_exact_distribution_is_named_for_what_changed():
    assert "expected-changed" not in {c.value for c in Category}
    assert Category.EXACT_DISTRIBUTION_CHANGED.value == "exact-distribution-changed"
    old = Field("distribution", {"a": 50, "b": 50}, {"expected": {"a": 0.5, "b": 0.5}})
    new = Field("distribution", {"a": 50, "b": 50}, {"expected": {"a": 0.6, "b": 0.4}})
    outcome = compare_field("joint", new, old)
    assert (outcome.status, outcome.category) == (Status.REGRESSION, "exact-distribution-changed")
    assert outcome.detail.startswith("the exact distribution changed: TV(old exact, new exact)")


# ---- "the sampling table marks as pass the joint cases that Needs attention lists as regressions"

def test_the_sampling_row_takes_the_worst_status_of_its_field():
    case = "m.plain.top_k.short-0-70.k2"
    outcomes = [
        Outcome("sampling", case, "joint", "distribution", Status.REGRESSION, "vs record", "exact-distribution-changed"),
        Outcome("sampling", case, "joint_vs_exact", "distribution", Status.PASS, "fits", "", {"n": 400, "p_value": 0.4},
                "reference"),
        Outcome("sampling", case, "joint_bias_vs_target", "exact", Status.PASS, "bias", "bias", {"tv_to_target": 0.1}),
    ]
    (row,) = sampling_rows(outcomes)
    assert row.status == "regression"
    html = render_html(Results(env={}, baseline_env=None, outcomes=outcomes))
    table = html[html.index('<table class="sampling">'):]
    assert '<tr class="st-regression">' in table[:table.index("</table>")]


# ---- the terminal: case ids whole, the summary once, fields vs tests, no dangling colon

def _long_case_outcomes() -> list[Outcome]:
    stem = "my-model.prompt_lookup.dynamic.short-0.sample0.with.a.long.tail"
    return [Outcome("outputs", f"{stem}.{end}", "tokens", "tokens", Status.REGRESSION, f"differs from step {step}",
                    "real-change") for step, end in ((1, "a1"), (2, "a2"))]  # two findings: never one collapsed row


def test_the_terminal_table_never_cuts_a_case_id(capsys):
    outcomes = _long_case_outcomes()
    print_summary(Results(env={}, baseline_env=None, outcomes=outcomes), "title")
    out = capsys.readouterr().out
    for o in outcomes:
        assert re.search(rf"outputs\s+{re.escape(o.case)}\s+tokens", out), o.case


def test_the_counts_say_they_are_fields_not_tests(capsys):
    print_summary(Results(env={}, baseline_env=None, outcomes=_long_case_outcomes()), "title")
    out = capsys.readouterr().out
    assert "fields compared, by status (pytest's 'passed' above counts tests):" in out
    assert re.search(r"status\s+fields\n", out) and not re.search(r"status\s+count", out)


def test_no_findings_is_a_sentence_without_a_dangling_colon(capsys):
    passing = [Outcome("outputs", "c", "tokens", "tokens", Status.PASS, "identical")]
    assert headline(group_findings(passing)) == "no findings: every field passed"
    print_summary(Results(env={}, baseline_env=None, outcomes=passing), "title")
    out = capsys.readouterr().out
    assert "no findings: every field passed." in out and "findings:\n" not in out and "0 distinct" not in out


def test_the_summary_is_printed_once_by_harness_check():
    """The plugin's own summary is off when `harness check` runs pytest: it prints the summary itself
    (end to end: tests/test_cli.py test_check_all_pass_writes_report, tests/test_journey.py)."""
    from harness.cli.project import QUIET_PYTEST

    assert "harness_terminal_summary=false" in QUIET_PYTEST


# ---- the command line: a flag typo, the descriptions, the fault list

def test_a_flag_typo_in_a_subcommand_prints_the_subcommands_usage(capsys):
    assert main(["check", "--bsaeline", "x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: harness check") and "unrecognized arguments: --bsaeline x" in err
    assert "did you mean --baseline?" in err
    assert main(["envs", "--bogus"]) == 2
    assert capsys.readouterr().err.startswith("usage: harness envs")


def test_every_subcommand_has_a_help_line_and_a_description():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    helps = {c.dest: c.help for c in sub._choices_actions}
    for name, command in sub.choices.items():
        assert helps.get(name), f"harness {name} has no help line in `harness --help`"
        assert command.description, f"harness {name} --help has no description"


def test_an_unknown_fault_lists_the_whole_catalogue(capsys):
    assert main(["check", "--inject-fault", "nope"]) == 2
    err = capsys.readouterr().err
    assert all(f.name in err for f in FAULTS) and f"catalogue's {len(FAULTS)} faults" in err
    assert main(["check", "--inject-fault", "top-p-one-fewr"]) == 2
    assert "did you mean top-p-one-fewer?" in capsys.readouterr().err


# ---- "the report's writes cell is a raw JSON dump"

WRITES = [{"path": "tf5.24.0-x/outputs/m.plain.json", "fields": {"tokens": "new", "text": "new", "n": "changed"},
           "replaced_unreadable": ""}]


def test_what_a_run_wrote_is_a_list_a_person_reads():
    meta = {"writes": WRITES, "write_rule": "fields without a record are written", "golden_dir": "golden/records"}
    assert writes_lines(meta) == ["records written: wrote 3 field(s) in 1 record(s) under golden/records/",
                                  "  tf5.24.0-x/outputs/m.plain.json: 1 changed (n), 2 new (text, tokens)"]
    none = {"writes": [], "write_rule": "not written - the baseline is another environment's (K); pass --record"}
    assert writes_lines(none) == ["records written: none (the baseline is another environment's (K); pass --record)"]
    html = render_html(Results(env={}, baseline_env=None, outcomes=[], meta=meta))
    assert '<ul class="writes"><li>tf5.24.0-x/outputs/m.plain.json: 1 changed (n), 2 new (text, tokens)</li></ul>' in html
    assert '"fields": {' not in html  # not the JSON of meta.writes


# ---- the checkpoint first, the rest under it

@pytest.mark.parametrize("render", ["terminal", "markdown", "html"])
def test_a_changed_checkpoint_is_the_first_finding_with_its_cases_differences_under_it(render, capsys):
    case = "my-model.plain.dynamic.short-0.greedy"
    outcomes = [
        Outcome("outputs", "llama-target.plain.dynamic.short-0.greedy", "tokens", "tokens", Status.REGRESSION,
                "tokens differ", "real-change"),  # the library's: stays outside the group
        Outcome("outputs", case, "checkpoint", "checkpoint", Status.CHANGED,
                "the checkpoint changed (model.safetensors sha256 111111111111 -> 222222222222)", "checkpoint-changed"),
        Outcome("outputs", case, "first_logits", "tensor", Status.REGRESSION, "max abs err 0.3", "real-change"),
        Outcome("outputs", case, "tokens", "tokens", Status.REGRESSION, "tokens differ", "real-change"),
    ]
    findings = group_findings(outcomes)
    assert [f.category for f in findings] == ["checkpoint-changed", "real-change"]
    assert [f.fields for f in findings[0].under] == [["first_logits"], ["tokens"]]
    first = ("the checkpoint of my-model changed (model.safetensors sha256 111111111111 -> 222222222222); "
             "the 2 findings under it are on its 1 case")
    results = Results(env={}, baseline_env=None, outcomes=outcomes)
    if render == "terminal":
        print_summary(results, "title")
        text = capsys.readouterr().out
        numbered = [line.strip() for line in text.splitlines() if re.match(r"\s+\d+(\.\d+)*\. ", line)]
        assert numbered[0].startswith("1. " + first)
        assert numbered[1].startswith("1.1. regression (real-change) in `first_logits`")
        assert numbered[3].startswith("2. regression (real-change) in `tokens`")
    elif render == "markdown":
        text = markdown_summary(results)  # HTML escaped, as in index.html: GitHub shows "&gt;" as ">"
        assert "\n1. " + escape(first, quote=False) in text and "\n   1. regression (real-change) in `first_logits`" in text
    else:
        html = render_html(results)
        findings_html = html[html.index('<ol class="findings">'):]
        assert findings_html.index(escape(first)) < findings_html.index('<ol class="findings under">') < \
            findings_html.index("in `first_logits`") < findings_html.index('data-number="2"')
