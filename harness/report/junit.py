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
from pathlib import Path

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
    if results.meta.get("error"):  # the run broke: one erroring test case says why
        suite = ET.SubElement(root, "testsuite", name="harness", tests="1", failures="0", errors="1", skipped="0")
        case = ET.SubElement(suite, "testcase", classname="harness", name="run")
        ET.SubElement(case, "error", message=xml_text(results.meta["error"]), type="run-error")
        root.set("tests", str(totals["tests"] + 1))
        root.set("errors", "1")
    return root


def write_junit(results: Results, path: str | Path) -> Path:
    """Write JUnit XML for `results` to `path` (parents created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tree = ET.ElementTree(junit_tree(results))
    ET.indent(tree)
    tmp = path.with_name(f".{path.name}.tmp")
    tree.write(tmp, encoding="utf-8", xml_declaration=True)
    tmp.replace(path)
    return path
