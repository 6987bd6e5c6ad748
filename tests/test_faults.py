"""The fault catalogue (harness/faults/): each fault is caught by the suite, case and field the
catalogue names, and a clean run of the same cases raises nothing.

Default run (fast; ~25 s of CPU, two pytest subprocesses): the catalogue's shape; every fault
applies to the installed transformers and is undone exactly; a fault that does not apply names
itself and the text; the plugin / CLI / report plumbing; and a fast pair of faults (`Fault.fast`)
run for real, crossed - two strict runs over both faults' catching cases, each injecting one
fault (the second through `harness check`), so each run is also the other fault's clean control.

`pytest -m faults tests/test_faults.py`: the whole catalogue the same way (`harness faults`
writes the same runs as docs/faults.md; ~4 minutes on 2 shared cores). A fault whose catching
suite is not in the checkout yet (suites/test_sampling.py) is skipped with that reason.
"""

from __future__ import annotations

import fnmatch
import json
import time
from pathlib import Path

import pytest
import torch

from harness import faults
from harness.cli import faults as fault_runs
from harness.faults import FAULTS, Catch, FaultError, patches
from harness.faults.patches import SourceEdit
from harness.report import render_html
from harness.schema import Outcome, Results, Status
from harness.store.env import env_key, fingerprint
from harness.store.records import GoldenStore

ROOT = Path(__file__).resolve().parents[1]
STORE = GoldenStore(ROOT / "golden" / "records")
AREAS = {"verifier", "drafting", "caches", "attention", "backends", "checkpoints", "contracts", "sampling", "stopping",
         "streaming", "latency", "long context", "batching", "compile", "quantization", "tokenizers", "chat", "beam",
         "kernels"}


def env() -> str:
    return env_key(fingerprint(dtype="fp32", attn_implementation="sdpa", device="cpu"))


# ----------------------------------------------------------------------------------------------
# the catalogue


def test_catalogue_has_at_least_20_named_faults_over_every_area():
    names = [f.name for f in FAULTS]
    assert len(names) >= 20
    assert len(set(names)) == len(names)
    assert {f.area for f in FAULTS} == AREAS
    assert all(f.breaks and f.catch.field for f in FAULTS)


def test_every_catch_names_a_suite_and_recorded_cases():
    """The suite exists (or is the one awaited), and the case glob matches this env's records."""
    records = {(p.parent.name, p.stem) for p in STORE.record_paths(env())}
    for f in FAULTS:
        assert fault_runs.suite_file(ROOT, f.catch.suite).exists(), f.name
        assert any(s == f.catch.suite and fnmatch.fnmatchcase(c, f.catch.case) for s, c in records), f.name


def _targets(fault: faults.Fault) -> list[object]:
    """What the fault's patches replace, as they are now (identity of each patched object)."""
    out: list[object] = []
    for patch in fault.patches:
        if isinstance(patch, (patches.SourceEdit, patches.Wrap)):
            _, owner, name = patches._resolve(patch.module, patch.qualname)
            out.append(vars(owner)[name] if name in vars(owner) else getattr(owner, name))
        elif isinstance(patch, patches.SetItems):
            _, owner, name = patches._resolve(patch.module, patch.qualname)
            target = getattr(owner, name)
            out.append(tuple((k, vars(target).get(k)) for k, _ in patch.values))
        else:
            from transformers import PreTrainedModel

            out.append(vars(PreTrainedModel).get("__call__"))
    return out


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.name)
def test_fault_applies_and_is_undone_exactly(fault):
    before = _targets(fault)
    undo = fault.apply()
    try:
        during = _targets(fault)
        assert all(d is not b and d != b for d, b in zip(during, before, strict=True))
    finally:
        undo()
    after = _targets(fault)
    assert all(a is b or a == b for a, b in zip(after, before, strict=True))


