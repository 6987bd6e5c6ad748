"""The paired A/B latency mode (issue 61): Yuen's trimmed-mean test on ABBA blocks holds its level
and has its stated power (synthetic blocks), the ABBA schedule cancels a host that drifts (a fake
worker pair sharing one fake clock), and a field is decided by the tolerance rule. No timing here:
the measured false alarms and power on this host are benchmarks/paired_power.py's."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from harness.checking import stats
from harness.checking.compare_stats import compare_paired
from harness.checking.policy import Policy
from harness.designs import paired
from harness.schema import Status

CHECK_LEVEL = 1e-3  # a simulated rate is rejected as above alpha only beyond this binomial tail


def test_the_trimmed_mean_test_holds_its_level_under_heavy_tails_and_outliers():
    """1000 A/A runs of 40 blocks, d_k ~ t(3) x 0.02 with 5 % of blocks hit by a descheduling spike
    (+0.3): called slower at most alpha = 0.02 of the time, faster likewise (alpha per direction)."""
    rng = np.random.default_rng(61)
    runs, alpha = 1000, 0.02
    slower = faster = 0
    for _ in range(runs):
        d = 0.02 * rng.standard_t(3, 40)
        d = d + np.where(rng.random(40) < 0.05, 0.3 * rng.choice([-1, 1], 40), 0.0)
        t = stats.paired_slowdown_test(d, alpha)
        slower += t.p_slower < alpha
        faster += t.p_faster < alpha
    for hits in (slower, faster):
        assert sps.binom.sf(hits - 1, runs, alpha) >= CHECK_LEVEL, (hits, runs, alpha)


def test_the_stated_detectable_slowdown_is_detected_at_about_power_0_8():
    """Normal blocks (sd 0.03, 60 blocks): a slowdown of the test's stated `detectable` figure (its
    median over 200 A/A runs: one run's figure moves with its SE estimate) is called slower in about
    DESIGN_POWER of 1000 runs."""
    rng = np.random.default_rng(7)
    alpha = 0.01 / 32
    stated = float(np.median([stats.paired_slowdown_test(0.03 * rng.standard_normal(60), alpha).detectable
                              for _ in range(200)]))
    hits = sum(stats.paired_slowdown_test(math.log1p(stated) + 0.03 * rng.standard_normal(60), alpha).p_slower < alpha
               for _ in range(1000))
    assert 0.7 < hits / 1000 < 0.9, (hits, stated)


def test_too_few_blocks_are_refused():
    with pytest.raises(ValueError):
        stats.paired_slowdown_test([0.0, 0.1, 0.2, 0.3], 0.01)


class Host:
    """A fake machine whose speed drifts: every call costs base x (1 + slow) x speed(t), t the number
    of calls made on it so far - both workers share it, as two processes share a host."""

    def __init__(self, drift: float, noise: float = 0.0, seed: int = 0) -> None:
        self.calls, self.drift, self.noise = 0, drift, noise
        self.rng = np.random.default_rng(seed)
        self.order: list[str] = []

    def cost(self, who: str, base: float, slow: float) -> float:
        self.calls += 1
        self.order.append(who)
        speed = 1 + self.drift * self.calls + 0.3 * math.sin(self.calls / 7)  # a slow ramp and a wave
        return base * (1 + slow) * speed * math.exp(self.noise * self.rng.standard_normal())


class FakeWorker:
    """A worker answering the driver's protocol from `Host` (no model, no process)."""

    def __init__(self, host: Host, who: str, base: float = 1e-3, slow: float = 0.0, fails: str = "",
                 waits: float = 0.0) -> None:
        self.host, self.who, self.base, self.slow, self.fails, self.waits = host, who, base, slow, fails, waits

    def ask(self, msg: dict) -> dict:
        if msg["op"] == "prepare":
            return {"error": {"type": "NotSupported", "message": self.fails}} if self.fails else {"ok": True}
        if msg["op"] == "time":
            cpu = self.host.cost(self.who, self.base, self.slow + msg.get("slow", 0.0))
            return {"wall": cpu * (1 + self.waits), "cpu": cpu}
        return {"peak_bytes": 10, "allocated_bytes": 20}


