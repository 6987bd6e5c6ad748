"""The sampling suite's design: which (path x setting) cases run, how many draws each needs, and
the fields a case records. The statistics live in the comparers (harness/checking/compare_stats.py).

A case draws the first K = 2 tokens of `generate(do_sample=True, max_new_tokens=K)` N times
with distinct seeds (harness/subjects/hf_sampling.py) and compares the counts of the K-tuples with
their exact joint probabilities (harness/engine/joint.py) under the settings the installed
version really applied (its defaults included):

- plain, assisted, prompt lookup, MTP: the target's processed chain (lossless);
- ensemble weight w: the joint derived from the draft schedule (`joint.speculative_joint`), with
  the drafter's distribution processed by the same settings.

Sample size (`design`): at the test's level (the run's per-test alpha / STAT_CHECKS), N is the smallest multiple
of 100 for which the G-test over the lumped bins has power >= POWER against every distribution at
TV >= `tv` from the exact joint (`stats.samples_needed`: noncentrality >= 4 N TV^2, a bound that
holds for any alternative). Tuples with probability < MIN_MASS are lumped into one bin. The
record keeps alpha, N, power and the detectable TV beside the counts.

Cost: a speculative path is one generate() call per draw (~6-10 ms here), plain sampling draws
512 per call; the default grid keeps the speculative cases few, a deep run (`--harness-deep`,
`harness check --deep`) runs every path x setting at a smaller detectable TV. The case table is
harness/cases.py `sampling`.
"""

from __future__ import annotations

import zlib
from typing import Any

import torch

from harness.cases import SAMPLED_TOKENS as K
from harness.cases import SamplingSpec
from harness.checking import stats
from harness.engine import joint as joints
from harness.engine.joint import Joint, tv_by_bin
from harness.engine.processors import Sampling
from harness.schema import Case, Observation
from harness.settings.run import RunSettings

TV_DEFAULT = 0.2  # detectable TV of a default run (N 300-400: the everyday command stays under 2 min)
TV_DEEP = 0.08  # ... of a deep run
MIN_MASS = 0.005  # tuples below this probability form one bin
LOW_PRECISION = ("bf16", "fp16")
PRECISION_TV = 0.02  # low precision: at most this much mass may sit within rounding of a filter's cut
# logit margin a dtype's rounding can move a token across a cut: 2x the largest bf16-vs-fp32 logit
# difference measured over the top-50 logits of the zoo's targets at the sampling context (0.037-0.056);
# fp16 has 3 more mantissa bits
BOUNDARY_EPS = {"bf16": 0.1, "fp16": 0.02}
STAT_CHECKS = 2  # statistical fields per case (the record's fit, the fit against the exact joint): Holm
SEED_STRIDE = 100_000  # draw i of a case uses seed crc32(case id) * SEED_STRIDE + i (+ the run's seed salt)


def seed_of(spec: SamplingSpec, salt: int = 0) -> int:
    """A case's first seed: stable across processes and versions, distinct per case; a run's
    seed salt (`--harness-seed-salt N`) shifts every case to fresh seeds (false-alarm measurements)."""
    return (zlib.crc32(spec.id.encode()) * SEED_STRIDE + salt * 7_919) % 2**62


def design(joint: Joint, alpha: float, tv: float) -> stats.SampleDesign:
    """N for one case at the run's per-test `alpha` (see the module docstring)."""
    return stats.SampleDesign.gtest(list(joint.probabilities().values()), alpha, STAT_CHECKS, tv)


def bias(joint: Joint, target: Joint) -> float:
    """Exact TV between a path's joint and the target's (0 for lossless paths), over the bins."""
    return tv_by_bin(joint.probabilities(), target.probabilities())


# ----------------------------------------------------------------------------------------------
# observing a case


def context_ids(zoo: Any, spec: SamplingSpec) -> list[int]:
    """The sampling context under the model's own tokenizer (a user model's prompt, else the zoo's)."""
    return zoo.load(spec.model).tokenizer(zoo.prompt_text(spec.model, spec.prompt)).input_ids[: spec.prompt_tokens]

def expected_joint(zoo: Any, spec: SamplingSpec, settings: Sampling, prompt: list[int]) -> tuple[Joint, Joint]:
    """(the path's exact joint, the target's) under `settings`: the reference engine's forward where it
    implements the family, else transformers' own plain forward
    (lossless paths only need p)."""
    from harness.subjects import engine, hf_sampling

    def next_probs(name: str):
        ref = zoo.reference(name)
        if ref is not None:
            return engine.next_token_probs(ref, prompt, settings)
        return hf_sampling.next_token_probs(zoo.load(name).model, settings)

    eos = hf_sampling.eos_ids(zoo.load(spec.model).model)
    p = next_probs(spec.model)
    target = joints.target_joint(p, prompt, K, eos=eos, min_mass=MIN_MASS)
    if spec.weight is None:
        return target, target
    q = next_probs(spec.assistant)
    path = joints.speculative_joint(p, q, prompt, K, spec.draft_tokens, w=spec.weight, eos=eos, min_mass=MIN_MASS)
    return path, target