def test_a_module_function_is_rebound_where_it_was_imported():
    from transformers import dynamic_module_utils
    from transformers.models.auto import configuration_auto

    original = dynamic_module_utils.resolve_trust_remote_code
    undo = faults.inject("trust-remote-code-default-on")
    try:
        assert configuration_auto.resolve_trust_remote_code is dynamic_module_utils.resolve_trust_remote_code
        assert configuration_auto.resolve_trust_remote_code is not original
    finally:
        undo()
    assert configuration_auto.resolve_trust_remote_code is original


def test_a_module_function_is_rebound_in_its_module_s_registries():
    """ROPE_INIT_FUNCTIONS holds the llama3 init by value: the edited function must be the one it hands out."""
    from transformers import modeling_rope_utils

    original = modeling_rope_utils.ROPE_INIT_FUNCTIONS["llama3"]
    undo = faults.inject("llama3-rope-returns-unscaled")
    try:
        assert modeling_rope_utils.ROPE_INIT_FUNCTIONS["llama3"] is modeling_rope_utils._compute_llama3_parameters
        assert modeling_rope_utils.ROPE_INIT_FUNCTIONS["llama3"] is not original
    finally:
        undo()
    assert modeling_rope_utils.ROPE_INIT_FUNCTIONS["llama3"] is original


def test_an_edit_that_does_not_match_the_installed_source_names_the_fault_and_the_text():
    edit = SourceEdit("transformers.generation.utils", "_speculative_sampling", (("no such line", "x"),))
    with pytest.raises(FaultError, match=r"fault 'demo': transformers.generation.utils._speculative_sampling.*"
                                         r"occurs 0 times.*'no such line'"):
        edit.apply("demo")


def test_unknown_fault_lists_the_known_ones():
    with pytest.raises(FaultError, match=r"--inject-fault nope: no such fault\. The catalogue's \d+ faults .*: ensemble-weight-one-minus, "):
        faults.get("nope")


@pytest.mark.parametrize("waits", [False, True], ids=["computes", "waits"])
def test_slow_forward_slows_generating_models_only(waits):
    """The latency faults: a generating model's call costs 1 + fraction of its own time - spinning
    (CPU time grows) or sleeping (only the wall clock grows); a model that does not generate (a
    base model, the calibration workload's side) is untouched."""
    from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel

    from harness.subjects.timing import busy_wait

    class Base(PreTrainedModel):
        config_class = PretrainedConfig

        def __init__(self):
            super().__init__(PretrainedConfig())

        def forward(self, x):
            busy_wait(0.02)
            return x

    class Generating(Base, GenerationMixin):
        pass

    def cost(module: torch.nn.Module) -> tuple[float, float]:
        # this thread's CPU time: the process's also counts what other threads do while the fault
        # sleeps (a busy CI runner's xdist and torch threads read as 8 ms of 'CPU' on a 20 ms call)
        wall, start = time.perf_counter(), time.thread_time()
        module(torch.ones(1))
        return time.perf_counter() - wall, time.thread_time() - start

    undo = patches.SlowForward(1.0, waits=waits).apply("demo")  # twice the call: 20 ms more, spun or slept
    try:
        (slowed, slowed_cpu), (_, plain_cpu) = cost(Generating()), cost(Base())
    finally:
        undo()
    # CPU time where the work is a spin (a busy test machine stretches wall times, not CPU times);
    # 1.5x is 10 ms from either outcome (1.0x: slept, 2.0x: spun)
    assert slowed >= 0.02 * 1.9 and (slowed_cpu < 0.02 * 1.5) is waits
    assert plain_cpu < 0.02 * 1.5
    assert cost(Generating())[1] < 0.02 * 1.5  # undone


