"""Every suite's case table, in one namespace and one shape (the shared roles and helpers in
harness/cases/common.py; the contracts and text tables in modules of their own).

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
    compiled(run)   static-cache generate() compiled through aot_eager (and inductor in deep mode) on
                    llama-target, then each user model through aot_eager
    quantized(run)  llama-target loaded with torchao's int8 weight-only quantization (the serving extra)
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

# every table in one namespace (`cases.<table>`): the shared helpers, then the tables of their own modules
from harness.cases.common import (  # noqa: F401
    ASSISTANT,
    DRAFT_TOKENS,
    ENSEMBLE_WEIGHTS,
    LONG_CONTEXT,
    MTP,
    NEW_TOKENS,
    TARGET,
    _deep,
    _p,
    _planned,
    _users,
    draft_tokens_of,
    models,
)
from harness.cases.contracts import API, CONTRACTS, ENTRY_POINTS, ENUM_FIELDS, STATEFUL, contract, contracts  # noqa: F401
from harness.cases.kernels import CPU_SDPA_BACKENDS, KERNEL_DTYPES, SDPA_BACKENDS, kernel_matmuls, kernels  # noqa: F401
from harness.cases.text import (  # noqa: F401
    CHAT_MODELS,
    TOKENIZER_FILES,
    ZOO_CHATS,
    chats,
    tokenizer_groups,
    tokenizers,
    zoo_chats,
    zoo_tokenizers,
)
from harness.engine.processors import Sampling
from harness.fixtures.zoo import MTP_TRUNK_LAYERS, SPECS
from harness.schema import Case
from harness.settings import budget
from harness.settings.models import UserModel
from harness.settings.run import RunSettings


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



# ----------------------------------------------------------------------------------------------
# models, outputs




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
    llama-target's serving paths (compiled static cache, continuous batching: harness/designs/latency.py),
    then a user model's generate() on its paths but MTP (`user_latency`)."""
    return [
        Case(TARGET, name=f"{TARGET}.prefill"),
        Case(TARGET, name=f"{TARGET}.decode"),
        Case(TARGET, name=f"{TARGET}.generate", new_tokens=NEW_TOKENS, draft_tokens=DRAFT_TOKENS,
             assistant=ASSISTANT, params=(("paths", ("plain", "assisted", "prompt_lookup", "ensemble")),
                                          ("weight", ENSEMBLE_WEIGHTS[0]))),
        Case(MTP, name=f"{MTP}.generate", new_tokens=8, draft_tokens=1, params=(("paths", ("plain", "mtp")),)),
        Case(TARGET, name=f"{TARGET}.serving", new_tokens=NEW_TOKENS),
        *(user_latency(m) for m in _users(run)),
    ]


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
BATCH_CHECKS = ("greedy", "sample", "right-padded", "tokenizer-padded", "assisted", "prompt_lookup")
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
    checks = ["greedy", "right-padded", "tokenizer-padded"] + [p for p in ("assisted", "prompt_lookup") if p in model.paths]
    return [batch_case(model.name, c, _batch_prompts(model), model.assistant_name) for c in checks]


# ----------------------------------------------------------------------------------------------
# continuous: several requests served at once by generate_batch

CONTINUOUS_CHECKS = ("greedy", "sample", "processors", "beam", "requests")
CONTINUOUS_TOKENS = 12  # few steps: each case is one generate_batch of three requests (~0.2 s)
# the sampled case's draws are tested as draws (continuous.py draws_as_engine): 3 x 32 of them, so that a
# sampler stuck on the mode fails at a full run's per-test alpha in bf16 too, where near-ties make the
# engine's mode another token now and then (3 x 12 did not: 34 of 36 modes, p > 2e-5)
CONTINUOUS_SAMPLE_TOKENS = 32


def continuous_case(model: str, check: str, prompts: tuple[str, ...]) -> Case:
    """`<model>.cb.<check>`: the prompts as requests of one generate_batch (harness/designs/continuous.py
    says what each check runs), CONTINUOUS_TOKENS new tokens each (the sampled case's
    CONTINUOUS_SAMPLE_TOKENS)."""
    sampled = check in ("sample", "requests")  # requests: the manager, one request sampled (continuous_requests.py)
    return Case(model, prompt=prompts[0], decoding="sample" if sampled else "greedy",
                seed=0 if sampled else None, name=f"{model}.cb.{check}",
                new_tokens=CONTINUOUS_SAMPLE_TOKENS if check == "sample" else CONTINUOUS_TOKENS,
                params=_p(check=check, prompts=prompts))


