"""The sampling suite's design: which (path x setting) cases run, what each observes and how many
draws its black-box fit takes. The decisions live in the comparers (harness/checking/).

A case first runs `whitebox.CALLS` generate() calls with every sampled decision observed inside
(harness/designs/whitebox.py): the `exact_*` fields compare the target p, the draft q, the acceptance
probabilities, the correction / bonus distribution and the emitted distribution implied at every
position with their exact values - deterministic, down to float tolerance (`detectable_tv` 1e-5).
A deviation the baseline record already has is `changed` (known-deviation), a new or larger one a
regression, one that disappears `fixed`.

Then the black-box backstop: the first K = 2 tokens of `generate(do_sample=True, max_new_tokens=K)`
drawn N times with distinct seeds (harness/subjects/hf_sampling.py), their counts tested against the
exact joint (harness/engine/joint.py) under the processors the version really applied (its defaults
included): the target's chain on lossless paths; for an ensemble weight w the joint derived from the
draft schedule with the drafter's processors *as applied* (the doubled warpers of 5.x included), so
the backstop checks what the mechanism the white box observed emits, end to end through the engine's
forward, while `exact_emitted` measures the bias against the intended process.

Sample size (`design`): the case's statistical fields are counted (`statistical`: the fit, plus the
caller's - the outputs suite's acceptance rate), each sized at the run's per-test alpha / that
count; N is the smallest multiple of 100 for which the G-test over the lumped bins has power
>= 0.8 against every distribution at TV >= `tv` from the exact joint (`stats.samples_needed`:
noncentrality >= 4 N TV^2, a bound that holds for any alternative). The backstop is kept small
(`default_tv`: TV_DEFAULT 0.25, N 200-300 on the speculative paths, one generate() call a draw;
TV_PLAIN 0.15, N 500-700 on the batched plain path) because the white-box fields carry the
exactness: a fit that cannot rule out thresholds.tv_max (0.05 needs N ~3000-5600 here, over the
run's time budget) is `not checked` - never a pass - and says the smallest TV it did detect; a misfit
at that size is still a regression. Tuples with probability < MIN_MASS
form one bin; a case whose exact mass sits in one bin (a flat distribution) is `not checkable`.
A user model under the budget plan (harness/settings/budget.py) skips the backstop the same way:
its white-box fields check it. A (model, path) in NO_BACKSTOP is too costly to draw N from (glm4moe-mtp's MTP path: 46 layers, ~0.3 s
a call): its fit is skipped with that reason, its white-box fields check it.

Cost: a speculative path is one generate() call per draw (~6-10 ms here), plain sampling draws
PLAIN_BATCH per call; draws depend on (seed, index) only, so two designs of one case (sampling and
outputs suites) share them. A deep run (`--harness-deep`) runs every path x setting at TV_DEEP.
The case table is harness/cases/ `sampling`.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

import torch

from harness.cases import SAMPLED_TOKENS as K
from harness.cases import SamplingSpec
from harness.checking import stats
from harness.engine import joint as joints
from harness.engine.joint import Joint, tv_by_bin
from harness.engine.processors import Sampling
from harness.schema import Case, Observation
from harness.settings import budget
from harness.settings.run import RunSettings

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

TV_DEFAULT = 0.25  # detectable TV of a default run's backstop (N 200-300: the white box carries the exactness)
TV_PLAIN = 0.15  # ... on the plain path, whose draws are batched (PLAIN_BATCH a call): N 500-700 for ~0.1 s more a case
TV_DEEP = 0.08  # ... of a deep run
MIN_MASS = 0.005  # tuples below this probability form one bin
LOW_PRECISION = ("bf16", "fp16")
PRECISION_TV = 0.02  # low precision: at most this much mass may sit within rounding of a filter's cut
# logit margin a dtype's rounding can move a token across a cut: 2x the largest bf16-vs-fp32 logit
# difference measured over the top-50 logits of the zoo's targets at the sampling context (0.037-0.056);
# fp16 has 3 more mantissa bits
BOUNDARY_EPS = {"bf16": 0.1, "fp16": 0.02}
SEED_STRIDE = 100_000  # draw i of a case uses seed crc32(case id) * SEED_STRIDE + i (+ the run's seed salt)
# (model, path) whose N one-call draws are too costly: the white box alone checks them
NO_BACKSTOP = {("glm4moe-mtp", "mtp"): "the black-box backstop does not draw N from glm4moe-mtp's MTP path (46 layers, "
                                       "~0.3 s a generate() call); its exact_* fields check this path exactly"}


def seed_of(spec: SamplingSpec, salt: int = 0) -> int:
    """A case's first seed: stable across processes and versions, distinct per case; a run's
    seed salt (`--harness-seed-salt N`) shifts every case to fresh seeds (false-alarm measurements)."""
    return (zlib.crc32(spec.id.encode()) * SEED_STRIDE + salt * 7_919) % 2**62


def design(joint: Joint, alpha: float, tv: float, statistical: int = 1) -> stats.SampleDesign:
    """N for one case at the run's per-test `alpha`, its `statistical` fields decided together (Holm)."""
    return stats.SampleDesign.gtest(list(joint.probabilities().values()), alpha, statistical, tv)


