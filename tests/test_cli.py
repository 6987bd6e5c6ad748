"""The `harness` command line: exit codes, messages and files, on throw-away project roots.

Each project is a tmp dir with a pyproject.toml whose [tool.harness] points everything inside it,
a fake fixture model (a config.json) and a tiny suite that checks cheap values read from
value.json through the `golden` fixture. Records are written with the store API. Only three tests
run pytest (check pass, check regression, regen); the rest stop before running anything.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.checking.regen import diff_records
from harness.cli import main
from harness.cli.common import finish
from harness.cli.project import pytest_problem
from harness.schema import Field, Outcome, Results, Status
from harness.store.env import env_key, fingerprint
from harness.store.records import GoldenStore, Record, RecordError
from report_sample import sample_results

SUITE = textwrap.dedent("""
    import json
    from pathlib import Path

    import pytest

    DATA = json.loads((Path(__file__).parents[1] / "value.json").read_text())


    @pytest.mark.parametrize("case", ["one", "two"])
    def test_toy(case, golden):
        golden.check("value", DATA["value"])
        golden.check("features", DATA["features"], kind="capability")
""")

OTHER_KEY = "tf5.13.0-torch2.8.0-cpu-x86_64-fp32"
FIX = "python -m harness.zoo build"


@pytest.fixture(scope="module")
def current():
    """The fingerprint and env key a default run (fp32, cpu, sdpa) records under."""
    fp = fingerprint()
    return fp, env_key(fp)


class Project:
    def __init__(self, root: Path, fp: dict, key: str):
        self.root, self.fp, self.key = root, fp, key
        self.store = GoldenStore(root / "records")

    def values(self, value=1, features=("a",)) -> None:
        (self.root / "value.json").write_text(json.dumps({"value": value, "features": list(features)}))

    def record(self, case: str, value=1, features=("a",), key: str | None = None, env: dict | None = None,
               **more: Field) -> Path:
        fields = {"value": Field("exact", value), "features": Field("capability", list(features)), **more}
        return self.store.update(key or self.key, "toy", case, env or self.fp, fields).path

    def run(self, *argv: str) -> int:
        return main([*argv, "--root", str(self.root)])

    def run_dirs(self, name: str) -> list[Path]:
        return sorted((self.root / "reports" / name).iterdir())


@pytest.fixture
def project(tmp_path, current) -> Project:
    return make_project(tmp_path, current)


def make_project(tmp_path: Path, current: tuple[dict, str]) -> Project:
    """The throw-away project the `project` fixture gives (tests/test_upgrade_baseline.py makes its own)."""
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""
        [tool.harness]
        golden_dir = "records"
        models_dir = "models"
        reports_dir = "reports"
    """))
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "models" / "tiny" / "config.json").write_text("{}")
    for name in ("config.json", "model.safetensors"):
        (tmp_path / "models" / "tiny" / name).write_bytes(b"{}" if name == "config.json" else b"\x00" * 16)
    files = {n: hashlib.sha256((tmp_path / "models" / "tiny" / n).read_bytes()).hexdigest()
             for n in ("config.json", "model.safetensors")}
    (tmp_path / "models" / "manifest.json").write_text(json.dumps({"models": {"tiny": {"files": files}}}))
    (tmp_path / "suites").mkdir()
    (tmp_path / "records").mkdir()
    (tmp_path / "suites" / "test_toy.py").write_text(SUITE)
    p = Project(tmp_path, *current)
    p.values()
    return p


def other_env(fp: dict, transformers: str = "5.13.0") -> dict:
    return {**fp, "transformers": transformers, "torch": "2.8.0"}


# ----------------------------------------------------------------------------------------------
# check (runs pytest)


def test_check_all_pass_writes_report(project, capfd):
    project.record("one")
    project.record("two")
    assert project.run("check") == 0
    out = capfd.readouterr().out
    assert "verdict: pass" in out
    (run_dir,) = project.run_dirs(project.key)
    for name in ("index.html", "results.json", "junit.xml"):
        assert (run_dir / name).is_file(), name
    assert f"report: {run_dir / 'index.html'}" in out
    results = json.loads((run_dir / "results.json").read_text())
    assert {o["status"] for o in results["outcomes"]} == {"pass"} and len(results["outcomes"]) == 4
    assert ET.parse(run_dir / "junit.xml").getroot().get("failures") == "0"


def test_a_suite_named_by_suites_runs_at_the_whole_runs_per_test_alpha(project):
    """`--suites suites/test_toy.py` collects every suite and runs only toy's cases: the per-test
    alpha (so a statistical field's N, so the records a partial regen writes) is the full run's."""
    (project.root / "suites" / "test_more.py").write_text(SUITE)
    project.record("one")
    project.record("two")
    assert project.run("check") == 0
    full = json.loads((project.run_dirs(project.key)[-1] / "results.json").read_text())["meta"]
    assert project.run("check", "--suites", str(project.root / "suites" / "test_toy.py")) == 0
    results = json.loads((project.run_dirs(project.key)[-1] / "results.json").read_text())
    assert results["meta"]["golden_tests"] == full["golden_tests"] == 4
    assert {o["suite"] for o in results["outcomes"]} == {"toy"}


def test_check_changed_value_is_a_regression(project, capfd):
    project.record("one")
    project.record("two")
    project.values(value=2, features=("a", "b"))
    assert project.run("check") == 1
    out = capfd.readouterr().out
    regression = out[out.index("\nregression (2):"):out.index("\nchanged (2):")]
    # the same change in both cases is one row (report/terminal.py `collapsed`)
    assert "toy    one (+1 more)  value" in regression and regression.count("root: 1 -> 2") == 1
    changed = out[out.index("\nchanged (2):"):out.index("report:")]
    assert "features" in changed and "feature-added" in changed
    assert "verdict: REGRESSION" in out
    (run_dir,) = project.run_dirs(project.key)
    assert (run_dir / "index.html").is_file() and (run_dir / "junit.xml").is_file()


