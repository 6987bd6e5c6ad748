"""Every suite's case table, in one place and one shape.

A table is a function of the run's settings, ``table(run) -> list[Case]`` (run: harness/settings/run.py
`RunSettings`, or None for the zoo's rows of a default run). A suite declares it with
``@pytest.mark.cases(table=...)`` and the plugin calls it at collection, so deep mode and your own
models (``run.user_models``) reach a table through the settings - never through a global. A
`Case` (harness/schema.py) is frozen and its `id` is stable text that names the record file
``golden/records/<env-key>/<suite>/<case id>.json``; adding a model to the zoo adds its rows here,
never a test function.

    outputs(run)    every (model, path, cache, prompt, decoding) that makes sense for the zoo, then each
                    user model's (its paths x prompts x caches; one seeded sample per path)
    models(run)     one case per checkpoint (caches, backends)
    contracts(run)  API contracts, the API surface, per-model defaults, MTP checkpoints, stateful paths
    sampling(run)   sampled generate() per path x sampling setting (the default grid, or every
                    path x setting in deep mode), then each user model's
    bias(run)       one verification step per ensemble weight x context
    latency(run)    prefill, steady-state decode and generate() per path, then each user model's
    loading(run)    the load contract: every zoo model as shipped, llama-target's checkpoint variants
                    (harness/designs/loading.py `VARIANTS`), then each user model as shipped
    stopping(run)   one stopping setting per case (eos list, stop strings, length limits, min_new_tokens,
                    pad tokens in a batch of 2) on llama-target, then on each user model
    streaming(run)  TextStreamer / TextIteratorStreamer on plain and assisted generate(), and a batch of 2
                    (refused), on llama-target, then on each user model
    long_context(run) the rope-scaled fixtures (llama3, yarn) driven past original_max_position_embeddings,
                    each also from a 4.x config (`rope_scaling`), and mistral-sliding decoding past its window
                    in a left-padded batch of 2 (zoo only: a real model's pretraining length is far past a cheap run)
    batching(run)   each prompt alone vs inside a padded batch (greedy, seeded sampling, right padding,
                    assisted and prompt lookup) on llama-target, greedy on mistral-sliding and
                    gemma2-softcap, then each user model's
    continuous(run) several requests at once through generate_batch (greedy with an early eos, sampled,
                    logits processors, num_beams) on llama-target, then each user model's greedy
    tokenizers(run) one case per distinct zoo tokenizer (the manifest's digests of its tokenizer files),
                    then each user model's own
    chats(run)      the chat-template fixture on llama-target, then each user model's own template
    beam(run)       beam search settings (num_beams, length_penalty, early_stopping, num_return_sequences,
                    a batch of 2) on llama-target, then each user model's
    beam_modes(run) the decoding modes moved out of the library (group beam, contrastive, constrained, DoLa):
                    run, refused or redirected to the hub, per version

The draft schedule is part of a case: a biased verifier's output depends on how drafts are cut
into blocks, so both transformers and the reference engine run a constant draft length
(`draft_tokens`, no confidence-threshold early stop).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.engine.cache import has_linear_attention
from harness.engine.processors import Sampling
from harness.fixtures import load as fixtures_load
from harness.fixtures import tokzoo
from harness.fixtures.zoo import MTP_TRUNK_LAYERS, SPECS
from harness.schema import Case
from harness.settings import budget
from harness.settings.models import UserModel
from harness.settings.run import RunSettings

NEW_TOKENS = 24
DRAFT_TOKENS = 4
ENSEMBLE_WEIGHTS = (0.3, 0.7)
TARGET, ASSISTANT, MTP = "llama-target", "llama-assistant", "glm4moe-mtp"
# the rope-scaled fixtures are the long_context suite's alone: the model-level suites (caches, backends,
# loading) check llama-target, whose shape they share
LONG_CONTEXT = "long-context"


def _users(run: RunSettings | None) -> Sequence[UserModel]:
    return run.user_models if run is not None else ()


def _planned(run: RunSettings | None, table: str, make: Callable[[UserModel], list[Case]]) -> list[Case]:
    """Each user model's cases of `table`, as its plan runs them (harness/settings/budget.py: the
    full grid, or the budget plan's selection)."""
    return [c for m in _users(run) for c in budget.select(table, m.plan, make(m))]


def left_out(run: RunSettings | None) -> list[str]:
    """What the budget plans of the run's user models leave out, one line per (model, table)."""
    lines = []
    for m in _users(run):
        for table in budget.RULES:
            ids, why = budget.left_out(table, m.plan, USER_TABLES[table](m))
            if ids:
                lines.append(f"{m.name}: {table}: {len(ids)} case{'s' if len(ids) != 1 else ''} left out by the budget "
                             f"plan ({m.plan.why}) - {why}: {', '.join(ids)}")
    return lines


def _deep(run: RunSettings | None) -> bool:
    return bool(run is not None and run.deep)


def _p(**kwargs: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(kwargs.items()))


def draft_tokens_of(path: str) -> int | None:
    """The constant draft length a path runs with: none for plain decoding, one token for an MTP
    layer, DRAFT_TOKENS for an assistant or prompt lookup."""
    return None if path == "plain" else 1 if path == "mtp" else DRAFT_TOKENS


# ----------------------------------------------------------------------------------------------
# models, outputs


def models(run: RunSettings | None = None) -> list[Case]:
    """One case per checkpoint (its id is the model's name): the model-level suites."""
    return ([Case(s.name, name=s.name) for s in SPECS if s.role != LONG_CONTEXT]
            + [Case(m.name, name=m.name) for m in _users(run)])


