"""The harness's pytest plugin (pytest11 entry point ``harness``): a run's settings in, a
`CaseCheck` per golden test, results.json out. It decides nothing itself: each test's fields are
judged by the checking core (harness/checking/core.py).

    options.py     the pytest options, one per RunSettings field (harness/settings/run.py)
    session.py     HarnessSession: settings, store, env; collection, finishing tests, results.json
    selection.py   case ids and suite names, @pytest.mark.cases(table), the model and case filters
    golden.py      Golden, the `golden` fixture's object: one test's checks and its record write
    fixtures.py    golden, zoo, fresh_models, run_settings, harness_env, harness_config

A suite reads::

    @pytest.mark.cases(table=cases.outputs)
    def test_generate(case, golden, zoo):
        golden.check_all(outputs.observe(zoo, case))

Checks are soft: every field of the test is compared; at the end of the test body the record is
written (normal run: only fields the record lacks; --force-regen: every changed field) and a
`regression` fails the test with field, old vs new.

False alarms: each of the m golden tests of a run is one case whose statistical checks are
decided with Holm's procedure at ``alpha / m`` ([tool.harness] alpha), so P(any statistical
regression in a run without a real change) <= alpha.
"""

from __future__ import annotations

from harness.plugin.fixtures import (
           fresh_models,
           golden,
           harness_config,
           harness_env,
           run_settings_fixture,
           zoo,
)
from harness.plugin.options import pytest_addoption
from harness.plugin.session import pytest_configure

__all__ = ["fresh_models", "golden", "harness_config", "harness_env", "run_settings_fixture", "zoo", "pytest_addoption",
           "pytest_configure"]
