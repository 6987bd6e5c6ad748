"""The pytest plugin end to end (pytester): new -> pass -> fail on a change -> force-regen -> pass
for every field kind, strict mode, unreadable records, another env key as baseline, reference
outcomes, Holm within a test, and pytest-xdist with 2 workers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.checking import stats
from harness.store.env import env_key, fingerprint
from harness.store.records import GoldenStore

pytest_plugins = ["pytester"]

FP32_KEY = env_key(fingerprint(dtype="fp32"))
BF16_KEY = env_key(fingerprint(dtype="bf16"))

PYPROJECT = """
[tool.harness]
golden_dir = "golden/records"
alpha = 0.01

[tool.harness.thresholds]
latency_run_sd = 0.002  # a quiet machine's own tau: with the default 0.011 the field cannot see 5 % (not checked)
"""

# One test per field kind; all of them check fields of the same case(s), so every record is
# merged from 7 tests. change.json lists the kinds whose value changes in this run.
KINDS_MODULE = '''
import json
import pathlib

import numpy as np
import pytest

CHANGED = set(json.loads((pathlib.Path(__file__).parent / "change.json").read_text()))
N_CASES = int((pathlib.Path(__file__).parent / "cases.txt").read_text())


class Case:
    def __init__(self, id):
        self.id = id


CASES = [Case(f"tiny/plain-{i}") for i in range(N_CASES)]
case_param = pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)


def pick(kind, old, new):
    return new if kind in CHANGED else old


@case_param
def test_exact(case, golden):
    golden.check("layers", pick("exact", ["full", "sliding"], ["full", "chunked"]), kind="exact")


@case_param
def test_tokens(case, golden):
    golden.check("tokens", pick("tokens", [5, 6, 7, 8], [5, 6, 9, 8]), kind="tokens", margins=[2.0, 1.5, 1.2, 1.0])


@case_param
def test_tensor(case, golden):
    golden.check("logits", pick("tensor", [[0.5, -1.25], [2.0, 3.5]], [[0.5, -1.25], [2.0, 3.75]]),
                 kind="tensor", dtype="fp32")


@case_param
def test_rate(case, golden):
    golden.check("accepted", pick("rate", {"k": 600, "n": 1000}, {"k": 300, "n": 1000}), kind="rate")


@case_param
def test_distribution(case, golden):
    counts, expected = pick("distribution", ([1000, 600, 400], [0.5, 0.3, 0.2]), ([800, 800, 400], [0.4, 0.4, 0.2]))
    golden.check("emitted", counts, kind="distribution", expected=expected)


@case_param
def test_latency(case, golden):
    rng = np.random.default_rng(0)
    calibration = 1e-3 * rng.lognormal(0.0, 0.02, 30)
    samples = calibration * rng.lognormal(0.0, 0.01, 30) * pick("latency", 1.0, 1.6)
    golden.check("latency", {"samples": samples, "calibration": calibration, "cpu": samples,
                             "cpu_calibration": calibration, "load_per_core": 0.1}, kind="latency")


@case_param
def test_capability(case, golden):
    golden.check("features", pick("capability", {"mtp": True, "ensemble": False}, {"mtp": True, "ensemble": True}),
                 kind="capability")
'''

FIELD_OF = {"exact": "layers", "tokens": "tokens", "tensor": "logits", "rate": "accepted",
            "distribution": "emitted", "latency": "latency", "capability": "features"}
ALL_KINDS = list(FIELD_OF)


QUIET = ("-p", "no:hypothesispytest", "-p", "no:cacheprovider")  # hypothesis' summary costs ~3 s a run


def run_inline(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*QUIET, *args)


def write_pyproject(pytester: pytest.Pytester) -> None:
    """The project's settings and its (empty) store: a golden_dir that does not exist is refused."""
    (pytester.path / "pyproject.toml").write_text(PYPROJECT)
    (pytester.path / "golden" / "records").mkdir(parents=True, exist_ok=True)


def make_project(pytester: pytest.Pytester, cases: int = 1) -> None:
    write_pyproject(pytester)
    (pytester.path / "test_kinds.py").write_text(KINDS_MODULE)
    (pytester.path / "cases.txt").write_text(str(cases))
    set_change(pytester, [])


def set_change(pytester: pytest.Pytester, kinds: list[str]) -> None:
    (pytester.path / "change.json").write_text(json.dumps(kinds))


