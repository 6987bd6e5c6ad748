"""The sampling suite's table (suites/test_sampling.py): sampled generate() per path x setting (the
default grid, or every path x setting in deep mode), then each user model's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.cases.common import (
    ASSISTANT,
    ENSEMBLE_WEIGHTS,
    MTP,
    TARGET,
    _deep,
    draft_tokens_of,
    setting,
)
from harness.cases.outputs import user_outputs
from harness.cases.registry import Rule, Suite, Table
from harness.engine.processors import Sampling
from harness.schema import Case
from harness.settings.models import UserModel
from harness.settings.run import RunSettings

# The context every sampling case samples after: the first 70 tokens of held-out prompt long-1, where
# the target is uncertain (17 two-token tuples above the lumping mass under the default top-k) and the
# assistant disagrees with it (one-step acceptance ~0.6; the bias suite's ctx0), so a verifier or
# drafter fault moves the emitted distribution, and w = 0.3 has an exact bias of TV ~0.26.
SAMPLING_PROMPT, SAMPLING_PROMPT_TOKENS = "long-1", 70
SAMPLED_TOKENS = 2  # K: the first K emitted tokens of each draw
SAMPLING_SETTINGS: dict[str, Sampling] = {
    "default": Sampling(),  # only do_sample=True: the installed version's defaults decide
    "temperature": Sampling(temperature=1.5),
    "top_k": Sampling(top_k=8),
    "top_p": Sampling(top_p=0.7),
    "min_p": Sampling(min_p=0.2),
    "repetition": Sampling(repetition_penalty=1.5),
    "combined": Sampling(temperature=0.8, top_k=20, top_p=0.9, min_p=0.05, repetition_penalty=1.2),
    # every other processor a GenerationConfig builds (harness/engine/pipeline.py), checked by the white box
    # against the engine's own: the logit-moving and banning ones together - the context ends (.., 80, 302,
    # 80) and the target's top two are 302 (0.53) and 14 (0.46), so the 2-gram (80, 302) is banned, 14 is
    # begin-suppressed and the rest of the mass redistributed - then the entropy filters, then top-h
    "constraints": Sampling(extra=(("no_repeat_ngram_size", 2), ("encoder_no_repeat_ngram_size", 3),
                                   ("encoder_repetition_penalty", 1.2), ("bad_words_ids", ((89,), (14, 80))),
                                   ("sequence_bias", (((223,), 2.0), ((14, 290), 1.0))), ("min_new_tokens", 3),
                                   ("suppress_tokens", (16,)), ("begin_suppress_tokens", (14,)),
                                   ("exponential_decay_length_penalty", (2, 1.5)), ("remove_invalid_values", True),
                                   ("forced_bos_token_id", 1), ("forced_eos_token_id", 2))),
    "filters": Sampling(temperature=1.3, extra=(("typical_p", 0.7), ("epsilon_cutoff", 3e-3), ("eta_cutoff", 3e-3),
                                                ("renormalize_logits", True))),
    "top_h": Sampling(temperature=1.5, extra=(("top_h", 0.6),)),  # transformers 5.0+ (4.57 has no top_h: its error)
}
# the settings whose processors the black-box joint does not model (the white box checks them exactly)
WHITEBOX_ONLY_SETTINGS = ("constraints", "filters", "top_h")
# the MTP path samples on both MTP fixtures: the 2-layer Mellum (MTP weights under mtp.*: ~14 ms per
# sampled use_mtp call; transformers 5.14.0 loads it without its MTP head) and glm4moe-mtp (the GLM
# layout, whose MTP path 5.14.0 does run: white-box only, its 46-layer trunk is ~0.3 s a call), so every
# version where any zoo model runs use_mtp has its MTP sampling checked
SAMPLING_MTP_MODEL = "mellum-mtp"
SAMPLING_MTP_MODELS = ("mellum-mtp", MTP)
# a user model's settings restrict the support with a top-k, so a 32k-256k vocabulary stays tractable
USER_SAMPLING_SETTINGS = ("top_k", "combined")
USER_ENSEMBLE_WEIGHT = 0.3


@dataclass(frozen=True)
class SamplingSpec:
    """One sampling case: a model, a path, a setting and the context it samples after."""

    model: str
    path: str  # plain | assisted | prompt_lookup | mtp | ensemble
    setting: str
    weight: float | None = None
    assistant: str | None = None  # None: the zoo's assistant on the paths that need one
    prompt: str = SAMPLING_PROMPT
    prompt_tokens: int = SAMPLING_PROMPT_TOKENS

    def __post_init__(self) -> None:
        if self.assistant is None and self.path in ("assisted", "ensemble"):
            object.__setattr__(self, "assistant", ASSISTANT)

    @property
    def id(self) -> str:
        path = self.path if self.weight is None else f"{self.path}.w{self.weight}"
        return f"{self.model}.{path}.{self.setting}.{self.prompt}-{self.prompt_tokens}.k{SAMPLED_TOKENS}"

    @property
    def sampling(self) -> Sampling:
        return SAMPLING_SETTINGS[self.setting]

    @property
    def draft_tokens(self) -> int | None:
        return draft_tokens_of(self.path)

    def case(self) -> Case:
        return Case(self.model, self.path, "dynamic", self.prompt, "sample", weight=self.weight,
                    draft_tokens=self.draft_tokens, assistant=self.assistant, new_tokens=SAMPLED_TOKENS, name=self.id,
                    params=(("prompt_tokens", self.prompt_tokens), ("setting", self.setting)))

    @staticmethod
    def of(case: Case) -> SamplingSpec:
        return SamplingSpec(case.model, case.path, case.param("setting"), case.weight, case.assistant, case.prompt,
                            int(case.param("prompt_tokens", SAMPLING_PROMPT_TOKENS)))


def sampling_grid(deep: bool, mtp_models: Sequence[str] = SAMPLING_MTP_MODELS) -> list[SamplingSpec]:
    """The zoo's sampling cases: a default grid, or every path x setting (deep). The default grid holds
    ensemble x temperature, where 5.x's assistant applies the temperature twice (a known deviation)."""
    everything = list(SAMPLING_SETTINGS)
    if deep:
        rows = [(TARGET, p, None, everything) for p in ("plain", "assisted", "prompt_lookup")]
        rows += [(TARGET, "ensemble", w, everything) for w in ENSEMBLE_WEIGHTS]
        rows += [(m, "mtp", None, everything) for m in mtp_models]
    else:
        rows = [(TARGET, "plain", None, everything),
                (TARGET, "assisted", None, ["default", "combined"]),
                (TARGET, "prompt_lookup", None, ["default"]),
                (TARGET, "ensemble", 0.3, ["default", "min_p", "temperature"]),
                (TARGET, "ensemble", 0.7, ["default"])]
        rows += [(m, "mtp", None, ["default", "top_p"]) for m in mtp_models]
    return [SamplingSpec(model, path, s, w) for model, path, w, settings in rows for s in settings]


