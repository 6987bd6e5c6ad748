"""Sampling at generation level: does `generate(do_sample=True)` on each path, with each sampling
setting, emit the distribution it should?

One test, parametrized by the case table (harness/designs/sampling.py `specs`): every path that samples
(plain, assisted, prompt lookup, MTP, ensemble weight w) x sampling settings (the model's
defaults, temperature, top-k, top-p, min-p, repetition penalty, a combination). Per case,
N draws of the first K = 2 tokens after one context, distinct seeds, and (harness/designs/sampling.py
`observe`):
  joint_error     exact         the exception generate() raised, or None
  joint_processors exact        the logits processors generate() applied, its defaults included
  joint           distribution  K-tuple counts vs the exact joint from the reference engine with
                                the same processors: the target's chain on lossless paths, the
                                schedule-derived ensemble joint for w (G-test of fit at the
                                test's alpha; N sized for power 0.8 at the stated TV); the record
                                field, and joint_vs_exact decided in every run
  joint_bias_vs_target exact         exact TV(path, target) beside the measured one (information)
A path the installed version does not support records its capability and skips with the reason.
Your own checkpoints ([tool.harness.models.*], --model) get plain sampling at top-k 8 and a
combination, and each other path they support at top-k 8 (`sampling.user_specs`).
The default grid costs ~40 s on one core; HARNESS_DEEP=1 (`harness check --deep`) runs every path
x setting at a smaller detectable TV (see the README for its time).
"""

from __future__ import annotations

import pytest

from harness.designs import sampling
from harness.schema import Case

FEATURE = {"mtp": "use_mtp", "ensemble": "assistant_ensemble_weight", "prompt_lookup": "prompt_lookup",
           "assisted": "assistant_model"}


@pytest.mark.cases(table=sampling.cases)
def test_sampled_distribution(case: Case, golden, zoo, require_feature):
    spec = sampling.Spec.of(case)
    if spec.path in FEATURE:
        require_feature(FEATURE[spec.path])
    sampling.observe(golden, zoo, spec)
