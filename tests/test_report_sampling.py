"""The report's sampling table: one row per sampling case, from its fit and its bias point."""

from __future__ import annotations

from harness.report.page import render_html
from harness.report.sampling_table import sampling_rows
from harness.schema import Outcome, Results, Status


def _case(case: str, status: Status, p: float, tv: float, bias: float) -> list[Outcome]:
    fit = Outcome("sampling", case, "joint_vs_exact", "distribution", status, "fit", "", {
        "n": 500, "p_value": p, "misfit": [{"cell": "12 40", "observed": 90, "expected": 31.5, "residual": 10.4}]},
        "reference")
    point = Outcome("sampling", case, "joint_bias_vs_target", "exact", Status.PASS, "bias", "bias",
                    {"tv_to_target": tv, "tv_to_target_ci": [max(0.0, tv - 0.14), tv + 0.14], "bias_exact": bias})
    return [fit, point]


def test_rows_pair_the_fit_with_the_bias_point_and_show_misfit_cells_only_for_a_misfit():
    outcomes = _case("a.plain.default", Status.PASS, 0.4, 0.06, 0.0) + _case("a.ensemble.w0.3", Status.REGRESSION, 1e-5, 0.5, 0.26)
    rows = sampling_rows(outcomes)
    assert [r.case for r in rows] == ["a.plain.default", "a.ensemble.w0.3"]
    assert rows[0].misfit == "" and rows[0].bias == 0.0 and rows[0].n == 500
    assert rows[1].status == "regression" and rows[1].misfit.startswith("[12 40] 90 vs 31.5")
    assert rows[1].tv_ci == (0.36, 0.64)


def test_the_page_has_a_sampling_section_only_when_there_are_rows():
    env = {"transformers": "5.24.0"}
    with_rows = render_html(Results(env=env, baseline_env=None, outcomes=_case("a.plain.default", Status.PASS, 0.4, 0.06, 0.0)))
    assert 'id="sampling"' in with_rows and "a.plain.default" in with_rows and "0.060 [0.000, 0.200]" in with_rows
    without = render_html(Results(env=env, baseline_env=None, outcomes=[]))
    assert 'id="sampling"' not in without
