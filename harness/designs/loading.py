"""The load contract (suites/test_loading.py): what `AutoModelForCausalLM.from_pretrained(path)`
resolves when the caller passes nothing, per checkpoint, and which source wins for a generation
setting given in more than one place. Upgrades move these defaults silently: v5 loads with
``dtype="auto"`` (a checkpoint whose config says float16 arrives in fp16 where v4 gave fp32, PR
#42805), generation parameters left ``model.config``, and ``max_length`` against
``max_new_tokens`` has changed hands more than once (#13983, #35765, PR #34026).

A case is a checkpoint - a zoo model or yours as shipped, or a `Variant` of llama-target built in
the test's tmp dir (its weights and tokenizer linked, its config.json edited, a
generation_config.json written) - loaded once with no arguments, on the CPU: what a caller who passes
nothing gets, whatever the run's dtype and device (a bf16 run records the same load as an fp32 one).
Fields (all exact):

  dtype              {"parameters": the loaded parameters' dtype, "config": config.dtype after load}
  attn_implementation config._attn_implementation after the plain load; as shipped, the mechanism of
                     `logits` (extra ``mechanism_of``: a change of it while the logits moved to the
                     engine's is that fix, any other change keeps its verdict)
  kernels            (as shipped) whether the load kernelized the model with the `kernels` library's hub
                     kernels (`use_kernels`: 5.25 does by default - a new required dependency -, earlier
                     releases do not): one cause across models; the layers that name a hub kernel
                     (`kernel_layers`: RMSNorm, SiLU, ...) and the kernels package's version ride along
                     (extras, never compared)
  logits             (tensor, as shipped) the plainly loaded model's logits at the prompt's last position
                     (a vocabulary above 4096: its top 256); its oracle is the reference engine
  logits_vs_engine   (a reference, tensor, as shipped) ... equal the engine's logits of the same prompt
                     (harness/subjects/engine.py `logits_cached`; the same columns - `narrowed`), within the
                     cross-implementation tolerance (mixture-of-experts and linear-attention models at their
                     allowances; a bf16 run holds the fp32 load at bf16's rounding); skipped with the reason
                     where the engine has no such model, `not-checkable` where the load arrived in a coarser
                     dtype than the run's (your bf16 checkpoint in an fp32 run)
  generation_config  {"built_from": "generation_config.json" | "config.json" (transformers' own stamp,
                     `_from_model_config`), "file_present": whether the checkpoint has a
                     generation_config.json, "non_default": each value that differs from a default
                     GenerationConfig()}
  plain_generate     generate(input_ids) and nothing else, stopped by the harness after its first token:
                     the token budget the decoding loop received (max_length - prompt), max_new_tokens,
                     and the cache object the first forward got (class, layer classes with counts)
  settings_precedence (variants with a generation_config.json, and your models) per route a caller has
                     for a setting - the file alone, model.generation_config, model.config, a
                     GenerationConfig argument (one that names another setting, one at the global
                     default), keyword arguments, argument + keywords - the effective
                     repetition_penalty and top_k the decoding loop received, or the error raised
  length_precedence  the same for the length: the file alone, max_new_tokens, max_length, both, and each
                     inside a GenerationConfig argument - the budget, max_new_tokens and the new tokens
                     generated (at most CAP: a harness stopping criterion, never a generation setting)
  processors_built   (a reference, exact) per call above, the logits-processor list generate() built from
                     the loaded generation config - each processor read as the engine's entry - against
                     the list the harness builds itself (harness/engine/pipeline.py `build`) from the
                     config the version handed its builder, the call's keyword arguments taking their
                     value: a setting the config holds but no processor applies (or one built with
                     another value) is a regression on a first run too. Which source wins is the
                     precedence fields' (baseline) business; this one checks that what won is applied.

Every length is given as a budget over the prompt (`absolute` adds the prompt's length), so a
record reads the same for any prompt and the value each source set is told apart by its number.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.engine import pipeline
from harness.schema import Case, Observation
from harness.subjects import hf_loading as hf
from harness.subjects import observe

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

CONFIG_FILE, GENERATION_FILE = "config.json", "generation_config.json"
BUDGET_KEYS = ("max_length",)  # lengths written as a budget over the prompt (see `absolute`)
CAP = 8  # the most new tokens a precedence call generates (every budget below is smaller)
FIRST_TOKEN = 1  # plain_generate stops after the prefill's token: its cache and config are known by then


def absolute(values: dict[str, Any], prompt_len: int) -> dict[str, Any]:
    """`values` with each BUDGET_KEYS entry turned from new tokens into a total length."""
    return {k: v + prompt_len if k in BUDGET_KEYS and isinstance(v, int) else v for k, v in values.items()}


def non_default(values: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The entries of a generation config that differ from (or are absent in) the defaults."""
    missing = object()
    return {k: values[k] for k in sorted(values) if defaults.get(k, missing) != values[k]}