def user_outputs(model: UserModel) -> list[Case]:
    """A user model's outputs cases, from its resolved paths and prompts: every path greedy on
    every prompt in both caches (ensemble at each weight), and each path sampled (seed 0) once on
    the first prompt in a dynamic cache."""
    cases: list[Case] = []
    first = model.prompts[0].id
    for path in model.paths:
        assistant = model.assistant_name if path in ("assisted", "ensemble") else None
        draft = draft_tokens_of(path)
        weights = ENSEMBLE_WEIGHTS if path == "ensemble" else (None,)
        for w in weights:
            for cache in ("dynamic", "static"):
                for prompt in model.prompts:
                    cases.append(Case(model.name, path, cache, prompt.id, weight=w, draft_tokens=draft,
                                      assistant=assistant))
            cases.append(Case(model.name, path, "dynamic", first, "sample", seed=0, weight=w, draft_tokens=draft,
                              assistant=assistant))
    return cases


def deep_trunk(spec: Any) -> bool:
    """A GLM-4.5-layout MTP fixture: 46 trunk layers only because its checkpoint layout puts the MTP
    weights at `model.layers.46.*` - the layout is the point, the depth is not."""
    return spec.role == "mtp" and spec.config.get("num_hidden_layers", 0) >= MTP_TRUNK_LAYERS


def outputs(run: RunSettings | None = None) -> list[Case]:
    """Every (model, path, cache, prompt, decoding) combination that makes sense for the zoo, then
    each user model's (`user_outputs`). A deep-trunk MTP fixture (`deep_trunk`) runs where its
    layout is the point: the MTP path in both caches on both prompts (whose lossless check runs
    plain greedy beside it), and one plain greedy case so a version without MTP still generates
    with the family; prompt lookup and sampling are the other models' (the same code, at a 20th
    of the cost)."""
    cases: list[Case] = []
    for spec in (s for s in SPECS if s.role in ("target", "mtp")):
        model, is_mtp = spec.name, spec.role == "mtp"
        if deep_trunk(spec):
            cases.append(Case(model, "plain", "dynamic", "short-0"))
            cases += [Case(model, "mtp", cache, prompt, draft_tokens=1)
                      for cache in ("dynamic", "static") for prompt in ("short-0", "long-0")]
            continue
        for cache in ("dynamic", "static"):
            for prompt in ("short-0", "long-0"):
                cases.append(Case(model, "plain", cache, prompt))
                cases.append(Case(model, "prompt_lookup", cache, prompt, draft_tokens=DRAFT_TOKENS))
                if is_mtp:
                    cases.append(Case(model, "mtp", cache, prompt, draft_tokens=1))
                else:
                    cases.append(Case(model, "assisted", cache, prompt, draft_tokens=DRAFT_TOKENS,
                                      assistant=ASSISTANT))
                if model == TARGET:
                    for w in ENSEMBLE_WEIGHTS:
                        cases.append(Case(model, "ensemble", cache, prompt, weight=w, draft_tokens=DRAFT_TOKENS,
                                          assistant=ASSISTANT))
        cases.append(Case(model, "plain", "dynamic", "short-1", "sample", seed=0))
        if model == TARGET:
            cases.append(Case(model, "assisted", "dynamic", "short-1", "sample", seed=0, draft_tokens=DRAFT_TOKENS,
                              assistant=ASSISTANT))
            for w in ENSEMBLE_WEIGHTS:
                cases.append(Case(model, "ensemble", "dynamic", "short-1", "sample", seed=0, weight=w,
                                  draft_tokens=DRAFT_TOKENS, assistant=ASSISTANT))
    return cases + _planned(run, "outputs", user_outputs)


# ----------------------------------------------------------------------------------------------
# sampling

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
    for path in model.paths:
        settings = USER_SAMPLING_SETTINGS if path == "plain" else USER_SAMPLING_SETTINGS[:1]
        weight = USER_ENSEMBLE_WEIGHT if path == "ensemble" else None
        assistant = model.assistant_name if path in ("assisted", "ensemble") else None
        out += [SamplingSpec(model.name, path, s, weight, assistant, prompt) for s in settings]
    return out


def sampling(run: RunSettings | None = None) -> list[Case]:
    """The sampling suite's table: the zoo's grid, then each user model's."""
    return [s.case() for s in sampling_grid(_deep(run))] + _planned(run, "sampling", _user_sampling_cases)


def _user_sampling_cases(model: UserModel) -> list[Case]:
    return [s.case() for s in user_sampling(model)]


# ----------------------------------------------------------------------------------------------
# bias: one verification step


@dataclass(frozen=True)
class Context:
    """The first `length` tokens of held-out prompt `prompt` (tokenized by the llama-target
    tokenizer, no special tokens added by it)."""

    prompt: str
    length: int


# found by harness/designs/one_step.py `search_contexts` (tests/test_bias_design.py re-runs it)
CONTEXTS = (Context("long-1", 70), Context("long-0", 80), Context("long-1", 80))
BIAS_WEIGHTS = (None, 0.3, 0.7)


def bias_case_id(w: float | None, ctx: int) -> str:
    return f"{'lossless' if w is None else f'w{w}'}.ctx{ctx}"


def bias(run: RunSettings | None = None) -> list[Case]:
    """One case per (w, context): "<lossless|w0.3|w0.7>.ctx<i>", each with its own seed."""
    return [Case(TARGET, "ensemble" if w is not None else "assisted", weight=w, assistant=ASSISTANT,
                 name=bias_case_id(w, i), params=_p(ctx=i, order=k))
            for k, (w, i) in enumerate((w, i) for w in BIAS_WEIGHTS for i in range(len(CONTEXTS)))]