def results(pytester: pytest.Pytester, path: str = "reports/results.json") -> dict:
    return json.loads((pytester.path / path).read_text())


def statuses(data: dict) -> dict[str, tuple[str, str]]:
    """field -> (status, category) of the run's baseline outcomes (one case)."""
    return {o["field"]: (o["status"], o["category"]) for o in data["outcomes"] if o["against"] == "baseline"}


def record_path(pytester: pytest.Pytester, key: str = FP32_KEY, case: str = "tiny_plain-0") -> Path:
    return pytester.path / "golden" / "records" / key / "kinds" / f"{case}.json"


def test_full_workflow_for_every_field_kind(pytester: pytest.Pytester):
    make_project(pytester)

    # 1. no records: every field is new, written into one merged record, nothing fails
    run = run_inline(pytester)
    run.assert_outcomes(passed=7)
    assert statuses(results(pytester)) == {f: ("new", "") for f in FIELD_OF.values()}
    record = json.loads(record_path(pytester).read_text())
    assert sorted(record["fields"]) == sorted(FIELD_OF.values())
    assert record["case"] == "tiny/plain-0" and record["suite"] == "kinds" and record["env"]["dtype"] == "fp32"
    run.stdout.fnmatch_lines(["*harness golden records*",
                              "fields: 0 pass, 0 changed, 0 regression, 7 new, 0 missing, 0 skipped*",
                              "records written: wrote 7 field(s) in 1 record(s) under *",
                              "*kinds/tiny_plain-0.json: 7 new (accepted, emitted, features, latency, layers, logits, +1 more)"])
    written = record_path(pytester).read_bytes()

    # 2. same observations: every field passes, the store is untouched
    run_inline(pytester).assert_outcomes(passed=7)
    assert statuses(results(pytester)) == {f: ("pass", "") for f in FIELD_OF.values()}
    assert record_path(pytester).read_bytes() == written

    # 3. every kind changes: each fails its test with field and old vs new, except capability,
    #    which is reported as a feature change and never fails
    set_change(pytester, ALL_KINDS)
    run = run_inline(pytester)
    run.assert_outcomes(passed=1, failed=6)
    expected = {
        "layers": ("regression", "real-change"), "tokens": ("regression", "real-change"),
        "logits": ("regression", "real-change"), "accepted": ("regression", "rate-down"),
        "emitted": ("regression", "exact-distribution-changed"), "latency": ("regression", "slowdown"),
        "features": ("changed", "feature-added"),
    }
    assert statuses(results(pytester)) == expected
    run.stdout.fnmatch_lines([
        "*golden regression in kinds/tiny/plain-0*",
        "*layers [[]exact, baseline[]]: root[[]1[]]: 'sliding' -> 'chunked'*",
        "*tokens [[]tokens, baseline[]]: tokens differ from step 2: old [[]7, 8[]] vs new [[]9, 8[]]*",
        "*accepted [[]rate, baseline[]]: rate changed: old 600/1000*vs new 300/1000*",
    ])
    assert record_path(pytester).read_bytes() == written  # a failing run never rewrites a record

    # 4. --force-regen accepts the change: nothing fails, the summary lists what was rewritten
    run = run_inline(pytester, "--force-regen")
    run.assert_outcomes(passed=7)
    data = results(pytester)
    assert {f: s for f, (s, _) in statuses(data).items()} == {f: "changed" for f in FIELD_OF.values()}
    assert {c for _, c in statuses(data).values()} == {"regenerated"}
    assert data["meta"]["force_regen"] is True
    assert data["meta"]["writes"] == [{"path": f"{FP32_KEY}/kinds/tiny_plain-0.json", "replaced_unreadable": "",
                                       "fields": {f: "changed" for f in FIELD_OF.values()}}]
    run.stdout.fnmatch_lines(["records written: rewrote 7 field(s) in 1 record(s) under *",
                              "*tiny_plain-0.json: 7 changed (accepted, emitted, features, *"])
    record = json.loads(record_path(pytester).read_text())
    assert record["fields"]["layers"]["value"] == ["full", "chunked"]

    # 5. the regenerated records are the new baseline
    run_inline(pytester).assert_outcomes(passed=7)
    assert statuses(results(pytester)) == {f: ("pass", "") for f in FIELD_OF.values()}