def test_extra_allocation_grows_a_generating_model_s_memory_and_is_undone():
    from harness.subjects.hf import Zoo
    from harness.subjects.timing import peak_memory

    zoo = Zoo()
    model, ids = zoo.load("llama-target").model, zoo.prompt_ids("llama-target", "short-0")
    before = peak_memory(lambda: model(ids))
    undo = patches.ExtraAllocation(0.3).apply("demo")
    try:
        grown = peak_memory(lambda: model(ids))
    finally:
        undo()
    assert grown["allocated_bytes"] > 1.25 * before["allocated_bytes"] and grown["peak_bytes"] > before["peak_bytes"]
    assert peak_memory(lambda: model(ids)) == before


# ----------------------------------------------------------------------------------------------
# plumbing: the CLI flag, the report banner, the table


def test_harness_check_refuses_an_unknown_fault(capsys):
    from harness.cli import main

    assert main(["check", "--inject-fault", "nope"]) == 2
    assert "no such fault. The catalogue's" in capsys.readouterr().err


def test_harness_faults_refuses_an_unknown_name(capsys):
    from harness.cli import main

    assert main(["faults", "--only", "nope"]) == 2
    assert "--only nope: no such fault" in capsys.readouterr().err


def test_the_report_of_an_injected_run_names_the_fault_at_the_top():
    fault = faults.get("crop-leaves-stale-entry")
    outcome = Outcome("caches", "llama-target", "rollback", "exact", Status.REGRESSION, "held_after_crop[0]: 83 -> 84")
    html = render_html(Results(env={}, baseline_env=None, outcomes=[outcome],
                               meta={"injected_fault": faults.describe(fault)}))
    banner = html.index('id="injected-fault"')
    assert banner < html.index('id="verdict"') < html.index("<main")
    assert "Injected fault: crop-leaves-stale-entry" in html[banner:banner + 600]
    assert "Injected fault" not in render_html(Results(env={}, baseline_env=None, outcomes=[outcome], meta={}))


def test_caught_only_by_the_named_field_in_a_matching_case():
    catch = Catch("caches", "llama-*", "rollback")
    found = [{"suite": "caches", "case": "qwen2-hybrid", "field": "rollback", "detail": ""},
             {"suite": "caches", "case": "llama-target", "field": "rollback_vs_fresh", "detail": ""}]
    assert fault_runs.caught_by(catch, found) == []
    found.append({"suite": "caches", "case": "llama-target", "field": "rollback", "detail": "83 -> 84"})
    assert fault_runs.caught_by(catch, found) == [found[-1]]


def test_the_table_lists_every_fault_with_its_verdict_and_seconds():
    runs = [fault_runs.FaultRun(f.name, fault_runs.CAUGHT, 3.25,
                                [{"suite": f.catch.suite, "case": "c", "field": f.catch.field, "detail": "a -> b"}],
                                [{"suite": f.catch.suite, "case": "c", "field": f.catch.field, "detail": "a -> b"}], 1)
            for f in FAULTS]
    runs[0] = fault_runs.FaultRun(FAULTS[0].name, fault_runs.MISSED, 2.0)
    text = fault_runs.markdown(runs, fault_runs.FaultRun(None, fault_runs.CLEAN_OK, 9.0, cases=4), "env-x", "harness faults")
    assert f"**Detection: {len(FAULTS) - 1}/{len(FAULTS)}**" in text
    assert "no regression, 9 s" in text
    for f in FAULTS:
        assert f"| `{f.name}` | {f.area} |" in text
    assert "**MISSED**" in text and "| 3.2 |" in text


def _outcome(category: str, against: str = "baseline", **diff) -> dict:
    return {"suite": "s", "case": "c", "field": "f", "status": "regression", "category": category, "against": against,
            "diff": diff}


