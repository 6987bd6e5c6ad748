"""The report in a real headless Chromium: rendered DOM, layout visibility, console, screenshot.

Skips when Debian's chromium is absent (install: apt-get install -y --no-install-recommends chromium).
Three browser runs, each a few seconds:
  1. the report as written: --dump-dom, --screenshot, console messages on stderr;
  2. a test-only copy with a probe script appended, which measures layout (is the verdict on
     the first screen, are diff tables and chart points visible, does the filter hide passing
     rows) and writes the answers into a DOM attribute that --dump-dom returns;
  3. a page with a deliberate script error, proving the console check can fail.
Name resolution is mapped to nothing, so any network fetch would fail (and the DOM check
already rejects external URLs).
"""

from __future__ import annotations

import html
import json
import os
import re
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.report import render
from harness.report.sampling_table import sampling_rows
from harness.schema import Results, Status
from report_sample import ACCEPTED_PER_STEP, BIAS_POINTS, HOSTILE, LATENCY, sample_results

CHROMIUM = Path(os.environ.get("HARNESS_CHROMIUM", "/usr/bin/chromium"))
pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason=f"{CHROMIUM} not found: the browser check needs Debian's chromium "
    "(apt-get install -y --no-install-recommends chromium)",
)
WIDTH, HEIGHT = 1280, 2000
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)
# Page console output on stderr: [pid:tid:time:INFO:CONSOLE:12] "message", source: file:///... (12)
CONSOLE_LINE = re.compile(r":CONSOLE\b")

PROBE = """<script>
(function () {
  function visible(el) {
    if (!el) return false;
    var r = el.getBoundingClientRect(), cs = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && cs.visibility !== "hidden" && cs.display !== "none";
  }
  function inside(el) {
    var svg = el.ownerSVGElement, a = el.getBoundingClientRect(), b = svg.getBoundingClientRect();
    return a.left >= b.left - 1 && a.right <= b.right + 1 && a.top >= b.top - 1 && a.bottom <= b.bottom + 1;
  }
  var all = function (sel) { return Array.prototype.slice.call(document.querySelectorAll(sel)); };
  var verdict = document.getElementById("verdict");
  var bottom = function (el) { return el ? el.getBoundingClientRect().bottom + window.scrollY : null; };
  var folded = {
    height: document.documentElement.scrollHeight,  // as the page opens: passing rows and tables folded
    nextBottom: bottom(document.getElementById("next-step")),
    firstFindingBottom: bottom(document.querySelector("ol.findings > li.finding")),
    findingStatuses: all("#findings ol.findings > li.finding").map(function (li) { return li.className.split("st-")[1]; }),
  };
  all("details").forEach(function (d) { d.open = true; });  // what follows measures the unfolded page
  var out = {
    folded: folded,
    verdictVisible: visible(verdict),
    verdictBottom: verdict ? verdict.getBoundingClientRect().bottom : null,
    diffParts: all("tbody.outcome:not(.st-pass) .diff > *").map(visible),
    points: all("[data-point]").length,
    pointsVisible: all("[data-point]").filter(visible).length,
    pointsInside: all("[data-point]").filter(inside).length,
    horizontalOverflow: document.documentElement.scrollWidth > window.innerWidth,
    // a chart label clipped at the chart's edge (e.g. the latency chart's longest row label)
    textsClipped: all("svg text").filter(function (t) { return !inside(t); }).map(function (t) { return t.textContent; }),
    // a sampling-table header or number broken over lines ("20" / "0", "STATU" / "S")
    samplingWrapped: all("table.sampling th, table.sampling td.num").filter(function (c) {
      var range = document.createRange(), tops = {};
      range.selectNodeContents(c);
      Array.prototype.forEach.call(range.getClientRects(), function (r) { tops[Math.round(r.top)] = 1; });
      return Object.keys(tops).length > 1;
    }).map(function (c) { return c.textContent; }),
    samplingRows: all("table.sampling tbody tr").length,
  };
  var box = document.getElementById("hide-pass");
  box.checked = true;
  out.passVisibleWhenHidden = all("tbody.outcome.st-pass").filter(visible).length;
  out.othersVisibleWhenHidden = all("tbody.outcome:not(.st-pass)").filter(visible).length;
  box.checked = false;
  out.passVisible = all("tbody.outcome.st-pass").filter(visible).length;
  document.documentElement.setAttribute("data-probe", JSON.stringify(out));
})();
</script>"""


