"""Measure the sampling suite's false-alarm rate by rerunning cases with fresh seeds.

    python benchmarks/sampling_false_alarms.py --runs 200 [--specs plain] [--out FILE]

Each rerun shifts every case to fresh seeds (`sampling.seed_of(spec, salt)`), draws the case's N at the level
a default `harness check` uses (alpha / m per test, one statistical field per case) and decides the
fit exactly as the comparer does (`stats.g_test`). Prints, over all reruns: the reruns with any
false alarm at the run's levels (the family-wise rate; the claim is <= alpha), and the fraction of
p-values below 0.01 / 0.05 / 0.10 (calibration of the test itself: ~0.01 / 0.05 / 0.10 expected).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from harness import cases
from harness.checking import stats
from harness.designs import sampling
from harness.plugin.selection import count_golden_tests
from harness.settings.config import load_config
from harness.subjects import hf_sampling
from harness.subjects.hf import Zoo

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--specs", default="plain", help="comma list of case-id substrings (default: plain cases)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    zoo = Zoo()
    chosen = [s for s in cases.sampling_grid(deep=False, mtp_models=()) if any(x in s.id for x in args.specs.split(","))]
    m = count_golden_tests(REPO / "suites", REPO)  # golden tests of a default run: alpha / m per test
    level = stats.per_test_alpha(load_config(REPO).alpha, m)  # the sampling case's one statistical field
    prepared = []
    for spec in chosen:
        prompt = sampling.context_ids(zoo, spec)
        ids = torch.tensor([prompt])
        model = zoo.load(spec.model).model
        path_args = zoo.path_args(spec.case())
        probe = hf_sampling.draw(model, ids, sampling.K, 1, spec.sampling, seed=1, **path_args)
        drafter = tuple(hf_sampling.chain_steps(probe.drafter_processors, len(prompt))) if spec.weight else None
        joint, _ = sampling.expected_joint(zoo, spec, probe.effective(), prompt, drafter)
        plan = sampling.design(joint, level, sampling.TV_DEFAULT)
        prepared.append((spec, model, ids, path_args, joint, plan))
    pvalues, alarms, start = [], 0, time.time()
    for r in range(args.runs):
        alarm = False
        for spec, model, ids, path_args, joint, plan in prepared:
            draws = hf_sampling.draw(model, ids, sampling.K, plan.n, spec.sampling, seed=sampling.seed_of(spec, r + 1), **path_args)
            counts, probs = joint.counts(draws.samples), joint.probabilities()
            p = stats.g_test([counts[k] for k in probs], list(probs.values()), alpha=level).p_value
            pvalues.append(p)
            alarm |= p < level
        alarms += alarm
        if (r + 1) % 20 == 0:
            print(f"{r + 1} runs, {alarms} with a false alarm, {time.time() - start:.0f} s", flush=True)
    below = {a: sum(p < a for p in pvalues) / len(pvalues) for a in (0.01, 0.05, 0.10)}
    result = {"runs": args.runs, "cases": [s.id for s in chosen], "n": [p[5].n for p in prepared], "level": level,
              "runs_with_false_alarm": alarms, "tests": len(pvalues),
              "fraction_p_below": below, "seconds": time.time() - start}
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