def built_from(from_model_config: bool) -> str:
    """The file transformers says it built the generation config from."""
    return CONFIG_FILE if from_model_config else GENERATION_FILE


# ----------------------------------------------------------------------------------------------
# checkpoint variants


@dataclass(frozen=True)
class Variant:
    """A checkpoint made from a model's files: config.json with `config_set` set and
    `config_drop` removed, and a generation_config.json holding `generation_file` (None: no such
    file). Lengths are budgets over the prompt. `generate`: observe a plain generate() (a model
    loaded in fp16 is not run on the CPU); `precedence`: run every route."""

    name: str
    what: str
    config_set: tuple[tuple[str, Any], ...] = ()
    config_drop: tuple[str, ...] = ()
    generation_file: tuple[tuple[str, Any], ...] | None = None
    generate: bool = True
    precedence: bool = False

    @property
    def edits(self) -> bool:
        return bool(self.config_set or self.config_drop or self.generation_file is not None)

    def config(self, config: dict[str, Any], prompt_len: int) -> dict[str, Any]:
        kept = {k: v for k, v in config.items() if k not in self.config_drop}
        return {**kept, **absolute(dict(self.config_set), prompt_len)}

    def generation(self, prompt_len: int) -> dict[str, Any] | None:
        return None if self.generation_file is None else absolute(dict(self.generation_file), prompt_len)


# the file's values, the legacy config.json's and each route's are distinct numbers, so a record
# says which source won
FILE_SETTINGS = (("max_length", 6), ("repetition_penalty", 1.3), ("top_k", 7))
LEGACY_SETTINGS = (("max_length", 7), ("repetition_penalty", 1.15), ("top_k", 11))
AS_SHIPPED = Variant("as-shipped", "the checkpoint's own files", precedence=False)
OWN = Variant("as-shipped", "your checkpoint's own files", precedence=True)
VARIANTS: dict[str, Variant] = {v.name: v for v in (
    Variant("config-fp16", "config.json declares float16 over float32 weights: dtype='auto' (v5's default) "
            "loads fp16, torch's default dtype would load fp32", config_set=(("dtype", "float16"),), generate=False),
    Variant("config-no-dtype", "config.json declares no dtype: 'auto' falls back to the weights' dtype",
            config_drop=("dtype", "torch_dtype"), generate=False),
    Variant("legacy-config", "generation settings in config.json only (a checkpoint saved before "
            "generation_config.json existed)", config_set=LEGACY_SETTINGS),
    Variant("genconfig-file", "a generation_config.json, and other values for the same settings in config.json",
            config_set=LEGACY_SETTINGS, generation_file=FILE_SETTINGS, precedence=True),
    Variant("genconfig-max-new-tokens", "a generation_config.json that sets max_new_tokens",
            generation_file=(("max_new_tokens", 5),), precedence=True),
)}


def variant_of(case: Case) -> Variant:
    name = case.param("variant")
    if name == AS_SHIPPED.name:
        return OWN if case.param("own") else AS_SHIPPED
    return VARIANTS[name]


def build(source: Path, variant: Variant, tmp: Path, prompt_len: int) -> Path:
    """The variant's checkpoint directory under `tmp`: every file of `source` but the two configs
    linked, config.json and generation_config.json written."""
    target = tmp / variant.name
    target.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        if path.name not in (CONFIG_FILE, GENERATION_FILE):
            (target / path.name).symlink_to(path.resolve())
    config = json.loads((source / CONFIG_FILE).read_text(encoding="utf-8"))
    (target / CONFIG_FILE).write_text(json.dumps(variant.config(config, prompt_len), indent=2), encoding="utf-8")
    generation = variant.generation(prompt_len)
    if generation is not None:
        (target / GENERATION_FILE).write_text(json.dumps(generation, indent=2), encoding="utf-8")
    return target


# ----------------------------------------------------------------------------------------------
# routes: where a caller can set a generation setting


