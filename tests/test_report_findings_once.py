"""The findings of a run are grouped once per finish and handed to every renderer (issue 59): the
terminal summary, summary.md and index.html show the same findings under the same numbers, and the
report's files are written in one place (harness/report/output.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import harness.checking.findings as findings_module
from harness.checking.findings import Findings
from harness.cli.common import finish
from harness.report import load_results
from report_sample import sample_results


@pytest.fixture
def grouping_count(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times `group_findings` runs: every harness module's binding of it wrapped with a counter."""
    original = findings_module.group_findings
    calls = [0]

    def counted(outcomes):
        calls[0] += 1
        return original(outcomes)

    for name, module in list(sys.modules.items()):
        if name.startswith("harness") and getattr(module, "group_findings", None) is original:
            monkeypatch.setattr(module, "group_findings", counted)
    return calls


def test_one_finish_groups_the_findings_once(tmp_path: Path, grouping_count: list[int], capsys) -> None:
    """Before issue 59 one finish grouped them 4 times (the terminal summary, summary.md, and twice for
    index.html); `harness report` 3 times, each matrix link 4 times."""
    (tmp_path / "results.json").write_text(json.dumps(sample_results().to_json()))
    results = load_results(tmp_path / "results.json")
    assert results.outcomes and Findings.of(results).numbered  # a sample with findings to group
    grouping_count[0] = 0
    finish(results, tmp_path / "out", owned=True)
    assert grouping_count[0] == 1
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"results.json", "index.html", "junit.xml", "summary.md"}


def test_every_renderer_shows_the_same_headline_and_numbers(tmp_path: Path, capsys) -> None:
    results = sample_results()
    found = Findings.of(results)
    finish(results, tmp_path / "out", owned=True)
    headline = found.headline(results.verdict)
    assert headline in capsys.readouterr().out
    assert headline in (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert headline in (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert [n for n, _ in found.numbered][:2] == ["1", "1.1"]  # the sample's changed checkpoint, a finding under it
    assert found.number("1.1") is found.grouped[0].under[0] and found.number("999") is None
    assert found.every == [f for _, f in found.numbered]


def test_harness_report_groups_once(tmp_path: Path, grouping_count: list[int], capsys) -> None:
    from harness.cli import main

    (tmp_path / "results.json").write_text(json.dumps(sample_results().to_json()))
    main(["report", str(tmp_path / "results.json"), "--out", str(tmp_path / "out"), "--junit",
          str(tmp_path / "out" / "junit.xml")])
    assert grouping_count[0] == 1
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["index.html", "junit.xml"]  # no temporary file


def test_a_failed_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """summary.md cannot be written (a full disk): the folder the run made is gone, nothing half-written."""
    import errno

    import harness.store.files as files

    real = files._atomic_write_text

    def disk_full(path, text):
        if Path(path).name == "summary.md":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, text)

    monkeypatch.setattr(files, "_atomic_write_text", disk_full)
    (tmp_path / "run").mkdir()
    assert finish(sample_results(), tmp_path / "run" / "out", owned=True) == 2
    assert not (tmp_path / "run").exists()
