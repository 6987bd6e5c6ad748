"""The report's sampling table: one row per path x setting, from its white-box fields, its fit and its
bias point; what was skipped and why."""

from __future__ import annotations

from harness.report.page import render_html
from harness.report.sampling_table import sampling_rows
from harness.schema import Outcome, Results, Status


def _case(case: str, status: Status, p: float, tv: float, bias: float) -> list[Outcome]:
    fit = Outcome("sampling", case, "joint", "distribution", status, "fit", "", {
        "n": 500, "p_value": p, "misfit": [{"cell": "12 40", "observed": 90, "expected": 31.5, "residual": 10.4}]})
    point = Outcome("sampling", case, "joint_bias_vs_target", "exact", Status.INFO, "bias", "bias",
                    {"tv_to_target": tv, "tv_to_target_ci": [max(0.0, tv - 0.14), tv + 0.14], "bias_exact": bias},
                    "reference")
    return [fit, point]


def _exact(case: str, status: Status, tv: float, category: str = "", mechanism: tuple[str, ...] = ()) -> Outcome:
    return Outcome("sampling", case, "exact_emitted", "deviation", status, "exact", category,
                   {"tv": tv, "mechanism": list(mechanism)})


def test_rows_pair_the_fit_with_the_bias_point_and_show_misfit_cells_only_for_a_misfit():
    outcomes = _case("a.plain.default", Status.PASS, 0.4, 0.06, 0.0) + _case("a.ensemble.w0.3", Status.REGRESSION, 1e-5, 0.5, 0.26)
    rows = sampling_rows(outcomes)
    assert [r.case for r in rows] == ["a.plain.default", "a.ensemble.w0.3"]
    assert rows[0].misfit == "" and rows[0].bias == 0.0 and rows[0].n == 500
    assert rows[1].status == "regression" and rows[1].misfit.startswith("[12 40] 90 vs 31.5")
    assert rows[1].tv_ci == (0.36, 0.64)


def test_a_row_shows_the_exact_bias_with_its_mechanism_and_what_was_skipped():
    case = "a.ensemble.w0.3.temperature"
    outcomes = [_exact(case, Status.CHANGED, 0.24, "known-deviation", ("drafter applies T twice",)),
                Outcome("sampling", case, "exact_draft", "deviation", Status.SKIPPED, "not checkable (no hook)",
                        "not-checkable"),
                *_case(case, Status.PASS, 0.3, 0.3, 0.32)]
    (row,) = sampling_rows(outcomes)
    assert row.status == "changed" and row.exact_tv == 0.24 and row.exact_status == "changed (known-deviation)"
    assert row.mechanism == "drafter applies T twice" and row.skipped == "exact_draft: not checkable (no hook)"
    html = render_html(Results(env={}, baseline_env=None, outcomes=outcomes))
    assert "drafter applies T twice" in html and "not checkable (no hook)" in html


def test_a_fit_that_is_not_checkable_shows_why_and_no_n():
    case = "user.plain.top_k"
    outcomes = [_exact(case, Status.PASS, 1e-7),
                Outcome("sampling", case, "joint", "distribution", Status.SKIPPED, "not checkable (one bin)",
                        "not-checkable", {"n": 200}),
                Outcome("sampling", case, "joint_bias_vs_target", "exact", Status.INFO, "bias", "", {})]
    (row,) = sampling_rows(outcomes)
    assert row.status == "skipped" and row.n is None and row.skipped == "joint: not checkable (one bin)"


def test_the_page_has_a_sampling_section_only_when_there_are_rows():
    env = {"transformers": "5.24.0"}
    with_rows = render_html(Results(env=env, baseline_env=None, outcomes=_case("a.plain.default", Status.PASS, 0.4, 0.06, 0.0)))
    assert 'id="sampling"' in with_rows and "a.plain.default" in with_rows and "0.060 [0.000, 0.200]" in with_rows
    without = render_html(Results(env=env, baseline_env=None, outcomes=[]))
    assert 'id="sampling"' not in without
