"""`harness bisect` (harness/cli/bisect.py, harness/checking/bisection.py, harness/cli/releases.py) with
the nox cells replaced by a fake runner and the registry by a fixed release list: which release it
names, that it probed both sides of the boundary itself, where it stops (a cell that failed to
install, an intermittent case, GOOD already showing it, BAD not showing it) and the reference GOOD's
cell records when the store has none. The real run (5.13.1 .. 5.24.0) is in docs/upgrades/bisect.md."""

import argparse
from pathlib import Path

import pytest
from packaging.version import Version

from harness.checking.bisection import Step, Target, Verdict, cell_verdict, search
from harness.checking.findings import group_findings, numbered
from harness.cli import bisect as cli
from harness.cli.project import Project, UsageError
from harness.cli.releases import between
from harness.report import load_results
from harness.schema import Category, Field, Outcome, Results, Status
from harness.settings.config import HarnessConfig
from harness.store.records import GoldenStore, atomic_write_json

ROOT = Path(__file__).resolve().parents[1]
SUITE, CASE = "outputs", "m.mtp.static"
TARGET = Target(SUITE, CASE, ("error",))
# what the registry lists: unordered, with pre-releases, a post release and older ones around the range
REGISTRY = ["5.24.0", "5.9.0", "5.23.0", "5.22.0rc1", "5.22.0", "5.21.0", "5.20.0", "5.19.0", "5.18.0",
            "5.17.0", "5.16.0.post1", "5.16.0", "5.15.0", "5.14.0", "5.13.1", "5.13.0", "5.10.0", "6.0.0.dev0"]
RANGE = ["5.13.1", "5.14.0", "5.15.0", "5.16.0", "5.17.0", "5.18.0", "5.19.0", "5.20.0", "5.21.0", "5.22.0",
         "5.23.0", "5.24.0"]


def outcome(status: Status, category: Category = Category.NONE, field: str = "error") -> Outcome:
    return Outcome(SUITE, CASE, field, "exact", status, f"{status.value} here", category)


PASS, BROKEN = outcome(Status.PASS), outcome(Status.REGRESSION, Category.BROKEN)
TIE = outcome(Status.CHANGED, Category.TIE_FLIP, "tokens")


class FakeCells:
    """The nox session of each cell: `runs[version]` is what each run of the case observes (a list of
    outcome lists, one per run), or "pip" for a cell whose install fails. Records what it was asked."""

    def __init__(self, runs):
        self.runs, self.calls = runs, []

    def __call__(self, cell, project, out, args, versions):
        self.calls.append((cell.version, dict(args.cell_env), list(args.posargs), args.envdir))
        cell_dir = out / "cells" / cell.version
        key = cli.cell_key(cell.version, args.torch)
        plan = self.runs[cell.version]
        if plan == "pip":
            (cell_dir / "nox.log").write_text(f"nox > python -m pip install transformers=={cell.version}\n"
                                              f"ERROR: No matching distribution found for transformers=={cell.version}\n")
            return 1
        (cell_dir / "nox.log").write_text(f"nox > Session suites-{cell.version} was successful.\n")
        if "HARNESS_BASELINE" not in args.cell_env:  # GOOD recording the reference
            GoldenStore(Path(args.cell_env["HARNESS_GOLDEN_DIR"])).update(
                key, SUITE, CASE, {"transformers": cell.version}, {"error": Field("exact", None)})
            plan = [[outcome(Status.NEW)]]
        for i, seen in enumerate(plan, 1):
            name = "results.json" if i == 1 else f"results.run{i}.json"
            atomic_write_json(cell_dir / name, Results({}, None, list(seen), {"env_key": key}).to_json())
        return 0


def history(first_bad: str, **special):
    """Each release's runs: clean before `first_bad`, the regression from it on; `special` overrides."""
    runs = {v: [[BROKEN], [BROKEN]] if Version(v) >= Version(first_bad) else [[PASS], [PASS]] for v in RANGE}
    runs.update(special)
    return runs


@pytest.fixture
def project(tmp_path) -> Project:
    store = GoldenStore(tmp_path / "records")
    (tmp_path / "records").mkdir()
    store.update(cli.cell_key("5.13.1", cli.installed("torch")), SUITE, CASE, {}, {"error": Field("exact", None)})
    config = HarnessConfig(rootdir=tmp_path, golden_dir=tmp_path / "records", models_dir=tmp_path / "models",
                           reports_dir=tmp_path / "reports")
    return Project(tmp_path, config, store, tmp_path / "reports")