@dataclass(frozen=True)
class Route:
    """One generate() call: attributes set on model.generation_config / model.config for the call,
    a GenerationConfig argument's values, keyword arguments (lengths as budgets)."""

    generation_config_attrs: tuple[tuple[str, Any], ...] = ()
    model_config_attrs: tuple[tuple[str, Any], ...] = ()
    argument: tuple[tuple[str, Any], ...] | None = None
    kwargs: tuple[tuple[str, Any], ...] = ()

    def call(self, prompt_len: int) -> dict[str, Any]:
        """generate_once's keyword arguments, lengths made absolute."""
        return {"generation_config_attrs": absolute(dict(self.generation_config_attrs), prompt_len),
                "model_config_attrs": absolute(dict(self.model_config_attrs), prompt_len),
                "argument": None if self.argument is None else absolute(dict(self.argument), prompt_len),
                "kwargs": absolute(dict(self.kwargs), prompt_len)}


RP = "repetition_penalty"
SETTINGS_ROUTES: dict[str, Route] = {
    "file": Route(),
    "model.generation_config": Route(generation_config_attrs=((RP, 1.4),)),
    "model.config": Route(model_config_attrs=((RP, 1.5),)),
    "argument": Route(argument=((RP, 1.6),)),
    "argument-at-global-default": Route(argument=((RP, 1.0),)),
    "kwargs": Route(kwargs=((RP, 1.7),)),
    "argument+kwargs": Route(argument=((RP, 1.6),), kwargs=((RP, 1.7),)),
}
LENGTH_ROUTES: dict[str, Route] = {
    "file": Route(),
    "max_new_tokens": Route(kwargs=(("max_new_tokens", 3),)),
    "max_length": Route(kwargs=(("max_length", 4),)),
    "max_length+max_new_tokens": Route(kwargs=(("max_length", 4), ("max_new_tokens", 2))),
    "argument-max_new_tokens": Route(argument=(("max_new_tokens", 3),)),
    "argument-max_length": Route(argument=(("max_length", 4),)),
}


def budget(effective: dict[str, Any] | None, prompt_len: int) -> dict[str, Any]:
    """The length part of an effective config: max_length as new tokens, max_new_tokens."""
    effective = effective or {}
    total = effective.get("max_length")
    return {"budget": total - prompt_len if isinstance(total, int) else total,
            "max_new_tokens": effective.get("max_new_tokens")}


def settings_row(result: dict[str, Any]) -> dict[str, Any]:
    if "error" in result:
        return {"error": result["error"]}
    effective = result["effective"] or {}
    return {k: effective.get(k) for k in (RP, "top_k")}


def length_row(result: dict[str, Any], prompt_len: int) -> dict[str, Any]:
    if "error" in result:
        return {"error": result["error"]}
    return {**budget(result["effective"], prompt_len), "new_tokens": result["new_tokens"]}


def plain_row(result: dict[str, Any], prompt_len: int) -> dict[str, Any]:
    if "error" in result:
        return {"error": result["error"]}
    return {**budget(result["effective"], prompt_len), "cache": result["cache"]}


# ----------------------------------------------------------------------------------------------
# the observation


def _version_of(package: str) -> str | None:
    """An installed package's version (None: not installed)."""
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def observe_load(zoo: Zoo, case: Case, tmp: Path) -> Observation:
    """One checkpoint loaded with no arguments: what it resolved, and (where the variant asks) the
    precedence of every route."""
    obs = Observation()
    variant = variant_of(case)
    source = zoo.checkpoints.directory(case.model)
    ids = zoo.memo(("loading-ids", case.model, case.prompt),
                   lambda: hf.tokenizer_ids(source, zoo.checkpoints.prompt_text(case.model, case.prompt)))
    prompt_len = int(ids.shape[1])
    directory = build(source, variant, tmp, prompt_len) if variant.edits else source
    model, err = observe(lambda: hf.plain_load(directory))
    if err is not None:
        obs.add("load_error", err)
        return obs.stop(f"from_pretrained({case.model} {variant.name}) raised {err['type']}: {err['message']}")
    got = hf.resolved(model)
    obs.add("dtype", {"parameters": got["parameters"], "config": got["config"]}, variant=variant.what)
    shipped = variant.name == AS_SHIPPED.name
    obs.add("attn_implementation", got["attn_implementation"], model_class=type(model).__name__,
            **({"mechanism_of": "logits"} if shipped else {}))
    if shipped:
        obs.add("kernels", {"use_kernels": got["kernels"]["use_kernels"]},
                kernel_layers=got["kernels"]["kernel_layers"], kernels_package=_version_of("kernels"))
        logits_vs_engine(obs, zoo, case, model, ids, got["parameters"])
    gen = hf.generation_dicts(model)
    obs.add("generation_config", {"built_from": built_from(gen["from_model_config"]),
                                  "file_present": (directory / GENERATION_FILE).is_file(),
                                  "non_default": non_default(gen["values"], gen["defaults"])})
    calls: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}  # call -> (result, its keyword arguments)
    if variant.generate:
        calls["plain_generate"] = (hf.generate_once(model, ids, FIRST_TOKEN), {})
        obs.add("plain_generate", plain_row(calls["plain_generate"][0], prompt_len), prompt_tokens=prompt_len)
    if variant.precedence:
        settings = {name: _route(model, ids, route, prompt_len) for name, route in SETTINGS_ROUTES.items()}
        obs.add("settings_precedence", {name: settings_row(r) for name, (r, _) in settings.items()},
                values={name: route.call(0) for name, route in SETTINGS_ROUTES.items()})
        lengths = {name: _route(model, ids, route, prompt_len) for name, route in LENGTH_ROUTES.items()}
        obs.add("length_precedence", {name: length_row(r, prompt_len) for name, (r, _) in lengths.items()},
                budgets={name: route.call(0) for name, route in LENGTH_ROUTES.items()}, cap=CAP)
        calls.update({f"settings:{n}": v for n, v in settings.items()})
        calls.update({f"length:{n}": v for n, v in lengths.items()})
    if calls:
        processors_built(obs, calls, ids[0].tolist())
    return obs