@dataclass(frozen=True)
class BrowserRun:
    dom: str
    stderr: str

    @property
    def console(self) -> list[str]:
        """Console lines the page produced (the report has no script, so any is unexpected)."""
        return [line for line in self.stderr.splitlines() if CONSOLE_LINE.search(line) or "Uncaught" in line]


def chromium(url: str, workdir: Path, *extra: str) -> BrowserRun:
    command = [str(CHROMIUM), *FLAGS, f"--user-data-dir={workdir / 'profile'}", *extra, url]
    proc = subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=60, cwd=workdir)
    assert proc.returncode == 0, f"chromium failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return BrowserRun(proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def results() -> Results:
    return sample_results()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("browser")


@pytest.fixture(scope="module")
def report(results: Results, workdir: Path) -> Path:
    return render(results, workdir / "report")


@pytest.fixture(scope="module")
def page(report: Path, workdir: Path) -> BrowserRun:
    shot = workdir / "report.png"
    run = chromium(report.as_uri(), workdir, "--dump-dom", f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}")
    print(f"screenshot: {shot}")
    return run


def probed(report: Path, workdir: Path, fragment: str = "", size: tuple[int, int] = (WIDTH, HEIGHT)) -> dict[str, Any]:
    """The report with PROBE appended, loaded in Chromium (at `#fragment` if given): its answers."""
    copy = report.parent / "probe.html"
    copy.write_text(report.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    run = chromium(copy.as_uri() + fragment, workdir, "--dump-dom", f"--window-size={size[0]},{size[1]}")
    assert run.console == [], run.console
    match = re.search(r'data-probe="([^"]*)"', run.dom)
    assert match, "the probe script did not run"
    return json.loads(html.unescape(match.group(1)))


@pytest.fixture(scope="module")
def probe(report: Path, workdir: Path) -> dict[str, Any]:
    return probed(report, workdir)


def count(dom: str, attribute: str) -> int:
    return len(re.findall(re.escape(attribute), dom))


def test_rendered_dom_has_verdict_diffs_and_chart_points(page: BrowserRun, results: Results) -> None:
    assert re.search(r'<h1 id="verdict" data-verdict="regression">', page.dom)
    assert count(page.dom, '<tbody class="outcome') == len(results.outcomes)
    assert "<del>bought a red apple</del>" in page.dom and "<ins>saw a blue book</ins>" in page.dom
    assert count(page.dom, 'class="deepdiff"') == 2
    assert count(page.dom, 'data-point="measured"') == 2 * len(BIAS_POINTS)
    assert count(page.dom, 'data-point="exact"') == 2 * len(BIAS_POINTS) + 1  # + the hostile series
    assert count(page.dom, 'data-point="latency"') == len(LATENCY) + 1
    assert count(page.dom, 'data-point="step"') == len(ACCEPTED_PER_STEP)


def test_hostile_strings_did_not_run(page: BrowserRun) -> None:
    assert "PWNED" not in re.search(r"<title>(.*?)</title>", page.dom, re.S).group(1)  # type: ignore[union-attr]
    assert "data-pwned" not in page.dom
    assert html.escape(HOSTILE, quote=False) in page.dom  # shown as text


def test_no_console_output(page: BrowserRun) -> None:
    assert page.console == []


def test_console_check_catches_errors(workdir: Path) -> None:
    broken = workdir / "broken.html"
    broken.write_text("<!DOCTYPE html><p>x</p><script>console.error('boom'); missingFunction();</script>")
    console = chromium(broken.as_uri(), workdir, "--dump-dom").console
    assert any("Uncaught ReferenceError" in line for line in console), console
    assert any('"boom"' in line for line in console), console


def test_layout(probe: dict[str, Any]) -> None:
    assert probe["verdictVisible"] and probe["verdictBottom"] < 400  # the first thing a reader sees
    assert probe["diffParts"] and all(probe["diffParts"])  # non-passing diffs are expanded
    assert probe["points"] == probe["pointsVisible"] == probe["pointsInside"] > 0  # plotted inside the charts
    assert probe["horizontalOverflow"] is False


def test_no_chart_label_is_clipped_and_the_sampling_table_keeps_numbers_and_headers_whole(probe: dict[str, Any],
                                                                                           results: Results) -> None:
    """Issue 28's layout items: the latency chart's longest row label (44 characters, the hostile
    string) ends inside its chart; the sampling table, squeezed by long misfit cells and case ids,
    keeps every header and number on one line."""
    assert probe["textsClipped"] == []
    assert probe["samplingRows"] == len(sampling_rows(results.outcomes)) and probe["samplingWrapped"] == []


def test_hide_passing_filter_works_without_script(probe: dict[str, Any], results: Results) -> None:
    passing = sum(o.status is Status.PASS for o in results.outcomes)
    info = sum(o.status is Status.INFO for o in results.outcomes)  # information rows hide with the passes
    assert probe["passVisible"] == passing
    assert probe["passVisibleWhenHidden"] == 0
    assert probe["othersVisibleWhenHidden"] == len(results.outcomes) - passing - info


def test_screenshot(page: BrowserRun, workdir: Path) -> None:
    shot = workdir / "report.png"
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (WIDTH, HEIGHT)
    # a blank white 1280x2000 page compresses to ~8 KB; the report's first screen is far busier
    assert len(data) > 50_000, f"{shot} looks blank ({len(data)} bytes)"


FRAGMENT_PROBE = """<script>
window.addEventListener("load", function () { setTimeout(function () {
  var target = document.querySelector(location.hash), folded = target.closest("details.suite");
  document.documentElement.setAttribute("data-target-open", String(!!folded && folded.open && window.scrollY > 0));
}, 100); });
</script>"""
SCREEN = (1400, 900)  # the screenshots: Chromium at 1400 px, one screen 900 px tall
UPGRADE = Path(__file__).resolve().parents[1] / "docs" / "upgrades" / "5.14.0-to-5.24.0" / "results.json"


def test_the_committed_upgrade_report_leads_with_the_decision(workdir: Path) -> None:
    """Issue 57 on the committed 5.14.0 -> 5.24.0 comparison (rendered by the code now): the first
    screen holds the verdict, the next step and the first regression finding; the findings are in
    order of severity; the page is at most ten screens tall until a reader unfolds something (it
    was 228,452 px); a finding's link to a case inside a folded suite opens it."""
    from harness.checking.findings import group_findings
    from harness.report import load_results

    results = load_results(UPGRADE)
    report = render(results, workdir / "upgrade")
    first = probed(report, workdir, size=SCREEN)["folded"]
    print(f"5.14.0 -> 5.24.0 report: {first['height']} px tall folded")
    assert first["height"] <= 10 * SCREEN[1], first["height"]
    assert first["nextBottom"] <= SCREEN[1] and first["firstFindingBottom"] <= SCREEN[1], first
    rank = {"regression": 0, "missing": 1, "changed": 2, "new": 3, "skipped": 3}
    statuses = first["findingStatuses"]
    assert statuses[0] == "regression" and statuses == sorted(statuses, key=rank.__getitem__), statuses
    finding = group_findings(results.outcomes)[0]
    index = next(i for i, o in enumerate(results.outcomes) if o is finding.outcomes[0])
    copy = report.parent / "fragment.html"  # the browser opens the folded suite holding a linked case
    copy.write_text(report.read_text(encoding="utf-8").replace("</body>", FRAGMENT_PROBE + "</body>"), encoding="utf-8")
    run = chromium(copy.as_uri() + f"#o{index}", workdir, "--dump-dom", "--virtual-time-budget=3000",
                   f"--window-size={SCREEN[0]},{SCREEN[1]}")
    assert 'data-target-open="true"' in run.dom, re.findall(r'data-target-open="[^"]*"', run.dom)