def default_tv(path: str, deep: bool) -> float:
    """The TV a case's backstop is sized to detect: TV_DEEP in a deep run; else TV_PLAIN on the plain
    path (batched draws are cheap) and TV_DEFAULT on the speculative ones (one generate() call a draw)."""
    if deep:
        return TV_DEEP
    return TV_PLAIN if path == "plain" else TV_DEFAULT


def bias(joint: Joint, target: Joint) -> float:
    """Exact TV between a path's joint and the target's (0 for lossless paths), over the bins."""
    return tv_by_bin(joint.probabilities(), target.probabilities())


# ----------------------------------------------------------------------------------------------
# observing a case


def context_ids(zoo: Zoo, spec: SamplingSpec) -> list[int]:
    """The sampling context under the model's own tokenizer (a user model's prompt, else the zoo's)."""
    return zoo.load(spec.model).tokenizer(zoo.checkpoints.prompt_text(spec.model, spec.prompt)).input_ids[: spec.prompt_tokens]

def expected_joint(zoo: Zoo, spec: SamplingSpec, settings: Sampling, prompt: list[int],
                   drafter: tuple[Sampling, ...] | None = None) -> tuple[Joint, Joint]:
    """(the path's exact joint, the target's) under `settings`: the reference engine's forward where it
    implements the family, else transformers' own plain forward (lossless paths only need p). The
    ensemble's q takes `drafter` - the drafter's processors as the version applied them - when given."""
    from harness.subjects import engine, hf_sampling

    def next_probs(name: str, chain: Any):
        ref = zoo.oracle.model(name)
        if ref is not None:
            return engine.next_token_probs(ref, prompt, chain)
        return hf_sampling.next_token_probs(zoo.load(name).model, chain)

    eos = hf_sampling.eos_ids(zoo.load(spec.model).model)
    p = next_probs(spec.model, settings)
    target = joints.target_joint(p, prompt, K, eos=eos, min_mass=MIN_MASS)
    if spec.weight is None:
        return target, target
    q = next_probs(spec.assistant, drafter if drafter is not None else settings)
    path = joints.speculative_joint(p, q, prompt, K, spec.draft_tokens, w=spec.weight, eos=eos, min_mass=MIN_MASS)
    return path, target


def boundary_ambiguity(zoo: Zoo, spec: SamplingSpec, settings: Sampling, prompt: list[int], target: Joint,
                       eps: float) -> float:
    """The expected probability mass, over the first two positions, of tokens within `eps` (a
    logit margin: BOUNDARY_EPS of the dtype) of a top-k / top-p / min-p cut, from the fp32
    engine's logits: how much of the exact distribution the run's rounding may redraw."""
    from harness.engine.processors import boundary_mass

    ref = zoo.oracle.model(spec.model)
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