# ----------------------------------------------------------------------------------------------
# check: input errors (exit 2 before running anything)


def test_unknown_baseline_lists_known_keys(project, capfd):
    project.record("one", key=OTHER_KEY, env=other_env(project.fp))
    assert project.run("check", "--baseline", "tf9.9.9-nope") == 2
    err = capfd.readouterr().err
    assert "--baseline 'tf9.9.9-nope'" in err and OTHER_KEY in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (project.root / "reports").exists() or not any((project.root / "reports").iterdir())


def test_unknown_baseline_from_pyproject_names_the_key(project, capfd):
    with (project.root / "pyproject.toml").open("a") as handle:
        handle.write('baseline = "tf0-gone"\n')
    assert project.run("check") == 2
    err = capfd.readouterr().err
    assert "[tool.harness] baseline 'tf0-gone'" in err and "known env keys: none" in err


def test_corrupt_record_names_the_file(project, capfd):
    path = project.record("one")
    path.write_text('{"schema": 1, "suite": "toy", "ca')
    assert project.run("check") == 2
    err = capfd.readouterr().err
    assert str(path) in err and "corrupt" in err and "harness regen" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("what", ["models_dir", "no_config", "removed_weights", "flipped_bytes", "pickle_swapped",
                                  "named_model", "extra_dir"])
def test_missing_or_corrupt_fixture_names_path_and_fix(project, capfd, what):
    models = project.root / "models"
    weights = models / "tiny" / "model.safetensors"
    if what == "models_dir":
        shutil.rmtree(models)
        missing = models
    elif what == "no_config":
        (models / "tiny" / "config.json").unlink()
        missing = models / "tiny" / "config.json"
    elif what == "removed_weights":
        weights.unlink()
        missing = weights
    elif what == "flipped_bytes":
        weights.write_bytes(b"\x01" + weights.read_bytes()[1:])
        missing = weights
    elif what == "pickle_swapped":
        weights.write_bytes(pickle.dumps({"weight": [0.0] * 4}))
        missing = weights
    elif what == "named_model":
        with (project.root / "pyproject.toml").open("a") as handle:
            handle.write('models = ["tiny", "llama-target"]\n')
        missing = models / "manifest.json"
    else:
        with (project.root / "pyproject.toml").open("a") as handle:
            handle.write('extra_model_dirs = ["private/ckpt"]\n')
        missing = project.root / "private" / "ckpt"
    assert project.run("check") == 2
    err = capfd.readouterr().err
    assert str(missing) in err
    if what != "extra_dir":
        assert FIX in err
    else:
        assert "extra_model_dirs" in err and "save_pretrained" in err


def test_a_suite_path_after_dashdash_is_refused_with_the_flag_that_narrows(project, capfd, monkeypatch):
    """`harness check -- suites/test_x.py` would run every suite (pytest collects the command's suites
    and the path); regen would re-record them all. Refused before anything runs, naming --suites."""
    monkeypatch.chdir(project.root)
    root = ["--root", str(project.root)]
    for command in (["check"], ["regen", "--yes"]):
        for target in ("suites/test_toy.py", "suites/test_toy.py::test_one"):
            assert main([*command, *root, "--", "-x", target]) == 2
            err = capfd.readouterr().err
            assert "--suites suites/test_toy.py" in err and "every suite" in err
    assert not (project.root / "reports").exists()  # refused before anything ran
    assert main(["check", *root, "--", "-k", "suites"]) == 0  # an option's value that names a path is the option's


def test_bad_config_key_and_bad_flags(project, capfd):
    assert project.run("check", "-n", "many") == 2
    assert "-n 'many'" in capfd.readouterr().err
    assert project.run("check", "--", "--golden-dir", "x") == 2
    assert "use --golden-dir" in capfd.readouterr().err
    assert project.run("envs", "--", "-k", "x") == 2
    assert "takes no pytest arguments" in capfd.readouterr().err
    with (project.root / "pyproject.toml").open("a") as handle:
        handle.write("colour = 'red'\n")
    assert project.run("envs") == 2
    err = capfd.readouterr().err
    assert "pyproject.toml" in err and "colour" in err
    assert main(["check", "--bogus"]) == 2


def test_no_project_root(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    assert main(["envs"]) == 2
    assert "--root" in capfd.readouterr().err


# ----------------------------------------------------------------------------------------------
# regen


def test_regen_without_yes_and_no_tty_refuses(project, capfd, monkeypatch):
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False, raising=False)
    path = project.record("one")
    before = path.read_bytes()
    project.values(value=5)
    assert project.run("regen") == 2
    assert "--yes" in capfd.readouterr().err
    assert path.read_bytes() == before


def test_regen_yes_prints_and_writes_only_the_current_env(project, capfd):
    project.record("one", value=1, gone=Field("exact", "old field"))
    stale = project.record("stale")
    other = project.record("one", key=OTHER_KEY, env=other_env(project.fp))
    other_bytes = other.read_bytes()
    project.values(value=2)
    assert project.run("regen", "--yes") == 0
    out = capfd.readouterr().out
    assert "1 record(s) added, 1 changed, 1 removed" in out
    assert "~ toy/one" in out and "~ value (changed)" in out and "value: 1 -> 2" in out
    assert "- gone (removed)" in out
    assert "+ toy/two" in out and "+ value (added)" in out
    assert "- toy/stale" in out
    one = project.store.read(project.key, "toy", "one")
    assert one.fields["value"].value == 2 and "gone" not in one.fields
    assert project.store.read(project.key, "toy", "two").fields["value"].value == 2
    assert not stale.exists()
    assert other.read_bytes() == other_bytes  # other envs are never touched
    assert not list(project.store.root.rglob("*.tmp"))


