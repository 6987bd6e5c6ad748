"""The HTML report: rendered from Results built here, parsed with the stdlib HTML parser."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.report import ResultsFileError, load_results, render, render_html
from harness.report.charts import nice_domain, noise_band, relative_latency
from harness.report.diffview import diff_view
from harness.report.fmt import flatten, fmt_value, split_common
from harness.schema import KINDS, RESULTS_VERSION, Outcome, Results, Status
from report_sample import (
    ACCEPTED_PER_STEP,
    BIAS_POINTS,
    HOSTILE,
    LATENCY,
    sample_results,
)

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


# --------------------------------------------------------------------------- a tiny DOM


@dataclass
class Node:
    tag: str
    attrs: dict[str, str | None]
    children: list[Node | str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def iter(self):
        yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        return [
            n for n in self.iter()
            if (tag is None or n.tag == tag)
            and (cls is None or cls in n.classes)
            and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]

    def one(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Node:
        found = self.find_all(tag, cls, **attrs)
        assert len(found) == 1, f"expected one <{tag} class={cls} {attrs}>, found {len(found)}"
        return found[0]


class TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]
        self.start_tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs))
        self.start_tags.append((tag, node.attrs))
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(html: str) -> TreeBuilder:
    builder = TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder


@pytest.fixture(scope="module")
def results() -> Results:
    return sample_results()


@pytest.fixture(scope="module")
def page(results: Results, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, TreeBuilder]:
    path = render(results, tmp_path_factory.mktemp("report") / "out")
    html = path.read_text(encoding="utf-8")
    return html, parse(html)


def dom(page: tuple[str, TreeBuilder]) -> Node:
    return page[1].root


def count_points(root: Node, kind: str) -> int:
    return len(root.find_all("g", data_point=kind))


# --------------------------------------------------------------------------- the page


def test_render_writes_index_html(results: Results, tmp_path: Path) -> None:
    out = tmp_path / "nested" / "dir"
    path = render(results, out)
    assert path == out / "index.html"
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in out.iterdir()) == ["index.html"]  # no temp file left behind
    assert render(results, out) == path  # re-rendering replaces the file


def test_verdict_text(page, results: Results) -> None:
    verdict = dom(page).one("h1", id="verdict")
    assert results.verdict == "regression"
    assert verdict.attrs["data-verdict"] == "regression"
    assert "regression" in verdict.text
    assert "CI fails" in dom(page).one("p", cls="verdict-text").text


@pytest.mark.parametrize(
    ("statuses", "verdict"),
    [([Status.PASS, Status.NEW, Status.SKIPPED], "pass"), ([Status.PASS, Status.CHANGED], "changed"), ([], "pass")],
)
def test_verdict_follows_results(statuses: list[Status], verdict: str) -> None:
    outcomes = [Outcome("s", f"c{i}", "f", "exact", s) for i, s in enumerate(statuses)]
    root = parse(render_html(Results(env={}, baseline_env=None, outcomes=outcomes))).root
    assert root.one("h1", id="verdict").attrs["data-verdict"] == verdict
    assert root.one("header").classes == {"banner", f"v-{verdict}"}


def test_only_tracked_deviations_are_a_pass_in_the_headline() -> None:
    """A known upstream deviation the baseline holds is tracked, not a change: the headline is
    the verdict line's decision (harness/cli/common.py `verdict_line`), with no word of regenerating."""
    outcomes = [Outcome("s", "c0", "f", "exact", Status.PASS),
                Outcome("s", "c1", "exact_emitted", "deviation", Status.CHANGED, "TV 0.24", "known-deviation")]
    root = parse(render_html(Results(env={}, baseline_env={}, outcomes=outcomes))).root
    assert root.one("h1", id="verdict").attrs["data-verdict"] == "pass"
    text = root.one("p", cls="verdict-text").text
    assert "1 known deviation" in text and "tracked" in text and "regenerate the golden records" not in text


