"""A report's files, written in one place. The renderers return text - index.html
(`page.render_html`), junit.xml (`junit.junit_xml`), summary.md (`terminal.markdown_summary`) -
from one `Results` and its `Findings`, grouped once (harness/checking/findings.py); this module
alone writes them, each atomically (harness/store/files.py: a temporary file in the same folder,
fsync, `os.replace`), so a reader never sees half a file and a failed write leaves no temporary
file behind. The commands (`harness check`, `compare`, `report`, `matrix`, `repro`, `bisect`)
write their files through it.

Public API: `render(results, out_dir)` (index.html) and `write_junit(results, path)`, re-exported
by harness.report; `write_report` (every file of a run's report folder); `write_file` (one text).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.checking.findings import Findings
from harness.report.junit import junit_xml
from harness.report.page import render_html
from harness.report.terminal import markdown_summary
from harness.schema import Results
from harness.store.files import write_text
from harness.store.records import atomic_write_json


def write_file(path: str | Path, text: str) -> Path:
    """`text` at `path` as UTF-8, atomically (parents created); returns the path. A lone surrogate
    (which UTF-8 cannot hold; a record string may carry one) is written as '?' - the report's files
    always wrote it so - rather than failing the write."""
    path = Path(path)
    write_text(path, text.encode("utf-8", errors="replace").decode("utf-8"))
    return path


def render(results: Results, out_dir: str | Path, claims: Any = None, findings: Findings | None = None) -> Path:
    """Write `out_dir/index.html` (directories created, file replaced atomically); return its path.
    `claims`: the release-notes table; `findings`: those of `results`, when the caller grouped them."""
    return write_file(Path(out_dir) / "index.html", render_html(results, claims, findings))


def write_junit(results: Results, path: str | Path) -> Path:
    """Write JUnit XML for `results` to `path` (parents created, file replaced atomically); returns the path."""
    return write_file(path, junit_xml(results))


@dataclass(frozen=True)
class ReportPaths:
    index: Path
    junit: Path | None
    summary: Path | None


def write_report(results: Results, out_dir: Path, findings: Findings | None = None, *, results_json: bool = True,
                 claims: Any = None, summary_extra: Sequence[Sequence[str]] = (), junit: bool = True,
                 summary: bool = True) -> ReportPaths:
    """A run's report folder: results.json (unless `results_json` is False: the plugin wrote it),
    index.html (with the release-notes `claims`, if any), junit.xml and summary.md (its `summary_extra`
    sections: the claims as markdown) - every text rendered from `results` and `findings` (grouped here
    when the caller has none) before the first file is written. A write that fails (a full disk)
    raises OSError and takes back the results.json written here (its run ends 'error', not what it
    says); the caller removes the rest (harness/cli/common.py `discard_report`)."""
    found = findings if findings is not None else Findings.of(results)
    page = render_html(results, claims, found)
    xml = junit_xml(results) if junit else None
    gist = markdown_summary(results, summary_extra, found) if summary else None
    out_dir.mkdir(parents=True, exist_ok=True)
    if results_json:
        atomic_write_json(out_dir / "results.json", results.to_json())
    try:
        index = write_file(out_dir / "index.html", page)
        junit_path = write_file(out_dir / "junit.xml", xml) if xml is not None else None
        summary_path = write_file(out_dir / "summary.md", gist) if gist is not None else None
    except OSError:
        if results_json:
            with contextlib.suppress(OSError):
                (out_dir / "results.json").unlink()
        raise
    return ReportPaths(index, junit_path, summary_path)