def args_for(tmp_path, target=f"{SUITE}/{CASE}:error", good="5.13.1", bad="5.24.0", **kw):
    values = {"transformers": [good, bad], "torch": None, "target": target, "pin": None, "baseline": None,
              "results": None, "runs": 2, "envdir": str(tmp_path / "venvs"), "workers": None,
              "out": str(tmp_path / "bisect")}
    return argparse.Namespace(**{**values, **kw})


def run(project, tmp_path, cells, **kw):
    lines = []
    plan, result, seconds = cli.bisect(project, args_for(tmp_path, **kw), lister=lambda axis: REGISTRY,
                                       runner=cells, say=lines.append)
    return plan, result, cli.sentence(plan, result, seconds), lines


def test_the_registry_list_gives_the_final_releases_between_in_version_order():
    assert between(REGISTRY, "5.13.1", "5.24.0") == RANGE  # 5.9 < 5.10; rc, post and dev left out
    with pytest.raises(UsageError, match="older"):
        between(REGISTRY, "5.24.0", "5.13.1")
    with pytest.raises(UsageError, match="5.22.1 is not a final release"):
        between(REGISTRY, "5.13.1", "5.22.1")


def test_it_names_the_first_release_and_probed_both_sides_of_the_boundary(project, tmp_path):
    cells = FakeCells(history("5.20.0"))
    plan, result, line, lines = run(project, tmp_path, cells)
    assert (result.first, result.last_without) == ("5.20.0", "5.19.0")
    probed = {s.version: s.verdict for s in result.steps}
    assert probed["5.19.0"] == Verdict.CLEAN and probed["5.20.0"] == Verdict.SHOWS
    assert probed["5.13.1"] == Verdict.CLEAN and probed["5.24.0"] == Verdict.SHOWS
    assert len(result.steps) <= 2 + 4  # GOOD, BAD, then log2 of the 10 between
    assert line.startswith(f"first release showing {SUITE}/{CASE}:error: 5.20.0 (last without: 5.19.0); "
                           f"{len(result.steps)} cells built, ")
    for step in result.steps:
        assert Path(step.log).is_file() and Path(step.log).parent.name == step.version
    version, env, posargs, envdir = cells.calls[0]
    assert env["HARNESS_BASELINE"] == plan.reference == cli.cell_key("5.13.1", cli.installed("torch"))
    assert env["HARNESS_GOLDEN_DIR"] == str(project.store.root.resolve()) and env["HARNESS_RUNS"] == "2"
    assert posargs == ["--harness-case", f"{SUITE}:{CASE}", "--harness-strict"] and envdir == str(tmp_path / "venvs")
    assert any("5.20.0: shows it - regression (broken) in `error`" in x for x in lines)
    table = cli.write_steps(plan, result, line).read_text()
    assert line in table and "| 5.19.0 | clean |" in table


@pytest.mark.parametrize("first_bad", ["5.14.0", "5.24.0"])
def test_a_boundary_at_either_end_of_the_range(project, tmp_path, first_bad):
    _, result, _, _ = run(project, tmp_path, FakeCells(history(first_bad)))
    index = RANGE.index(first_bad)
    assert (result.first, result.last_without) == (first_bad, RANGE[index - 1])
    assert {RANGE[index - 1], first_bad} <= {s.version for s in result.steps}


def test_it_stops_at_the_first_cell_that_fails_to_install_with_the_reason(project, tmp_path):
    cells = FakeCells(history("5.20.0", **{"5.18.0": "pip"}))
    _, result, line, _ = run(project, tmp_path, cells)
    assert not result.first and result.steps[-1].version == "5.18.0"
    assert result.stopped == "5.18.0: the cell failed: ERROR: No matching distribution found for transformers==5.18.0"
    assert line.startswith(f"no release named for {SUITE}/{CASE}:error: 5.18.0: the cell failed")
    assert [c[0] for c in cells.calls][-1] == "5.18.0"  # nothing after it was built


def test_runs_that_disagree_in_one_cell_are_intermittent_never_a_release(project, tmp_path):
    _, result, line, _ = run(project, tmp_path, FakeCells(history("5.20.0", **{"5.18.0": [[PASS], [BROKEN]]})))
    assert not result.first and result.stopped.startswith("intermittent in 5.18.0: run 1: clean")
    assert "run 2: shows it (regression (broken) in `error`" in result.stopped
    assert "no release named" in line and "intermittent" in line