def test_the_header_says_which_axis_moved_and_the_summary_too() -> None:
    """A torch bump and a transformers bump are told apart: the banner, summary.md and the terminal
    name the axis that moved (harness/store/env.py `moved_axes`) and the torch build that differs."""
    from harness.report.terminal import markdown_summary

    kernels = {"isa": "AVX512", "onednn": "3.10.0", "blas": "mkl", "sdpa_backends": ["flash", "math"]}
    old = {"transformers": "5.24.0", "torch": "2.12.1", "dtype": "fp32", "threads": 1,
           "device": {"type": "cpu", "name": "Some CPU", "arch": "x86_64"}, "cpu_kernels": kernels}
    new = {**old, "torch": "2.13.0+cpu", "cpu_kernels": {**kernels, "onednn": "3.12.0"}}
    results = Results(env=new, baseline_env=old, outcomes=[Outcome("s", "c", "f", "exact", Status.PASS)])
    root = parse(render_html(results)).root
    axis = root.one("p", id="axis").text
    assert axis.startswith("axis moved: torch 2.12.1 -> 2.13.0") and "transformers 5.24.0" in axis
    assert "another torch build: oneDNN 3.10.0 -> 3.12.0" in root.one("p", id="machine").text
    assert "Axis moved: torch 2.12.1 -&gt; 2.13.0" in markdown_summary(results)
    tf_bump = Results(env={**old, "transformers": "5.25.0"}, baseline_env=old, outcomes=[])
    assert parse(render_html(tf_bump)).root.one("p", id="axis").text.startswith("axis moved: transformers")
    assert not parse(render_html(Results(env=new, baseline_env=None, outcomes=[]))).root.find_all("p", id="axis")


def test_the_run_panel_says_what_ran_in_plain_words_and_keeps_the_raw_metadata_disclosed() -> None:
    def argv(phase: str, *more: str) -> list[str]:
        return ["/x/suites", "--harness-phase", phase, *more, "-k", "mine", "-q"]

    meta = {"argv": argv("parallel", "-n", "2"), "duration_s": 47.5, "env_key": "tf5-fp32", "baseline_key": "tf5-fp32",
            "golden_tests": 44, "alpha": 0.01, "left_out": ["quick tier: 60 of the zoo's 408 cases not run - ..."],
            "phases": [{"phase": "parallel", "duration_s": 31.58, "outcomes": 386, "argv": argv("parallel", "-n", "2")},
                       {"phase": "timing", "duration_s": 15.94, "outcomes": 6, "argv": argv("timing")}]}
    root = parse(render_html(Results(env={}, baseline_env=None, outcomes=[], meta=meta))).root
    plain = {}
    for tr in root.one("table", cls="run-plain").find_all("tr"):
        plain.setdefault(tr.one("th").text, []).append(tr.one("td").text)
    assert plain["command"] == ["pytest /x/suites -k 'mine'"]
    assert plain["phase"] == ["parallel: 31.6 s, 2 workers, 386 fields", "timing: 15.9 s, 1 process, 6 fields"]
    assert plain["duration"] == ["47.5 s in all"] and plain["records"] == ["this env tf5-fp32 against its own records"]
    assert plain["left out"] == ["quick tier: 60 of the zoo's 408 cases not run - ..."]  # what the run did not check
    raw = root.one("details", cls="raw-meta")
    assert raw.one("summary").text.startswith("raw run metadata")
    assert "--harness-phase" in raw.one("table", cls="meta").text  # the raw argv, only behind the disclosure


def test_the_tiles_count_findings_as_the_headline_does_and_the_fields_line_counts_fields(page, results: Results) -> None:
    """Issue 57: the tiles count what the headline counts (distinct findings per status); the line
    under them counts fields per status, and the checks (information rows are none)."""
    from harness.checking.findings import every_finding, group_findings

    shown = {li.attrs["data-status"]: int(li.one(cls="n").text) for li in dom(page).find_all("li", cls="count")}
    every = every_finding(group_findings(results.outcomes))
    per = {s.value: sum(f.status is s for f in every) for s in
           (Status.REGRESSION, Status.MISSING, Status.CHANGED, Status.NEW, Status.SKIPPED)}
    assert shown == {**per, "total": len(every)} and len(every) > 0
    headline = dom(page).one("section", id="findings").one("h2").text
    assert headline.startswith(f"{len(every)} distinct findings (")
    expected = results.counts()
    assert set(expected.values()) != {0} and all(n > 0 for n in expected.values())  # every status present
    line = dom(page).one("p", id="field-counts")
    fields = {span.attrs["data-status"]: int(span.attrs["data-count"]) for span in line.find_all("span")}
    assert fields == expected
    checks = sum(o.status is not Status.INFO for o in results.outcomes)  # information rows are no check
    assert f"Fields: {checks} checked" in line.text