def test_results_json_contents_and_custom_path(pytester: pytest.Pytester):
    make_project(pytester)
    run_inline(pytester, "--harness-results", "out/run.json").assert_outcomes(passed=7)
    data = results(pytester, "out/run.json")
    assert data["results_version"] == 1
    assert data["env"]["dtype"] == "fp32" and data["baseline_env"] == data["env"]
    meta = data["meta"]
    assert meta["alpha"] == 0.01 and meta["golden_tests"] == 7
    assert meta["alpha_per_test"] == pytest.approx(0.01 / 8)  # 7 golden tests, rounded up to a power of two
    assert meta["env_key"] == FP32_KEY and meta["baseline_key"] == FP32_KEY
    assert "--harness-results" in meta["argv"] and meta["duration_s"] >= 0
    assert not (pytester.path / "reports" / "results.json").exists()


def test_run_options_reach_the_fingerprint(pytester: pytest.Pytester):
    """--harness-threads / --harness-attn / --golden-dir; a bad dtype is a usage error."""
    import torch

    make_project(pytester)
    threads = torch.get_num_threads()
    (pytester.path / "elsewhere").mkdir()
    try:
        run_inline(pytester, "--harness-threads", "1", "--harness-attn", "eager", "--golden-dir", "elsewhere")
    finally:
        torch.set_num_threads(threads)  # the inline run shares this process
    env = results(pytester)["env"]
    assert (env["threads"], env["attn_implementation"]) == (1, "eager")
    assert GoldenStore(pytester.path / "elsewhere").env_keys() == [FP32_KEY]
    assert not any((pytester.path / "golden" / "records").iterdir())
    run = run_inline(pytester, "--harness-dtype", "int3")
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    run.stderr.fnmatch_lines(["*--harness-dtype 'int3': unknown dtype*"])


def test_a_strict_collect_only_run_reports_nothing_missing(pytester: pytest.Pytester):
    """--collect-only runs nothing on purpose: under --strict (CI) its recorded fields are not
    `missing` regressions, it exits 0 and writes no results (counting m for alpha collects so)."""
    make_project(pytester)
    run_inline(pytester).assert_outcomes(passed=7)  # records written
    (pytester.path / "reports" / "results.json").unlink()
    run = run_inline(pytester, "--harness-strict", "--collect-only")
    assert run.ret == 0
    assert "regression" not in run.stdout.str()
    assert not list(pytester.path.rglob("results.json"))


def test_strict_fails_on_missing_records_and_writes_nothing(pytester: pytest.Pytester):
    make_project(pytester)
    for flag in ("--harness-strict", "--strict"):
        run = run_inline(pytester, flag)
        run.assert_outcomes(failed=7)
        run.stdout.fnmatch_lines(["*no golden record in*(--strict: missing records fail)*"])
        assert {s for s, _ in statuses(results(pytester)).values()} == {"regression"}
        assert not any((pytester.path / "golden").rglob("*.json"))
    run_inline(pytester).assert_outcomes(passed=7)  # without strict: written as new
    run_inline(pytester, "--strict").assert_outcomes(passed=7)  # strict with records: fine


@pytest.mark.parametrize(
    ("text", "reason"),
    [("{not json", "not valid JSON"),
     ('{"schema": 7, "suite": "kinds", "case": "tiny/plain-0", "env": {}, "fields": {}}', "unknown schema version 7"),
     ('{"schema": 1, "suite": "kinds", "case": "tiny/plain-9", "env": {}, "fields": {}}', "record is for case")],
)
def test_unreadable_record_fails_naming_the_file_and_is_never_overwritten(pytester: pytest.Pytester, text, reason):
    make_project(pytester)
    run_inline(pytester).assert_outcomes(passed=7)
    path = record_path(pytester)
    path.write_text(text)
    run = run_inline(pytester)
    run.assert_outcomes(failed=7)
    run.stdout.fnmatch_lines([f"*{path}: {reason}*"])
    assert {c for _, c in statuses(results(pytester)).values()} == {"unreadable-record"}
    assert path.read_text() == text
    # --force-regen replaces it, and says so
    run = run_inline(pytester, "--force-regen")
    run.assert_outcomes(passed=7)
    run.stdout.fnmatch_lines(["*tiny_plain-0.json:*(replaced an unreadable record)"])
    assert sorted(json.loads(path.read_text())["fields"]) == sorted(FIELD_OF.values())
    run_inline(pytester).assert_outcomes(passed=7)