def test_a_near_tie_verdict_of_the_field_is_intermittent(project, tmp_path):
    _, result, _, _ = run(project, tmp_path, FakeCells(history("5.20.0", **{"5.18.0": [[TIE], [TIE]]})),
                          target=f"{SUITE}/{CASE}")
    assert not result.first and result.stopped.startswith("intermittent in 5.18.0: changed (tie-flip) in `tokens`")


def test_good_showing_it_too_is_refused(project, tmp_path):
    cells = FakeCells(history("5.13.1"))
    _, result, line, _ = run(project, tmp_path, cells)
    assert not result.first and result.stopped.startswith("GOOD shows it too: 5.13.1")
    assert [c[0] for c in cells.calls] == ["5.13.1"]


def test_bad_not_showing_it_is_refused(project, tmp_path):
    _, result, _, _ = run(project, tmp_path, FakeCells(history("9.9.9")))
    assert not result.first and result.stopped.startswith("BAD does not show it: 5.24.0 (1 field(s) pass)")


def test_a_field_not_judged_stops_as_undecided_never_clean():
    steps = iter([Step("a", Verdict.CLEAN), Step("c", Verdict.SHOWS), Step("b", Verdict.UNDECIDED, "new in `x`")])
    result = search(["a", "b", "c"], lambda version: next(steps))
    assert not result.first and result.stopped == "undecided in b: new in `x`"
    assert cell_verdict([[outcome(Status.NEW)]], TARGET)[0] == Verdict.UNDECIDED
    assert cell_verdict([[outcome(Status.REGRESSION, Category.MISSING_RECORD)]], TARGET)[0] == Verdict.UNDECIDED
    assert cell_verdict([[outcome(Status.SKIPPED, Category.NOT_CHECKED)]], TARGET)[0] == Verdict.UNDECIDED
    assert cell_verdict([[outcome(Status.PASS, field="tokens")]], TARGET)[0] == Verdict.UNDECIDED  # not its field


def test_without_a_record_of_good_its_cell_records_the_reference_first(project, tmp_path):
    project.store.root.joinpath(cli.cell_key("5.13.1", cli.installed("torch"))).rename(tmp_path / "moved")
    cells = FakeCells(history("5.20.0"))
    plan, result, _, _ = run(project, tmp_path, cells)
    assert result.first == "5.20.0" and plan.record_first and plan.store == tmp_path / "bisect" / "store"
    version, env, _, _ = cells.calls[0]
    assert version == "5.13.1" and "HARNESS_BASELINE" not in env  # the recording run
    assert env["HARNESS_GOLDEN_DIR"] == str(plan.store.resolve())
    assert all(c[1]["HARNESS_BASELINE"] == plan.reference for c in cells.calls[1:])
    assert (tmp_path / "bisect" / "reference" / "cells" / "5.13.1" / "nox.log").is_file()
    assert not any(project.store.root.iterdir())  # the project's store was never written


def test_a_finding_number_of_a_report_is_bisected_on_its_first_case_and_field(project, tmp_path):
    results = ROOT / "docs" / "upgrades" / "5.14.0-to-5.24.0" / "results.json"
    plan = cli.make_plan(project, args_for(tmp_path, target="5", results=str(results)), lambda axis: REGISTRY)
    finding = dict(numbered(group_findings(load_results(results).outcomes)))["5"]  # as `harness repro 5` reads it
    first = finding.outcomes[0]
    assert plan.target == Target(first.suite, first.case, (first.field,))
    assert plan.finding == finding.sentence(width=400) and plan.record_first  # tmp store: no record of its case


def test_a_torch_bisection_builds_one_venv_per_torch_release(project, tmp_path):
    cells = FakeCells({"5.24.0": [[PASS], [PASS]]})
    lister = {"torch": ["2.12.0", "2.12.1", "2.13.0"]}
    plan = cli.make_plan(project, args_for(tmp_path, transformers=None, torch=["2.12.0", "2.13.0"], pin="5.24.0",
                                           baseline=None), lister.get)
    assert plan.versions == ["2.12.0", "2.12.1", "2.13.0"] and plan.reference == cli.cell_key("5.24.0", "2.12.0")
    step = cli.probe(project, plan, "2.12.1", cells)
    version, env, _, envdir = cells.calls[0]
    assert version == "5.24.0" and envdir == str(tmp_path / "venvs" / "torch2.12.1")
    assert step.log == str(tmp_path / "bisect" / "torch2.12.1" / "cells" / "5.24.0" / "nox.log")