@pytest.mark.parametrize(("outcome", "alone"), [
    (_outcome("real-change", "reference"), True),  # computed in the run
    (_outcome("deviation", tv=0.1, tv_baseline=None), True),
    (_outcome("distribution-mismatch", test="g-test-fit"), True),
    (_outcome("distribution-mismatch", test="g-test-two-sample"), False),  # against the baseline's counts
    (_outcome("coverage-lost", positions=1, min_positions=16), True),
    (_outcome("coverage-lost", positions=16, positions_baseline=18, min_positions=16), False),
    (_outcome("feature-ignored", in_run=True), True),
    (_outcome("feature-ignored", ignored=["use_mtp"]), False),  # "accepted" -> "ignored" needs the old word
    (_outcome("real-change"), False), (_outcome("path-lost"), False),
], ids=["reference", "deviation", "fit", "two-sample", "coverage-in-run", "coverage-vs-baseline", "path-ignored",
        "probe-ignored", "exact", "path-lost"])
def test_an_empty_store_catch_is_derived_only_from_what_no_baseline_decided(outcome, alone):
    assert fault_runs.in_run(outcome) is alone
    assert ("in_run" in fault_runs.regressions({"outcomes": [outcome]})[0]) is alone


def test_the_empty_store_verdict_reuses_the_same_run_when_an_in_run_check_caught_it(monkeypatch):
    """No second run when a catching case's regression was decided in the run; otherwise one run on
    an empty store (not strict), caught by any field of a matching case."""
    fault = FAULTS[0]
    hit = {"suite": fault.catch.suite, "case": "x", "field": "any_field", "detail": "d"}
    calls = []

    def fake(root, store, globs, name, timeout=600, strict=True, dtype="fp32"):
        calls.append((store, strict))
        return [hit], 1, ""

    monkeypatch.setattr(fault_runs, "run_cases", fake)
    monkeypatch.setattr(fault_runs, "any_field", lambda f: Catch(f.catch.suite, "*", "*"))
    derived = fault_runs.FaultRun(fault.name, fault_runs.CAUGHT, 1.0, regressions=[{**hit, "in_run": "yes"}])
    assert fault_runs.on_empty_store(ROOT, derived, fault, []).empty_from == "same run" and calls == []
    ran = fault_runs.on_empty_store(ROOT, fault_runs.FaultRun(fault.name, fault_runs.CAUGHT, 1.0), fault, [])
    assert (ran.empty_store, ran.empty_from, ran.empty_by) == (fault_runs.CAUGHT, "empty-store run", [hit])
    assert len(calls) == 1 and calls[0][1] is False and calls[0][0] != STORE.root


def test_the_table_has_the_empty_store_column_and_names_what_only_a_baseline_sees():
    runs = [fault_runs.FaultRun(f.name, fault_runs.CAUGHT, 1.0,
                                [{"suite": f.catch.suite, "case": "c", "field": f.catch.field, "detail": "a -> b"}],
                                [{"suite": f.catch.suite, "case": "c", "field": f.catch.field, "detail": "a -> b"}], 1,
                                empty_store=fault_runs.CAUGHT, empty_from="same run",
                                empty_by=[{"suite": f.catch.suite, "case": "c", "field": "ref", "detail": ""}])
            for f in FAULTS]
    blind = [f for f in FAULTS if f.area in ("contracts", "latency")]
    for f in blind:
        runs[FAULTS.index(f)].empty_store, runs[FAULTS.index(f)].empty_by = fault_runs.MISSED, []
    clean = fault_runs.FaultRun(None, fault_runs.CLEAN_OK, 9.0, cases=4, empty_store=fault_runs.CLEAN_OK)
    text = fault_runs.markdown(runs, clean, "env-x", "harness faults")
    assert f"**Empty store** (a first run, no baseline record): {len(FAULTS) - len(blind)}/{len(FAULTS)} caught" in text
    assert "| empty store | s |" in text and "caught (same run): c `ref`" in text
    listed = text.split("Only a baseline can see")[1].split("Notes:")[0]
    assert all(f"`{f.name}` ({f.area})" in listed for f in blind)
    assert not any(f"`{f.name}` (" in listed for f in FAULTS if f not in blind)


