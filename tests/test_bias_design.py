"""The bias suite's design: `not checked` (it used to read `underpowered`) is a failure of the design, not a verdict a run may pass.

For every case of a default `pytest suites` run (alpha = 0.01 / m, m = the run's golden tests,
counted here by collecting), the distribution check of suites/test_bias.py must
  - have power >= 0.8 against every distribution at TV >= tv_max, at the level Holm may decide it
    (alpha / one_step.STAT_CHECKS), and
  - not be `not checked` for a correct verifier: the TV upper bound it reports stays <= tv_max
    (checked by simulating the check's bound under the exact distribution, and on the recorded
    draws of every environment's golden records, decided by the checking core),
and the contexts must be the ones the documented search (`one_step.search_contexts`) finds.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness import cases
from harness.checking import stats
from harness.checking.core import compare_records
from harness.designs import one_step
from harness.engine import verify
from harness.schema import Category, Record, Status
from harness.settings.config import Thresholds
from harness.subjects.hf import Zoo
from run_size import default_run_alpha

REPO = Path(__file__).resolve().parents[1]
RECORDS = REPO / "golden" / "records"
ALPHA = default_run_alpha()  # alpha / m of a default run, m counted by collecting the suites
TV_MAX = Thresholds().tv_max


@pytest.fixture(scope="module")
def zoo():
    return Zoo()


def test_contexts_are_the_documented_search(zoo):
    assert one_step.search_contexts(zoo) == cases.CONTEXTS
    for ctx in cases.CONTEXTS:
        p, q = one_step.step_inputs(zoo, ctx)
        lo, hi = one_step.ACCEPTANCE_RANGE
        assert lo <= verify.acceptance_probability(p, q) <= hi


@pytest.mark.parametrize("case", cases.bias(), ids=lambda c: c.id)
def test_default_run_case_is_powered(zoo, case):
    p, q = one_step.step_inputs(zoo, cases.CONTEXTS[case.param("ctx")])
    plan = one_step.design(p, q, case.weight, ALPHA, TV_MAX)
    level = ALPHA / one_step.STAT_CHECKS
    assert plan.design.alpha == ALPHA and plan.design.level == level
    # the G-test's power against the least favourable alternative at TV = tv_max
    assert stats.gtest_power(plan.n, TV_MAX, level, plan.design.bins) >= stats.DESIGN_POWER
    assert plan.design.detectable_tv <= TV_MAX
    # the TV upper bound the check reports for a correct verifier (independent simulation)
    expected = np.array(list(plan.expected.values()))
    draws = np.random.default_rng(7).multinomial(plan.n, expected / expected.sum(), size=1000)
    over = np.mean([stats.tv_upper_bound(c, expected, level) > TV_MAX for c in draws])
    assert over <= 0.03, f"{case.id}: underpowered in {over:.1%} of correct runs"


def _bias_records() -> dict[str, dict[str, Record]]:
    out: dict[str, dict[str, Record]] = {}
    for path in sorted(RECORDS.glob("*/bias/*.json")):
        record = Record.from_json(json.loads(path.read_text()), path)
        out.setdefault(path.parent.parent.name, {})[record.case] = record
    return out


@pytest.mark.parametrize("env_key", sorted(_bias_records()))
def test_recorded_checks_are_powered(env_key):
    """The draws in the golden records, decided by the checking core at the alpha they were sized
    for: no regression, nothing `not checked`, and every case of the suite is recorded."""
    records = _bias_records()[env_key]
    assert set(records) == {c.id for c in cases.bias()}
    for record in records.values():
        f = record.fields.get("first_token")
        if f is None:  # a version without the feature: its capability is recorded instead
            assert record.fields["supports_assistant_ensemble_weight"].value is False
            continue
        assert sum(f.value.values()) == f.extras["n"]
        assert f.extras["power"] >= stats.DESIGN_POWER and f.extras["detectable_tv"] <= TV_MAX
        outcomes = compare_records({0: record}, {0: record}, alpha=f.extras["alpha"], thresholds=Thresholds())
        assert [o for o in outcomes if o.status is Status.REGRESSION] == []
        assert [o.field for o in outcomes if o.category is Category.NOT_CHECKED] == [], record.case
