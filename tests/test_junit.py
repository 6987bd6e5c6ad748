"""JUnit XML: one testcase per check (information rows are none); regressions fail, skipped skip;
always well-formed XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.report import write_junit
from harness.report.junit import xml_text
from harness.schema import Outcome, Results, Status
from report_sample import HOSTILE, sample_results


def junit(results: Results, tmp_path: Path) -> ET.Element:
    path = write_junit(results, tmp_path / "out" / "junit.xml")
    assert path == tmp_path / "out" / "junit.xml"
    return ET.parse(path).getroot()


@pytest.fixture
def results() -> Results:
    return sample_results()


def checks(results: Results) -> list[Outcome]:
    return [o for o in results.outcomes if o.status is not Status.INFO]


def test_an_information_row_is_no_testcase(results: Results, tmp_path: Path) -> None:
    info = [o for o in results.outcomes if o.status is Status.INFO]
    names = {c.get("name") for c in junit(results, tmp_path).iter("testcase")}
    assert info and not any(f"{o.case}::{o.field}" in names for o in info)


def test_totals_match_outcomes(results: Results, tmp_path: Path) -> None:
    root = junit(results, tmp_path)
    counts = results.counts()
    assert root.tag == "testsuites"
    assert int(root.get("tests", -1)) == len(checks(results)) == len(root.findall("./testsuite/testcase"))
    assert int(root.get("failures", -1)) == counts["regression"] == len(root.findall(".//failure"))
    assert int(root.get("skipped", -1)) == counts["skipped"] == len(root.findall(".//skipped"))
    assert root.get("errors") == "0" and root.findall(".//error") == []


def test_one_testsuite_per_suite_with_its_counts(results: Results, tmp_path: Path) -> None:
    root = junit(results, tmp_path)
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == list(dict.fromkeys(o.suite for o in checks(results)))
    for name, suite in suites.items():
        mine = [o for o in checks(results) if o.suite == name]
        assert int(suite.get("tests", -1)) == len(mine) == len(suite.findall("testcase"))
        assert int(suite.get("failures", -1)) == sum(o.status is Status.REGRESSION for o in mine)
        assert int(suite.get("skipped", -1)) == sum(o.status is Status.SKIPPED for o in mine)


def test_testcase_names_and_bodies(results: Results, tmp_path: Path) -> None:
    cases = junit(results, tmp_path).findall("./testsuite/testcase")
    order = list(dict.fromkeys(o.suite for o in checks(results)))  # one <testsuite> per suite, first seen first
    grouped = sorted(checks(results), key=lambda o: order.index(o.suite))  # stable: the run's order within a suite
    for outcome, case in zip(grouped, cases, strict=True):
        assert case.get("classname") == outcome.suite
        assert case.get("name") == f"{outcome.case}::{outcome.field}"
        props = {p.get("name"): p.get("value") for p in case.findall("properties/property")}
        assert props == {"kind": outcome.kind, "category": outcome.category, "against": outcome.against,
                         "status": outcome.status.value}
        failure, skipped, out = case.find("failure"), case.find("skipped"), case.find("system-out")
        assert (failure is not None) == (outcome.status is Status.REGRESSION)
        assert (skipped is not None) == (outcome.status is Status.SKIPPED)
        assert (out is not None) == (outcome.status in (Status.CHANGED, Status.NEW, Status.MISSING))
        if failure is not None:
            assert failure.get("message") == (outcome.detail or "regression")
            assert (failure.text or "").startswith(outcome.detail)
        if skipped is not None:
            assert skipped.get("message") == outcome.detail
        if out is not None:
            assert outcome.status.value in (out.text or "") and outcome.detail in (out.text or "")


def test_failure_text_carries_the_diff(results: Results, tmp_path: Path) -> None:
    case = junit(results, tmp_path).find("./testsuite/testcase")
    assert case is not None and case.get("name") == "tiny-llama/assisted/dynamic/p0::tokens"
    body = (case.find("failure").text or "").split("\n", 1)[1]  # type: ignore[union-attr]
    assert json.loads(body)["first_divergence"]["new_text"] == "One day Anna went to the market. She saw a blue book"


def test_hostile_strings_are_escaped_and_round_trip(results: Results, tmp_path: Path) -> None:
    path = write_junit(results, tmp_path / "junit.xml")
    raw = path.read_text(encoding="utf-8")
    assert "<script>" not in raw and "&lt;script&gt;" in raw
    case = [c for c in ET.parse(path).getroot().iter("testcase") if c.get("classname") == HOSTILE]
    assert len(case) == 1 and case[0].get("name") == f"{HOSTILE}::{HOSTILE}"
    assert case[0].find("failure").get("message") == HOSTILE  # type: ignore[union-attr]


def test_characters_xml_cannot_hold_become_visible_escapes(tmp_path: Path) -> None:
    nasty = "nul\x00 esc\x1b lone\ud800 ok\t\u00e9\U0001f600"
    outcome = Outcome(nasty, nasty, "f", "tokens", Status.REGRESSION, nasty, "", {"old_text": nasty})
    root = junit(Results(env={}, baseline_env=None, outcomes=[outcome]), tmp_path)
    case = root.find("./testsuite/testcase")
    assert case is not None
    assert case.get("classname") == "nul\\x00 esc\\x1b lone\\ud800 ok\t\u00e9\U0001f600"
    assert xml_text(nasty) == case.get("classname")


def test_empty_results(tmp_path: Path) -> None:
    root = junit(Results(env={}, baseline_env=None), tmp_path)
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("0", "0", "0")
    assert root.findall("testsuite") == []