CROSS_MODULE = '''
import os

import pytest


def test_greedy(golden, harness_env):
    bf16 = harness_env.dtype == "bf16"
    # step 2 is a near-tie (margin 0.05 < bf16 tie eps 0.75): bf16 may pick the other token
    golden.check("near_tie", [1, 2, 8 if bf16 else 3, 4], kind="tokens", margins=[3.0, 2.0, 0.05, 1.0])
    # step 1 has a clear margin: a different token there is a real change
    real = os.environ.get("REAL_CHANGE") == "1"
    golden.check("clear", [1, 9 if real else 2, 3], kind="tokens", margins=[3.0, 2.5, 1.0])
    # derived from the streams: they inherit a tie-flip, never a real change
    golden.check("near_tie_text", "a b " + ("h" if bf16 else "c"), follows="near_tie")
    golden.check("clear_text", "a " + ("i" if real else "b"), follows="clear")
'''


def test_baseline_from_another_env_key(pytester: pytest.Pytester, monkeypatch):
    write_pyproject(pytester)
    (pytester.path / "test_cross.py").write_text(CROSS_MODULE)
    run_inline(pytester).assert_outcomes(passed=1)  # fp32 records

    run = run_inline(pytester, "--harness-dtype", "bf16", "--baseline", FP32_KEY)
    run.assert_outcomes(passed=1)
    data = results(pytester)
    assert data["env"]["dtype"] == "bf16" and data["baseline_env"]["dtype"] == "fp32"
    assert statuses(data) == {"near_tie": ("pass", "tie-flip"), "clear": ("pass", ""),
                              "near_tie_text": ("pass", "tie-flip"), "clear_text": ("pass", "")}
    store = GoldenStore(pytester.path / "golden" / "records")
    assert store.env_keys() == [FP32_KEY]  # against another env's baseline nothing is written unasked
    run.stdout.fnmatch_lines([f"records written: none (the baseline is another environment's ({FP32_KEY}); *"])
    run_inline(pytester, "--harness-dtype", "bf16", "--baseline", FP32_KEY, "--harness-record").assert_outcomes(passed=1)
    assert store.env_keys() == sorted([FP32_KEY, BF16_KEY])  # asked: the bf16 run wrote only its own records
    assert store.read(BF16_KEY, "cross", "test_greedy").fields["near_tie"].value == [1, 2, 8, 4]
    assert store.read(FP32_KEY, "cross", "test_greedy").fields["near_tie"].value == [1, 2, 3, 4]

    monkeypatch.setenv("REAL_CHANGE", "1")
    run = run_inline(pytester, "--harness-dtype", "bf16", "--baseline", FP32_KEY)
    run.assert_outcomes(failed=1)
    run.stdout.fnmatch_lines(["*clear [[]tokens, baseline[]]: tokens differ from step 1*margin 2.5 >= tie eps 0.75*"])
    assert statuses(results(pytester))["clear_text"] == ("regression", "real-change")
    # the bf16 run against its own records: the near-tie flip is no tie-flip there (same numerics)
    monkeypatch.delenv("REAL_CHANGE")
    run_inline(pytester, "--harness-dtype", "bf16").assert_outcomes(passed=1)
    # a regen in bf16 rewrites bf16 records only, never the baseline env's
    fp32_record = store.path(FP32_KEY, "cross", "test_greedy").read_bytes()
    monkeypatch.setenv("REAL_CHANGE", "1")
    run_inline(pytester, "--harness-dtype", "bf16", "--force-regen").assert_outcomes(passed=1)
    assert store.read(BF16_KEY, "cross", "test_greedy").fields["clear"].value == [1, 9, 3]
    assert store.path(FP32_KEY, "cross", "test_greedy").read_bytes() == fp32_record

    run = run_inline(pytester, "--baseline", "tf0.0-nope")
    assert run.ret == pytest.ExitCode.USAGE_ERROR
    run.stderr.fnmatch_lines([f"*--baseline 'tf0.0-nope': no golden records*known env keys: {', '.join(sorted([FP32_KEY, BF16_KEY]))}*"])