@pytest.mark.parametrize("failure", ["read-only", "disk-full"])
def test_regen_a_store_that_cannot_be_written_is_one_line_exit_2(project, capfd, monkeypatch, failure):
    """A read-only store (simulated: tests run as root, where chmod does not stop writes) fails
    before the suites run; a full disk while applying leaves the old records. Both: exit 2, one
    line naming the path, no traceback."""
    import errno

    import harness.store.records as golden

    path = project.record("one", value=1)
    before = path.read_bytes()
    project.values(value=2)
    root = str(project.store.root)
    real_open, real_replace = golden.os.open, golden.os.replace

    def read_only(file, flags, *args, **kwargs):
        if str(file).startswith(root) and flags & (golden.os.O_WRONLY | golden.os.O_RDWR | golden.os.O_CREAT):
            raise PermissionError(errno.EACCES, "Permission denied", str(file))
        return real_open(file, flags, *args, **kwargs)

    def disk_full(src, dst, *args, **kwargs):
        if str(dst).startswith(root):
            raise OSError(errno.ENOSPC, "No space left on device", str(src))
        return real_replace(src, dst, *args, **kwargs)

    if failure == "read-only":
        monkeypatch.setattr(golden.os, "open", read_only)
    else:
        monkeypatch.setattr(golden.os, "replace", disk_full)
    assert project.run("regen", "--yes") == 2
    captured = capfd.readouterr()
    err = captured.err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert root in err and ("Permission denied" if failure == "read-only" else "No space left") in err
    assert ("harness: running pytest" in captured.out) == (failure == "disk-full")  # read-only: fails first
    assert path.read_bytes() == before
    assert sorted(p.name for p in project.store.root.iterdir()) == [project.key]  # the lock lives beside the tree


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod 0o555")
def test_regen_a_read_only_store_dir_is_one_line_exit_2(project, capfd):
    path = project.record("one", value=1)
    project.values(value=2)
    project.store.root.chmod(0o555)
    try:
        assert project.run("regen", "--yes") == 2
    finally:
        project.store.root.chmod(0o755)
    err = capfd.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and str(project.store.root) in err
    assert project.store.read(project.key, "toy", "one").fields["value"].value == 1 and path.exists()


NOISY_SUITE = SUITE + textwrap.dedent("""

    def test_vec(golden):
        golden.check("vec", DATA["vec"], kind="tensor")
""")


def test_regen_dry_run_of_float_noise_reports_nothing_changed(project, capfd):
    """Last-digit float noise in a tensor and another thread count in the env are no change."""
    (project.root / "suites" / "test_toy.py").write_text(NOISY_SUITE)
    vec = [0.12345678, 1.2345678, -3.3333333e-5, 7.0]
    noisy = [v * (1 + 1e-7) for v in vec]  # moves the 8th significant digit; fp32 rtol is 1.3e-6
    env = {**project.fp, "threads": project.fp["threads"] + 3}  # the env key ignores threads
    for case in ("one", "two"):
        project.record(case, env=env)
    vec_path = project.store.update(project.key, "toy", "test_vec", env, {"vec": Field("tensor", vec)}).path
    (project.root / "value.json").write_text(json.dumps({"value": 1, "features": ["a"], "vec": noisy}))
    before = {p: p.read_bytes() for p in project.store.record_paths(project.key)}
    assert project.run("regen", "--dry-run") == 0
    out = capfd.readouterr().out
    assert "0 record(s) added, 0 changed, 0 removed, 3 unchanged" in out and "records are up to date" in out
    assert project.run("regen", "--yes") == 0
    assert {p: p.read_bytes() for p in project.store.record_paths(project.key)} == before
    # a change beyond the tolerance is still a change
    (project.root / "value.json").write_text(json.dumps({"value": 1, "features": ["a"],
                                                         "vec": [v * 1.001 for v in vec]}))
    assert project.run("regen", "--dry-run") == 0
    out = capfd.readouterr().out
    assert "0 added, 1 changed" not in out and "1 changed" in out and "~ vec (changed)" in out
    assert vec_path.read_bytes() == before[vec_path]


# ----------------------------------------------------------------------------------------------
# compare, envs, report (nothing runs)


def write_two_envs(project: Project) -> tuple[str, str]:
    a, b = OTHER_KEY, "tf5.14.0-torch2.8.0-cpu-x86_64-fp32"
    env_a, env_b = other_env(project.fp, "5.13.0"), other_env(project.fp, "5.14.0")
    for key, env, last in ((a, env_a, 3), (b, env_b, 4)):
        project.store.update(key, "greedy", "c1", env, {
            "ids": Field("tokens", [[1, 2, last]], {"margins": [[5.0, 5.0, 5.0]]}),
            "layers": Field("exact", ["full", "sliding"]),
            "features": Field("capability", ["mtp"] if key == a else ["mtp", "ensemble"]),
        })
        project.store.update(key, "greedy", "c2", env, {"layers": Field("exact", ["full"])})
    project.store.update(a, "greedy", "only-a", env_a, {"x": Field("exact", 1)})
    project.store.update(b, "sampling", "only-b", env_b, {"acc": Field("rate", {"k": 40, "n": 100})})
    return a, b