def test_docs_faults_md_is_the_generated_table_of_this_catalogue():
    """docs/faults.md is `harness faults` output: every fault of the catalogue has its row, caught."""
    text = (ROOT / "docs" / "faults.md").read_text()
    data = json.loads((ROOT / "docs" / "faults.json").read_text())
    assert text.startswith("# Sensitivity: the fault catalogue")
    assert [r["fault"] for r in data["runs"]] == [f.name for f in FAULTS]
    for run in data["runs"]:
        fault = faults.get(run["fault"])
        assert run["status"] == fault_runs.CAUGHT, run["fault"]
        assert f"| `{fault.name}` |" in text
    assert data["clean"]["status"] == fault_runs.CLEAN_OK


def test_clean_reruns_draw_fresh_bias_seeds():
    """benchmarks/clean_runs.py reruns `harness check --seed-salt i`: every bias case draws from a
    seed no other run or case uses."""
    from harness import cases
    from harness.designs import one_step

    base = [one_step.case_seed(c) for c in cases.bias()]
    seeds = set(base)
    assert len(seeds) == len(base)
    for salt in range(1, 21):
        fresh = [one_step.case_seed(c, salt) for c in cases.bias()]
        assert not seeds & set(fresh) and len(set(fresh)) == len(fresh)
        seeds |= set(fresh)


# ----------------------------------------------------------------------------------------------
# the suites under injected faults, for real


def _check_runs(runs, clean) -> None:
    for run in runs:
        fault = faults.get(run.fault)
        assert run.status == fault_runs.CAUGHT, (
            f"{run.fault} not caught by {fault.catch}: {run.error or run.regressions[:5]}")
    assert clean.status == fault_runs.CLEAN_OK, clean.regressions[:5]
    assert clean.cases >= len({(f.catch.suite, f.catch.case) for f in FAULTS if f.name in {r.fault for r in runs}})


@pytest.mark.long
def test_the_fast_pair_is_caught_each_run_clean_on_the_other_faults_cases(tmp_path, capfd):
    """Two faults of the catalogue (`Fault.fast`), crossed: each is injected into a strict run of
    both faults' cases and must regress its own field, while the other fault's cases - run clean in
    the same session - raise nothing (each run is the other's clean control). The first run is
    `harness faults`' own (`fault_runs.run_cases`), the second goes end to end through the CLI,
    `harness check --strict --inject-fault NAME -- --harness-case ...`: exit 1, and the terminal
    summary, the HTML report and results.json name the fault."""
    from harness.cli import main

    first, second = [f for f in FAULTS if f.fast]
    assert first.catch.suite != second.catch.suite
    globs = [f"{f.catch.suite}:{f.catch.case}" for f in (first, second)]

    def clean_on(fault, found):
        return not [r for r in found if r["suite"] == fault.catch.suite and fnmatch.fnmatchcase(r["case"], fault.catch.case)]

    found, cases, error = fault_runs.run_cases(ROOT, STORE.root, globs, first.name)
    assert not error and cases >= 2
    assert fault_runs.caught_by(first.catch, found), f"{first.name} not caught: {found[:5]}"
    assert clean_on(second, found), found

    code = main(["check", "--root", str(ROOT), "--reports-dir", str(tmp_path), "--strict", "--inject-fault",
                 second.name, "--", *[arg for glob in globs for arg in ("--harness-case", glob)]])
    out = capfd.readouterr().out
    assert code == 1, out[-2000:]
    assert f"INJECTED FAULT: {second.name}" in out
    assert f"Injected fault: {second.name}" in next(tmp_path.rglob("index.html")).read_text()
    results = json.loads(next(tmp_path.rglob("results.json")).read_text())
    assert results["meta"]["injected_fault"]["name"] == second.name
    found = fault_runs.regressions(results)
    assert fault_runs.caught_by(second.catch, found), f"{second.name} not caught: {found[:5]}"
    assert clean_on(first, found), found


