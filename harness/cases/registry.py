"""The suites registry: one `Suite` row per suite module (suites/test_<name>.py), holding every fact
about it that the rest of the harness needs - its case tables, the cases each table adds for a user
model, the quick tier's rule, the budget plan's rule, the preflight's cost units and the repro
recipe - so that adding a family is new files named after it plus one line in
harness/cases/__init__.py's `SUITES` (tests/test_registry.py checks every row against its module).

The anchor is vLLM's tests/models/registry.py: one row per family, and a coverage test that fails
when a family lacks a row or a row lacks what its tests need.

    Table(name, zoo, user=None, plan=None)
        zoo(run)    the zoo's cases (run: harness/settings/run.py RunSettings, or None)
        user(model) one user model's cases, before its plan (None: the table adds none)
        plan        the budget plan's Rule for a user model's cases (harness/settings/budget.py):
                    keeps(case, all of the model's cases of the table), why the rest can go
        table(run)  zoo(run), then each user model's cases as its plan runs them

    Suite(name, tables, units=(), quick=None, repro=None, extra=None)
        units       per table: single-token forwards of the model that one user-model case of the
                    table costs in this suite (every test of the suite that runs it); the
                    preflight's time estimate (harness/settings/preflight.py) is built from them
        quick       the quick tier's Rule for the zoo's cases (harness/cases/tier.py; None: whole)
        repro       the `harness repro` recipe of the suite's cases (None: no script)
        extra       further work units for a user model (the sampling suite's black-box backstop)
        api         the call its cases exercise, in a reader's words (harness/report/about.py)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from harness.schema import Case
from harness.settings import budget
from harness.settings.models import UserModel
from harness.settings.run import RunSettings


@dataclass(frozen=True)
class Rule:
    """Which cases a selection keeps, and the one line that says why the rest can go."""

    keeps: Callable[..., bool]
    why: str


@dataclass(frozen=True)
class Table:
    """One case table: the zoo's cases and, where it adds them, each user model's (see the module
    docstring). Called as ``table(run)``: the form ``@pytest.mark.cases(table=...)`` takes."""

    name: str
    zoo: Callable[[RunSettings | None], list[Case]]
    user: Callable[[UserModel], list[Case]] | None = None
    plan: Rule | None = None

    def __call__(self, run: RunSettings | None = None) -> list[Case]:
        return self.zoo(run) + [c for m in users(run) for c in self.planned(m)]

    def planned(self, model: UserModel) -> list[Case]:
        """The model's cases of this table as its plan runs them (all of them on the full grid)."""
        if self.user is None:
            return []
        return budget.select(self.plan.keeps if self.plan else None, model.plan, self.user(model))

    def left_out(self, model: UserModel) -> tuple[list[str], str]:
        """(ids the model's plan leaves out of this table, why)."""
        if self.user is None or self.plan is None:
            return [], ""
        return budget.left_out(self.plan.keeps, self.plan.why, model.plan, self.user(model))


@dataclass(frozen=True)
class Recipe:
    """`harness repro`'s recipe for a suite: which one makes a case's call (`of`: None where none
    does) and whether a case id alone names such a case (`scripts`: the report's repro line)."""

    of: Callable[[Case], str | None]
    scripts: Callable[[str], bool]


@dataclass(frozen=True)
class Suite:
    """One suite module's row (see the module docstring)."""

    name: str
    tables: tuple[Table, ...]
    units: tuple[int, ...] = ()
    quick: Rule | None = None
    repro: Recipe | None = None
    extra: Callable[[RunSettings, UserModel], Mapping[str, int]] | None = None
    api: str = ""  # the call or API its cases exercise, in a reader's words (the line a finding opens with)

    @property
    def adds_user_cases(self) -> bool:
        return any(t.user is not None for t in self.tables)

    def keeps(self, case: object) -> bool:
        """Does the quick tier run this zoo case? (Anything but a Case, or a suite without a rule: yes.)"""
        return self.quick is None or not isinstance(case, Case) or bool(self.quick.keeps(case))

    def work(self, model: UserModel) -> int:
        """Single-token forwards of `model` this suite's tests cost under its plan (the preflight's input)."""
        return sum(len(t.planned(model)) * u for t, u in zip(self.tables, self.units, strict=True))


def users(run: RunSettings | None) -> Sequence[UserModel]:
    return run.user_models if run is not None else ()


def user_work(suites: Sequence[Suite], run: RunSettings, model: UserModel) -> dict[str, int]:
    """Work units per suite (and per `extra` key) of `model` under its plan, for the preflight."""
    out: dict[str, int] = {}
    for suite in suites:
        if suite.adds_user_cases:
            out[suite.name] = suite.work(model)
        if suite.extra is not None:
            out.update(suite.extra(run, model))
    return {k: v for k, v in out.items() if v}


def left_out(suites: Sequence[Suite], run: RunSettings | None) -> list[str]:
    """What the budget plans of the run's user models leave out, one line per (model, table)."""
    lines = []
    for m in users(run):
        if m.shipped:  # the harness's real model: its plan is fixed (harness/settings/real.py PLAN), not yours to budget
            continue
        for table in dict.fromkeys(t for s in suites for t in s.tables):
            ids, why = table.left_out(m)
            if ids:
                lines.append(f"{m.name}: {table.name}: {len(ids)} case{'s' if len(ids) != 1 else ''} left out by the "
                             f"budget plan ({m.plan.why}) - {why}: {', '.join(ids)}")
    return lines


def by_name(suites: Sequence[Suite]) -> dict[str, Suite]:
    return {s.name: s for s in suites}