def test_a_row_per_outcome_in_order(page, results: Results) -> None:
    rows = dom(page).find_all("tbody", cls="outcome")
    assert len(rows) == len(results.outcomes)
    by_anchor = {row.attrs["id"]: row for row in rows}
    for i, outcome in enumerate(results.outcomes):
        row = by_anchor[f"o{i}"]
        assert row.attrs["data-status"] == outcome.status.value
        assert outcome.field in row.one("td", cls="c-field").text
        assert outcome.detail in row.one("td", cls="detail").text
        if outcome.category:
            assert row.one("span", cls="cat").text == outcome.category


def test_every_kind_and_status_is_rendered(page, results: Results) -> None:
    """The sample holds every kind and status; each outcome's row shows its own kind and status."""
    rows = {row.attrs["id"]: row for row in dom(page).find_all("tbody", cls="outcome")}
    shown = [(rows[f"o{i}"].one("td", cls="c-kind").text, rows[f"o{i}"].attrs["data-status"])
             for i in range(len(results.outcomes))]
    assert shown == [(o.kind, o.status.value) for o in results.outcomes]

    assert {k for k, _ in shown} == set(KINDS)
    assert {s for _, s in shown} == {s.value for s in Status}


def test_suites_and_cases_grouped(page, results: Results) -> None:
    suites = dom(page).find_all("section", cls="suite")
    assert [s.one("h3").children[0].strip() for s in suites] == list(dict.fromkeys(o.suite for o in results.outcomes))
    greedy = suites[0]
    cases = [c.text for c in greedy.find_all("h4", cls="case-id")]
    assert cases == list(dict.fromkeys(o.case for o in results.outcomes if o.suite == "greedy"))
    # the first case holds both of its fields
    assert len(greedy.find_all("div", cls="case")[0].find_all("tbody", cls="outcome")) == 2


def test_needs_attention_lists_regressions_then_missing_then_changes_folded(page, results: Results) -> None:
    """Most severe first (regression, missing, changed; the outcomes' order within each), behind a
    disclosure: the findings above are the decision, this is every field."""
    from harness.checking.causes import crashed_cases

    section = dom(page).one("section", id="attention")
    assert section.one("details", cls="attention").attrs.get("open") is None
    crashed = crashed_cases(results.outcomes)
    order = (Status.REGRESSION, Status.MISSING, Status.CHANGED)
    wanted = [f"#o{i}" for s in order for i, o in enumerate(results.outcomes) if o.status is s
              and not (o.status is Status.MISSING and (o.suite, o.case) in crashed)]
    links = [a.attrs["href"] for a in section.one("table", cls="attention").find_all("a")]
    assert links == wanted and len(wanted) > 2


def test_first_divergence_shows_both_texts_highlighted(page) -> None:
    row = dom(page).one("tbody", id="o0")
    div = row.one("div", cls="divergence")
    assert div.one("b", cls="step").text == "7"
    assert div.one("b", cls="margin").text == "2.31"
    assert [c.text for c in div.find_all("code")] == ["412", "88"]
    assert div.one("del").text == "bought a red apple"
    assert div.one("ins").text == "saw a blue book"
    assert all(s.text == "One day Anna went to the market. She " for s in div.find_all("span", cls="same"))


def test_divergence_without_common_prefix_computes_it() -> None:
    view = diff_view({"first_divergence": {"step": 3, "old_text": "the wind was cold", "new_text": "the sky was"}})
    assert view.divergence is not None
    assert (view.divergence.prefix, view.divergence.old_rest, view.divergence.new_rest) == (
        "the ", "wind was cold", "sky was"
    )
    assert view.divergence.margin == "not recorded"


def test_divergence_extras_listed(page) -> None:
    row = dom(page).one("tbody", id="o1")  # the tie flip carries a tie_epsilon
    assert "tie epsilon" in row.one("div", cls="divergence").text and "0.0078" in row.text


def test_old_new_lists_highlight_from_first_difference(page) -> None:
    change = dom(page).one("tbody", id="o0").one("div", cls="change")
    assert change.one("del").text == "412, 3]"
    assert change.one("ins").text == "88, 7]"


def test_deepdiff_table(page, results: Results) -> None:
    index = next(i for i, o in enumerate(results.outcomes) if o.field == "layer_classes")
    rows = dom(page).one("tbody", id=f"o{index}").one("table", cls="deepdiff").find_all("tr")[1:]
    cells = [[td.text for td in r.find_all("td")] for r in rows]
    assert cells == [
        ["values changed", "root[2]", "SlidingWindowLayer", "DynamicLayer"],
        ["iterable item added", "root[4]", "", "ChunkedLayer"],
    ]