# ----------------------------------------------------------------------------------------------
# latency


def user_latency(model: UserModel) -> Case:
    """`<name>.generate`: one greedy generate() per path of the model's (MTP, whose draft schedule
    differs, excepted), plain first - the speculative paths' speedups are over it."""
    paths = tuple(p for p in model.paths if p != "mtp")
    return Case(model.name, name=f"{model.name}.generate", new_tokens=NEW_TOKENS, draft_tokens=DRAFT_TOKENS,
                assistant=model.assistant_name, params=(("paths", paths), ("weight", ENSEMBLE_WEIGHTS[0])))


def latency(run: RunSettings | None = None) -> list[Case]:
    """Prefill and steady-state decode of llama-target (dynamic and static cache), generate() per
    path - llama-target: plain, assisted, prompt lookup, ensemble w=0.3; glm4moe-mtp: plain, MTP -
    then a user model's generate() on its paths but MTP (`user_latency`)."""
    return [
        Case(TARGET, name=f"{TARGET}.prefill"),
        Case(TARGET, name=f"{TARGET}.decode"),
        Case(TARGET, name=f"{TARGET}.generate", new_tokens=NEW_TOKENS, draft_tokens=DRAFT_TOKENS,
             assistant=ASSISTANT, params=(("paths", ("plain", "assisted", "prompt_lookup", "ensemble")),
                                          ("weight", ENSEMBLE_WEIGHTS[0]))),
        Case(MTP, name=f"{MTP}.generate", new_tokens=8, draft_tokens=1, params=(("paths", ("plain", "mtp")),)),
        *(user_latency(m) for m in _users(run)),
    ]


# ----------------------------------------------------------------------------------------------
# contracts


def contract(id: str, probe: str, requires: str | None = None, params: tuple[tuple[str, Any], ...] = (),
             model: str = TARGET) -> Case:
    """One contract: a case named `id` that runs probe `probe` (harness/subjects/hf_contracts.py
    `PROBES`) with `params` (on `model`); `requires`: the generation feature the probe needs."""
    return Case(model, name=id, params=_p(probe=probe, requires=requires, **dict(params)))


CONTRACTS: tuple[Case, ...] = (
    contract("generate-return-default", "generate_return"),
    contract("generate-return-dict", "generate_return", params=_p(return_dict_in_generate=True)),
    contract("generate-return-dict-scores", "generate_return",
             params=_p(return_dict_in_generate=True, output_scores=True, output_logits=True)),
    contract("tokenizer-encode", "tokenizer", params=_p(call="encode")),
    contract("tokenizer-call", "tokenizer", params=_p(call="__call__")),
    contract("tokenizer-call-pt", "tokenizer", params=_p(call="__call__", return_tensors="pt")),
    contract("trust-remote-code-default", "trust_remote_code", params=_p(model_type="harness_custom")),
    contract("trust-remote-code-known-type", "trust_remote_code", params=_p(model_type="llama")),
    contract("generation-config-keys", "generation_config_keys"),
    contract("genconfig-ensemble-weight-0", "genconfig", "assistant_ensemble_weight",
             _p(assistant_ensemble_weight=0.0)),
    contract("genconfig-ensemble-weight-1", "genconfig", "assistant_ensemble_weight",
             _p(assistant_ensemble_weight=1.0)),
    contract("genconfig-ensemble-weight-1.5", "genconfig", "assistant_ensemble_weight",
             _p(assistant_ensemble_weight=1.5)),
    contract("genconfig-ensemble-weight-neg", "genconfig", "assistant_ensemble_weight",
             _p(assistant_ensemble_weight=-0.1)),
    contract("genconfig-ensemble-weight-0.5", "genconfig", "assistant_ensemble_weight",
             _p(assistant_ensemble_weight=0.5)),
    contract("genconfig-use-mtp-true", "genconfig", "use_mtp", _p(use_mtp=True)),
    contract("genconfig-max-new-tokens-neg", "genconfig", params=_p(max_new_tokens=-1)),
    contract("genconfig-top-p-1.5", "genconfig", params=_p(do_sample=True, top_p=1.5)),
    contract("genconfig-temperature-neg", "genconfig", params=_p(do_sample=True, temperature=-1.0)),
    contract("genconfig-unknown-key", "genconfig", params=_p(harness_no_such_key=1)),
    contract("generate-prompt-lookup-with-ensemble", "generate_error", "assistant_ensemble_weight",
             _p(prompt_lookup_num_tokens=3, assistant_ensemble_weight=0.5)),
    contract("generate-ensemble-weight-1.5", "generate_error", "assistant_ensemble_weight",
             _p(assistant=True, assistant_ensemble_weight=1.5)),
    contract("generate-use-mtp-without-heads", "generate_error", "use_mtp", _p(use_mtp=True)),
    contract("accept-use-mtp", "acceptance", params=_p(feature="use_mtp", value=True, model=MTP)),
    contract("accept-use-mtp-without-heads", "acceptance", params=_p(feature="use_mtp", value=True, model=TARGET)),
    # w = 0.1: v = 0.1 p + 0.9 q accepts nearly every greedy draft, an effect no numerics can hide
    # (at w = 0.5 a bf16 run happened to accept exactly what the lossless verifier accepts)
    contract("accept-ensemble-weight", "acceptance",
             params=_p(feature="assistant_ensemble_weight", value=0.1, model=TARGET, assistant=True)),
    contract("capabilities", "capabilities"),
    contract("cache-api", "cache_api"),
    contract("cache-crop-positive", "cache_crop_positive"),
    contract("forward-cache-keyword", "forward_cache_keyword"),
    contract("load-dtype-keywords", "load_dtype_keywords"),
    # v4 spellings v5 keeps or renames (the migration guide), each checked for its effect
    contract("generate-cache-keyword", "generate_cache_keyword"),
    contract("tokenizer-special-tokens-keywords", "tokenizer_special_keywords"),
    contract("save-pretrained-side-effects", "save_pretrained_side_effects"),
)