def continuous(run: RunSettings | None = None) -> list[Case]:
    """Every check on llama-target's batching prompts, then each user model's greedy on its first prompts."""
    cases = [continuous_case(TARGET, c, BATCH_PROMPTS) for c in CONTINUOUS_CHECKS]
    cases += [continuous_case(m.name, "greedy", _batch_prompts(m)) for m in _users(run)]
    return cases


# ----------------------------------------------------------------------------------------------
# compiled static-cache decoding


def compiled_case(model: str, backend: str) -> Case:
    """`<model>.compiled.<backend>`: generate() on a static cache with a CompileConfig for torch's
    `backend` (harness/designs/compiled.py says which calls it makes)."""
    return Case(model, cache="static", prompt="short-0", name=f"{model}.compiled.{backend}", params=_p(backend=backend))


COMPILED_SLIDING = "mistral-sliding"  # every layer a sliding window: the static cache's sliding layers


def compiled(run: RunSettings | None = None) -> list[Case]:
    """llama-target through aot_eager (graph capture and functionalization, seconds on a CPU), in deep
    mode through inductor too (generated kernels: ~30 s to compile on 2 cores); mistral-sliding through
    aot_eager (a full run: the quick tier keeps llama-target) - a sliding window's static cache layer
    keeps its length as a Python int that dynamo guards on, so each decode step recompiles until the
    recompile limit sends the rest eager (transformers #44609: found by this suite on a user's Gemma 2);
    each user model through aot_eager."""
    backends = ("aot_eager", "inductor") if _deep(run) else ("aot_eager",)
    return ([compiled_case(TARGET, b) for b in backends] + [compiled_case(COMPILED_SLIDING, "aot_eager")]
            + [compiled_case(m.name, "aot_eager") for m in _users(run)])


# ----------------------------------------------------------------------------------------------
# quantized weights


def quantized(run: RunSettings | None = None) -> list[Case]:
    """`<model>.quantized.int8-weight-only`: llama-target loaded with torchao's int8 weight-only
    quantization (harness/designs/quantized.py; torchao is the harness's optional `serving` extra)."""
    return [Case(TARGET, prompt="short-0", new_tokens=8, name=f"{TARGET}.quantized.int8-weight-only",
                 params=_p(scheme="int8-weight-only"))]


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


# The zoo's second batch: whether a row's beams finish while the other row's run on (what a batch-wide
# early-stopping heuristic gets wrong, transformers #38778) depends on the numbers. Measured with the
# fault beam-heuristic-across-batch on llama-target: with the rows (short-1, short-0) it changes the
# result in fp32 only; with (short-3, short-0) in fp32 and in bf16, where rule_on_own_scores sees it.
BEAM_SECOND_BATCH = ("n3.batch2", ("short-3", "short-0"))  # n3.batch's settings on these rows


def _beam_case(model: str, name: str, k: int, lp: float, es: bool | str, ret: int,
               order: tuple[str, ...], rows: int) -> Case:
    return Case(model, "plain", "dynamic", order[0], new_tokens=BEAM_TOKENS, name=f"{model}.beam.{name}",
                params=_p(num_beams=k, length_penalty=lp, early_stopping=es, num_return_sequences=ret,
                          rows=rows, prompts=order))


def beam_cases(model: str, prompts: tuple[str, str]) -> list[Case]:
    """`<model>.beam.<name>`: one beam-search setting of `BEAM_SETTINGS` on the first prompt; the batch
    case holds both, the second first (its beams finish early while the other row's run on)."""
    return [_beam_case(model, name, k, lp, es, ret, (prompts[1], prompts[0]), 2) if name.endswith("batch")
            else _beam_case(model, name, k, lp, es, ret, prompts, 1) for name, k, lp, es, ret in BEAM_SETTINGS]


def beam(run: RunSettings | None = None) -> list[Case]:
    """llama-target's beam-search cases and its second batch (`BEAM_SECOND_BATCH`: n3.batch's
    settings on other rows), then each user model's (its first two prompts)."""
    name, order = BEAM_SECOND_BATCH
    _, k, lp, es, ret = next(s for s in BEAM_SETTINGS if s[0] == "n3.batch")
    return [*beam_cases(TARGET, BEAM_PROMPTS), _beam_case(TARGET, name, k, lp, es, ret, order, len(order)),
            *_planned(run, "beam", _user_beam_cases)]


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
