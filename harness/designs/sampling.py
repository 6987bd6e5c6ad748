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
512 per call; the default grid keeps the speculative cases few, `--harness-deep` (or
HARNESS_DEEP=1) runs every path x setting at a smaller detectable TV.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass
from typing import Any

import torch

from harness.checking import stats
from harness.engine import joint as joints
from harness.engine.joint import Joint, tv_by_bin
from harness.engine.processors import Sampling
from harness.fixtures.cases import ASSISTANT, draft_tokens_of
from harness.schema import Case
from harness.settings.config import deep_mode

K = 2
# The context every case samples after: the first 70 tokens of held-out prompt long-1, where the
# target is uncertain (17 two-token tuples above MIN_MASS under the default top-k) and the
# assistant disagrees with it (one-step acceptance ~0.6; the bias suite's ctx0), so a verifier
# or drafter fault moves the emitted distribution, and w = 0.3 has an exact bias of TV ~0.26.
PROMPT, PROMPT_TOKENS = "long-1", 70
POWER = 0.8
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
# the MTP path samples on the 2-layer Mellum fixture (MTP weights under mtp.*: ~14 ms per sampled
# use_mtp call) - glm4moe-mtp's 46-layer trunk (~100 ms a call) stays for its checkpoint layout
MTP_MODEL = "mellum-mtp"
SEED_STRIDE = 100_000  # draw i of a case uses seed crc32(case id) * SEED_STRIDE + i (+ HARNESS_SEED_SALT)

SETTINGS: dict[str, Sampling] = {
    "default": Sampling(),  # only do_sample=True: the installed version's defaults decide
    "temperature": Sampling(temperature=1.5),
    "top_k": Sampling(top_k=8),
    "top_p": Sampling(top_p=0.7),
    "min_p": Sampling(min_p=0.2),
    "repetition": Sampling(repetition_penalty=1.5),
    "combined": Sampling(temperature=0.8, top_k=20, top_p=0.9, min_p=0.05, repetition_penalty=1.2),
}


@dataclass(frozen=True)
class Spec:
    """One sampling case: a model, a path, a setting and the context it samples after."""

    model: str
    path: str  # plain | assisted | prompt_lookup | mtp | ensemble
    setting: str
    weight: float | None = None
    assistant: str | None = None  # None: the zoo's assistant on the paths that need one
    prompt: str = PROMPT
    prompt_tokens: int = PROMPT_TOKENS

    def __post_init__(self) -> None:
        if self.assistant is None and self.path in ("assisted", "ensemble"):
            object.__setattr__(self, "assistant", ASSISTANT)

    @property
    def id(self) -> str:
        path = self.path if self.weight is None else f"{self.path}.w{self.weight}"
        return f"{self.model}.{path}.{self.setting}.{self.prompt}-{self.prompt_tokens}.k{K}"

    @property
    def sampling(self) -> Sampling:
        return SETTINGS[self.setting]

    @property
    def draft_tokens(self) -> int | None:
        return draft_tokens_of(self.path)

    def case(self) -> Case:
        return Case(self.model, self.path, "dynamic", self.prompt, "sample", weight=self.weight,
                    draft_tokens=self.draft_tokens, assistant=self.assistant, new_tokens=K, name=self.id,
                    params=(("prompt_tokens", self.prompt_tokens), ("setting", self.setting)))

    @staticmethod
    def of(case: Case) -> Spec:
        return Spec(case.model, case.path, case.param("setting"), case.weight, case.assistant, case.prompt,
                    int(case.param("prompt_tokens", PROMPT_TOKENS)))


def _grid(mtp_model: str | None, deep: bool) -> list[Spec]:
    everything = list(SETTINGS)
    if deep:
        rows = [("llama-target", p, None, everything) for p in ("plain", "assisted", "prompt_lookup")]
        rows += [("llama-target", "ensemble", w, everything) for w in (0.3, 0.7)]
        rows += [(mtp_model, "mtp", None, everything)] if mtp_model else []
    else:
        rows = [("llama-target", "plain", None, everything),
                ("llama-target", "assisted", None, ["default", "combined"]),
                ("llama-target", "prompt_lookup", None, ["default"]),
                ("llama-target", "ensemble", 0.3, ["default", "min_p"]),
                ("llama-target", "ensemble", 0.7, ["default"])]
        rows += [(mtp_model, "mtp", None, ["default", "top_p"])] if mtp_model else []
    return [Spec(model, path, s, w) for model, path, w, settings in rows for s in settings]


# a user model's settings restrict the support with a top-k, so a 32k-256k vocabulary stays tractable
USER_SETTINGS = ("top_k", "combined")
ENSEMBLE_WEIGHT_USER = 0.3


def user_specs(model: Any) -> list[Spec]:
    """A user model's cases (harness/settings/models.py `UserModel`): plain sampling at USER_SETTINGS, each
    other path it supports at top-k (the ensemble at w = 0.3), after its first prompt."""
    prompt = model.prompts[0].id if model.prompts else PROMPT
    specs_: list[Spec] = []
    for path in model.paths:
        settings = USER_SETTINGS if path == "plain" else USER_SETTINGS[:1]
        weight = ENSEMBLE_WEIGHT_USER if path == "ensemble" else None
        assistant = model.assistant_name if path in ("assisted", "ensemble") else None
        specs_ += [Spec(model.name, path, s, weight, assistant, prompt) for s in settings]
    return specs_


def specs(mtp_model: str | None = MTP_MODEL, deep_run: bool | None = None) -> list[Spec]:
    """The zoo's case table: the default grid, or every path x setting with HARNESS_DEEP=1."""
    return _grid(mtp_model, deep_mode() if deep_run is None else deep_run)