FIELD = paired.FIELDS[0]


def test_abba_blocks_alternate_and_cancel_a_drifting_host():
    """The host slows 0.5 % per call and waves by +-30 %: a drift that dwarfs a 5 % change. ABBA
    blocks (n o o n, then o n n o) cancel it: an A/A pair reads d_k ~ 0, a 5 % slower new side
    reads x1.05 - where unpaired medians would read the drift."""
    host = Host(drift=0.005)
    got = paired.pair(FakeWorker(host, "new"), FakeWorker(host, "old"), FIELD, budget=0, blocks=40)
    assert host.order[:8] == ["new", "old", "old", "new", "old", "new", "new", "old"]
    assert len(got.blocks) == 40 and len(got.new) == len(got.old) == 80
    assert abs(np.mean(got.blocks)) < 0.01
    host = Host(drift=0.005)
    slower = paired.pair(FakeWorker(host, "new", slow=0.05), FakeWorker(host, "old"), FIELD, budget=0, blocks=40)
    assert np.mean(slower.blocks) == pytest.approx(math.log(1.05), abs=0.01)


@pytest.mark.parametrize(("slow", "status", "category"), [
    (0.0, Status.PASS, ""),
    (0.05, Status.REGRESSION, "slowdown"),
    (0.10, Status.REGRESSION, "slowdown"),
    (-0.10, Status.CHANGED, "speedup"),
], ids=["aa", "slower-5", "slower-10", "faster-10"])
def test_a_paired_field_is_decided_by_the_tolerance_rule(slow, status, category):
    """A drifting, noisy host (1 % per call): 5 % and 10 % slowdowns are regressions, a speed-up is
    changed (information), an A/A pair passes - stating a detectable slowdown under the tolerance."""
    host = Host(drift=0.002, noise=0.01, seed=3)
    got = paired.pair(FakeWorker(host, "new", slow=slow), FakeWorker(host, "old"), FIELD, budget=0, blocks=60)
    o = compare_paired(FIELD.name, {"wall": got.new, "cpu": got.new_cpu},
                       {"wall": got.old, "cpu": got.old_cpu}, Policy(alpha=0.01 / 16))
    assert (o.status, o.category) == (status, category), o.detail
    assert o.diff["detectable_slowdown"] < 0.05 and o.diff["alpha"] == pytest.approx(0.01 / 64)


def test_a_slowdown_on_the_wall_clock_alone_is_a_regression_that_waits():
    """A release that waits (the wall time grows by 10 %, the CPU time does not) is caught by the wall
    clock's test and said to wait."""
    host = Host(drift=0.002, noise=0.01, seed=5)
    got = paired.pair(FakeWorker(host, "new", waits=0.10), FakeWorker(host, "old"), FIELD, budget=0, blocks=60)
    o = compare_paired(FIELD.name, {"wall": got.new, "cpu": got.new_cpu}, {"wall": got.old, "cpu": got.old_cpu},
                       Policy(alpha=0.01 / 16))
    assert (o.status, o.category, o.diff["clock"]) == (Status.REGRESSION, "slowdown", "wall"), o.detail
    assert "the process waits" in o.detail


def test_a_field_that_cannot_see_the_tolerance_is_not_checked_and_one_side_failing_is_said():
    host = Host(drift=0.0, noise=0.3, seed=4)
    got = paired.pair(FakeWorker(host, "new"), FakeWorker(host, "old"), FIELD, budget=0, blocks=16)
    o = compare_paired(FIELD.name, {"wall": got.new, "cpu": got.new_cpu},
                       {"wall": got.old, "cpu": got.old_cpu}, Policy(alpha=0.01 / 16))
    assert (o.status, o.category) == (Status.SKIPPED, "not-checked") and "it detects only" in o.detail
    failed = paired.pair(FakeWorker(host, "new"), FakeWorker(host, "old", fails="no MTP"), FIELD, budget=0)
    assert failed.error == "old: NotSupported: no MTP" and not failed.blocks