def test_divergences_table(page, results: Results) -> None:
    index = next(i for i, o in enumerate(results.outcomes) if "divergences" in o.diff)
    table = dom(page).one("tbody", id=f"o{index}").one("table", cls="divergences")
    rows = [[td.text for td in tr.find_all("td")] for tr in table.find_all("tr")[1:]]
    assert rows == [
        ["0", "9", "31, 2", "30, 2", "0.001 (old 0.002, new 0.001)", "0.0078", "yes", "dtype bf16"],
        ["1", "5", "17, 4", "23, 4", "0.9 (old 1.1, new 0.9)", "0.0078", "no", "dtype bf16"],
    ]
    assert [tr.classes for tr in table.find_all("tr")[1:]] == [{"tie"}, {"real"}]
    assert '["device", "dtype"]' in dom(page).one("tbody", id=f"o{index}").one("table", cls="generic").text


def test_mapping_old_new_as_key_table(page, results: Results) -> None:
    index = next(i for i, o in enumerate(results.outcomes) if isinstance(o.diff.get("old"), dict))
    table = dom(page).one("tbody", id=f"o{index}").one("table", cls="pairs")
    rows = [(tr.classes, tr.one("th").text, [td.text for td in tr.find_all("td")]) for tr in table.find_all("tr")[1:]]
    assert rows == [
        ({"differs"}, "k", ["36", "34"]),
        ({"same"}, "n", ["56", "56"]),
        ({"differs"}, "rate", ["0.643", "0.607"]),
    ]


def test_capability_added_removed(page, results: Results) -> None:
    index = next(i for i, o in enumerate(results.outcomes) if o.kind == "capability")
    chips = dom(page).one("tbody", id=f"o{index}").find_all("span", cls="chip")
    assert [c.text for c in chips] == ["+ use_mtp", "+ mtp_heads", "\u2212 legacy_cache"]


def test_tolerances_and_statistics_visible(page, results: Results) -> None:
    tensor = next(i for i, o in enumerate(results.outcomes) if o.kind == "tensor")
    metrics = {
        tr.one("th").text: tr.one("td", cls="num").text
        for tr in dom(page).one("tbody", id=f"o{tensor}").one("table", cls="metrics").find_all("tr")
    }
    assert metrics == {"max abs error": "3e-06", "max rel error": "1e-05", "atol": "1e-05", "rtol": "1.3e-06"}
    latency = next(i for i, o in enumerate(results.outcomes) if o.status is Status.REGRESSION and o.kind == "latency")
    note = dom(page).one("tbody", id=f"o{latency}").one("td", cls="bad").text
    assert note == "1.33\u00d7 baseline, outside band 0.92\u20131.08\u00d7"
    relative = [i for i, o in enumerate(results.outcomes) if "p_slower" in o.diff][0]
    notes = [td.text for td in dom(page).one("tbody", id=f"o{relative}").find_all("td", cls="note")]
    assert "1.25\u00d7 baseline, outside band 0.91\u20131.10\u00d7" in notes
    assert "< alpha 0.01: significant" in notes and "\u2265 alpha 0.01: not significant" in notes


def test_unknown_keys_go_to_generic_table(page, results: Results) -> None:
    index = next(i for i, o in enumerate(results.outcomes) if "holm_rank" in o.diff)
    generic = dom(page).one("tbody", id=f"o{index}").one("table", cls="generic")
    assert [(tr.one("th").text, tr.one("td").text) for tr in generic.find_all("tr")] == [("holm_rank", "3")]


def test_env_table_shows_both_sides_and_highlights_differences(page, results: Results) -> None:
    rows = {
        tr.one("th").text: (tr.classes, [td.text for td in tr.find_all("td")])
        for tr in dom(page).one("table", id="env").find_all("tr")[1:]
    }
    assert set(rows) == set(results.env) | set(results.baseline_env or {})
    assert rows["transformers"] == ({"differs"}, ["5.13.0", "5.14.0"])
    assert rows["torch"] == ({"same"}, ["2.6.0", "2.6.0"])
    assert rows["only_in_baseline"] == ({"differs"}, ["x", "\u2014"])
    assert rows["hostile"] == ({"differs"}, ["\u2014", HOSTILE])
    banner = [s.text for s in dom(page).find_all("span", cls="env-change")]
    assert "transformers 5.13.0 \u2192 5.14.0" in banner and "dtype float32 \u2192 bfloat16" in banner