# The API surface the suites and their users call: (short name, dotted path, workload that calls it
# or None). A signature is recorded for each; with a workload, also the shapes it returned.
_G, _C, _M, _CG = ("transformers.GenerationMixin.", "transformers.cache_utils.", "transformers.masking_utils.",
                   "transformers.generation.candidate_generator.")
ENTRY_POINTS: tuple[tuple[str, str, str | None], ...] = (
    ("generate", _G + "generate", "plain"),
    ("GenerationMixin._sample", _G + "_sample", None),
    ("GenerationMixin._assisted_decoding", _G + "_assisted_decoding", None),
    ("GenerationMixin._get_candidate_generator", _G + "_get_candidate_generator", "assisted"),
    ("GenerationMixin._prepare_generation_config", _G + "_prepare_generation_config", "plain"),
    ("GenerationConfig", "transformers.GenerationConfig", None),
    ("GenerationConfig.validate", "transformers.GenerationConfig.validate", "plain"),
    ("Cache", _C + "Cache", None),
    ("Cache.update", _C + "Cache.update", "plain"),
    ("Cache.get_seq_length", _C + "Cache.get_seq_length", "plain"),
    ("Cache.get_mask_sizes", _C + "Cache.get_mask_sizes", "plain"),
    ("Cache.crop", _C + "Cache.crop", "assisted"),
    ("DynamicCache", _C + "DynamicCache", None),
    ("DynamicCache.crop", _C + "DynamicCache.crop", "assisted"),
    ("StaticCache", _C + "StaticCache", None),
    ("DynamicLayer.update", _C + "DynamicLayer.update", "plain"),
    ("DynamicLayer.get_mask_sizes", _C + "DynamicLayer.get_mask_sizes", "plain"),
    ("DynamicSlidingWindowLayer", _C + "DynamicSlidingWindowLayer", None),
    ("DynamicSlidingWindowLayer.update", _C + "DynamicSlidingWindowLayer.update", "sliding"),
    ("DynamicSlidingWindowLayer.get_mask_sizes", _C + "DynamicSlidingWindowLayer.get_mask_sizes", "sliding"),
    ("StaticLayer", _C + "StaticLayer", None),
    ("StaticLayer.update", _C + "StaticLayer.update", "static"),
    ("StaticSlidingWindowLayer", _C + "StaticSlidingWindowLayer", None),
    ("LinearAttentionLayer", _C + "LinearAttentionLayer", None),
    ("get_layer_types_and_kwargs", _C + "get_layer_types_and_kwargs", "plain"),
    ("create_causal_mask", _M + "create_causal_mask", "plain"),
    ("create_sliding_window_causal_mask", _M + "create_sliding_window_causal_mask", "sliding"),
    ("create_chunked_causal_mask", _M + "create_chunked_causal_mask", None),
    ("AssistedCandidateGenerator", _CG + "AssistedCandidateGenerator", None),
    ("AssistedCandidateGenerator.get_candidates", _CG + "AssistedCandidateGenerator.get_candidates", "assisted"),
    ("AssistedCandidateGenerator.update_candidate_strategy",
     _CG + "AssistedCandidateGenerator.update_candidate_strategy", "assisted"),
    ("PromptLookupCandidateGenerator", _CG + "PromptLookupCandidateGenerator", None),
    ("PromptLookupCandidateGenerator.get_candidates", _CG + "PromptLookupCandidateGenerator.get_candidates",
     "prompt-lookup"),
    ("MTPCandidateGenerator", _CG + "MTPCandidateGenerator", None),
    ("MTPCandidateGenerator.get_candidates", _CG + "MTPCandidateGenerator.get_candidates", "mtp"),
    ("_speculative_sampling", "transformers.generation.utils._speculative_sampling", "assisted-sample"),
    ("MtpModel", "transformers.modeling_layers.MtpModel", None),
)

# Enum-like GenerationConfig fields: (field, candidate values - the union of what 5.13 - 5.24
# declare, plus a value no version should take - the constant that declares them, the generate()
# settings a value needs to matter).
BOGUS = "harness-no-such-value"
ENUM_FIELDS: tuple[tuple[str, tuple[Any, ...], str | None, tuple[tuple[str, Any], ...]], ...] = (
    ("cache_implementation",
     ("dynamic", "dynamic_full", "static", "offloaded", "offloaded_static", "sliding_window", "hybrid",
      "hybrid_chunked", "offloaded_hybrid", "offloaded_hybrid_chunked", "quantized", BOGUS),
     "transformers.generation.configuration_utils.ALL_CACHE_IMPLEMENTATIONS", ()),
    ("num_assistant_tokens_schedule", ("constant", "heuristic", "heuristic_transient", BOGUS), None,
     (("assistant", True),)),
    ("early_stopping", (True, False, "never", BOGUS), None, (("num_beams", 2),)),
)

# Zoo models with recurrent-state (linear-attention) layers: which generate() paths the installed
# version runs on them (transformers refuses assisted decoding on stateful models) and which cache
# layer classes it gives their layers.
STATEFUL: tuple[str, ...] = tuple(s.name for s in SPECS if has_linear_attention(s.config))

