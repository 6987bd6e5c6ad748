"""The bias suite's design: `underpowered` is a failure of the design, not a verdict a run may pass.

For every case of a default `pytest suites` run (alpha = 0.01 / m, m = the run's golden tests,
counted here by collecting), the distribution check of suites/test_bias.py must
  - have power >= 0.8 against every distribution at TV >= tv_max, at the level Holm may decide it
    (alpha / one_step.STAT_CHECKS), and
  - not be `underpowered` for a correct verifier: the TV upper bound it reports stays <= tv_max
    (checked by simulating the check's bound under the exact distribution, and on the recorded
    draws of every environment's golden records, decided by the checking core),
and the contexts must be the ones the documented search (`one_step.search_contexts`) finds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.checking import stats
from harness.checking.core import compare_records
from harness.designs import one_step
from harness.engine import verify
from harness.schema import Category, Record, Status
from harness.settings.config import Thresholds
from harness.subjects.hf import Zoo

REPO = Path(__file__).resolve().parents[1]
RECORDS = REPO / "golden" / "records"
ALPHA = stats.per_test_alpha(one_step.DEFAULT_RUN_ALPHA, one_step.DEFAULT_RUN_TESTS)
TV_MAX = Thresholds().tv_max

COUNT_GOLDEN_TESTS = """
import sys, pytest
class Count:
    n = -1
    def pytest_collection_finish(self, session):
        Count.n = sum("golden" in getattr(i, "fixturenames", ()) for i in session.items)
rc = pytest.main(["suites", "--collect-only", "-q", "-p", "no:cacheprovider", "--harness-results", sys.argv[1]],
                 plugins=[Count()])
print("GOLDEN_TESTS", Count.n, rc)
"""


@pytest.fixture(scope="module")
def zoo():
    return Zoo()


def test_default_run_size_is_collected(tmp_path):
    """one_step.DEFAULT_RUN_TESTS is m of a default `pytest suites` run (the per-test alpha the
    controls and this design are checked at). When a suite adds or drops cases, update it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", COUNT_GOLDEN_TESTS, str(tmp_path / "results.json")], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)
    line = [x for x in done.stdout.splitlines() if x.startswith("GOLDEN_TESTS")]
    assert line, done.stdout[-2000:] + done.stderr[-2000:]
    _, m, rc = line[-1].split()
    assert rc in ("0", "ExitCode.OK"), done.stdout[-2000:]
    assert int(m) == one_step.DEFAULT_RUN_TESTS


def test_contexts_are_the_documented_search(zoo):
    assert one_step.search_contexts(zoo) == one_step.CONTEXTS
    for ctx in one_step.CONTEXTS:
        p, q = one_step.step_inputs(zoo, ctx)
        lo, hi = one_step.ACCEPTANCE_RANGE
        assert lo <= verify.acceptance_probability(p, q) <= hi


@pytest.mark.parametrize(("w", "ctx"), one_step.CASES, ids=[one_step.case_id(*c) for c in one_step.CASES])
def test_default_run_case_is_powered(zoo, w, ctx):
    p, q = one_step.step_inputs(zoo, one_step.CONTEXTS[ctx])
    plan = one_step.design(p, q, w, ALPHA, TV_MAX)
    level = ALPHA / one_step.STAT_CHECKS
    assert plan.alpha == ALPHA and plan.level == level
    # the G-test's power against the least favourable alternative at TV = tv_max
    assert stats.gtest_power(plan.n, TV_MAX, level, plan.bins) >= one_step.POWER
    assert plan.detectable_tv <= TV_MAX
    # the TV upper bound the check reports for a correct verifier (independent simulation)
    expected = np.array(list(plan.expected.values()))
    draws = np.random.default_rng(7).multinomial(plan.n, expected / expected.sum(), size=1000)
    over = np.mean([stats.tv_upper_bound(c, expected, level) > TV_MAX for c in draws])
    assert over <= 0.03, f"{one_step.case_id(w, ctx)}: underpowered in {over:.1%} of correct runs"


def _bias_records() -> dict[str, dict[str, Record]]:
    out: dict[str, dict[str, Record]] = {}
    for path in sorted(RECORDS.glob("*/bias/*.json")):
        record = Record.from_json(json.loads(path.read_text()), path)
        out.setdefault(path.parent.parent.name, {})[record.case] = record
    return out


@pytest.mark.parametrize("env_key", sorted(_bias_records()))
def test_recorded_checks_are_powered(env_key):
    """The draws in the golden records, decided by the checking core at the alpha they were sized
    for: no regression, nothing `underpowered`, and every case of the suite is recorded."""
    records = _bias_records()[env_key]
    assert set(records) == {one_step.case_id(*c) for c in one_step.CASES}
    for record in records.values():
        f = record.fields.get("first_token")
        if f is None:  # a version without the feature: its capability is recorded instead
            assert record.fields["supports_assistant_ensemble_weight"].value is False
            continue
        assert sum(f.value.values()) == f.extras["n"]
        assert f.extras["power"] >= one_step.POWER and f.extras["detectable_tv"] <= TV_MAX
        outcomes = compare_records({0: record}, {0: record}, alpha=f.extras["alpha"], thresholds=Thresholds())
        assert [o for o in outcomes if o.status is Status.REGRESSION] == []
        assert [o.field for o in outcomes if o.category is Category.UNDERPOWERED] == [], record.case
