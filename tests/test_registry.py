"""The suites registry covers every suite (harness/cases/registry.py; vLLM's tests/models/registry.py
is the anchor): a suite module without a row, a row whose tables are not the ones its tests mark, a
table that adds your models' cases without cost units, a fault catching in a suite the registry does
not know - each fails here, before a run leaves it out of a time estimate or a plan.

(The drift this was written against: the continuous and compiled suites added a case for every user
model, but the preflight's hand-kept table of counts and units had neither - a user model's time
estimate left them out and no test noticed.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from harness import cases
from harness.cases.registry import Table
from harness.faults.catalogue import FAULTS
from harness.settings import budget
from harness.settings.config import load_config
from harness.settings.models import UserModel
from harness.zoo.prompts import PROMPTS

SUITES_DIR = Path(__file__).resolve().parents[1] / "suites"


def marked_tables(path: Path) -> list[Table]:
    """The tables the module's tests are parametrized over (`@pytest.mark.cases(table=...)`), one
    entry per test."""
    spec = importlib.util.spec_from_file_location(f"_registry_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found = []
    for name in dir(module):
        for mark in getattr(getattr(module, name), "pytestmark", []):
            if name.startswith("test_") and mark.name == "cases":
                found.append(mark.args[0] if mark.args else mark.kwargs["table"])
    return found


class _Run:
    deep = False
    device = "cpu"
    dtype = "fp32"

    def __init__(self, *models: UserModel):
        self.user_models = models
        self.config = load_config(Path(__file__).resolve().parents[1])


def _model(plan: budget.Plan) -> UserModel:
    prompts = tuple(p for p in PROMPTS if p.id in ("short-0", "long-0", "short-1"))
    return UserModel("mine", Path("/nowhere"), "--model", paths=("plain", "prompt_lookup"), prompts=prompts, plan=plan)


MODULES = sorted(SUITES_DIR.glob("test_*.py"))


def test_every_suite_module_has_a_row_and_every_row_a_module():
    assert sorted(p.stem.removeprefix("test_") for p in MODULES) == sorted(s.name for s in cases.SUITES)
    assert len(cases.BY_SUITE) == len(cases.SUITES)  # one row a name


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_a_row_holds_exactly_the_tables_its_tests_mark(path):
    row = cases.suite(path.stem.removeprefix("test_"))
    marked = marked_tables(path)
    assert marked and all(isinstance(t, Table) for t in marked), "every test runs over a registry Table"
    assert set(map(id, marked)) == set(map(id, row.tables))
    assert all(getattr(cases, t.name) is t for t in row.tables)  # `cases.<name>` is the table the row holds


@pytest.mark.parametrize("row", cases.SUITES, ids=lambda s: s.name)
def test_a_suite_that_runs_your_models_costs_something_in_the_preflight(row):
    """Every table that adds a user model's cases has cost units; the preflight's work per suite
    (what the time estimate reads) covers every suite whose tables hold a case of the model, under
    the full grid and under a budget plan."""
    if row.adds_user_cases:
        assert len(row.units) == len(row.tables)
        assert all(u > 0 for t, u in zip(row.tables, row.units, strict=True) if t.user is not None)
    for plan in (budget.Plan("full"), budget.Plan("budget", 300.0, "test")):
        run = _Run(_model(plan))
        runs_mine = any(c.model == "mine" for t in row.tables for c in t(run))
        assert runs_mine == row.adds_user_cases
        assert (row.name in cases.user_work(run, run.user_models[0])) == runs_mine


def test_a_plan_rule_belongs_to_a_table_that_adds_user_cases_and_keeps_one():
    run = _Run(_model(budget.Plan("budget", 300.0, "test")))
    for row in cases.SUITES:
        for table in row.tables:
            if table.plan is not None:
                assert table.user is not None, table.name
                assert [c for c in table(run) if c.model == "mine"], table.name  # a plan keeps at least one case
                assert table.plan.why, table.name


def test_every_row_says_what_its_cases_exercise():
    """The line a finding opens with (harness/report/about.py) comes from the row, never a table of names."""
    assert [s.name for s in cases.SUITES if not s.api] == []


def test_every_fault_catches_in_a_registered_suite():
    unknown = sorted({f.name for f in FAULTS if cases.suite(f.catch.suite) is None})
    assert not unknown, f"faults catching in a suite the registry does not know: {unknown}"


@pytest.mark.parametrize("row", [s for s in cases.SUITES if s.repro], ids=lambda s: s.name)
def test_a_repro_recipe_writes_every_case_its_id_rule_promises(row):
    run = _Run(_model(budget.Plan("full")))
    every = [c for t in row.tables for c in t(run)]
    promised = [c for c in every if row.repro.scripts(c.id)]
    assert promised, row.name
    assert all(row.repro.of(c) is not None for c in promised), row.name