def test_nested_env_flattened_and_missing_baseline_noted() -> None:
    root = parse(
        render_html(Results(env={"versions": {"torch": "2.6", "transformers": "5.14"}}, baseline_env=None))
    ).root
    env = root.one("table", id="env")
    assert [tr.one("th").text for tr in env.find_all("tr")[1:-1]] == ["versions.torch", "versions.transformers"]
    assert "No baseline environment" in env.text
    assert not env.find_all("tr", cls="differs")
    assert "No outcomes were recorded." in root.text


# --------------------------------------------------------------------------- escaping


def test_no_markup_from_data(page) -> None:
    html, tree = page
    tags = [tag for tag, _ in tree.start_tags]
    assert "script" not in tags and "img" not in tags
    handlers = [(t, k) for t, attrs in tree.start_tags for k in attrs if k.startswith("on")]
    assert handlers == []
    assert "<script" not in html.lower() and "<img" not in html.lower()


@pytest.mark.parametrize(
    ("tag", "cls"),
    [
        ("h3", "suite-name"),  # suite
        ("h4", "case-id"),  # case id
        ("td", "c-field"),  # field name
        ("td", "detail"),  # detail
    ],
)
def test_hostile_text_shown_as_text(page, tag: str, cls: str) -> None:
    assert any(HOSTILE in node.text for node in dom(page).find_all(tag, cls))


def test_hostile_text_in_diff_env_meta_and_charts(page) -> None:
    root = dom(page)
    hostile_row = root.find_all("tbody", cls="outcome")[-1]
    assert hostile_row.one("del").text == "old" and HOSTILE in hostile_row.one("div", cls="divergence").text
    assert HOSTILE in hostile_row.one("table", cls="generic").text  # unknown key and value
    assert HOSTILE in hostile_row.one("table", cls="deepdiff").text
    assert any(HOSTILE in td.text for td in root.one("table", id="env").find_all("td"))
    assert HOSTILE in root.one("table", cls="meta").text
    titles = [t.text for t in root.find_all("title")]
    assert any(HOSTILE in t for t in titles[1:])  # SVG tooltips
    assert any(HOSTILE in (f.attrs.get("aria-label") or "") for f in root.find_all("svg"))
    # latency row labels are cut to 44 characters; the full text is in the tooltip
    assert any(t.text.startswith(HOSTILE[:40]) for t in root.find_all("text", cls="row-label"))


# --------------------------------------------------------------------------- charts


def test_bias_chart_points_match_data(page) -> None:
    bias = [g for g in dom(page).find_all("div", cls="chart-group") if "bias" in g.classes]
    ensemble = next(g for g in bias if g.one("h3").text == "Bias curve: ensemble")
    tv, acceptance = ensemble.find_all("figure", cls="chart")
    for chart in (tv, acceptance):
        assert count_points(chart, "exact") == len(BIAS_POINTS)
        assert count_points(chart, "measured") == len(BIAS_POINTS)
        assert len(chart.find_all("polyline", cls="exact-line")) == 1
        # each measured point has its interval bar (1 vertical + 2 caps)
        assert all(len(g.find_all("line", cls="ci")) == 3 for g in chart.find_all("g", data_point="measured"))
    tips = [g.one("title").text for g in tv.find_all("g", data_point="measured")]
    assert tips[-1].startswith("w = 1, measured TV 0.08, interval [0.05, 0.11], exact TV 0")
    # the hostile outcome forms its own series with one exact TV point and no acceptance panel
    other = next(g for g in bias if g is not ensemble)
    assert count_points(other, "exact") == 1 and len(other.find_all("figure")) == 1


def test_latency_chart_points_match_data(page, results: Results) -> None:
    chart = dom(page).one("div", cls="latency")
    with_ratio = [o for o in results.outcomes if "ratio" in o.diff]
    assert count_points(chart, "latency") == len(with_ratio) == len(LATENCY) + 1
    assert len(chart.find_all("rect", cls="band")) == len(LATENCY)  # the hostile row has no band
    assert len(chart.find_all("line", cls="baseline")) == 1  # everything is relative to its baseline
    tips = [g.one("title").text for g in chart.find_all("g", data_point="latency")]
    assert tips[1].startswith("tiny-llama/prompt_lookup :: latency: 1.333\u00d7 baseline, band 0.9167\u20131.083\u00d7")
    assert tips[3].startswith("tiny-llama/static-cache :: latency: 1.25\u00d7 baseline, band 0.9091\u20131.1\u00d7")