def test_the_block_count_is_fixed_by_the_budget_before_any_block():
    assert paired.blocks_for(0.01, 4.0) == 100
    assert paired.blocks_for(10.0, 4.0) == paired.MIN_BLOCKS
    assert paired.blocks_for(1e-6, 4.0) == paired.MAX_BLOCKS


def test_the_injected_slowdown_computes_in_proportion_to_the_call():
    """`paired.slowed`: a CPU-bound spin (the thread's CPU clock advances) of the fraction x the call's wall time."""
    import time

    def call() -> None:
        until = time.thread_time() + 0.02
        while time.thread_time() < until:
            pass

    start = time.thread_time()
    paired.slowed(call, 0.5)()
    assert time.thread_time() - start >= 0.025


def test_check_against_something_that_is_no_interpreter_is_a_usage_error(capsys, tmp_path):
    from pathlib import Path

    from harness.cli import main

    root = Path(__file__).resolve().parents[1]
    assert main(["check", "--root", str(root), "--against", str(tmp_path / "no-python")]) == 2
    assert "not an interpreter" in capsys.readouterr().err
    assert main(["check", "--root", str(root), "--against", "python3", "--pair-fields", "no-such-field"]) == 2
    assert "no paired field matches" in capsys.readouterr().err


def test_a_paired_run_writes_the_report_a_run_writes(tmp_path):
    """paired.json beside results.json, index.html, junit.xml and summary.md of the same outcomes: a
    5 % slower new side is the report's regression, its JUnit failure and its summary's finding."""
    import json as _json

    from harness.cli.paired import run_fields, write_paired
    from harness.settings.config import load_config

    host = Host(drift=0.002)
    project = type("P", (), {"config": load_config(Path(__file__).resolve().parents[1])})()
    outcomes, records = run_fields(FakeWorker(host, "new", slow=0.08), FakeWorker(host, "old"), (FIELD,), 0.0,
                                   0.01, project)
    hello = {"new": {"transformers": "5.24.0", "torch": "2.13.0"}, "old": {"transformers": "5.14.0", "torch": "2.13.0"}}
    run = {"against": "/venvs/old/bin/python", "alpha_field": 0.01, "alpha": 0.01, "cores": [0], "threads": 1,
           "seconds": 0.0, "end": "load 0 0 0"}
    path, index = write_paired(tmp_path, hello, run, outcomes, records)
    assert _json.loads(path.read_text())["outcomes"] == [o.to_json() for o in outcomes]
    results = _json.loads((tmp_path / "results.json").read_text())
    assert [o["status"] for o in results["outcomes"]] == [o.status.value for o in outcomes]
    decided = next(o for o in outcomes if o.field == FIELD.name)
    assert decided.status is Status.REGRESSION
    assert "<failure" in (tmp_path / "junit.xml").read_text()
    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("# tf5.24.0-torch2.13.0 vs baseline tf5.14.0-torch2.13.0 (paired")
    assert "Verdict: **regression**" in summary and index.is_file()


def test_a_user_model_adds_its_own_fields_and_reaches_the_worker_as_resolved(tmp_path):
    """--model PATH (or [tool.harness.models]) pairs the model's prefill, decode and generate() per path
    but MTP; the worker gets it as JSON and resolves it again in its own env."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from harness.settings.models import from_flags, resolve
    from user_checkpoints import qwen3

    model = resolve(from_flags(str(qwen3(tmp_path / "mine", layers=1)), None))
    keys = [f.key for f in paired.select(["mine"], [model])]
    assert keys[:2] == ["mine.prefill/prefill_dynamic", "mine.decode/decode_dynamic"]
    assert keys[2:] == [f"mine.generate/generate_{p}" for p in ("plain", *(p for p in model.paths
                                                                            if p not in ("plain", "mtp")))]
    assert set(paired.select([], [model])) >= set(paired.FIELDS)
    again = paired.user_model(paired.user_spec(model))
    assert (again.name, again.path, again.paths, again.prompts) == (model.name, model.path, model.paths, model.prompts)