REFERENCE_MODULE = '''
import pytest


def test_against_reference(golden):
    golden.reference("ids_vs_engine", [1, 2, 3], [1, 2, 3], kind="tokens")
    golden.outcome("analytic_tv", "pass", kind="exact", detail="exact TV 0.0", category="")


def test_statistics_are_not_decided_by_a_suite(golden):
    with pytest.raises(ValueError, match="must be compared"):
        golden.outcome("acceptance", "pass", kind="rate")


def test_reference_regression(golden):
    golden.reference("ids_vs_engine", [1, 2, 9], [1, 2, 3], kind="tokens",
                     observed_extras={"margins": [1.0, 1.0, 2.0]}, expected_extras={"margins": [1.0, 1.0, 2.0]})


def test_checked_twice(golden):
    golden.check("x", 1)
    with pytest.raises(ValueError, match="checked twice"):
        golden.check("x", 2)
'''


def test_reference_outcomes_need_no_record(pytester: pytest.Pytester):
    (pytester.path / "golden" / "records").mkdir(parents=True)  # the default golden_dir, left empty
    (pytester.path / "test_ref.py").write_text(REFERENCE_MODULE)
    run = run_inline(pytester)
    run.assert_outcomes(passed=3, failed=1)
    run.stdout.fnmatch_lines(["*ids_vs_engine [[]tokens, reference[]]: tokens differ from step 2*"])
    data = results(pytester)
    reference = {(o["case"], o["field"]): o["status"] for o in data["outcomes"] if o["against"] == "reference"}
    assert reference == {("test_against_reference", "ids_vs_engine"): "pass",
                         ("test_against_reference", "analytic_tv"): "pass",
                         ("test_reference_regression", "ids_vs_engine"): "regression"}
    run.stdout.fnmatch_lines(["*its record was not written (a case that regresses is never recorded as golden*"])
    records = GoldenStore(pytester.path / "golden" / "records")
    stored = {(r.case, name): ref.status for k in records.env_keys() for r in records.records(k)
              for name, ref in r.references.items()}
    # the verdicts are recorded (schema 2), no value of either side - and a case that regressed on this
    # first run is not recorded at all (a faulty case never becomes golden)
    assert stored == {k: v for k, v in reference.items() if v != "regression"}
    regen = run_inline(pytester, "--force-regen")  # on purpose: regen records it, its failing verdict with it
    assert regen.ret == 1  # the reference still fails: regen records it, it does not make it pass
    stored = {(r.case, name): ref.status for k in records.env_keys() for r in records.records(k)
              for name, ref in r.references.items()}
    assert stored[("test_reference_regression", "ids_vs_engine")] == "regression"


STOPPED_MODULE = '''
from harness.schema import Observation


def test_regresses_then_stops(golden):
    obs = Observation()
    obs.reference("rows_as_specified", [1, 2, 9], [1, 2, 3])
    golden.check_all(obs.stop("the rest of the case cannot run"))


def test_stops_clean(golden):
    obs = Observation()
    obs.reference("rows_as_specified", [1, 2, 3], [1, 2, 3])
    golden.check_all(obs.stop("the rest of the case cannot run"))
'''


def test_a_case_that_stops_after_a_regression_fails_and_one_that_stops_clean_is_skipped(pytester: pytest.Pytester):
    """`obs.stop` after a regression: the plain pytest run fails the test (exit 1, the regression
    named), as `harness check` does; a stop without one is still a skip with its reason."""
    write_pyproject(pytester)
    (pytester.path / "test_stopped.py").write_text(STOPPED_MODULE)
    run = run_inline(pytester)
    run.assert_outcomes(failed=1, skipped=1)
    assert run.ret == 1
    run.stdout.fnmatch_lines(["*rows_as_specified [[]exact, reference[]]*", "*the case then stopped: the rest of*"])
    status = {(o["case"], o["field"]): o["status"] for o in results(pytester)["outcomes"]}
    assert status == {("test_regresses_then_stops", "rows_as_specified"): "regression",
                      ("test_stops_clean", "rows_as_specified"): "pass"}


HOLM_MODULE = '''
import json
import pathlib

COUNTS = json.loads((pathlib.Path(__file__).parent / "counts.json").read_text())


def test_two_rates(golden):
    golden.check("first", COUNTS["first"], kind="rate")
    golden.check("second", COUNTS["second"], kind="rate")
'''