def logits_vs_engine(obs: Observation, zoo: Zoo, case: Case, model: Any, ids: Any, dtype: str) -> None:
    """As shipped: what the plain load computes - its logits at the prompt's last position (`logits`) -
    held to the engine's (`logits_vs_engine`) where the engine implements the model and the load
    is not coarser than the run's dtype (the engine's); `attn_implementation` is their mechanism."""
    from harness.designs.backends import routes_experts
    from harness.engine.cache import has_linear_attention
    from harness.subjects import engine
    from harness.subjects.hf_cache import logits, narrowed, top_values

    mine = logits(model, ids)[-1:]
    gap = zoo.oracle.gap(case.model)
    run_dtype = zoo.checkpoints.dtype_of(case.model)
    # an fp32 load against a bf16 run's engine is held at the run's (coarser) rounding; a bf16 load
    # against an fp32 engine would be held to fp32's tolerance, which its own rounding exceeds
    coarser = dtype not in (run_dtype, "fp32")
    why = gap or (f"the plain load arrived in {dtype} (the checkpoint's own), coarser than the run's {run_dtype}: the "
                  f"engine's logits hold it to {run_dtype}'s tolerance, which {dtype}'s rounding exceeds" if coarser else "")
    routing = {"routing": "experts"} if routes_experts(model.config) else {}
    obs.add("logits", top_values(mine), kind="tensor", prompt=case.prompt, **routing,
            **({} if why else {"oracle": "logits_vs_engine"}))
    if gap:
        obs.skipped("logits_vs_engine", "tensor", gap)
        return
    if why:
        obs.skipped("logits_vs_engine", "tensor", why, "not-checkable")
        return
    recurrence = {"recurrence": "linear-attention"} if has_linear_attention(model.config.to_dict()) else {}
    ours = engine.last_logits(zoo, case.model, ids[0].tolist())
    obs.reference("logits_vs_engine", *narrowed(mine, ours), kind="tensor", expected_extras={**routing, **recurrence})


def _route(model: Any, ids: Any, route: Route, prompt_len: int) -> tuple[dict[str, Any], dict[str, Any]]:
    call = route.call(prompt_len)
    return hf.generate_once(model, ids, CAP, **call), call["kwargs"]


def processors_built(obs: Observation, calls: dict[str, tuple[dict[str, Any], dict[str, Any]]],
                     prompt: list[int]) -> None:
    """The `processors_built` reference (module docstring) over every call that ran and built a list."""
    observed, expected = {}, {}
    for name, (result, kwargs) in calls.items():
        built = result.get("processors")
        if built is None:
            continue  # raised, or built no list (the error is its precedence row)
        asked = pipeline.requested(built["config"], kwargs, len(prompt))
        observed[name] = built["built"]
        expected[name] = [p.spec() for p in pipeline.build(asked, prompt)]
    if not observed:
        obs.skipped("processors_built", "exact", "not checkable (no call built a logits-processor list)",
                    "not-checkable")
        return
    obs.reference("processors_built", observed, expected,
                  observed_extras={"observed": "each call's LogitsProcessorList as _get_logits_processor returned it, "
                                               "read as the engine's entries"},
                  expected_extras={"expected": "harness/engine/pipeline.py build() on the config the version "
                                               "received, the call's keyword arguments taking their value"})