@pytest.mark.parametrize(
    ("diff", "expected"),
    [
        ({"ratio": 1.6, "baseline_ratio": 1.2, "noise_band": [1.1, 1.3]}, (4 / 3, (1.1 / 1.2, 1.3 / 1.2))),
        ({"ratio": 0.9, "baseline_ratio": 1.0, "noise_band": 0.1}, (0.9, (0.9, 1.1))),
        ({"ratio": 1.25, "tolerance": 0.25}, (1.25, (0.8, 1.25))),
        ({"ratio": 1.25, "noise_band": 0.1, "tolerance": 0.25}, (1.25, (0.9, 1.1))),
        ({"ratio": 1.25}, (1.25, None)),
        ({"ratio": 1.25, "baseline_ratio": 0}, None),
        ({"ratio": "slow"}, None),
    ],
)
def test_relative_latency_conventions(diff: dict, expected: tuple | None) -> None:
    found = relative_latency(diff)
    if expected is None:
        assert found is None
    else:
        assert found is not None and found[0] == pytest.approx(expected[0])
        assert found[1] == (pytest.approx(expected[1]) if expected[1] else None)


def test_acceptance_per_step_points_match_data(page) -> None:
    charts = [f for f in dom(page).find_all("figure", cls="chart") if f.one("figcaption").text.startswith("Accepted")]
    assert len(charts) == 1
    assert count_points(charts[0], "step") == len(ACCEPTED_PER_STEP)
    assert "34 tokens accepted over 14 steps" in charts[0].text
    titles = [g.one("title").text for g in charts[0].find_all("g", data_point="step")]
    assert titles[2] == "step 2: 0 of 4 drafted tokens accepted"


def test_no_charts_without_chart_data() -> None:
    outcomes = [Outcome("s", "c", "tokens", "tokens", Status.REGRESSION, "x", "", {"old": [1], "new": [2]})]
    root = parse(render_html(Results(env={}, baseline_env={}, outcomes=outcomes))).root
    assert root.find_all("svg") == [] and root.find_all(id="charts") == []


def test_invalid_chart_values_are_skipped_not_plotted() -> None:
    outcomes = [
        Outcome("s", "a", "tv", "distribution", Status.PASS, diff={"w": 0.1, "tv_exact": float("nan")}),
        Outcome("s", "b", "tv", "distribution", Status.PASS, diff={"w": "high", "tv_exact": 0.1}),
        Outcome("s", "c", "tv", "distribution", Status.PASS, diff={"w": 0.2, "tv_measured": 0.1, "tv_ci": [0.2]}),
        Outcome("s", "d", "t", "latency", Status.PASS, diff={"ratio": True}),
        Outcome("s", "e", "k", "rate", Status.PASS, diff={"accepted_per_step": [1, "x"]}),
    ]
    root = parse(render_html(Results(env={}, baseline_env={}, outcomes=outcomes))).root
    assert count_points(root, "measured") == 1 and count_points(root, "exact") == 0
    assert root.find_all("g", data_point="measured")[0].find_all("line", cls="ci") == []
    assert count_points(root, "latency") == 0 and count_points(root, "step") == 0
    assert '[1, "x"]' in root.one("tbody", id="o4").text  # shown generically instead


def test_bias_curve_list_in_one_outcome() -> None:
    curve = [{"w": w / 4, "tv_exact": 0.3 - w / 20, "acceptance_measured": 0.5 + w / 10} for w in range(5)]
    outcome = Outcome("ens", "curve", "bias", "distribution", Status.PASS, diff={"bias_curve": curve, "series": "S"})
    root = parse(render_html(Results(env={}, baseline_env={}, outcomes=[outcome]))).root
    group = root.one("div", cls="bias")
    assert group.one("h3").text == "Bias curve: S"
    assert count_points(group, "exact") == 5 and count_points(group, "measured") == 5


# --------------------------------------------------------------------------- self-contained


def test_self_contained(page) -> None:
    html, tree = page
    for tag, attrs in tree.start_tags:
        for key in ("src", "href", "xlink:href", "action", "srcset"):
            if key not in attrs:
                continue
            value = (attrs[key] or "").strip().lower()
            assert not value.startswith(("http:", "https:", "//")), (tag, key, value)
            if key == "href":
                assert value.startswith("#"), (tag, value)  # only in-page links
    assert {t for t, _ in tree.start_tags}.isdisjoint({"script", "link", "iframe", "object", "embed", "img"})
    style = "".join(n.text for n in tree.root.find_all("style"))
    assert "url(" not in style and "@import" not in style and "@font-face" not in style