API: tuple[Case, ...] = (
    *(contract(f"api-{name}", "api_entry", params=_p(target=target, workload=workload))
      for name, target, workload in ENTRY_POINTS),
    *(contract(f"genconfig-values-{field}", "genconfig_values",
               params=_p(field=field, values=values, declared=declared, run=run))
      for field, values, declared, run in ENUM_FIELDS),
    *(contract(f"generation-defaults-{c.model}", "generation_defaults", params=_p(model=c.model), model=c.model)
      for c in models()),
    *(contract(f"mtp-checkpoint-{s.name}", "mtp_checkpoint", params=_p(model=s.name), model=s.name)
      for s in SPECS if s.role == "mtp"),
    *(contract(f"stateful-paths-{name}", "stateful_paths", params=_p(model=name), model=name) for name in STATEFUL),
)

# The v4 API surface (transformers 4.57): the cache, mask and tokenizer entry points a v4 caller
# used that v5 removed, renamed or kept only for compatibility - a signature each ("<missing>" where a
# version has none), so the 4.57 -> 5.x report says which calls a caller must change.
_A = "transformers.modeling_attn_mask_utils."
V4_ENTRY_POINTS: tuple[tuple[str, str, str | None], ...] = (
    ("DynamicCache.from_legacy_cache", _C + "DynamicCache.from_legacy_cache", None),
    ("DynamicCache.to_legacy_cache", _C + "DynamicCache.to_legacy_cache", None),
    ("SlidingWindowCache", _C + "SlidingWindowCache", None),
    ("HybridCache", _C + "HybridCache", None),
    ("HybridChunkedCache", _C + "HybridChunkedCache", None),
    ("OffloadedCache", _C + "OffloadedCache", None),
    ("SlidingWindowLayer", _C + "SlidingWindowLayer", None),
    ("ChunkedSlidingLayer", _C + "ChunkedSlidingLayer", None),
    ("Cache.get_max_cache_shape", _C + "Cache.get_max_cache_shape", None),
    ("GenerationMixin._get_cache", _G + "_get_cache", None),
    ("_prepare_4d_causal_attention_mask", _A + "_prepare_4d_causal_attention_mask", None),
    ("AttentionMaskConverter", _A + "AttentionMaskConverter", None),
    ("PreTrainedTokenizerFast", "transformers.PreTrainedTokenizerFast", None),
    ("TokenizersBackend", "transformers.TokenizersBackend", None),
    ("GreedySearchDecoderOnlyOutput", "transformers.generation.utils.GreedySearchDecoderOnlyOutput", None),
)
API_V4: tuple[Case, ...] = (
    *(contract(f"api-{name}", "api_entry", params=_p(target=target, workload=workload))
      for name, target, workload in V4_ENTRY_POINTS),
    # v5 folds batch_decode into decode and encode_plus into __call__ (the migration guide)
    contract("tokenizer-decode-batch", "tokenizer_decode", params=_p(call="decode")),
    contract("tokenizer-batch-decode", "tokenizer_decode", params=_p(call="batch_decode")),
    contract("tokenizer-encode-plus", "tokenizer", params=_p(call="encode_plus")),
)


def contracts(run: RunSettings | None = None) -> list[Case]:
    """The contracts suite's table (the same in every run)."""
    return [*CONTRACTS, *API, *API_V4]


# ----------------------------------------------------------------------------------------------
# loading: the load contract

LOAD_PROMPT = "short-0"
# llama-target's checkpoint variants (harness/designs/loading.py `VARIANTS` says what each edits)
LOAD_VARIANTS = ("config-fp16", "config-no-dtype", "legacy-config", "genconfig-file", "genconfig-max-new-tokens")


def load_case(model: str, variant: str, prompt: str = LOAD_PROMPT, own: bool = False) -> Case:
    """`<model>.<variant>`: the checkpoint (as shipped, or a variant built from its files) loaded
    with no arguments; `own`: a user's checkpoint, whose every route is run."""
    return Case(model, prompt=prompt, name=f"{model}.{variant}", params=_p(variant=variant, own=own))


def loading(run: RunSettings | None = None) -> list[Case]:
    """Every zoo model as shipped, llama-target's variants, then each user model as shipped (on
    its first prompt)."""
    return ([load_case(s.name, "as-shipped") for s in SPECS if s.role != LONG_CONTEXT]
            + [load_case(TARGET, v) for v in LOAD_VARIANTS]
            + [load_case(m.name, "as-shipped", m.prompts[0].id if m.prompts else LOAD_PROMPT, own=True)
               for m in _users(run)])


# ----------------------------------------------------------------------------------------------
# stopping and streaming

STOP_TOKENS = 12  # new tokens of a stopping or streaming case: a handful, the suite stays cheap
STOP_PROMPTS = ("short-0", "short-1")  # the first runs alone; a batch of 2 holds both, cut to one length
STOP_CHECKS = ("eos-list", "stop-string-hit", "stop-string-never", "max-new-tokens", "max-length",
               "max-length-and-new-tokens", "min-new-tokens", "min-new-tokens-release", "pad-batch", "pad-batch-default")
STOP_MODELS = (TARGET,)


def _stop_prompts(model: UserModel) -> tuple[str, str]:
    ids = [p.id for p in model.prompts] or list(STOP_PROMPTS)
    return (ids[0], ids[1] if len(ids) > 1 else ids[0])