def test_compare_two_envs_renders_the_report(project, capfd):
    a, b = write_two_envs(project)
    assert project.run("compare", a, b) == 1
    out = capfd.readouterr().out
    assert "greedy  c1    ids" in out and "features" in out and "verdict: REGRESSION" in out
    (run_dir,) = project.run_dirs(f"compare-{a}-vs-{b}")
    html = (run_dir / "index.html").read_text()
    assert a in html and b in html
    results = json.loads((run_dir / "results.json").read_text())
    assert results["env"]["transformers"] == "5.14.0" and results["baseline_env"]["transformers"] == "5.13.0"
    status = {(o["case"], o["field"]): o["status"] for o in results["outcomes"]}
    assert status == {("c1", "ids"): "regression", ("c1", "layers"): "pass", ("c1", "features"): "changed",
                      ("c2", "layers"): "pass", ("only-a", "x"): "skipped", ("only-b", "acc"): "new"}
    assert ET.parse(run_dir / "junit.xml").getroot().get("failures") == "1"
    summary = (run_dir / "summary.md").read_text()
    assert "Verdict: **regression**" in summary and "| greedy | c1 | ids | real-change |" in summary
    assert "| greedy | regression (real-change) | 1 |" in summary
    assert project.run("compare", b, b, "--out", str(project.root / "docs" / "same")) == 0
    assert "Verdict: **pass**" in (project.root / "docs" / "same" / "summary.md").read_text()
    assert project.run("compare", a, "nope") == 2
    assert a in capfd.readouterr().err


def test_compare_with_claims_writes_the_table_to_html_and_summary(project, capfd, tmp_path):
    a, b = write_two_envs(project)
    claims = tmp_path / "claims.json"
    claims.write_text(json.dumps({"title": "Toy", "claims": [
        {"id": "ensemble", "text": "adds ensemble", "evidence": [
            {"suite": "greedy", "case": "c1", "field": "features", "expect": {"detail": "added ensemble"}}]}]}))
    target = project.root / "docs" / "upgrade"
    assert project.run("compare", a, b, "--out", str(target), "--claims", str(claims)) == 1
    assert "ensemble: observed" in capfd.readouterr().out
    summary = (target / "summary.md").read_text()
    assert summary.index("distinct finding") < summary.index("## Release notes, checked: Toy")
    assert "| **ensemble**: adds ensemble | observed |" in summary
    assert "### Not in the release notes (1)" in summary and "tokens differ from step 2" in summary
    assert 'data-claim="ensemble"' in (target / "index.html").read_text()
    # the claims ride along in results.json: a re-render shows the same table
    (target / "index.html").unlink()
    assert main(["report", str(target / "results.json")]) == 1  # the comparison's regression, as compare said
    assert 'data-claim="ensemble"' in (target / "index.html").read_text()
    assert "claims.claims" not in (target / "index.html").read_text()  # not dumped into the run table
    claims.write_text("{}")
    assert project.run("compare", a, b, "--claims", str(claims)) == 2
    assert str(claims) in capfd.readouterr().err


def test_compare_corrupt_record_names_the_file(project, capfd):
    a, b = write_two_envs(project)
    path = project.store.path(b, "greedy", "c2")
    path.write_text("[1, 2")
    assert project.run("compare", a, b) == 2
    assert str(path) in capfd.readouterr().err


def test_envs_lists_keys_versions_and_counts(project, capfd):
    a, b = write_two_envs(project)
    assert project.run("envs") == 0
    out = capfd.readouterr().out
    line_a = next(line for line in out.splitlines() if a in line)
    assert "5.13.0" in line_a and "2.8.0" in line_a and "fp32" in line_a and "greedy=3" in line_a
    line_b = next(line for line in out.splitlines() if b in line)
    assert "greedy=2 sampling=1" in line_b and " 3 " in line_b


def test_report_rerenders_results_json(tmp_path, capfd):
    source = tmp_path / "run" / "results.json"
    source.parent.mkdir()
    source.write_text(json.dumps(sample_results().to_json()))
    assert main(["report", str(source)]) == 1  # the sample holds a regression: report exits as check did
    assert (source.parent / "index.html").is_file()
    assert main(["report", str(source), "--out", str(tmp_path / "elsewhere"), "--junit", str(tmp_path / "j.xml")]) == 1
    assert (tmp_path / "elsewhere" / "index.html").is_file() and (tmp_path / "j.xml").is_file()
    assert "report:" in capfd.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    assert main(["report", str(bad)]) == 2
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    err = capfd.readouterr().err
    assert str(bad) in err and "missing.json" in err and "Traceback" not in err