def cases(user: Any = ()) -> list[Case]:
    """The suite's case table (`@pytest.mark.cases`): the zoo's grid, then each user model's."""
    return [s.case() for s in specs()] + [s.case() for m in user for s in user_specs(m)]


def seed_of(spec: Spec) -> int:
    """A case's first seed: stable across processes and versions, distinct per case;
    HARNESS_SEED_SALT=<int> shifts every case to fresh seeds (false-alarm measurements)."""
    salt = int(os.environ.get("HARNESS_SEED_SALT", "0") or 0)
    return (zlib.crc32(spec.id.encode()) * SEED_STRIDE + salt * 7_919) % 2**62


@dataclass(frozen=True)
class Design:
    n: int
    alpha: float
    tv: float
    power: float  # against TV = tv at level alpha
    bins: int
    min_mass: float

    def extras(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "n": self.n, "power": self.power, "detectable_tv": self.tv, "bins": self.bins,
                "min_mass": self.min_mass, "k_tokens": K}


def design(joint: Joint, alpha: float, tv: float) -> Design:
    """N for one case at level `alpha` (see the module docstring)."""
    bins = max(2, sum(1 for p in joint.probabilities().values() if p > 0))
    n = stats.samples_needed(tv, power=POWER, alpha=alpha, k=bins)
    n = -(-n // 100) * 100
    return Design(n, alpha, tv, stats.gtest_power(n, tv, alpha, bins), bins, joint.min_mass)


def bias(joint: Joint, target: Joint) -> float:
    """Exact TV between a path's joint and the target's (0 for lossless paths), over the bins."""
    return tv_by_bin(joint.probabilities(), target.probabilities())


# ----------------------------------------------------------------------------------------------
# observing a case


def context_ids(zoo: Any, spec: Spec) -> list[int]:
    """The sampling context under the model's own tokenizer (a user model's prompt, else the zoo's)."""
    return zoo.load(spec.model).tokenizer(zoo.prompt_text(spec.model, spec.prompt)).input_ids[: spec.prompt_tokens]


def expected_joint(zoo: Any, spec: Spec, settings: Sampling, prompt: list[int]) -> tuple[Joint, Joint]:
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


def boundary_ambiguity(zoo: Any, spec: Spec, settings: Sampling, prompt: list[int], target: Joint,
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


def observe(golden: Any, zoo: Any, spec: Spec, field: str = "joint", tv: float | None = None) -> None:
    """Draw the case and hand its fields to the comparers (the suite decides nothing itself):
      <field>_error    exact         the exception generate() raised, or None
      <field>_processors exact       the logits processors generate() applied (defaults included)
      <field>          distribution  counts of the K-tuples with their exact probabilities, alpha, N,
                                     power and detectable TV (record: fit, and the exact joint vs the baseline's)
      <field>_vs_exact distribution  G-test of fit against the exact joint, decided in every run
      <field>_bias_vs_target exact   exact TV(path joint, target joint) next to the measured one"""
    from harness.subjects import hf_sampling

    tv = tv or (TV_DEEP if deep_mode() else TV_DEFAULT)
    prompt = context_ids(zoo, spec)
    ids = torch.tensor([prompt], device=zoo.device)
    model = zoo.load(spec.model).model
    path_args = zoo.path_args(spec.case())
    seed = seed_of(spec)
    probe = zoo.memo(("sampling-probe", spec, seed),
                     lambda: hf_sampling.draw(model, ids, K, 1, spec.sampling, seed=seed, **path_args))
    golden.check(f"{field}_error", probe.error)
    if probe.error is not None:
        return
    golden.check(f"{field}_processors", probe.processors)
    settings = probe.effective()
    if settings is None:
        golden.outcome(field, "skipped", kind="distribution", category="not-applicable",
                       detail=f"generate() applied a processor the engine does not implement: {probe.processors}")
        return
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
            golden.outcome(name, "skipped", kind="distribution", category="not-applicable", detail=why)
        return
    plan = design(path_joint, golden.alpha / STAT_CHECKS, tv)
    draws = zoo.memo(("sampling-draws", spec, seed, plan.n),
                     lambda: hf_sampling.draw(model, ids, K, plan.n, spec.sampling, seed=seed, **path_args))
    counts = path_joint.counts(draws.samples)
    expected = path_joint.probabilities()
    extras = {"settings": settings.describe(), **plan.extras()}
    golden.check(field, counts, kind="distribution", expected=expected, **extras)
    golden.reference(f"{field}_vs_exact", counts, expected, kind="distribution",
                     observed_extras={"expected": expected, **extras}, expected_extras={"expected": expected})
    measured = tv_by_bin({k: c / plan.n for k, c in counts.items()}, target.probabilities())
    half_width = 0.5 * stats.l1_deviation_bound(plan.n, len(counts), plan.alpha)
    exact = bias(path_joint, target)
    golden.outcome(f"{field}_bias_vs_target", "pass", kind="exact", category="bias" if spec.weight is not None else "",
                   detail=f"exact TV(emitted, target) = {exact:.4f} over the bins; measured {measured:.4f} "
                          f"(n = {plan.n}); the fit is decided by {field}",
                   diff={"w": spec.weight, "path": spec.path, "setting": spec.setting, "bias_exact": exact,
                         "tv_to_target": measured,
                         "tv_to_target_ci": [max(0.0, measured - half_width), min(1.0, measured + half_width)],
                         "seconds": draws.seconds, **plan.extras()})