def stop_cases(model: str, prompts: tuple[str, str]) -> list[Case]:
    """`<model>.stop.<check>`: one stopping setting of `STOP_CHECKS` on the model's first prompt
    (the batch checks: both prompts)."""
    return [Case(model, "plain", "dynamic", prompts[0], new_tokens=STOP_TOKENS, name=f"{model}.stop.{check}",
                 params=_p(check=check, prompts=prompts)) for check in STOP_CHECKS]


def stopping(run: RunSettings | None = None) -> list[Case]:
    """The stopping cases of the zoo's `STOP_MODELS`, then each user model's (its first two prompts)."""
    return ([c for m in STOP_MODELS for c in stop_cases(m, STOP_PROMPTS)]
            + _planned(run, "stopping", _user_stop_cases))


def _user_stop_cases(model: UserModel) -> list[Case]:
    return stop_cases(model.name, _stop_prompts(model))


def stream_cases(model: str, prompts: tuple[str, str], assistant: str | None) -> list[Case]:
    """`<model>.stream.plain`, `<model>.stream.assisted` (with an assistant) and `<model>.stream.batch`
    (a batch of 2, which the streamers refuse)."""
    cases = [Case(model, "plain", "dynamic", prompts[0], new_tokens=STOP_TOKENS, name=f"{model}.stream.plain",
                  params=_p(check="stream", prompts=prompts))]
    if assistant is not None:
        cases.append(Case(model, "assisted", "dynamic", prompts[0], new_tokens=STOP_TOKENS, draft_tokens=DRAFT_TOKENS,
                          assistant=assistant, name=f"{model}.stream.assisted",
                          params=_p(check="stream", prompts=prompts)))
    cases.append(Case(model, "plain", "dynamic", prompts[0], new_tokens=STOP_TOKENS, name=f"{model}.stream.batch",
                      params=_p(check="stream-batch", prompts=prompts)))
    return cases


def streaming(run: RunSettings | None = None) -> list[Case]:
    """The streaming cases of llama-target (assisted by llama-assistant), then each user model's
    (assisted where it has an assistant)."""
    return stream_cases(TARGET, STOP_PROMPTS, ASSISTANT) + _planned(run, "streaming", _user_stream_cases)


def _user_stream_cases(model: UserModel) -> list[Case]:
    return stream_cases(model.name, _stop_prompts(model), model.assistant_name if "assisted" in model.paths else None)


# ----------------------------------------------------------------------------------------------
# long context

LONG_PROMPT = "long-0"  # 83 tokens: past the rope fixtures' original_max_position_embeddings (32) at once
LONG_TOKENS = 20  # prompt + new tokens reach position 102, past 3 x 32
ROPE_MODELS = tuple(s.name for s in SPECS if s.role == LONG_CONTEXT)
# the 4.x config.json each rope model is also loaded from: Llama 3.1's (`rope_scaling` with `rope_type`) and the
# form Qwen2.5's long-context recipe publishes for yarn (`rope_scaling` with `type`)
LEGACY_TYPE_KEYS = ("rope_type", "type")
SLIDING_MODEL = "mistral-sliding"
SLIDING_PROMPTS = ("long-0", "long-1")  # two lengths, both past the window: the shorter row is left-padded
SLIDING_TOKENS = 12
SLIDING_CUT = 48  # the second row's prompt tokens: three windows, 35 fewer than the first row's


def long_context(run: RunSettings | None = None) -> list[Case]:
    """`<rope model>.far` and `<rope model>.legacy-key` (its config.json under 4.x's `rope_scaling`) per
    rope-scaled fixture, `mistral-sliding.batch-past-window` (harness/designs/long_context.py)."""
    far = [Case(m, prompt=LONG_PROMPT, new_tokens=LONG_TOKENS, name=f"{m}.far", params=_p(check="far"))
           for m in ROPE_MODELS]
    legacy = [Case(m, prompt=LONG_PROMPT, new_tokens=LONG_TOKENS, name=f"{m}.legacy-key",
                   params=_p(check="legacy-key", type_key=key)) for m, key in zip(ROPE_MODELS, LEGACY_TYPE_KEYS, strict=True)]
    batch = Case(SLIDING_MODEL, prompt=SLIDING_PROMPTS[0], new_tokens=SLIDING_TOKENS,
                 name=f"{SLIDING_MODEL}.batch-past-window", params=_p(check="batch", prompts=SLIDING_PROMPTS, cut=SLIDING_CUT))
    return [*far, *legacy, batch]


# ----------------------------------------------------------------------------------------------
# batching: each prompt alone vs inside a padded batch

BATCH_PROMPTS = ("short-0", "long-0", "short-1")  # 20, 83 and 19 tokens: two rows left-padded by ~60
BATCH_CHECKS = ("greedy", "sample", "right-padded", "assisted", "prompt_lookup")
# padding meets sliding windows (every layer) and soft-capped eager attention: plain greedy only
BATCH_ALSO = ("mistral-sliding", "gemma2-softcap")


def _batch_prompts(model: UserModel) -> tuple[str, ...]:
    ids = [p.id for p in model.prompts] or list(BATCH_PROMPTS)
    return tuple(ids[:len(BATCH_PROMPTS)])


def batch_case(model: str, check: str, prompts: tuple[str, ...], assistant: str | None = None) -> Case:
    """`<model>.batch.<check>`: the prompts in one padded batch (harness/designs/batching.py says
    what each check runs), STOP_TOKENS new tokens."""
    path = check if check in ("assisted", "prompt_lookup") else "plain"
    return Case(model, path, "dynamic", prompts[0], "sample" if check == "sample" else "greedy",
                seed=0 if check == "sample" else None, draft_tokens=draft_tokens_of(path),
                assistant=assistant if path == "assisted" else None, new_tokens=STOP_TOKENS,
                name=f"{model}.batch.{check}", params=_p(check=check, prompts=prompts))