def _k_with_p(low: float, high: float, n: int = 400, base: int = 200) -> int:
    """A count k whose two-proportion p-value against base/n lies in (low, high)."""
    for k in range(base, n):
        if low < stats.two_proportion_test(k, n, base, n).p_value < high:
            return k
    raise AssertionError("no such k")


def test_holm_within_a_test(pytester: pytest.Pytester):
    """One golden test in the run (alpha 0.05, m = 1) with two rate checks. p = 0.03 and 0.04:
    each alone is below alpha, but Holm (0.03 * 2 > 0.05) rejects neither; p = 0.001 and 0.04:
    Holm rejects both."""
    (pytester.path / "pyproject.toml").write_text('[tool.harness]\nalpha = 0.05\n')
    (pytester.path / "golden" / "records").mkdir(parents=True)
    (pytester.path / "test_holm.py").write_text(HOLM_MODULE)
    base = {"k": 200, "n": 400}
    (pytester.path / "counts.json").write_text(json.dumps({"first": base, "second": base}))
    run_inline(pytester).assert_outcomes(passed=1)

    mid_a, mid_b = _k_with_p(0.026, 0.034), _k_with_p(0.036, 0.048)
    (pytester.path / "counts.json").write_text(json.dumps({"first": {"k": mid_a, "n": 400}, "second": {"k": mid_b, "n": 400}}))
    run_inline(pytester).assert_outcomes(passed=1)
    outcomes = {o["field"]: o for o in results(pytester)["outcomes"]}
    assert all(o["status"] == "pass" and o["diff"]["holm_adjusted_p"] > 0.05 for o in outcomes.values())

    strong = _k_with_p(0.0, 0.001)
    (pytester.path / "counts.json").write_text(json.dumps({"first": {"k": strong, "n": 400}, "second": {"k": mid_b, "n": 400}}))
    run_inline(pytester).assert_outcomes(failed=1)
    assert {o["field"]: o["status"] for o in results(pytester)["outcomes"]} == {"first": "regression", "second": "regression"}


@pytest.mark.long
def test_xdist_two_workers_merge_records_and_results(pytester: pytest.Pytester):
    """4 cases x 7 kinds = 28 tests on 2 workers: every record gets its 7 fields (merged from tests
    on both workers), results.json holds all 28 outcomes, written once by the controller."""
    pytest.importorskip("xdist")
    make_project(pytester, cases=4)
    # pin the thread count on both sides: workers are fresh processes, while the inline run
    # inherits this process's torch threads (latency compares only within one hardware class)
    run = run_inline(pytester, "-n", "2", "--harness-threads", "1")
    run.assert_outcomes(passed=28)
    data = results(pytester)
    assert len(data["outcomes"]) == 28 and {o["status"] for o in data["outcomes"]} == {"new"}
    assert data["meta"]["golden_tests"] == 28 and data["env"]["dtype"] == "fp32"
    assert len(data["meta"]["writes"]) >= 4
    run.stdout.fnmatch_lines(["*0 pass, 0 changed, 0 regression, 28 new, 0 missing, 0 skipped*"])
    store = GoldenStore(pytester.path / "golden" / "records")
    records = list(store.records(FP32_KEY))
    assert len(records) == 4 and all(sorted(r.fields) == sorted(FIELD_OF.values()) for r in records)
    # and they are a complete baseline: a plain run passes every field
    run_inline(pytester, "--harness-threads", "1").assert_outcomes(passed=28)
    assert {o["status"] for o in results(pytester)["outcomes"]} == {"pass"}


def test_a_field_the_suite_stops_checking_is_missing_and_fails_in_ci(pytester: pytest.Pytester, monkeypatch):
    make_project(pytester)
    run_inline(pytester).assert_outcomes(passed=7)
    # the suite drops the tokens check and the capability test
    module = KINDS_MODULE.replace('    golden.check("tokens", pick("tokens", [5, 6, 7, 8], [5, 6, 9, 8]), kind="tokens", '
                                  'margins=[2.0, 1.5, 1.2, 1.0])', "    pass")
    module = module[:module.index("@case_param\ndef test_capability")]
    (pytester.path / "test_kinds.py").write_text(module)
    run_inline(pytester).assert_outcomes(passed=7 - 1)
    got = statuses(results(pytester))
    assert got["tokens"] == ("missing", "missing-field") and got["features"] == ("missing", "missing-field")
    assert got["layers"] == ("pass", "")
    monkeypatch.setenv("CI", "true")  # CI is strict: a field that disappears fails the run
    run = run_inline(pytester)
    assert run.ret == pytest.ExitCode.TESTS_FAILED
    assert statuses(results(pytester))["tokens"] == ("regression", "missing-field")


