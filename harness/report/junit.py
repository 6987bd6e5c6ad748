"""Results -> JUnit XML, so CI systems show one test per (case, field).

One <testsuite> per harness suite; one <testcase> per outcome with classname = suite and
name = "case::field". A regression is a <failure> (message = detail, text = detail + diff as
JSON); skipped is <skipped>; pass, changed and new pass, with their status in <properties>
and, for changed/new, a <system-out> line so a reviewer sees the pending regen. Information rows
(status `info`) are not tests: they are left out.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from harness.report.fmt import to_json_text
from harness.schema import Outcome, Results, Status

# Characters XML 1.0 cannot carry (C0 controls except tab/newline/CR, lone surrogates, U+FFFE/F).
_ILLEGAL_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value: object) -> str:
    """Text safe to put in XML: illegal characters become visible \\xNN / \\uNNNN escapes."""
    return _ILLEGAL_XML.sub(lambda m: ascii(m.group(0))[1:-1], str(value))


def _status(outcome: Outcome) -> str:
    return str(getattr(outcome.status, "value", outcome.status))


def testcase(outcome: Outcome) -> ET.Element:
    case = ET.Element(
        "testcase",
        classname=xml_text(outcome.suite),
        name=xml_text(f"{outcome.case}::{outcome.field}"),
        time="0",
    )
    props = ET.SubElement(case, "properties")
    for key in ("kind", "category", "against"):
        ET.SubElement(props, "property", name=key, value=xml_text(getattr(outcome, key)))
    ET.SubElement(props, "property", name="status", value=_status(outcome))
    status = _status(outcome)
    detail = xml_text(outcome.detail)
    if status == Status.REGRESSION.value:
        failure = ET.SubElement(
            case, "failure", message=detail or "regression", type=xml_text(outcome.category or "regression")
        )
        body = detail
        if outcome.diff:
            body = f"{detail}\n{xml_text(to_json_text(outcome.diff, indent=2))}".strip()
        failure.text = body
    elif status == Status.SKIPPED.value:
        ET.SubElement(case, "skipped", message=detail or "skipped")
    elif status in (Status.CHANGED.value, Status.NEW.value, Status.MISSING.value):
        label = f"{status} ({xml_text(outcome.category)})" if outcome.category else status
        ET.SubElement(case, "system-out").text = f"{label}: {detail}" if detail else label
    return case


def junit_tree(results: Results) -> ET.Element:
    suites: dict[str, list[Outcome]] = {}
    for outcome in results.outcomes:
        if _status(outcome) != Status.INFO.value:
            suites.setdefault(str(outcome.suite), []).append(outcome)
    root = ET.Element("testsuites", name="harness")
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    for name, outcomes in suites.items():
        failures = sum(_status(o) == Status.REGRESSION.value for o in outcomes)
        skipped = sum(_status(o) == Status.SKIPPED.value for o in outcomes)
        suite = ET.SubElement(
            root,
            "testsuite",
            name=xml_text(name),
            tests=str(len(outcomes)),
            failures=str(failures),
            errors="0",
            skipped=str(skipped),
        )
        suite.extend(testcase(o) for o in outcomes)
        totals["tests"] += len(outcomes)
        totals["failures"] += failures
        totals["skipped"] += skipped
    root.set("tests", str(totals["tests"]))
    root.set("failures", str(totals["failures"]))
    root.set("errors", "0")
    root.set("skipped", str(totals["skipped"]))
    run = run_cases(results)
    if run:  # the run broke, or tests failed outside their golden verdicts: say so, never 0 failures
        errors = sum(kind == "error" for kind, _, _ in run)
        failures = len(run) - errors
        suite = ET.SubElement(root, "testsuite", name="harness", tests=str(len(run)), failures=str(failures),
                              errors=str(errors), skipped="0")
        for kind, name, message in run:
            case = ET.SubElement(suite, "testcase", classname="harness", name=xml_text(name))
            ET.SubElement(case, kind, message=xml_text(message), type=f"run-{kind}")
        root.set("tests", str(totals["tests"] + len(run)))
        root.set("failures", str(totals["failures"] + failures))
        root.set("errors", str(errors))
    return root


def run_cases(results: Results) -> list[tuple[str, str, str]]:
    """(error | failure, test case name, message) for what the run's meta says went wrong outside
    the outcomes - the same facts `Results.verdict` reads."""
    meta = results.meta if isinstance(results.meta, dict) else {}
    out: list[tuple[str, str, str]] = []
    if meta.get("error"):
        out.append(("error", "run", str(meta["error"])))
    out += [("error", f"collection: {e.split(':', 1)[0]}", e) for e in meta.get("collection_errors") or []]
    out += [("error", f"write: {e[:80]}", e) for e in meta.get("write_errors") or []]
    out += [("failure", str(t), "failed other than by its golden verdict (see pytest's output)")
            for t in meta.get("broken_tests") or []]
    if meta.get("failed") and not meta.get("broken_tests"):
        out.append(("failure", "run", str(meta["failed"])))
    return out


def junit_xml(results: Results) -> str:
    """JUnit XML for `results`, as text (harness/report/output.py writes it)."""
    root = junit_tree(results)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True).decode("utf-8")