def harness_chain(built_config: dict[str, Any], spec: SamplingSpec, prompt: list[int]) -> tuple[Any, ...]:
    """The processor list the harness builds (harness/engine/pipeline.py) for the black-box draws' own
    call (K new tokens): the expected side of a case whose processors are not `Sampling`'s five."""
    from harness.engine import pipeline

    asked = {"do_sample": True, "max_new_tokens": K, **spec.sampling.kwargs()}
    return tuple(pipeline.build(pipeline.requested(built_config, asked, len(prompt)), prompt))


def describe(settings: Any) -> str:
    if isinstance(settings, Sampling):
        return settings.describe()
    return ", ".join(f"{p.name}({', '.join(f'{k}={v}' for k, v in p.params if k not in ('prompt', 'ngrams'))})"
                     for p in settings)


def draws(zoo: Zoo, spec: SamplingSpec, seed: int, n: int) -> Any:
    """The case's first n draws (extending the ones already drawn for another design of the case)."""
    from harness.subjects import hf_sampling

    done = zoo.memo(("sampling-draws", spec, seed), lambda: hf_sampling.Draws())
    if len(done.samples) < n and done.error is None:
        ids = torch.tensor([context_ids(zoo, spec)], device=zoo.device)
        more = hf_sampling.draw(zoo.load(spec.model).model, ids, K, n, spec.sampling, seed=seed,
                                start=len(done.samples), **zoo.path_args(spec.case()))
        done.samples += more.samples
        done.error, done.seconds = more.error, done.seconds + more.seconds
    return hf_sampling.Draws(done.samples[:n], error=done.error, seconds=done.seconds)


def whitebox_run(zoo: Zoo, spec: SamplingSpec, seed: int) -> Any:
    """The case's white-box calls (harness/designs/whitebox.py `observe`) on its model, path and setting."""
    from harness.designs import whitebox as wb
    from harness.subjects import hf_sampling

    ids = torch.tensor([context_ids(zoo, spec)], device=zoo.device)
    model = zoo.load(spec.model).model
    args = zoo.path_args(spec.case())
    kwargs = hf_sampling.sampling_kwargs(model, ids, K, spec.sampling, assistant=args["assistant"],
                                         prompt_lookup=args["prompt_lookup"], use_mtp=args["use_mtp"],
                                         ensemble_weight=args["ensemble_weight"])
    return wb.observe(model, ids, kwargs, seed, path=spec.path, weight=spec.weight, assistant=args["assistant"],
                      draft_tokens=args["draft_tokens"])