@pytest.mark.faults
def test_the_whole_catalogue_is_caught_and_its_clean_control_is_clean():
    runs, clean = fault_runs.run_all(ROOT, STORE.root, FAULTS, jobs=2)
    waiting = [r.fault for r in runs if r.status == fault_runs.NO_SUITE]
    _check_runs(runs, clean)
    if waiting:
        pytest.skip(f"caught every fault that has its suite; waiting for a suite: {', '.join(waiting)}")


def _committed() -> dict:
    """docs/faults.json as a full fp32 run writes it: every fault caught, on an empty store too."""
    hit = [{"suite": "s", "case": "c", "field": "ref", "detail": ""}]
    runs = [fault_runs.FaultRun(f.name, fault_runs.CAUGHT, 1.0, hit, hit, 1, empty_store=fault_runs.CAUGHT,
                                empty_by=hit, empty_from="same run") for f in FAULTS]
    clean = fault_runs.FaultRun(None, fault_runs.CLEAN_OK, 9.0, cases=4, empty_store=fault_runs.CLEAN_OK)
    return {"env_key": "env-x", "runs": [r.to_json() for r in runs], "clean": clean.to_json()}


def test_an_empty_store_run_in_bf16_runs_the_first_run_alone_in_that_dtype(monkeypatch):
    """--dtype bf16 --empty-only: no baseline run, one non-strict run on a scratch store with the
    models in bf16 (the pytest command carries --harness-dtype)."""
    fault, calls = FAULTS[0], []
    hit = {"suite": fault.catch.suite, "case": "c", "field": "x", "detail": "d"}

    def fake(root, store, globs, name, timeout=600, strict=True, dtype="fp32"):
        calls.append((store, strict, dtype))
        return [hit], 1, ""

    monkeypatch.setattr(fault_runs, "run_cases", fake)
    monkeypatch.setattr(fault_runs, "any_field", lambda f: Catch(f.catch.suite, "*", "*"))
    got = fault_runs.run(ROOT, STORE.root, fault, dtype="bf16", empty_only=True)
    assert (got.status, got.empty_store, got.empty_from) == ("", fault_runs.CAUGHT, "empty-store run")
    assert len(calls) == 1 and calls[0][1:] == (False, "bf16") and calls[0][0] != STORE.root
    cmd = fault_runs.command(ROOT, ["s:c"], Path("r.json"), STORE.root, None, False, "bf16")
    assert cmd[cmd.index("--harness-dtype") + 1] == "bf16"
    assert "--harness-dtype" not in fault_runs.command(ROOT, ["s:c"], Path("r.json"), STORE.root, None)


def test_a_bf16_column_merges_into_the_committed_results_and_the_table():
    """--merge: another dtype's empty-store verdicts join the committed fp32 entries as that dtype's
    column (the rest of each entry kept); the table shows the column and its summary line."""
    names = [FAULTS[0].name, FAULTS[1].name]
    bf16 = [fault_runs.FaultRun(names[0], "", empty_store=fault_runs.CAUGHT, empty_from="empty-store run",
                                empty_by=[{"suite": "s", "case": "c", "field": "f", "detail": ""}]),
            fault_runs.FaultRun(names[1], "", empty_store=fault_runs.MISSED)]
    clean = fault_runs.FaultRun(None, "", empty_store=fault_runs.CLEAN_OK)
    runs, merged_clean = fault_runs.merged(_committed(), bf16, clean, "bf16", empty_only=True)
    assert [r.fault for r in runs] == [f.name for f in FAULTS]
    assert runs[0].status == fault_runs.CAUGHT and runs[0].empty_by_dtype["bf16"]["empty_store"] == fault_runs.CAUGHT
    assert runs[1].empty_by_dtype["bf16"]["empty_store"] == fault_runs.MISSED and "bf16" not in runs[2].empty_by_dtype
    assert merged_clean.cases == 4 and merged_clean.empty_by_dtype["bf16"]["empty_store"] == fault_runs.CLEAN_OK
    text = fault_runs.markdown(runs, merged_clean, "env-x", "harness faults")
    assert "| empty store | empty store, bf16 | s |" in text
    assert f"(the same first run with the models in bf16; 2 faults run there): 1/2 caught, missed: `{names[1]}`" in text
    row = next(line for line in text.splitlines() if line.startswith(f"| `{FAULTS[2].name}` |"))
    assert "| not run |" in row
    again, _ = fault_runs.merged({"runs": [r.to_json() for r in runs], "clean": merged_clean.to_json()},
                                 [fault_runs.FaultRun(names[0], fault_runs.CAUGHT, 2.0, runs[0].caught_by)], clean)
    assert again[0].seconds == 2.0 and again[0].empty_by_dtype["bf16"]["empty_store"] == fault_runs.CAUGHT
    with pytest.raises(fault_runs.UsageError, match="no committed fp32 results"):
        fault_runs.merged(None, bf16, clean, "bf16", empty_only=True)


