"""The latency machinery (harness/designs/latency.py, harness/subjects/hf_latency.py) and a reduced
version of the suite's power check: a 15 % slowdown injected into the model's forward is a
regression of the steady-state decode field at a default run's per-test alpha, and a clean rerun
is not. (The full measurement, 20 + 20 runs of the whole suite: benchmarks/latency_power.py.)"""

from __future__ import annotations

import pytest
import torch

from harness.checking.compare_stats import compare_latency
from harness.checking.policy import Policy
from harness.designs import latency
from harness.schema import Field, Status
from harness.settings.config import Thresholds
from harness.store.env import fingerprint
from harness.subjects import hf_latency, timing
from harness.subjects.hf import Zoo
from run_size import default_run_alpha

ALPHA = default_run_alpha()  # alpha / m of a default run, m counted by collecting the suites


def test_theoretical_speedup_is_leviathan():
    # a = 0: one token per step, paying g drafts; a = 1: g + 1 tokens per step
    assert timing.theoretical_speedup(0.0, 4, 0.5) == pytest.approx(1 / 3)
    assert timing.theoretical_speedup(1.0, 4, 0.0) == 5.0
    assert timing.theoretical_speedup(0.8, 4, 0.1) == pytest.approx((1 - 0.8**5) / 0.2 / 1.4)


def test_interleaved_alternates_and_keeps_gc_state():
    order: list[str] = []
    t = latency.interleaved(lambda: order.append("s"), lambda: order.append("c"), 4, warmup=1)
    assert len(t.samples) == len(t.calibration) == 4
    assert order == ["c", "s", "c", "s", "s", "c", "c", "s", "s", "c"]
    assert t.value() == {"samples": t.samples, "calibration": t.calibration}


def test_deep_mode_triples_samples():
    assert latency.scaled(10) == 10
    assert latency.scaled(10, deep=True) == 30


@pytest.fixture(scope="module")
def llama():
    torch.set_num_threads(1)
    zoo = Zoo()
    return zoo, zoo.load("llama-target").model, zoo.prompt_ids("llama-target", "short-0")


def _decode(zoo, model, ids) -> Field:
    t = latency.interleaved(hf_latency.decode_steps(model), hf_latency.calibration(zoo), 30, inner=3, cal_inner=3,
                            setup=hf_latency.decode_setup(model, ids, "dynamic"))
    return Field("latency", t.value())


class _ClockedModule(torch.nn.Module):
    """A forward that costs exactly `cost` on a fake clock."""

    def __init__(self, clock: dict[str, float], cost: float):
        super().__init__()
        self.clock, self.cost = clock, cost

    def forward(self, x):
        self.clock["t"] += self.cost
        return x


def test_slowed_busy_waits_the_fraction_of_each_forward_and_is_removed(monkeypatch):
    # on a fake clock (each read advances it by 1e-4), so the check is exact, not a timing race
    clock = {"t": 0.0}

    def read() -> float:
        clock["t"] += 1e-4
        return clock["t"]

    monkeypatch.setattr(timing, "timer", read)
    module = _ClockedModule(clock, cost=1.0)
    for fraction in (0.15, 0.5):
        with hf_latency.slowed(module, fraction):
            start = clock["t"]
            module(torch.zeros(1))
            spent = clock["t"] - start
        assert spent == pytest.approx(1.0 + fraction, abs=1e-3)  # the forward, then fraction of it busy
        assert not module._forward_hooks and not module._forward_pre_hooks
    start = clock["t"]
    module(torch.zeros(1))
    assert clock["t"] - start == pytest.approx(1.0)  # removed: no extra work after the block


def test_a_slower_forward_is_a_regression_and_a_rerun_is_not(llama):
    """The mechanism end to end, at a slowdown it detects with near certainty (50%): a unit test
    must not be a coin flip. The 15% figure (20/20 runs) and the false-alarm rate under load (0/20)
    are measured by benchmarks/latency_power.py, as the README states."""
    zoo, model, ids = llama
    env = fingerprint()
    policy = Policy(alpha=ALPHA, thresholds=Thresholds(), observed_env=env, baseline_env=env)
    baseline = _decode(zoo, model, ids)
    clean = compare_latency("decode", _decode(zoo, model, ids), baseline, policy)
    with hf_latency.slowed(model, 0.5):
        slowed = compare_latency("decode", _decode(zoo, model, ids), baseline, policy)
    assert clean.status is Status.PASS, clean.detail
    assert slowed.status is Status.REGRESSION and slowed.category == "slowdown", slowed.detail