def test_python_dash_m_harness(project):
    write_two_envs(project)
    ok = subprocess.run([sys.executable, "-m", "harness", "envs", "--root", str(project.root)],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and OTHER_KEY in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "harness", "compare", "x", "y", "--root", str(project.root)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "known env keys" in bad.stderr


# ----------------------------------------------------------------------------------------------
# exit-code mapping and regen diffs, without running pytest


def results_with(*statuses: str, category: str = "") -> Results:
    outcomes = [Outcome("toy", f"c{i}", "value", "exact", Status(s), f"detail {i}", category,
                        {"file": "/r/x.json", "reason": "corrupt JSON"} if category else {})
                for i, s in enumerate(statuses)]
    return Results(env={"transformers": "5.24.0"}, baseline_env=None, outcomes=outcomes,
                   meta={"env_key": "k", "baseline_key": "k"})


@pytest.mark.parametrize(
    ("statuses", "category", "pytest_rc", "code", "says"),
    [
        (("pass", "new", "skipped"), "", 0, 0, "verdict: pass"),
        (("pass", "changed"), "", 0, 0, "harness regen"),
        (("pass", "regression"), "", 1, 1, "verdict: REGRESSION"),
        (("pass",), "", 1, 1, "not golden regressions"),
        (("pass",), "", 4, 2, "usage error"),
        (("pass",), "", 2, 2, "interrupted"),
        (("regression",), "unreadable-record", 1, 2, "corrupt golden record /r/x.json"),
    ],
)
def test_exit_codes(tmp_path, capfd, statuses, category, pytest_rc, code, says):
    assert finish(results_with(*statuses, category=category), tmp_path, pytest_rc) == code
    captured = capfd.readouterr()
    assert says in captured.out + captured.err
    assert (tmp_path / "index.html").is_file() and (tmp_path / "junit.xml").is_file()


def test_pytest_problems():
    assert pytest_problem(0) is None and pytest_problem(1) is None
    assert "no tests" in pytest_problem(5) and "internal error" in pytest_problem(3)
    assert "killed" in pytest_problem(-9)


def test_partial_regen_removes_nothing():
    def rec(case: str, **values) -> Record:
        return Record("toy", case, {}, {k: Field("exact", v) for k, v in values.items()})

    old = {("toy", "a"): rec("a", x=1, y=2), ("toy", "b"): rec("b", x=1)}
    new = {("toy", "a"): rec("a", x=5)}
    full = {c.name: c for c in diff_records(old, new, complete=True)}
    assert full["toy/a"].removed == ("y",) and full["toy/b"].change == "removed"
    partial = diff_records(old, new, complete=False)
    assert [(c.name, c.removed, [f for f, _ in c.changed]) for c in partial] == [("toy/a", (), ["x"])]
    assert set(partial[0].record.fields) == {"x", "y"}
    broken = diff_records({("toy", "a"): RecordError("/r/a.json", "corrupt JSON")}, new)
    assert broken[0].change == "changed" and "unreadable" in broken[0].note


def test_no_tests_collected_is_a_usage_error(project, capfd):
    (project.root / "suites" / "test_toy.py").write_text("")
    assert project.run("check") == 2
    assert "collected no tests" in capfd.readouterr().err
    assert not any((project.root / "reports").rglob("*.json"))


def test_a_golden_dir_that_does_not_exist_is_an_error_naming_the_key(project, capfd):
    shutil.rmtree(project.root / "records")
    assert project.run("check") == 2
    err = capfd.readouterr().err
    assert str(project.root / "records") in err and "[tool.harness] golden_dir" in err
    assert not (project.root / "records").exists()  # nothing was written there


def test_a_collection_error_renders_an_error_report_never_a_pass(project, capfd):
    project.record("one")
    project.record("two")
    (project.root / "suites" / "test_broken.py").write_text("def test_x(:\n")
    assert project.run("check") == 2
    (run_dir,) = project.run_dirs(project.key)
    html = (run_dir / "index.html").read_text()
    assert 'data-verdict="error"' in html and 'data-verdict="pass"' not in html
    root = ET.parse(run_dir / "junit.xml").getroot()
    assert root.get("errors") == "2"  # the run, and the module that did not import
    meta = json.loads((run_dir / "results.json").read_text())["meta"]
    assert meta["error"].startswith("pytest stopped") and meta["collection_errors"][0].startswith("suites/test_broken.py")


@pytest.mark.parametrize(("field", "raw", "what"), [
    ("value", {"kind": "exact", "value": 1, "extras": 5}, "'extras' must be a JSON object"),
    ("tokens", {"kind": "tokens", "value": "oops"}, "a tokens value cannot be str"),
    ("rate", {"kind": "rate", "value": {"k": "3", "n": 4}}, "a rate value cannot be dict"),
])
def test_a_malformed_field_in_a_record_names_the_file_and_field(project, capfd, field, raw, what):
    path = project.record("one")
    data = json.loads(path.read_text())
    data["fields"][field] = raw
    path.write_text(json.dumps(data))
    assert project.run("check") == 2
    err = capfd.readouterr().err
    assert str(path) in err and f"field {field!r}: {what}" in err and "Traceback" not in err


def test_regen_diff_compares_fields_by_their_kind():
    env_a, env_b = {"dtype": "fp32", "threads": 2}, {"dtype": "fp32", "threads": 8}

    def rec(env: dict, **fields: Field) -> Record:
        return Record("toy", "a", env, fields)

    old = {("toy", "a"): rec(env_a, vec=Field("tensor", [1.0, 2.0]), ids=Field("exact", [1, 2]),
                             acc=Field("rate", {"k": 50, "n": 100}))}
    # float noise, an equal value, a rate within noise, another env fingerprint: nothing changed
    same = {("toy", "a"): rec(env_b, vec=Field("tensor", [1.0000001, 2.0]), ids=Field("exact", [1, 2]),
                              acc=Field("rate", {"k": 51, "n": 100}))}
    assert diff_records(old, same) == []
    # a real change: the changed field only; unchanged fields keep their old values
    moved = {("toy", "a"): rec(env_b, vec=Field("tensor", [1.0000001, 2.0]), ids=Field("exact", [1, 3]),
                               acc=Field("rate", {"k": 51, "n": 100}))}
    (change,) = diff_records(old, moved)
    assert [f for f, _ in change.changed] == ["ids"] and not change.added and not change.removed
    assert change.record.fields["vec"].value == [1.0, 2.0] and change.record.fields["acc"].value["k"] == 50
    assert change.record.fields["ids"].value == [1, 3] and change.record.env == env_b
    # beyond tolerance, a rate change beyond noise, a kind change: changed
    far = {("toy", "a"): rec(env_a, vec=Field("tensor", [1.01, 2.0]), ids=Field("tokens", [1, 2]),
                             acc=Field("rate", {"k": 95, "n": 100}))}
    (change,) = diff_records(old, far)
    assert sorted(f for f, _ in change.changed) == ["acc", "ids", "vec"]


def test_reports_carry_no_local_paths(project):
    project.record("one")
    project.record("two")
    assert project.run("check") == 0
    (run_dir,) = project.run_dirs(project.key)
    text = (run_dir / "results.json").read_text()
    meta = json.loads(text)["meta"]
    assert meta["golden_dir"] == "records"
    assert str(project.root) not in text and str(project.root) not in (run_dir / "index.html").read_text()


def test_terminal_output_strips_control_characters_and_survives_lone_surrogates(capsys):
    from harness.checking.humane import printable, shorten

    hostile = "old\x1b[2J\x1b]0;pwned\x07 new\r\nnext \ud800 end"
    shown = printable(hostile)
    assert "\x1b" not in shown and "\x07" not in shown and "\r" not in shown and "\ud800" not in shown
    assert shown.encode("utf-8")  # printable to a UTF-8 terminal
    assert shorten(hostile, 200) == "old [2J ]0;pwned new next ? end"
    finish_results = Results(env={}, baseline_env=None, outcomes=[
        Outcome("s", hostile, "f", "exact", Status.REGRESSION, hostile, "real-change")], meta={"env_key": hostile})
    from harness.report.terminal import print_summary

    print_summary(finish_results, hostile)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\ud800" not in out


def test_regen_keeps_float_noise_but_writes_a_new_extra():
    from harness.checking.regen import same_shape

    assert same_shape({"margins": [[1.0, 2.0]], "dtype": "fp32"}, {"margins": [[1.0000001, 2.0]], "dtype": "fp32"})
    assert not same_shape({"margins": [[1.0]]}, {"margins": [[1.0]], "follows": "tokens"})
    assert not same_shape({"loaded_as": {"dtype": "fp32"}}, {"loaded_as": {"dtype": "bf16"}})
    assert not same_shape({"margins": [[1.0]]}, {"margins": [[1.0, 2.0]]})


# ----------------------------------------------------------------------------------------------
# flags that reach the pytest run: --baseline, --strict, -n, --threads


def test_check_baseline_and_strict_reach_the_run(project, capfd):
    """--baseline compares with another env's records (one of the two cases recorded there) and
    writes nothing of this env unless asked (--record); --strict turns the unrecorded case from
    'new' into a regression and writes nothing either."""
    project.record("one", key=OTHER_KEY, env=other_env(project.fp))
    assert project.run("check", "--baseline", OTHER_KEY) == 0
    out = capfd.readouterr().out
    assert f"--baseline {OTHER_KEY}" in out and "--harness-strict" not in out
    assert f"records written: none (the baseline is another environment's ({OTHER_KEY}); pass --record" in out
    assert project.store.record_paths(project.key) == []  # no silent write of this env's records
    (run_dir,) = project.run_dirs(project.key)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["meta"]["baseline_key"] == OTHER_KEY and results["baseline_env"]["transformers"] == "5.13.0"
    assert results["meta"]["writes"] == [] and results["meta"]["write_rule"].startswith("not written - the baseline")
    status = {(o["case"], o["field"]): o["status"] for o in results["outcomes"]}
    assert status == {("one", "value"): "pass", ("one", "features"): "pass",
                      ("two", "value"): "new", ("two", "features"): "new"}
    shutil.rmtree(project.root / "reports")
    assert project.run("check", "--baseline", OTHER_KEY, "--record") == 0  # asked: this env's records are written
    out = capfd.readouterr().out
    assert "records written: wrote 4 field(s) in 2 record(s)" in out
    written = {p: p.read_bytes() for p in project.store.record_paths(project.key)}
    assert {p.stem for p in written} == {"one", "two"}
    shutil.rmtree(project.root / "reports")
    shutil.rmtree(project.store.root / project.key)  # what a strict run would write, it must not
    assert project.run("check", "--baseline", OTHER_KEY, "--strict", "--record") == 1
    out = capfd.readouterr().out
    assert "--harness-strict" in out and "verdict: REGRESSION" in out
    (run_dir,) = project.run_dirs(project.key)
    status = {(o["case"], o["field"]): o["status"]
              for o in json.loads((run_dir / "results.json").read_text())["outcomes"]}
    assert status[("one", "value")] == "pass"
    assert status[("two", "value")] == "regression" and status[("two", "features")] == "regression"
    assert project.store.record_paths(project.key) == []


def test_workers_and_threads_are_forwarded_to_pytest(project, capfd):
    project.record("one")
    project.record("two")
    assert project.run("check", "-n", "1", "--threads", "1") == 0
    out = capfd.readouterr().out
    running = next(line for line in out.splitlines() if line.startswith("harness: running"))
    assert " -n 1" in running and "--harness-threads 1" in running
    assert "verdict: pass" in out  # xdist's worker ran the toy suite and its outcomes came back
    (run_dir,) = project.run_dirs(project.key)
    assert len(json.loads((run_dir / "results.json").read_text())["outcomes"]) == 4


def test_workers_without_xdist_is_a_usage_error(project, capfd, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "xdist" else real(name, *a))
    assert project.run("check", "-n", "2") == 2
    assert "pip install pytest-xdist" in capfd.readouterr().err


@pytest.mark.parametrize(("argv", "says"), [
    (("check", "--dtype", "fp8"), "--dtype 'fp8': unknown dtype"),
    (("check", "--device", "tpu"), "--dtype/--device: unknown device 'tpu'"),
    (("check", "--suites", "nowhere"), "do not exist; pass --suites PATH"),
    (("regen", "--yes", "--suites", "nowhere"), "pass --suites PATH"),
])
def test_bad_run_flags_stop_before_pytest(project, capfd, argv, says):
    assert project.run(*argv) == 2
    captured = capfd.readouterr()
    assert says in captured.err and "harness: running" not in captured.out and "Traceback" not in captured.err


# ----------------------------------------------------------------------------------------------
# finding the project root


def test_root_is_found_from_a_subdirectory(project, capfd, monkeypatch):
    write_two_envs(project)
    nested = project.root / "suites" / "deeper"
    nested.mkdir()
    # a pyproject.toml without [tool.harness] on the way up (a sub-package) is passed over
    (project.root / "suites" / "pyproject.toml").write_text("[project]\nname = 'other'\n")
    monkeypatch.chdir(nested)
    assert main(["envs"]) == 0
    out = capfd.readouterr().out
    assert f"recorded envs under {project.root / 'records'}" in out and OTHER_KEY in out


def test_root_with_a_broken_pyproject_is_named(project, capfd, monkeypatch):
    (project.root / "pyproject.toml").write_text("[tool.harness\n")
    monkeypatch.chdir(project.root / "suites")
    assert main(["envs"]) == 2
    err = capfd.readouterr().err
    assert str(project.root / "pyproject.toml") in err and "Traceback" not in err


def test_root_that_is_not_a_directory(tmp_path, capfd):
    assert main(["envs", "--root", str(tmp_path / "nope")]) == 2
    assert f"--root {tmp_path / 'nope'}: not a directory" in capfd.readouterr().err


def test_envs_with_no_records(project, capfd):
    assert project.run("envs") == 0
    assert f"no recorded envs under {project.root / 'records'}" in capfd.readouterr().out


def test_interrupt_is_one_line_exit_130(project, capfd, monkeypatch):
    import harness.cli.envs as envs

    def interrupted(args, extra):
        raise KeyboardInterrupt

    monkeypatch.setattr(envs, "cmd_envs", interrupted)
    assert project.run("envs") == 130
    assert capfd.readouterr().err.strip() == "harness: error: interrupted"


# ----------------------------------------------------------------------------------------------
# regen: the interactive confirm, failing suites, unreadable records


@pytest.mark.parametrize("answer", ["y", "n", EOFError])
def test_regen_asks_on_a_terminal_and_writes_only_on_yes(project, capfd, monkeypatch, answer):
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    asked = []

    def fake_input(prompt: str) -> str:
        asked.append(prompt)
        if answer is EOFError:
            raise EOFError
        return answer

    monkeypatch.setattr("builtins.input", fake_input)
    path = project.record("one", value=1)
    before = path.read_bytes()
    project.values(value=3)
    code = project.run("regen")
    out = capfd.readouterr().out
    (prompt,) = asked
    assert prompt.endswith("[y/N] ") and str(project.store.root / project.key) in prompt
    if answer == "y":
        assert code == 0 and "wrote 2 record(s), removed 0" in out
        assert project.store.read(project.key, "toy", "one").fields["value"].value == 3
    else:
        assert code == 2 and "not confirmed; nothing written" in out
        assert path.read_bytes() == before and not project.store.path(project.key, "toy", "two").exists()


FAILING_SUITE = SUITE + textwrap.dedent("""

    def test_broken(golden):
        golden.check("value", DATA["value"])
        assert False, "a suite that fails"
""")


@pytest.mark.parametrize("partial", ["failing-test", "pytest-args", "narrowed-suites"])
def test_regen_of_a_partial_run_keeps_what_it_did_not_see(project, capfd, partial):
    """A failing test (exit 1), a -k selection or --suites naming one suite file: the fields and
    records that were observed are written, nothing else is removed; the failing test itself writes
    nothing."""
    one = project.record("one", value=1, gone=Field("exact", "kept"))
    stale = project.record("stale")
    project.values(value=4)
    if partial == "failing-test":
        (project.root / "suites" / "test_toy.py").write_text(FAILING_SUITE)
        code, why, written = project.run("regen", "--yes"), "1 test(s) broke before observing everything", {"one", "two"}
    elif partial == "pytest-args":
        code = main(["regen", "--yes", "--root", str(project.root), "--", "-k", "one"])
        why, written = "pytest arguments select part of the suites", {"one"}
    else:
        suite = project.root / "suites" / "test_toy.py"
        code = main(["regen", "--yes", "--root", str(project.root), "--suites", str(suite)])
        why, written = f"--suites {suite} is part of the suites", {"one", "two"}
    out = capfd.readouterr().out
    assert code == (1 if partial == "failing-test" else 0)
    assert f"partial run: {why}" in out and "removed" in out
    assert stale.exists() and "- toy/stale" not in out
    record = project.store.read(project.key, "toy", "one")
    assert record.fields["value"].value == 4 and record.fields["gone"].value == "kept" and one.exists()
    cases = {p.stem for p in project.store.record_paths(project.key)}
    assert cases == written | {"one", "stale"}


REGRESSING_SUITE = SUITE + textwrap.dedent("""

    def test_against_reference(golden):
        golden.reference("engine", DATA["value"], -1)  # a finding of the library, not a broken test
""")


def test_regen_of_a_run_whose_failures_are_findings_is_complete(project, capfd):
    """A test that fails by its golden verdict (a real bug of the installed version, e.g. a reference
    mismatch) observed everything: the regen is complete, so what no test produced any more goes."""
    project.record("one", value=1)
    stale = project.record("stale")
    (project.root / "suites" / "test_toy.py").write_text(REGRESSING_SUITE)
    code = project.run("regen", "--yes")
    out = capfd.readouterr().out
    assert code == 1 and "partial run" not in out and "- toy/stale" in out and not stale.exists()


def test_regen_rewrites_an_unreadable_record(project, capfd):
    path = project.record("one")
    path.write_text('{"schema": 1, "suite": "toy", "ca')
    assert project.run("regen", "--yes") == 0
    out = capfd.readouterr().out
    assert "~ toy/one" in out and "unreadable" in out
    assert project.store.read(project.key, "toy", "one").fields["value"].value == 1


# ----------------------------------------------------------------------------------------------
# check: runs whose tests never reach the `golden` fixture


@pytest.mark.parametrize(("body", "code", "says"), [
    ("def test_plain():\n    assert 1 + 1 == 2\n", 0, "not checked: no golden test ran"),
    ("def test_plain():\n    assert 1 + 1 == 3\n", 1, "tests failed and no results.json was written"),
])
def test_check_without_golden_observations(project, capfd, body, code, says):
    (project.root / "suites" / "test_toy.py").write_text(body)
    assert project.run("check") == code
    captured = capfd.readouterr()
    assert says in captured.out + captured.err
    assert not (project.root / "reports").exists() or not any((project.root / "reports").iterdir())


def test_confirm_reads_yes_and_defaults_to_no(monkeypatch):
    from harness.cli.regen import confirm

    for typed, expected in (("y", True), (" YES ", True), ("", False), ("no", False), ("yep", False)):
        monkeypatch.setattr("builtins.input", lambda prompt, typed=typed: typed)
        assert confirm("write?") is expected, typed


def test_merge_imports_runner_uploads_and_refuses_conflicts(project, capfd, tmp_path):
    for name, value in (("cell-a", 1), ("cell-b", 2)):
        GoldenStore(tmp_path / name).update(OTHER_KEY, "toy", "one", other_env(project.fp),
                                            {"value": Field("exact", value)})
    assert project.run("merge", str(tmp_path / "cell-a")) == 0
    assert f"harness: merge: {OTHER_KEY}: added 1 records" in capfd.readouterr().out
    assert project.store.read(OTHER_KEY, "toy", "one").fields["value"].value == 1
    assert project.run("merge", str(tmp_path / "cell-a"), str(tmp_path / "cell-b")) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and str(tmp_path / "cell-a" / OTHER_KEY) in err and str(tmp_path / "cell-b" / OTHER_KEY) in err


@pytest.mark.parametrize("categories, says_regen", [
    (["known-deviation"], False),  # the baseline already holds it: regen would change nothing - a pass
    (["known-deviation", "known-deviation"], False),
    (["known-deviation", "tolerated-drift"], True),  # one real change: regen has something to accept
    (["fixed"], True),
])
def test_the_verdict_says_regen_only_when_it_would_accept_something(categories, says_regen):
    """The verdict line and the report's headline are one decision (`Results.verdict`)."""
    from harness.cli.common import verdict_line
    from harness.report.page import context
    from harness.schema import Category
    results = Results(env={}, baseline_env={}, outcomes=[
        Outcome("sampling", f"c{i}", "exact_emitted", "deviation", Status.CHANGED, "", Category(c))
        for i, c in enumerate(categories)])
    line, page = verdict_line(results), context(results)
    assert results.verdict == page["verdict"] == ("changed" if says_regen else "pass")
    assert line.startswith("verdict: changed within policy (allowed)" if says_regen else "verdict: pass")
    assert ("accept the changes with `harness regen`" in line) is says_regen
    assert ("nothing for `harness regen` to accept" in line) is (not says_regen)
    assert ("regenerate the golden records" in page["verdict_text"]) is says_regen
    known = categories.count("known-deviation")
    said = f"{known} known deviation" if known else "known deviation"
    assert (said in line) is (said in page["verdict_text"]) is bool(known)


def test_combined_phases_report_a_fact_both_phases_saw_once():
    """Each phase of `harness check` collects every suite, so a record whose suite was deleted is
    `missing` in both; the run reports it once, and keeps each phase's own observations."""
    gone = Outcome("gone", "a", "tokens", "exact", Status.MISSING, "not observed")
    parallel = Results(env={}, baseline_env={}, outcomes=[gone, Outcome("outputs", "c", "tokens", "exact", Status.PASS)],
                       meta={"duration_s": 2})
    timing = Results(env={}, baseline_env={}, outcomes=[Outcome("gone", "a", "tokens", "exact", Status.MISSING,
                                                                "not observed"),
                                                        Outcome("latency", "d", "decode", "latency", Status.PASS)],
                     meta={"duration_s": 3})
    combined = Results.combine([parallel, timing], ["parallel", "timing"])
    assert [(o.suite, o.status) for o in combined.outcomes] == [
        ("gone", Status.MISSING), ("latency", Status.PASS), ("outputs", Status.PASS)]
    assert combined.meta["duration_s"] == 5


@pytest.mark.parametrize("given, auto, cores, expected", [
    (None, None, 2, "auto"),  # a user's default: every core, two phases
    (None, "1", 2, None),  # pytest-xdist's knob says one worker: a serial run
    (None, "0", 2, None),
    (None, "3", 2, "auto"),
    (None, None, 1, None),  # one core: serial
    ("2", "1", 2, "2"),  # -n as given always wins
])
def test_default_workers(monkeypatch, given, auto, cores, expected):
    from harness.cli.project import default_workers
    if auto is None:
        monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", auto)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert default_workers(given) == expected


@pytest.mark.parametrize("left, phases", [(0, ["parallel"]), (3, ["parallel", "timing"])])
def test_the_timing_phase_starts_only_when_the_parallel_one_left_it_tests(tmp_path, monkeypatch, left, phases):
    """A selection without a timing test (`-k` on one case, `--suite outputs`) costs one pytest
    session, not two: the parallel phase's results say how many timing tests it left."""
    from types import SimpleNamespace

    from harness.cli import plan
    from harness.cli import project as cli_project
    from harness.settings.config import load_config
    from harness.settings.run import RunSettings

    started: list[str] = []

    def fake_pytest(command, cwd, guard=None):
        phase, results = command
        started.append(phase)
        meta = {"timing_left": left} if phase == "parallel" else {}
        outcome = Outcome("outputs" if phase == "parallel" else "latency", "c", "f", "exact", Status.PASS)
        results.write_text(json.dumps(Results(env={}, baseline_env={}, outcomes=[outcome], meta=meta).to_json()))
        return 0

    monkeypatch.setattr(plan, "workers", lambda run, default, explicit=False: "2")
    monkeypatch.setattr(cli_project, "pytest_command", lambda project, run, args, extra, n=None: [run.phase, run.results])
    monkeypatch.setattr(cli_project, "run_pytest", fake_pytest)
    run = RunSettings(load_config(tmp_path), tmp_path, tmp_path / "results.json")
    rc, results = cli_project.run_phases(SimpleNamespace(root=tmp_path), run, SimpleNamespace(workers=None), [])
    assert (rc, started) == (0, phases)
    assert {o.suite for o in results.outcomes} == ({"outputs", "latency"} if left else {"outputs"})