# --------------------------------------------------------------------------- robustness

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
KNOWN_KEYS = [
    "old", "new", "old_text", "new_text", "first_divergence", "deepdiff", "added", "removed", "w", "tv_exact",
    "tv_measured", "tv_ci", "acceptance_exact", "acceptance_measured", "acceptance_ci", "bias_curve", "ratio",
    "baseline_ratio", "noise_band", "accepted_per_step", "drafted_per_step", "p_value", "alpha", "max_abs_err",
]
diffs = st.dictionaries(st.sampled_from(KNOWN_KEYS) | st.text(max_size=10), json_values, max_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(diff=diffs, env=st.dictionaries(st.text(max_size=6), json_values, max_size=4))
def test_any_diff_shape_renders(diff: dict, env: dict) -> None:
    outcome = Outcome("suite", "case", "field", "exact", Status.REGRESSION, "d", "", diff)
    root = parse(render_html(Results(env=env, baseline_env=None, outcomes=[outcome]))).root
    assert len(root.find_all("tbody", cls="outcome")) == 1


@pytest.mark.parametrize(("diff", "shown"), [
    (None, None),
    ("a string", {"diff": "a string"}),
    ([1, 2], {"diff": "[1, 2]"}),
    # keys of known sections with the wrong shape fall back to the generic key/value table
    ({"first_divergence": "x", "deepdiff": [1, {}]}, {"first_divergence": "x", "deepdiff": "[1, {}]"}),
])
def test_non_dict_diffs_render(diff, shown) -> None:
    outcome = Outcome("s", "c", "f", "exact", Status.REGRESSION, diff=diff)  # type: ignore[arg-type]
    root = parse(render_html(Results(env={}, baseline_env=None, outcomes=[outcome]))).root
    row = root.one("tbody", cls="outcome")
    if shown is None:  # nothing to show: no diff row at all
        assert row.find_all("tr", cls="diff-row") == []
        return
    generic = row.one("tr", cls="diff-row").one("table", cls="generic")
    assert {tr.one("th").text: tr.one("td").text for tr in generic.find_all("tr")} == shown


def test_control_characters_and_surrogates_do_not_break_the_file(tmp_path: Path) -> None:
    nasty = "nul\x00 esc\x1b lone\ud800 emoji\U0001f600"
    outcome = Outcome("s", nasty, nasty, "tokens", Status.REGRESSION, nasty, "", {"old_text": nasty, "new_text": "x"})
    path = render(Results(env={"k": nasty}, baseline_env=None, outcomes=[outcome]), tmp_path)
    html = path.read_text(encoding="utf-8")
    assert "emoji\U0001f600" in html and "lone?" in html


# --------------------------------------------------------------------------- load_results


def write(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_load_results_round_trip(results: Results, tmp_path: Path) -> None:
    path = write(tmp_path / "results.json", results.to_json())
    loaded = load_results(path)
    assert loaded.to_json() == results.to_json()
    assert render_html(loaded) == render_html(results)


def test_load_results_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "results.json"
    with pytest.raises(ResultsFileError, match="no such file") as err:
        load_results(path)
    assert str(err.value).startswith(str(path)) and err.value.path == path


def test_load_results_corrupt_json(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_text('{"results_version": 1,\n "env": {', encoding="utf-8")
    with pytest.raises(ResultsFileError, match=r"not valid JSON \(line 2") as err:
        load_results(path)
    assert str(path) in str(err.value)
    assert isinstance(err.value, ValueError)


def test_load_results_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ResultsFileError, match="not valid UTF-8"):
        load_results(path)


@pytest.mark.parametrize("version", [None, 0, RESULTS_VERSION + 1, "1"])
def test_load_results_unknown_version(tmp_path: Path, version: object) -> None:
    path = write(tmp_path / "results.json", {"results_version": version, "env": {}, "outcomes": []})
    with pytest.raises(ResultsFileError, match=f"results_version {version!r} is not supported") as err:
        load_results(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "expected a JSON object"),
        ({"results_version": RESULTS_VERSION, "env": {}}, "missing key 'outcomes'"),
        ({"results_version": RESULTS_VERSION, "env": {}, "outcomes": {}}, "'outcomes' must be a list"),
        ({"results_version": RESULTS_VERSION, "env": {}, "outcomes": [{"suite": "s"}]}, r"outcomes\[0\]"),
        (
            {"results_version": RESULTS_VERSION, "env": {}, "outcomes": [
                {"suite": "s", "case": "c", "field": "f", "kind": "exact", "status": "pass"},
                {"suite": "s", "case": "c", "field": "f", "kind": "exact", "status": "bogus"},
            ]},
            r"outcomes\[1\]: unknown status 'bogus'",
        ),
    ],
)
def test_load_results_malformed(tmp_path: Path, data: object, message: str) -> None:
    path = write(tmp_path / "results.json", data)
    with pytest.raises(ResultsFileError, match=message) as err:
        load_results(path)
    assert str(err.value).startswith(str(path))


