"""Which golden tests a run has and what each is called.

- `case_id(item)` / `suite_name(item)`: a golden test's case and suite, which name its record file
  ``<golden_dir>/<env-key>/<suite>/<case>.json``;
- ``@pytest.mark.cases(table=...)``: the one way a suite declares its cases - `table` is a function of
  the run's settings (harness/cases/), called at collection, so deep mode and your own models
  reach the table through the settings, never through a global;
- `select`: the models the run covers (``[tool.harness] models``, or only ``--harness-model``'s),
  then the quick tier of the zoo (harness/cases/tier.py: each suite's registry row; not in a full run), ``--harness-phase`` (the timing tests run in a phase of their own, so nothing else runs
  while they measure) and ``--harness-case`` globs; what it drops is deselected, so those records
  are not `missing`;
- m, the number of golden tests that sets the per-test alpha (alpha / m), is counted after the
  model filter and before the tier, phase and case filters: a narrowed run decides as the whole
  run would.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from harness import cases
from harness.cases import tier
from harness.settings.run import RunSettings

GOLDEN = "golden"


def is_golden(item: Any) -> bool:
    return GOLDEN in getattr(item, "fixturenames", ())


def case_id(item: Any) -> str:
    """``case.id`` of a ``case`` parameter, else the parametrize id, else the function name."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        case = callspec.params.get("case")
        if case is not None and getattr(case, "id", None) is not None:
            return str(case.id)
        return callspec.id
    return getattr(item, "originalname", None) or item.name


def suite_name(item: Any) -> str:
    """The test module's name without the ``test_`` prefix."""
    module = getattr(item, "module", None)
    name = module.__name__.rsplit(".", 1)[-1] if module is not None else Path(str(item.path)).stem
    return name.removeprefix("test_")


def model_of(item: Any) -> str | None:
    callspec = getattr(item, "callspec", None)
    return getattr(callspec.params.get("case"), "model", None) if callspec else None


def case_of(item: Any) -> Any:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("case") if callspec else None


def parametrize_cases(metafunc: pytest.Metafunc, run: RunSettings) -> None:
    """``@pytest.mark.cases(table=...)``: parametrize the test's ``case`` over ``table(run)``."""
    marker = metafunc.definition.get_closest_marker("cases")
    if marker is None:
        return
    table = marker.args[0] if marker.args else marker.kwargs["table"]
    cases = table(run)
    metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def wanted_model(item: Any, run: RunSettings) -> bool:
    """`[tool.harness] models` keeps those zoo models' cases (and the user's); `--harness-model`
    only that model's; a project with models of its own runs only theirs unless `zoo = true`.
    Tests without a case's model run unless the run is a one-off."""
    model = model_of(item)
    users = {m.name for m in run.user_models}
    if run.one_off:
        return model in users
    if run.config.user_models and not run.config.zoo and model is not None:
        return model in users
    if run.config.models and model is not None:
        return model in run.config.models or model in users
    return True


def wanted_case(item: Any, globs: tuple[str, ...]) -> bool:
    if not globs or not is_golden(item):
        return True
    suite, case = suite_name(item), case_id(item)
    return any(fnmatch.fnmatchcase(case, g.split(":", 1)[1]) and g.split(":", 1)[0] == suite if ":" in g
               else fnmatch.fnmatchcase(case, g) for g in globs)


TIMING = "timing"  # the marker of a test that measures time (the latency suite)


def in_phase(item: Any, phase: str) -> bool:
    """'parallel': every test but the timing ones; 'timing': only those; 'all': every test."""
    timing = item.get_closest_marker(TIMING) is not None
    return phase == "all" or (phase == "timing") == timing


def split_phase(items: list[Any], phase: str) -> tuple[list[Any], list[Any]]:
    """(kept, dropped) by the phase; run after every other selection, so the parallel phase's
    dropped timing tests are exactly the ones the timing phase will run."""
    return [i for i in items if in_phase(i, phase)], [i for i in items if not in_phase(i, phase)]


def yours(case: Any, run: RunSettings) -> bool:
    """A case of one of your own models (never tiered: its plan is harness/settings/budget.py's)."""
    return getattr(case, "model", None) in {m.name for m in run.user_models}


def in_tier(item: Any, run: RunSettings, full: bool) -> bool:
    """The quick tier keeps this test (its suite's registry row, harness/cases/tier.py): always in a
    full run and for a case of your own models."""
    case = case_of(item)
    row = cases.suite(suite_name(item))
    return full or not is_golden(item) or yours(case, run) or row is None or row.keeps(case)


def select(items: list[Any], run: RunSettings, explicit: bool = False) -> tuple[list[Any], list[Any], int]:
    """(kept, dropped, m): the model filter, m counted, then the quick tier (unless the run is
    full, or `explicit`: pytest's own selection - -k, a node id - names what to run) and the case
    filters (which narrow what runs, not the run's alpha). The phase filter is `split_phase`,
    applied after pytest's own -k / -m."""
    keep = [i for i in items if wanted_model(i, run)]
    dropped = [i for i in items if not wanted_model(i, run)]
    m = sum(is_golden(i) for i in keep)
    full = run.full or explicit

    def wanted(i: Any) -> bool:
        return in_tier(i, run, full) and wanted_case(i, run.cases)

    narrowed = [i for i in keep if wanted(i)]
    dropped += [i for i in keep if not wanted(i)]
    return narrowed, dropped, m


def tier_left_out(items: list[Any], run: RunSettings, explicit: bool = False) -> str:
    """The run's line on what the quick tier did not run ("" in a full run): counted over the
    collection, before the phase filter, so both phases of `harness check` say the same."""
    if run.full or explicit:
        return ""
    zoo = [i for i in items if is_golden(i) and wanted_model(i, run) and wanted_case(i, run.cases)
           and case_of(i) is not None and not yours(case_of(i), run)]
    dropped = Counter(suite_name(i) for i in zoo if not in_tier(i, run, False))
    why = {name: row.quick.why for name in dropped if (row := cases.suite(name)) is not None and row.quick}
    return tier.left_out_line(dropped, len(zoo), why) if dropped else ""


class _Count:
    def __init__(self) -> None:
        self.n = -1

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.n = sum(is_golden(i) for i in session.items)


def count_golden_tests(suites: Path, rootdir: Path, *args: str) -> int:
    """m of a `pytest suites` run with `args` (its golden tests), by collecting it in this process:
    what the run's per-test alpha is alpha / m of (benchmarks and the harness's own tests use it;
    m is never a constant kept by hand)."""
    import tempfile

    count = _Count()
    with tempfile.TemporaryDirectory() as tmp:
        rc = pytest.main([str(suites), "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "--rootdir", str(rootdir), "--harness-results", str(Path(tmp) / "results.json"), *args],
                         plugins=[count])
    if rc != 0 or count.n <= 0:
        raise RuntimeError(f"collecting {suites} failed (exit {rc}, {count.n} golden tests)")
    return count.n
