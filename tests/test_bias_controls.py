"""Simulated verifier bugs: does the bias suite catch them, at the run's alpha?

Each simulated run executes the bias suite's own code path (harness/designs/one_step.py: `design`, `draw`,
`observe`) for every case of the suite, with transformers' verifier replaced by a reference-math
verifier (optionally buggy), and lets the checking core decide exactly as the plugin does: one
`CaseCheck` per case (harness/checking/core.py, against a clean baseline record with
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

from harness import cases
from harness.checking.core import CaseCheck, Rules
from harness.designs import one_step
from harness.schema import Category, Record, Status
from harness.settings.config import Thresholds
from harness.store.env import fingerprint
from harness.subjects.hf import Zoo
from run_size import default_run_alpha

ALPHA = default_run_alpha()  # alpha / m of a default run, m counted by collecting the suites
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


@pytest.fixture(scope="module")
def setup():
    zoo = Zoo()
    thresholds = Thresholds()
    planned = []
    for case in cases.bias():
        p, q = one_step.step_inputs(zoo, cases.CONTEXTS[case.param("ctx")])
        planned.append((case, p, q, one_step.design(p, q, case.weight, ALPHA, thresholds.tv_max)))
    rules = Rules(alpha=ALPHA, thresholds=thresholds, env=fingerprint())
    records = {}
    for case, p, q, plan in planned:
        seed = one_step.case_seed(case)
        check = CaseCheck("bias", case.id, rules)
        check.check_all(one_step.observe(ReferenceVerifier(None, seed), p, q, case.weight, plan, seed))
        assert not [o for o in check.outcomes() if o.status is Status.REGRESSION]
        records[case.id] = Record("bias", case.id, rules.env, dict(check.observed))
    return SimpleNamespace(cases=planned, rules=rules, records=records)


def simulated_run(setup, bug: str | None, run: int, stop_at_detection: bool) -> dict[str, Any]:
    """One simulated run of the whole bias suite with fresh seeds; what the checking core said."""
    failed: list[str] = []
    outcomes: list[Any] = []
    # the verdict (any case fails) does not depend on the order; with `stop_at_detection` the
    # cases a weight bug can affect go first, so a detected run stops early
    order = sorted(setup.cases, key=lambda c: c[0].weight is None) if bug in BUGS[1:] else setup.cases
    for case, p, q, plan in order:
        seed = (1_000_003 * (run + 1) + 7919 * BUGS.index(bug) if bug else 1_000_003 * (run + 1)) + one_step.case_seed(case)
        check = CaseCheck("bias", case.id, setup.rules, baseline=setup.records[case.id])
        check.check_all(one_step.observe(ReferenceVerifier(bug, seed), p, q, case.weight, plan, seed))
        decided = check.outcomes()
        outcomes += decided
        if any(o.status is Status.REGRESSION for o in decided):
            failed.append(case.id)
            if stop_at_detection:
                break
    underpowered = sorted({o.case for o in outcomes if o.category is Category.NOT_CHECKED})
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