def batching(run: RunSettings | None = None) -> list[Case]:
    """Every check on llama-target (assisted by llama-assistant), plain greedy on `BATCH_ALSO`, then
    each user model's greedy, right-padded and speculative checks on its first prompts."""
    cases = [batch_case(TARGET, c, BATCH_PROMPTS, ASSISTANT) for c in BATCH_CHECKS]
    cases += [batch_case(m, "greedy", BATCH_PROMPTS) for m in BATCH_ALSO]
    return cases + _planned(run, "batching", _user_batch_cases)


def _user_batch_cases(model: UserModel) -> list[Case]:
    checks = ["greedy", "right-padded"] + [p for p in ("assisted", "prompt_lookup") if p in model.paths]
    return [batch_case(model.name, c, _batch_prompts(model), model.assistant_name) for c in checks]


# ----------------------------------------------------------------------------------------------
# continuous: several requests served at once by generate_batch

CONTINUOUS_CHECKS = ("greedy", "sample", "processors", "beam")
CONTINUOUS_TOKENS = 12  # few steps: each case is one generate_batch of three requests (~0.2 s)


def continuous_case(model: str, check: str, prompts: tuple[str, ...]) -> Case:
    """`<model>.cb.<check>`: the prompts as requests of one generate_batch (harness/designs/continuous.py
    says what each check runs), CONTINUOUS_TOKENS new tokens each."""
    return Case(model, prompt=prompts[0], decoding="sample" if check == "sample" else "greedy",
                seed=0 if check == "sample" else None, new_tokens=CONTINUOUS_TOKENS, name=f"{model}.cb.{check}",
                params=_p(check=check, prompts=prompts))


def continuous(run: RunSettings | None = None) -> list[Case]:
    """Every check on llama-target's batching prompts, then each user model's greedy on its first prompts."""
    cases = [continuous_case(TARGET, c, BATCH_PROMPTS) for c in CONTINUOUS_CHECKS]
    cases += [continuous_case(m.name, "greedy", _batch_prompts(m)) for m in _users(run)]
    return cases


# ----------------------------------------------------------------------------------------------
# text: tokenizers and chat templates

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                   "vocab.json", "merges.txt", "added_tokens.json")
CHAT_MODELS = (TARGET,)


def tokenizer_groups(manifest: dict[str, Any] | None, names: Sequence[str]) -> list[tuple[str, ...]]:
    """The zoo models grouped by their tokenizer files' digests in the manifest (one group per
    distinct tokenizer, each in `names`' order, groups in the order of their first model); a model the
    manifest does not list is a group of its own."""
    groups: dict[Any, list[str]] = {}
    for name in names:
        files = ((manifest or {}).get("models", {}).get(name) or {}).get("files")
        key = tuple(sorted((f, d) for f, d in files.items() if f in TOKENIZER_FILES)) if files else name
        groups.setdefault(key, []).append(name)
    return [tuple(g) for g in groups.values()]


def _zoo_manifest(run: RunSettings | None) -> dict[str, Any] | None:
    try:
        return fixtures_load.manifest(run.config.models_dir) if run is not None else fixtures_load.manifest()
    except fixtures_load.FixtureError:
        return None  # every model its own group; loading it reports the missing manifest


def tokenizers(run: RunSettings | None = None) -> list[Case]:
    """`<model>.tokenizer`: the first model of each distinct zoo tokenizer (`shared_by` names the
    group), then each user model's own tokenizer."""
    groups = tokenizer_groups(_zoo_manifest(run), [s.name for s in SPECS])
    return ([Case(g[0], name=f"{g[0]}.tokenizer", params=_p(shared_by=g)) for g in groups]
            + [Case(m.name, name=f"{m.name}.tokenizer", params=_p(own=True)) for m in _users(run)])


def zoo_tokenizers(run: RunSettings | None = None) -> list[Case]:
    """`<tok>.tokenizer`: each tokenizer of the tokenizer zoo (harness/fixtures/tokzoo.py)."""
    return [Case(t.name, name=f"{t.name}.tokenizer") for t in tokzoo.TOKENIZERS]


# (tokenizer, template): the families' chat templates (harness/fixtures/chat_<template>.jinja)
ZOO_CHATS = (("tok-spm", "mistral"), ("tok-spm", "gemma"), ("tok-bytelevel", "llama3"), ("tok-added", "chatml"))


def zoo_chats(run: RunSettings | None = None) -> list[Case]:
    """`<tok>.chat.<template>`: a family's chat template with its zoo tokenizer, generated from with
    llama-target's weights."""
    return [Case(tok, name=f"{tok}.chat.{template}", params=_p(template=template)) for tok, template in ZOO_CHATS]


def chats(run: RunSettings | None = None) -> list[Case]:
    """`<model>.chat`: the chat-template fixture (harness/fixtures/chat_template.jinja) with the
    zoo's `CHAT_MODELS`, then each user model's own template."""
    return ([Case(m, name=f"{m}.chat") for m in CHAT_MODELS]
            + [Case(m.name, name=f"{m.name}.chat", params=_p(own=True)) for m in _users(run)])


# ----------------------------------------------------------------------------------------------
# beam search, and the decoding modes moved out of the library