# --------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("values", "expected"),
    [([0.0, 0.31], (0.0, 0.4)), ([0.8, 1.6], (0.8, 1.6)), ([5.0], (4.4, 5.6)), ([], (0.0, 1.0))],
)
def test_nice_domain_covers_values(values: list[float], expected: tuple[float, float]) -> None:
    lo, hi, ticks = nice_domain(values)
    assert (lo, hi) == pytest.approx(expected)
    assert ticks[0] == pytest.approx(lo) and ticks[-1] == pytest.approx(hi)
    assert all(lo <= v <= hi for v in values)


def test_noise_band_conventions() -> None:
    assert noise_band([1.3, 1.1], 1.2) == (1.1, 1.3)  # absolute, sorted
    assert noise_band(0.1, 2.0) == pytest.approx((1.8, 2.2))  # relative half-width around baseline
    assert noise_band(0.1, None) is None
    assert noise_band("wide", 1.0) is None


def test_fmt_and_split_helpers() -> None:
    assert split_common("abcX", "abY") == ("ab", "cX", "Y")
    assert fmt_value(1 / 3) == "0.3333" and fmt_value(True) == "true" and fmt_value(None) == "null"
    assert fmt_value(math.inf) == "inf" and fmt_value("") == '""'
    assert fmt_value({"a": [1, 2]}) == '{"a": [1, 2]}'
    assert fmt_value("x" * 5000).endswith("(1000 more characters)")
    assert flatten({"a": {"b": 1, "c": {}}, "d": 2}) == {"a.b": 1, "a.c": {}, "d": 2}
    assert flatten(None) == {} and flatten(3) == {"(value)": 3}


def test_outcome_status_given_as_text_counts_like_the_enum():
    from harness.schema import Outcome, Results, Status

    results = Results(env={}, baseline_env=None, outcomes=[Outcome("s", "c", "f", "exact", "regression")])
    assert results.outcomes[0].status is Status.REGRESSION
    assert results.counts()["regression"] == 1 and results.verdict == "regression"
    with pytest.raises(ValueError):
        Outcome("s", "c", "f", "exact", "bogus")


def test_every_category_has_its_own_style() -> None:
    import re

    from harness.report.page import HERE, category_class
    from harness.schema import Category

    css = (HERE / "report.css").read_text()
    styled = set(re.findall(r"\.(cat-[a-z-]+)", css))
    missing = [c.value for c in Category if c is not Category.NONE and category_class(c) not in styled]
    assert missing == []


def test_an_unknown_category_in_results_json_is_refused(tmp_path: Path) -> None:
    data = Results(env={}, baseline_env=None, outcomes=[Outcome("s", "c", "f", "exact", Status.PASS)]).to_json()
    data["outcomes"][0]["category"] = "looks-fine"
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultsFileError, match="looks-fine"):
        load_results(path)


def test_a_deepdiffs_paths_render_in_natural_order_whatever_deepdiff_gave():
    """deepdiff's path order follows Python's hash seed; the page must not (the cross-numerics page
    swapped two rows between renders)."""
    from harness.report.diffview import deepdiff_rows

    body = {"root['a'][10]": {"old_value": 1, "new_value": 2}, "root['a'][3]": {"old_value": 3, "new_value": 4},
            "root['a'][2]": {"old_value": 5, "new_value": 6}}
    rows = deepdiff_rows({"values_changed": body})
    assert [r.path for r in rows] == ["root['a'][2]", "root['a'][3]", "root['a'][10]"]
    reordered = deepdiff_rows({"values_changed": dict(reversed(list(body.items())))})
    assert [r.path for r in reordered] == [r.path for r in rows]


def test_rendering_a_report_does_not_import_torch():
    """A report, a merge or a compare reads results, never a model: importing torch costs ~2 s of every
    such command (the suites registry's rows import it; report/about.py and report/repro.py read them
    lazily - a top-level import made every `harness report` and fail-closed probe ~1.8 s slower)."""
    import subprocess
    import sys

    code = ("import sys, harness.report, harness.report.about, harness.report.repro, harness.cli.report, "
            "harness.cli.merge, harness.cli.compare; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