def test_ci_makes_a_field_without_baseline_fail(pytester: pytest.Pytester, monkeypatch):
    make_project(pytester)
    monkeypatch.setenv("CI", "1")
    run_inline(pytester).assert_outcomes(failed=7)
    assert not any((pytester.path / "golden").rglob("*.json"))
    run_inline(pytester, "--force-regen").assert_outcomes(passed=7)  # regenerating on purpose is not strict


BROKEN_MODULE = '''
def test_breaks_after_a_check(golden):
    golden.check("value", BROKEN_VALUE)
    if BROKEN_VALUE == 2:
        {}["harness bug"]
'''


def test_a_harness_error_fails_the_test_and_leaves_the_record_untouched(pytester: pytest.Pytester):
    write_pyproject(pytester)
    (pytester.path / "test_broken.py").write_text("BROKEN_VALUE = 1\n" + BROKEN_MODULE)
    run_inline(pytester).assert_outcomes(passed=1)
    path = pytester.path / "golden" / "records" / FP32_KEY / "broken" / "test_breaks_after_a_check.json"
    before = path.read_bytes()
    (pytester.path / "test_broken.py").write_text("BROKEN_VALUE = 2\n" + BROKEN_MODULE)
    run = run_inline(pytester, "--force-regen")
    run.assert_outcomes(failed=1)
    run.stdout.fnmatch_lines(["*KeyError*harness bug*"])
    assert path.read_bytes() == before


def test_a_record_that_cannot_be_written_fails_the_test_naming_it(pytester: pytest.Pytester, monkeypatch):
    """A full disk while a plain run writes a new record: the test fails with one line naming
    the case and the OS error; the outcome itself is still reported."""
    import errno

    from harness.store import records as golden

    def disk_full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    write_pyproject(pytester)
    (pytester.path / "test_broken.py").write_text("BROKEN_VALUE = 1\n" + BROKEN_MODULE)
    monkeypatch.setattr(golden.GoldenStore, "update", disk_full)
    run = run_inline(pytester)
    run.assert_outcomes(failed=1)
    run.stdout.fnmatch_lines(["*cannot write golden record for broken/test_breaks_after_a_check: *No space left*"])
    assert [o["status"] for o in results(pytester)["outcomes"]] == ["new"]
    assert "No space left" in results(pytester)["meta"]["write_errors"][0]  # the verdict is 'error', never pass
    assert not (pytester.path / "golden" / "records" / FP32_KEY).exists()


LEAKED_MODULE = '''
KEPT = []


def test_keeps_the_fixture(golden):
    golden.check("value", 1)
    KEPT.append(golden)


def test_uses_it_later():
    KEPT[0].check("value", 2)
'''


def test_a_golden_fixture_used_after_its_test_is_an_error(pytester: pytest.Pytester):
    write_pyproject(pytester)
    (pytester.path / "test_leaked.py").write_text(LEAKED_MODULE)
    run = run_inline(pytester)
    run.assert_outcomes(passed=1, failed=1)
    run.stdout.fnmatch_lines(["*RuntimeError: golden check after the end of test *test_keeps_the_fixture*"])
    record = GoldenStore(pytester.path / "golden" / "records").read(FP32_KEY, "leaked", "test_keeps_the_fixture")
    assert record.fields["value"].value == 1  # the late check changed nothing


def test_a_deep_run_never_writes_records_and_leaves_the_environment_alone(pytester: pytest.Pytester, monkeypatch):
    import os

    monkeypatch.delenv("HARNESS_DEEP", raising=False)
    make_project(pytester)
    run_inline(pytester, "--harness-deep").assert_outcomes(passed=7)
    assert not any((pytester.path / "golden").rglob("*.json"))  # an investigation run: the default set stays the baseline
    assert "HARNESS_DEEP" not in os.environ
    run_inline(pytester).assert_outcomes(passed=7)
    assert record_path(pytester).exists()