BEAM_TOKENS = 6  # new tokens of a beam case: a handful, the suite stays cheap
BEAM_PROMPTS = ("short-0", "short-1")  # the batch case holds both, cut to one length
# (name, num_beams, length_penalty, early_stopping, num_return_sequences); "batch": a batch of 2
BEAM_SETTINGS: tuple[tuple[str, int, float, bool | str, int], ...] = (
    ("n2", 2, 1.0, False, 1),
    ("n3", 3, 1.0, False, 3),
    ("n3.lp0", 3, 0.0, False, 3),
    ("n4.lp2", 4, 2.0, False, 4),
    ("n3.early-true", 3, 1.0, True, 3),
    ("n3.early-never", 3, 1.0, "never", 3),
    ("n3.batch", 3, 1.0, False, 3),
)
# (name, generate() settings, the prompt's last token forced as a word)
BEAM_MODES: tuple[tuple[str, tuple[tuple[str, Any], ...], bool], ...] = (
    ("group-beam", _p(num_beams=4, num_beam_groups=2, diversity_penalty=1.0), False),
    ("contrastive", _p(penalty_alpha=0.6, top_k=4), False),
    ("constrained-beam", _p(num_beams=2), True),
    ("dola", _p(dola_layers="low"), False),
)


def beam_cases(model: str, prompts: tuple[str, str]) -> list[Case]:
    """`<model>.beam.<name>`: one beam-search setting of `BEAM_SETTINGS` on the first prompt; the batch
    case holds both, the second first (its beams finish early while the other row's run on)."""
    cases = []
    for name, k, lp, es, ret in BEAM_SETTINGS:
        batch = name.endswith("batch")
        order = (prompts[1], prompts[0]) if batch else prompts
        cases.append(Case(model, "plain", "dynamic", order[0], new_tokens=BEAM_TOKENS, name=f"{model}.beam.{name}",
                          params=_p(num_beams=k, length_penalty=lp, early_stopping=es, num_return_sequences=ret,
                                    rows=2 if batch else 1, prompts=order)))
    return cases


def beam(run: RunSettings | None = None) -> list[Case]:
    """llama-target's beam-search cases, then each user model's (its first two prompts)."""
    return beam_cases(TARGET, BEAM_PROMPTS) + _planned(run, "beam", _user_beam_cases)


def _user_beam_cases(model: UserModel) -> list[Case]:
    return beam_cases(model.name, _stop_prompts(model))


def beam_mode_cases(model: str, prompt: str) -> list[Case]:
    """`<model>.mode.<name>`: generate() with the settings of a decoding mode v5 moved to the hub."""
    return [Case(model, "plain", "dynamic", prompt, new_tokens=BEAM_TOKENS, name=f"{model}.mode.{name}",
                 params=_p(settings=settings, force_prompt_token=force)) for name, settings, force in BEAM_MODES]


def beam_modes(run: RunSettings | None = None) -> list[Case]:
    """llama-target's moved-mode cases, then each user model's (its first prompt)."""
    return beam_mode_cases(TARGET, BEAM_PROMPTS[0]) + [c for m in _users(run)
                                                        for c in beam_mode_cases(m.name, _stop_prompts(m)[0])]


KERNEL_DTYPES = ("fp32", "bf16")
SDPA_BACKENDS = ("math", "flash", "efficient", "cudnn")  # torch.nn.attention.SDPBackend members, by short name
CPU_SDPA_BACKENDS = ("math", "flash")  # the kernels torch has on a CPU (sdp_utils_cpp: flash, then math)


def kernels(run: RunSettings | None = None) -> list[Case]:
    """`sdpa.<backend>.<dtype>`: torch's SDPA kernels, one case per backend the run's device has
    (a CPU: math, flash; CUDA: efficient and cudnn too) and dtype (fp32, bf16 - whatever the run's)."""
    device = (run.device if run else "cpu").split(":", 1)[0]
    backends = CPU_SDPA_BACKENDS if device == "cpu" else SDPA_BACKENDS
    return [Case("torch", name=f"sdpa.{b}.{d}", params=_p(backend=b, dtype=d)) for b in backends for d in KERNEL_DTYPES]


def kernel_matmuls(run: RunSettings | None = None) -> list[Case]:
    """`matmul.fp32`: torch's fp32 linear under each matmul precision flag (the kernels suite)."""
    return [Case("torch", name="matmul.fp32", params=_p(op="linear", dtype="fp32"))]


# a user model's cases per table the budget plan narrows (harness/settings/budget.py RULES)
USER_TABLES: dict[str, Callable[[UserModel], list[Case]]] = {
    "outputs": user_outputs, "sampling": _user_sampling_cases, "stopping": _user_stop_cases,
    "streaming": _user_stream_cases, "beam": _user_beam_cases, "batching": _user_batch_cases}


def user_case_counts(run: RunSettings, model: UserModel) -> dict[str, int]:
    """How many tests each suite runs on `model` under its plan (the preflight's input,
    harness/settings/preflight.py `estimate`): the model-level suites' tests per model, every other
    table's cases of the model; "sampling-backstop": the sampling cases that also draw the black box."""
    def count(table: Callable[[RunSettings], list[Case]]) -> int:
        return sum(1 for c in table(run) if c.model == model.name)

    counts = {"outputs": count(outputs), "sampling": count(sampling), "latency": count(latency),
              "stopping": count(stopping), "streaming": count(streaming), "beam": count(beam),
              "beam_modes": count(beam_modes), "batching": count(batching), "caches": 3, "backends": 4,
              "loading": count(loading), "text": count(chats) + count(tokenizers)}
    if not model.plan.budgeted:
        counts["sampling-backstop"] = counts["sampling"] + sum(1 for c in user_outputs(model) if c.decoding == "sample")
    return counts