def observe(zoo: Zoo, spec: SamplingSpec, run: RunSettings, alpha: float, field: str = "joint",
            whitebox: bool = True, statistical: int = 1) -> Observation:
    """The case's fields (the design decides nothing itself):
      <field>_error      exact         the exception generate() raised, or None
      <field>_processors exact         the logits processors generate() applied (defaults included)
      <field>_drafter_processors exact the assistant's, as its own generate() built them (assisted, ensemble)
      exact_*            deviation     the white-box fields (`whitebox`; harness/designs/whitebox.py)
      <field>            distribution  counts of the K-tuples with their exact probabilities and the
                                       design (alpha, N, power, detectable TV): the G-test of fit, decided
                                       in every run, and the exact joint vs the baseline's
      <field>_bias_vs_target info      exact TV(path joint, target joint) next to the measured one
    `statistical`: the case's statistical fields, this fit included (N is sized for them)."""
    from harness.subjects import hf_sampling

    obs = Observation()
    prompt = context_ids(zoo, spec)
    seed = seed_of(spec, run.seed_salt)
    if whitebox:
        probe = zoo.memo(("sampling-whitebox", spec, seed), lambda: whitebox_run(zoo, spec, seed))
    else:
        ids = torch.tensor([prompt], device=zoo.device)
        probe = zoo.memo(("sampling-probe", spec, seed), lambda: hf_sampling.draw(
            zoo.load(spec.model).model, ids, K, 1, spec.sampling, seed=seed, **zoo.path_args(spec.case())))
    obs.add(f"{field}_error", probe.error)
    if probe.error is not None:
        return obs
    obs.add(f"{field}_processors", probe.processors)
    if spec.path in ("assisted", "ensemble"):
        obs.add(f"{field}_drafter_processors", probe.drafter_processors)
    if whitebox:
        obs.merge(probe.obs)
    if (spec.model, spec.path) in NO_BACKSTOP:
        obs.skipped(field, "distribution", NO_BACKSTOP[(spec.model, spec.path)])
        return obs
    owner = zoo.checkpoints.user.get(spec.model)
    if whitebox and owner is not None and owner.plan.budgeted:  # the white box above checks it exactly
        obs.skipped(field, "distribution", budget.BACKSTOP_WHY)
        return obs
    settings, drafter, why = hf_sampling.effective(probe.processors), None, ""
    if settings is None and spec.weight is None and getattr(probe, "built_config", None) is not None:
        settings = harness_chain(probe.built_config, spec, prompt)
        if BOUNDARY_EPS.get(zoo.checkpoints.dtype_of(spec.model)):
            why = (f"the exact distribution under {describe(settings)} is not determined at "
                   f"{zoo.checkpoints.dtype_of(spec.model)}: the rounding margin of these processors' cuts is not modelled; "
                   "fp32 runs check the fit, the white-box fields check every position here")
    elif settings is None:
        why = (f"the processors generate() applied are not `Sampling` settings and the harness's own list is not "
               f"known for this path: {probe.processors}")
    elif spec.weight is not None:
        try:
            drafter = tuple(hf_sampling.chain_steps(probe.drafter_processors, len(prompt)))
        except ValueError as exc:
            why = f"the drafter's processors: {exc}"
    if why:
        obs.skipped(field, "distribution", why)
        return obs
    path_joint, target = zoo.memo(("sampling-joint", spec, settings, drafter),
                                  lambda: expected_joint(zoo, spec, settings, prompt, drafter))
    dtype = zoo.checkpoints.dtype_of(spec.model)
    eps = BOUNDARY_EPS.get(dtype)
    ambiguous = zoo.memo(("sampling-boundary", spec, settings, eps),
                         lambda: boundary_ambiguity(zoo, spec, settings, prompt, target, eps)) if eps else 0.0
    if ambiguous > PRECISION_TV:
        obs.skipped(field, "distribution",
                    f"the exact distribution is not determined at {dtype}: {ambiguous:.3f} of its mass sits within the "
                    f"dtype's rounding margin ({eps} in logit) of a top-k / top-p / min-p cut ({describe(settings)}); "
                    "fp32 runs check it")
        return obs
    plan = design(path_joint, alpha, default_tv(spec.path, run.deep), statistical)
    drawn = draws(zoo, spec, seed, plan.n)
    counts = path_joint.counts(drawn.samples)
    expected = path_joint.probabilities()
    obs.add(field, counts, kind="distribution", expected=expected, settings=describe(settings), **plan.extras(),
            min_mass=path_joint.min_mass, k_tokens=K, statistical_fields=statistical)
    measured = tv_by_bin({k: c / plan.n for k, c in counts.items()}, target.probabilities())
    half_width = 0.5 * stats.l1_deviation_bound(plan.n, len(counts), plan.level)
    exact = bias(path_joint, target)
    obs.info(f"{field}_bias_vs_target",
             f"exact TV(emitted, target) = {exact:.4f} over the bins; measured {measured:.4f} "
             f"(n = {plan.n}); the fit is decided by {field}",
             {"w": spec.weight, "path": spec.path, "setting": spec.setting, "bias_exact": exact,
              "tv_to_target": measured,
              "tv_to_target_ci": [max(0.0, measured - half_width), min(1.0, measured + half_width)],
              "seconds": drawn.seconds, **plan.extras()},
             category="bias" if spec.weight is not None else "")
    return obs


def observe_case(zoo: Zoo, case: Case, run: RunSettings, alpha: float) -> Observation:
    """The sampling suite's case: the path's generate() feature first (`supports_<feature>`), then `observe`."""
    from harness.subjects import hf

    spec = SamplingSpec.of(case)
    obs = Observation()
    if not hf.requires(obs, hf.PATH_FEATURE.get(spec.path), probe=lambda: zoo.path_probe(spec.case())):
        return obs
    return obs.merge(observe(zoo, spec, run, alpha))