def boundary_ambiguity(zoo: Any, spec: SamplingSpec, settings: Sampling, prompt: list[int], target: Joint,
                       eps: float) -> float:
    """The expected probability mass, over the first two positions, of tokens within `eps` (a
    logit margin: BOUNDARY_EPS of the dtype) of a top-k / top-p / min-p cut, from the fp32
    engine's logits: how much of the exact distribution the run's rounding may redraw."""
    from harness.engine.processors import boundary_mass

    ref = zoo.reference(spec.model)
    if ref is None:
        return 0.0
    first: dict[tuple[int, ...], float] = {}  # the first emitted token of each longer tuple, and its mass
    for cell, mass in target.cells.items():
        if len(cell) > 1:
            first[cell[:1]] = first.get(cell[:1], 0.0) + mass
    total = 0.0
    for extra, mass in [((), 1.0), *first.items()]:
        ctx = list(prompt) + list(extra)
        logits = ref.forward(torch.tensor(ctx), torch.arange(len(ctx)), ref.new_caches(slack=4)).logits[-1]
        total += mass * boundary_mass(logits, ctx, settings, eps)
    return total


def observe(zoo: Any, spec: SamplingSpec, run: RunSettings, alpha: float, field: str = "joint") -> Observation:
    """Draw the case and hand its fields to the comparers (the design decides nothing itself):
      <field>_error    exact         the exception generate() raised, or None
      <field>_processors exact       the logits processors generate() applied (defaults included)
      <field>          distribution  counts of the K-tuples with their exact probabilities and the design
                                     (alpha, N, power, detectable TV) (record: fit, and the exact joint vs
                                     the baseline's)
      <field>_vs_exact distribution  G-test of fit against the exact joint, decided in every run
      <field>_bias_vs_target exact   exact TV(path joint, target joint) next to the measured one"""
    from harness.subjects import hf_sampling

    obs = Observation()
    tv = TV_DEEP if run.deep else TV_DEFAULT
    prompt = context_ids(zoo, spec)
    ids = torch.tensor([prompt], device=zoo.device)
    model = zoo.load(spec.model).model
    path_args = zoo.path_args(spec.case())
    seed = seed_of(spec, run.seed_salt)
    probe = zoo.memo(("sampling-probe", spec, seed),
                     lambda: hf_sampling.draw(model, ids, K, 1, spec.sampling, seed=seed, **path_args))
    obs.add(f"{field}_error", probe.error)
    if probe.error is not None:
        return obs
    obs.add(f"{field}_processors", probe.processors)
    settings = probe.effective()
    if settings is None:
        obs.skipped(field, "distribution",
                    f"generate() applied a processor the engine does not implement: {probe.processors}")
        return obs
    path_joint, target = zoo.memo(("sampling-joint", spec, settings), lambda: expected_joint(zoo, spec, settings, prompt))
    dtype = zoo.dtype_of(spec.model)
    eps = BOUNDARY_EPS.get(dtype)
    ambiguous = zoo.memo(("sampling-boundary", spec, settings, eps),
                         lambda: boundary_ambiguity(zoo, spec, settings, prompt, target, eps)) if eps else 0.0
    if ambiguous > PRECISION_TV:
        why = (f"the exact distribution is not determined at {dtype}: {ambiguous:.3f} of its mass sits within the "
               f"dtype's rounding margin ({eps} in logit) of a top-k / top-p / min-p cut ({settings.describe()}); "
               "fp32 runs check it")
        for name in (field, f"{field}_vs_exact"):
            obs.skipped(name, "distribution", why)
        return obs
    plan = design(path_joint, alpha, tv)
    draws = zoo.memo(("sampling-draws", spec, seed, plan.n),
                     lambda: hf_sampling.draw(model, ids, K, plan.n, spec.sampling, seed=seed, **path_args))
    counts = path_joint.counts(draws.samples)
    expected = path_joint.probabilities()
    extras = {"settings": settings.describe(), **plan.extras(), "min_mass": path_joint.min_mass, "k_tokens": K}
    obs.add(field, counts, kind="distribution", expected=expected, **extras)
    obs.reference(f"{field}_vs_exact", counts, expected, kind="distribution",
                  observed_extras={"expected": expected, **extras}, expected_extras={"expected": expected})
    measured = tv_by_bin({k: c / plan.n for k, c in counts.items()}, target.probabilities())
    half_width = 0.5 * stats.l1_deviation_bound(plan.n, len(counts), plan.level)
    exact = bias(path_joint, target)
    obs.info(f"{field}_bias_vs_target",
             f"exact TV(emitted, target) = {exact:.4f} over the bins; measured {measured:.4f} "
             f"(n = {plan.n}); the fit is decided by {field}",
             {"w": spec.weight, "path": spec.path, "setting": spec.setting, "bias_exact": exact,
              "tv_to_target": measured,
              "tv_to_target_ci": [max(0.0, measured - half_width), min(1.0, measured + half_width)],
              "seconds": draws.seconds, **plan.extras()},
             category="bias" if spec.weight is not None else "")
    return obs


def observe_case(zoo: Any, case: Case, run: RunSettings, alpha: float) -> Observation:
    """The sampling suite's case: the path's generate() feature first (`supports_<feature>`), then `observe`."""
    from harness.subjects import hf

    spec = SamplingSpec.of(case)
    obs = Observation()
    if not hf.requires(obs, hf.PATH_FEATURE.get(spec.path)):
        return obs
    return obs.merge(observe(zoo, spec, run, alpha))