def user_sampling(model: UserModel) -> list[SamplingSpec]:
    """A user model's sampling cases: plain sampling at USER_SAMPLING_SETTINGS, each other path it
    supports at top-k (the ensemble at w = 0.3), after its first prompt."""
    prompt = model.prompts[0].id if model.prompts else SAMPLING_PROMPT
    out: list[SamplingSpec] = []
    for path in (p for p in model.paths if p != "early_exit"):  # an assistant's verification: the assisted path's
        settings = USER_SAMPLING_SETTINGS if path == "plain" else USER_SAMPLING_SETTINGS[:1]
        weight = USER_ENSEMBLE_WEIGHT if path == "ensemble" else None
        assistant = model.assistant_name if path in ("assisted", "ensemble") else None
        out += [SamplingSpec(model.name, path, s, weight, assistant, prompt) for s in settings]
    return out


def zoo_sampling(run: RunSettings | None = None) -> list[Case]:
    """The zoo's sampling grid (each user model's: `user_sampling`)."""
    return [s.case() for s in sampling_grid(_deep(run))]


def _user_sampling_cases(model: UserModel) -> list[Case]:
    return [s.case() for s in user_sampling(model)]




# the quick tier: plain's single-processor settings run inside its combined case (the white box checks every
# sampled decision of it exactly); a path's other settings combine processors plain checks with its verifier
# the default checks; w0.7's verification step is drawn exactly by the bias suite's w0.7.ctx0; mellum-mtp's
# draws cost ~4x glm4moe-mtp's on the same candidate generator
QUICK_MTP = MTP  # the MTP model the quick tier samples
QUICK_WEIGHT = 0.3  # the ensemble weight it samples
COMBINED = ("temperature", "top_k", "top_p", "min_p", "repetition")  # the processors plain's `combined` case chains
BACKSTOP_UNITS = 900  # single-token forwards of the black-box backstop's N draws of one sampled case


def _quick(c: Case) -> bool:
    return ((c.path == "plain" and c.param("setting") not in COMBINED)
            or (c.param("setting") == "default" and (c.path != "mtp" or c.model == QUICK_MTP)
                and (c.weight is None or c.weight == QUICK_WEIGHT)))


def _backstop(run: RunSettings, model: UserModel) -> dict[str, int]:
    """The black-box backstop's draws (not drawn under a budget plan): every sampled case of the
    model's, this suite's and the outputs suite's `.sample` cases."""
    if model.plan.budgeted:
        return {}
    sampled = len(_user_sampling_cases(model)) + sum(1 for c in user_outputs(model) if c.decoding == "sample")
    return {"sampling-backstop": BACKSTOP_UNITS * sampled}


sampling = Table("sampling", zoo_sampling, user=_user_sampling_cases, plan=Rule(
    setting("top_k"), "each path is sampled at top-k, checked exactly by the white box; the other settings repeat "
                      "the same mechanism"))

SUITE = Suite(
    "sampling",
    (sampling,), api='sampled generate() (do_sample=True)', units=(25,), extra=_backstop,
    quick=Rule(_quick, "plain's single-processor settings (its combined case runs them together), the speculative "
                       "paths' other settings, the ensemble at w0.7 and mellum-mtp's draws"))