ALARM = {"suite": "text", "case": "tok-added.tokenizer", "field": "padding_as_specified", "detail": "d"}


def test_a_partial_runs_false_alarm_joins_the_committed_clean_control_and_never_vanishes():
    """A run over a narrower selection never replaces the whole selection's clean verdict, and its
    false alarm is kept beside it (fp32: the baseline run's and the empty store's)."""
    one = [fault_runs.FaultRun(FAULTS[0].name, fault_runs.CAUGHT, 1.0, [ALARM], [ALARM])]
    quiet = fault_runs.FaultRun(None, fault_runs.CLEAN_OK, 1.0, cases=1, empty_store=fault_runs.CLEAN_OK)
    _, kept = fault_runs.merged(_committed(), one, quiet)
    assert (kept.status, kept.cases, kept.empty_store) == (fault_runs.CLEAN_OK, 4, fault_runs.CLEAN_OK)
    alarmed = fault_runs.FaultRun(None, fault_runs.CLEAN_OK, 1.0, cases=1, empty_store=fault_runs.CLEAN_ALARM,
                                  empty_by=[ALARM])
    _, merged_clean = fault_runs.merged(_committed(), one, alarmed)
    assert (merged_clean.cases, merged_clean.empty_store, merged_clean.empty_by) == (4, fault_runs.CLEAN_ALARM, [ALARM])
    text = fault_runs.markdown(*fault_runs.merged(_committed(), one, alarmed), "env-x", "harness faults")
    assert "clean control there: FALSE ALARM (1 regressions)" in text


def test_a_partial_bf16_column_keeps_the_columns_alarm_and_a_whole_one_replaces_it():
    names = [f.name for f in FAULTS]
    caught = {"empty_store": fault_runs.CAUGHT}
    whole = [fault_runs.FaultRun(n, "", **caught) for n in names]
    alarmed = fault_runs.FaultRun(None, "", empty_store=fault_runs.CLEAN_ALARM, empty_by=[ALARM])
    quiet = fault_runs.FaultRun(None, "", empty_store=fault_runs.CLEAN_OK)
    runs, clean = fault_runs.merged(_committed(), whole, alarmed, "bf16", empty_only=True)
    assert clean.empty_by_dtype["bf16"]["empty_store"] == fault_runs.CLEAN_ALARM
    state = {"runs": [r.to_json() for r in runs], "clean": clean.to_json()}
    # one fault again, its clean control clean: the column's alarm stays
    _, partial = fault_runs.merged(json.loads(json.dumps(state)), whole[:1], quiet, "bf16", empty_only=True)
    assert partial.empty_by_dtype["bf16"]["empty_store"] == fault_runs.CLEAN_ALARM
    assert partial.empty_by_dtype["bf16"]["empty_by"] == [ALARM]
    # the whole column again, clean: the alarm is gone
    _, again = fault_runs.merged(json.loads(json.dumps(state)), whole, quiet, "bf16", empty_only=True)
    assert again.empty_by_dtype["bf16"]["empty_store"] == fault_runs.CLEAN_OK
