"""Simulated verifier bugs: does the bias suite catch them, at the run's alpha?

Each simulated run executes the bias suite's own code path (harness/designs/one_step.py: `design`, `draw`,
`observe`) for every case of the suite, with transformers' verifier replaced by a reference-math
verifier (optionally buggy), and lets the checking core decide exactly as the plugin does: one
`Golden` per case (harness/plugin/golden.py, a `CaseCheck` against a clean baseline record with
the run's rules), Holm within the case, the run's per-test alpha = 0.01 / m of a default
`pytest suites` run. A simulated run *detects* the bug when any case ends with a regression
(that is what fails a real run). The bugs:

  correction_from_p  the correction token drawn from p instead of norm([p - q]+) (ensemble: [v - q]+)
  weight_ignored     the ensemble weight silently ignored (lossless verifier when w is set)
  weight_one_minus   the weight applied as 1 - w

The clean reference verifier gives the false-alarm rate. The baseline records are one clean run at
the suite's own seeds (what a correct environment's golden store holds). Every simulated run uses
fresh seeds (deterministic, so the test is reproducible).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from scipy import stats as sps

from harness.checking import stats
from harness.checking.core import Rules
from harness.designs import one_step
from harness.plugin.golden import Golden
from harness.schema import Category, Record, Status
from harness.settings.config import Thresholds
from harness.store.env import fingerprint
from harness.subjects.hf import Zoo

ALPHA = stats.per_test_alpha(one_step.DEFAULT_RUN_ALPHA, one_step.DEFAULT_RUN_TESTS)
BUGS = ("correction_from_p", "weight_ignored", "weight_one_minus")
REQUIRED_DETECTION = 0.95
FAST_RUNS, SLOW_RUNS = 4, 100  # simulated runs per bug
FAST_CLEAN_RUNS, SLOW_CLEAN_RUNS = 2, 20


class ReferenceVerifier:
    """transformers' one-step verifier contract, f(draft, q_logits, p_logits, w) -> (token, accepted),
    in the reference math (harness/engine/verify.py `_sample_verify`, float64), drawing from its own
    generator; `bug` names a simulated defect (None = correct)."""

    def __init__(self, bug: str | None, seed: int):
        if bug not in (None, *BUGS):
            raise ValueError(f"unknown bug {bug!r}")
        self.bug, self.rng = bug, np.random.default_rng(seed)
        self._last: tuple[Any, ...] | None = None

    def _tables(self, q_logits: torch.Tensor, p_logits: torch.Tensor, w: float | None) -> tuple[np.ndarray, np.ndarray]:
        p = torch.softmax(p_logits.double(), -1).numpy()
        q = torch.softmax(q_logits.double(), -1).numpy()
        if self.bug == "weight_ignored":
            w = None
        elif self.bug == "weight_one_minus" and w is not None:
            w = 1.0 - w
        v = p if w is None else w * p + (1.0 - w) * q
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(q > 0, v / q, 1.0)  # accept x iff r <= v(x)/q(x)
        residual = p if self.bug == "correction_from_p" else np.clip(v - q, 0.0, None)
        return ratio, np.cumsum(residual)

    def __call__(self, draft: int, q_logits: torch.Tensor, p_logits: torch.Tensor, w: float | None) -> tuple[int, int]:
        last = self._last
        if last is None or last[0] is not q_logits or last[1] is not p_logits or last[2] != w:
            self._last = last = (q_logits, p_logits, w, *self._tables(q_logits, p_logits, w))
        ratio, cdf = last[3], last[4]
        if self.rng.random() <= ratio[draft]:
            return draft, 1
        return int(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right")), 0


class _Store:
    def __init__(self, records: dict[str, Record]):
        self.records = records

    def read(self, env_key: str, suite: str, case: str) -> Record | None:
        return self.records.get(case)


class _Session:
    """What `Golden` needs of the plugin's session: the run's rules and the baseline records."""

    def __init__(self, rules: Rules, records: dict[str, Record]):
        self._rules, self.store = rules, _Store(records)
        self.baseline_key = "controls"
        self.run_env = SimpleNamespace(key="controls", fingerprint=rules.env)
        self.strict = self.force_regen = False
        self.outcomes: list[Any] = []
        self.writes: list[Any] = []

    def rules(self) -> Rules:
        return self._rules


@pytest.fixture(scope="module")
def setup():
    zoo = Zoo()
    thresholds = Thresholds()
    cases = []
    for w, ctx in one_step.CASES:
        p, q = one_step.step_inputs(zoo, one_step.CONTEXTS[ctx])
        cases.append((w, ctx, p, q, one_step.design(p, q, w, ALPHA, thresholds.tv_max)))
    rules = Rules(alpha=ALPHA, thresholds=thresholds, env=fingerprint())
    baseline = _Session(rules, {})
    records = {}
    for w, ctx, p, q, plan in cases:
        cid = one_step.case_id(w, ctx)
        golden = Golden(baseline, "bias", cid, cid)
        one_step.observe(golden, ReferenceVerifier(None, one_step.case_seed(w, ctx)), p, q, w, plan,
                         one_step.case_seed(w, ctx))
        records[cid] = Record("bias", cid, rules.env, dict(golden.core.observed))
        assert not golden.finish(write=False)
    return SimpleNamespace(cases=cases, rules=rules, records=records)


def simulated_run(setup, bug: str | None, run: int, stop_at_detection: bool) -> dict[str, Any]:
    """One simulated run of the whole bias suite with fresh seeds; what the checking core said."""
    session = _Session(setup.rules, setup.records)
    failed: list[str] = []
    # the verdict (any case fails) does not depend on the order; with `stop_at_detection` the
    # cases a weight bug can affect go first, so a detected run stops early
    order = sorted(setup.cases, key=lambda c: c[0] is None) if bug in BUGS[1:] else setup.cases
    for w, ctx, p, q, plan in order:
        cid = one_step.case_id(w, ctx)
        seed = 1_000_003 * (run + 1) + 7919 * BUGS.index(bug) if bug else 1_000_003 * (run + 1)
        golden = Golden(session, "bias", cid, cid)
        one_step.observe(golden, ReferenceVerifier(bug, seed + one_step.case_seed(w, ctx)), p, q, w, plan,
                         seed + one_step.case_seed(w, ctx))
        if golden.finish(write=False):
            failed.append(cid)
            if stop_at_detection:
                break
    underpowered = sorted({o.case for o in session.outcomes if o.category is Category.UNDERPOWERED})
    assert all(o.status is not Status.REGRESSION or o.case in failed for o in session.outcomes)
    return {"failed": failed, "underpowered": underpowered}


def detection_rate(setup, bug: str, runs: int) -> tuple[float, list[dict[str, Any]]]:
    results = [simulated_run(setup, bug, r, stop_at_detection=True) for r in range(runs)]
    return sum(bool(r["failed"]) for r in results) / runs, results


def _report(name: str, data: dict[str, Any]) -> None:
    print(f"\n{name}: {json.dumps(data)}")
    out = os.environ.get("BIAS_CONTROLS_OUT")
    if out:
        with Path(out).open("a") as fh:
            fh.write(json.dumps({"name": name, **data}) + "\n")


def _clopper_pearson_low(k: int, n: int, confidence: float = 0.95) -> float:
    return float(sps.binomtest(k, n).proportion_ci(confidence).low)


def _false_alarm_check(setup, runs: int) -> None:
    results = [simulated_run(setup, None, 10_000 + r, stop_at_detection=False) for r in range(runs)]
    alarms = sum(bool(r["failed"]) for r in results)
    underpowered = sum(len(r["underpowered"]) for r in results)
    # Bonferroni: a clean run of the 9 bias cases alarms with probability <= 9 * alpha / m
    per_run = len(setup.cases) * ALPHA
    allowed = int(sps.binom.ppf(0.999, runs, per_run))
    _report("clean", {"runs": runs, "false_alarms": alarms, "per_run_bound": per_run, "allowed": allowed,
                      "underpowered_case_checks": underpowered, "case_checks": runs * len(setup.cases)})
    assert alarms <= allowed, f"{alarms} of {runs} clean runs alarmed; bound {per_run:.2g} per run"
    # the design keeps a correct verifier's check out of `underpowered` with probability >= 0.99 per case
    assert underpowered <= max(1, int(sps.binom.ppf(0.999, runs * len(setup.cases), 1 - one_step.NULL_QUANTILE)))


@pytest.mark.parametrize("bug", BUGS)
def test_bug_detected_fast(setup, bug):
    rate, results = detection_rate(setup, bug, FAST_RUNS)
    _report(bug, {"runs": FAST_RUNS, "detection_rate": rate, "first_failing_cases": [r["failed"][:1] for r in results]})
    assert rate == 1.0


def test_clean_verifier_passes_fast(setup):
    _false_alarm_check(setup, FAST_CLEAN_RUNS)


@pytest.mark.slow
@pytest.mark.parametrize("bug", BUGS)
def test_bug_detection_rate(setup, bug):
    rate, results = detection_rate(setup, bug, SLOW_RUNS)
    detected = sum(bool(r["failed"]) for r in results)
    _report(bug, {"runs": SLOW_RUNS, "detection_rate": rate, "cp95_low": _clopper_pearson_low(detected, SLOW_RUNS)})
    assert rate >= REQUIRED_DETECTION


@pytest.mark.slow
def test_false_alarm_rate(setup):
    _false_alarm_check(setup, SLOW_CLEAN_RUNS)
