"""Results -> the view model of the page -> one self-contained HTML file.

All text from records reaches the template as plain `str` and is escaped there (Jinja2
autoescape on for every template). The only markup passed through unescaped is our own CSS.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from harness.checking.causes import crashed_cases
from harness.checking.findings import Finding, Findings, library_hint
from harness.report.about import about
from harness.report.charts import BIAS_METRICS, Chart, bias_chart, bias_points, latency_chart, latency_rows
from harness.report.diffview import DiffView, diff_view
from harness.report.fmt import flatten, fmt_value, is_long
from harness.report.repro import repro_text, scriptable
from harness.report.run_panel import run_rows
from harness.report.sampling_table import sampling_rows
from harness.report.writes import writes_lines
from harness.schema import CATEGORY_MEANING, STATUS_MEANING, Category, Outcome, Results, Status
from harness.store.env import machine_differences, moved_axes

HERE = Path(__file__).parent
STATUS_ORDER = (Status.REGRESSION, Status.CHANGED, Status.MISSING, Status.NEW, Status.SKIPPED, Status.PASS,
                Status.INFO)
VERDICT_TEXT = {
    "regression": "At least one field regressed: CI fails.",
    "changed": "Differences within the policy of an intended change: review them, then regenerate "
    "the golden records on purpose.",
    "pass": "No regression and nothing to regenerate.",
    "error": "The run did not complete, so this report checked less than the records hold: fix the error "
    "(shown below in the Run panel) and rerun. Nothing here is a pass.",
    "failed": "Tests failed other than by a golden verdict (broken tests, in the Run panel): their cases "
    "observed less than they should. Fix them and rerun. Nothing here is a pass.",
}


@dataclass(frozen=True)
class EnvRow:
    key: str
    baseline: str
    current: str
    differs: bool


@dataclass(frozen=True)
class OutcomeView:
    anchor: str
    suite: str
    case: str
    field: str
    kind: str
    status: str
    category: str
    category_class: str
    against: str
    detail: str
    diff: DiffView

    @property
    def open(self) -> bool:
        """Diffs start expanded unless the field passed or is information (a per-step chart is always shown)."""
        return self.status not in (Status.PASS.value, Status.INFO.value) or self.diff.steps is not None


@dataclass(frozen=True)
class CaseView:
    case: str
    outcomes: tuple[OutcomeView, ...]


@dataclass(frozen=True)
class SuiteView:
    name: str
    anchor: str
    counts: tuple[tuple[str, int], ...]
    cases: tuple[CaseView, ...]


@dataclass(frozen=True)
class ModelView:
    name: str
    origin: str  # "yours" | "zoo" | "" (cases that are not one model's: contracts, bias)
    cases: int
    counts: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class FindingView:
    anchor: str
    status: str
    category: str
    category_class: str
    sentence: str
    cases: tuple[tuple[str, str], ...]  # (suite/case, anchor of its outcome)
    follows: int
    about: str = ""  # the call or API its cases exercise (report/about.py)
    repro: str = ""  # a regression's `harness repro` command, or why there is none
    lost: str = ""  # the fields its crash no longer observes, named
    number: str = ""  # '1', '2', ...; '1.1' for a finding under a changed checkpoint
    under: tuple[FindingView, ...] = ()  # the findings on a changed checkpoint's cases


@dataclass(frozen=True)
class ChartGroup:
    title: str
    charts: tuple[Chart, ...]


def status_text(outcome: Outcome) -> str:
    return str(getattr(outcome.status, "value", outcome.status))


def category_class(category: Category | str) -> str:
    """The CSS class of a category: every `Category` has a `.cat-<value>` rule in report.css."""
    return f"cat-{Category(category).value}" if category else "cat-other"


def env_rows(baseline: Any, current: Any) -> list[EnvRow]:
    """Keys of both fingerprints (flattened) in one table; a key missing on one side differs."""
    old, new = flatten(baseline), flatten(current)
    keys = list(dict.fromkeys([*old, *new]))
    absent = "\u2014"
    return [
        EnvRow(
            key=key,
            baseline=fmt_value(old[key]) if key in old else absent,
            current=fmt_value(new[key]) if key in new else absent,
            differs=baseline is not None and (key not in old or key not in new or old[key] != new[key]),
        )
        for key in keys
    ]


def outcome_view(index: int, outcome: Outcome) -> OutcomeView:
    category = str(outcome.category or "")
    return OutcomeView(
        anchor=f"o{index}",
        suite=str(outcome.suite),
        case=str(outcome.case),
        field=str(outcome.field),
        kind=str(outcome.kind),
        status=status_text(outcome),
        category=category,
        category_class=category_class(category),
        against=str(outcome.against),
        detail=str(outcome.detail or ""),
        diff=diff_view(outcome.diff),
    )


def count_statuses(views: list[OutcomeView]) -> tuple[tuple[str, int], ...]:
    return tuple((s.value, sum(v.status == s.value for v in views)) for s in STATUS_ORDER)


def suite_views(views: list[OutcomeView]) -> list[SuiteView]:
    """Suites and cases in order of first appearance."""
    grouped: dict[str, dict[str, list[OutcomeView]]] = {}
    for view in views:
        grouped.setdefault(view.suite, {}).setdefault(view.case, []).append(view)
    suites = []
    for i, (name, cases) in enumerate(grouped.items()):
        members = [v for vs in cases.values() for v in vs]
        suites.append(
            SuiteView(
                name=name,
                anchor=f"s{i}",
                counts=tuple((s, n) for s, n in count_statuses(members) if n),
                cases=tuple(CaseView(case, tuple(vs)) for case, vs in cases.items()),
            )
        )
    return suites


def model_of(case: str, names: Sequence[str]) -> str:
    """The model a case id belongs to: a model's own case is its name, a generation case starts
    with "<name>." (names have no dots); '' for cases of no single model."""
    return next((n for n in names if case == n or case.startswith(n + ".")), "")


def model_views(views: list[OutcomeView], user_models: Sequence[str], shipped: Sequence[str] = ()) -> list[ModelView]:
    """Outcome counts per model - your models first (`shipped`: the harness's real model, "real"), then
    the zoo's, then the rest."""
    from harness.zoo.specs import BY_NAME

    names = [*user_models, *sorted(BY_NAME, key=len, reverse=True)]  # longest zoo name first: no prefix clash
    grouped: dict[str, list[OutcomeView]] = {}
    for view in views:
        grouped.setdefault(model_of(view.case, names), []).append(view)
    order = [*user_models, *sorted(n for n in grouped if n in BY_NAME), ""]
    return [ModelView(name or "(no single model: contracts, bias)",
                      "real" if name in shipped else "yours" if name in user_models else "zoo" if name else "",
                      len({(v.suite, v.case) for v in grouped[name]}),  # a case is suite/case, as findings count
                      tuple((s, n) for s, n in count_statuses(grouped[name]) if n))
            for name in order if name in grouped]


def bias_groups(outcomes: list[Outcome]) -> list[ChartGroup]:
    per_metric = {metric: bias_points(outcomes, metric) for metric in BIAS_METRICS}
    names = list(dict.fromkeys(name for series in per_metric.values() for name in series))
    groups = []
    for name in names:
        charts = [bias_chart(name, per_metric[m].get(name, []), m) for m in BIAS_METRICS]
        groups.append(ChartGroup(f"Bias curve: {name}", tuple(c for c in charts if c is not None)))
    return groups


def finding_views(outcomes: list[Outcome], baseline: str | None = None,
                  findings: Findings | None = None) -> list[FindingView]:
    """The distinct findings (harness/checking/findings.py; `findings`: those of `outcomes`, grouped
    once by the caller), each linking to its cases' outcomes and naming the call it is about; a
    regression with its `harness repro` line; a crash with the fields it no longer observes. A
    changed checkpoint first, with the findings on its cases under it."""
    found = findings if findings is not None else Findings.of_outcomes(outcomes)
    anchors = {id(o): f"o{i}" for i, o in enumerate(outcomes)}

    def view(f: Finding, number: str) -> FindingView:
        first: dict[str, str] = {}
        for o in f.outcomes:
            first.setdefault(f"{o.suite}/{o.case}", anchors[id(o)])
        lost = sorted({o.field for o in f.follows})
        return FindingView(anchor="f" + number.replace(".", "-"), status=f.status.value, category=f.category,
                           category_class=category_class(f.category), sentence=f.sentence(240),
                           cases=tuple(first.items()), follows=len(f.follows), number=number,
                           about=about((o.suite, o.case) for o in f.outcomes),
                           repro=repro_text(f, baseline) if f.status is Status.REGRESSION and any(
                               scriptable(o.suite, o.case) for o in f.outcomes) else "",
                           lost=", ".join(lost[:12]) + (f" and {len(lost) - 12} more" if len(lost) > 12 else ""),
                           under=tuple(view(g, f"{number}.{j}") for j, g in enumerate(f.under, 1)))

    return [view(f, str(i)) for i, f in enumerate(found.grouped, 1)]


FINDING_ORDER = (Status.REGRESSION, Status.MISSING, Status.CHANGED, Status.NEW, Status.SKIPPED)
# the attention table's order: what fails first, then what is lost, then what changed
SEVERITY = {s.value: i for i, s in enumerate(FINDING_ORDER)}


def finding_counts(findings: Findings) -> tuple[tuple[str, int], ...]:
    """Findings per status, as the headline counts them (those under a changed checkpoint too)."""
    every = findings.every
    return tuple((s.value, sum(f.status is s for f in every)) for s in FINDING_ORDER)


def next_step(results: Results) -> str:
    """What to do now, in one or two sentences under the verdict."""
    verdict = results.verdict
    if verdict == "regression":
        return ("Do not take this change as it is. Start with finding 1 below: each regression names the call it "
                "is about, its cases and, where one exists, the `harness repro` command that writes a script "
                "reproducing it outside the harness (to report upstream; `harness bisect` finds the release). A "
                "difference you intend is recorded with `harness regen` - never a crash.")
    if verdict == "changed":
        return ("Review each change below. If every one is intended, `harness regen` records them as this env's "
                "baseline; commit golden/records/.")
    if verdict == "pass":
        return "Nothing to decide."
    return "Fix what stopped the run (the Run panel below) and rerun: nothing here is a pass."


def legend(views: list[OutcomeView], findings: list[FindingView]) -> list[tuple[str, str, str]]:
    """(word, css class, meaning) for every status and category this page shows, from the code's own
    vocabulary (harness/schema.py STATUS_MEANING, CATEGORY_MEANING)."""
    statuses = {v.status for v in views} | {f.status for f in findings}
    categories = {v.category for v in views if v.category} | {f.category for f in findings if f.category}
    rows = [(s.value, f"st-{s.value}", text) for s, text in STATUS_MEANING.items() if s.value in statuses]
    rows += [(c.value, category_class(c), text) for c, text in CATEGORY_MEANING.items() if c.value in categories]
    return rows


def attention_views(views: list[OutcomeView], outcomes: list[Outcome]) -> list[OutcomeView]:
    """Regressions, missing fields and changes, most severe first; a field its case's crash no longer
    observes is not listed here (its crash's finding names it)."""
    crashed = crashed_cases(outcomes)
    listed = [v for v in views if v.status in (Status.REGRESSION.value, Status.CHANGED.value, Status.MISSING.value)
              and not (v.category == Category.MISSING_FIELD.value and (v.suite, v.case) in crashed)]
    return sorted(listed, key=lambda v: SEVERITY[v.status])


# meta keys the page renders in a section of their own
SHOWN_ELSEWHERE = ("claims", "injected_fault", "writes", "write_rule")


def meta_rows(meta: Any) -> list[tuple[str, str, bool]]:
    rows = []
    shown = {k: v for k, v in meta.items() if k not in SHOWN_ELSEWHERE} if isinstance(meta, dict) else meta
    for key, value in flatten(shown).items():
        text = fmt_value(value)
        rows.append((key, text, is_long(text)))
    return rows


def tracked_text(results: Results) -> str:
    """The headline's word on the known upstream deviations the baseline holds (never a regen)."""
    n = len(results.tracked)
    return (f" {n} known deviation{'s' if n != 1 else ''} in transformers that the baseline already holds "
            f"{'are' if n != 1 else 'is'} tracked: listed below, nothing to regenerate.") if n else ""


def library_sentence(results: Results) -> str:
    """The headline's word when every regression is a reference the library failed (checking/findings.py)."""
    hint = library_hint(results)
    return f" {hint[0].upper()}{hint[1:]}." if hint else ""


def context(results: Results, claims: Any = None, findings: Findings | None = None) -> dict[str, Any]:
    """The page's template variables; `findings`: those of `results`, grouped once by the caller
    (`Findings.of`), else grouped here."""
    baseline = results.meta.get("baseline_key") if isinstance(results.meta, dict) else None
    grouped = findings if findings is not None else Findings.of(results)
    finding_list = finding_views(results.outcomes, baseline if isinstance(baseline, str) else None, grouped)
    views = [outcome_view(i, o) for i, o in enumerate(results.outcomes)]
    envs = env_rows(results.baseline_env, results.env)
    verdict = results.verdict
    latency = latency_chart(latency_rows(results.outcomes))
    sampling = sampling_rows(results.outcomes)
    return {
        "verdict": verdict,
        "verdict_text": VERDICT_TEXT.get(verdict, "") + tracked_text(results) + library_sentence(results),
        "total": sum(v.status != Status.INFO.value for v in views),  # checks: information rows are none
        "counts": count_statuses(views),
        "env_rows": envs,
        "env_changes": [r for r in envs if r.differs][:6],
        "axis": moved_axes(results.env, results.baseline_env),
        "machine": machine_differences(results.env, results.baseline_env),
        "has_baseline": results.baseline_env is not None,
        "meta_rows": meta_rows(results.meta),
        "run_rows": run_rows(results.meta),
        "attention": attention_views(views, results.outcomes),
        "finding_counts": finding_counts(grouped),
        "next_step": next_step(results),
        "legend": legend(views, [g for f in finding_list for g in (f, *f.under)]),
        "suites": suite_views(views),
        "models": model_views(views, results.meta.get("user_models") or [], results.meta.get("shipped_models") or []) if results.meta.get("user_models") else [],
        "bias_groups": bias_groups(results.outcomes),
        "sampling": sampling,
        "sampling_counts": [(s.value, n) for s in STATUS_ORDER if (n := sum(r.status == s.value for r in sampling))],
        "latency": latency,
        "findings": finding_list,
        "writes": writes_lines(results.meta, limit=500) if isinstance(results.meta, dict) and "writes" in results.meta else [],
        "findings_headline": grouped.headline(results.verdict),
        "claims": claims,
        "injected_fault": results.meta.get("injected_fault") if isinstance(results.meta, dict) else None,
    }


@cache
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE),
        autoescape=True,  # every template, whatever its extension
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_html(results: Results, claims: Any = None, findings: Findings | None = None) -> str:
    """index.html's text: one self-contained page (harness/report/output.py writes it)."""
    css = (HERE / "report.css").read_text(encoding="utf-8")
    return environment().get_template("report.html").render(css=css, **context(results, claims, findings))
