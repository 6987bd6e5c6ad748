"""The API surface of the installed transformers as records: what its generation and cache entry
points take and return, which values its enum-like GenerationConfig fields accept, and what a
model's generate() does when the caller passes nothing.

Probes (``probe_<name>(zoo, params, tmp) -> Observation``, merged into hf_contracts.PROBES):
- `api_entry`: the signature of one entry point (parameter names, kinds, defaults) and the
  runtime shapes of what it returned while a real generate() workload ran (observed with a
  profiler hook on the function's own code object, so calls through any import path count);
- `genconfig_values`: for one GenerationConfig field, each candidate value constructed, validated
  and run through a short generate(); which stage refused it, and the cache class it produced;
- `generation_defaults`: the GenerationConfig the decoding loop receives from `model.generate(ids)`.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from harness.schema import Observation
from harness.subjects import first_line, fold_keys, observe, type_name
from harness.subjects.hf import Zoo

TARGET, ASSISTANT, MTP, SLIDING = "llama-target", "llama-assistant", "glm4moe-mtp", "mistral-sliding"
PROMPT = "short-0"
NEW_TOKENS = 6
PAD = 0
MISSING = "<missing>"
NO_DEFAULT = "<required>"


# ----------------------------------------------------------------------------------------------
# pure helpers


def resolve(dotted: str) -> Any:
    """`transformers.x.y.Class.attr` -> the object, or MISSING when any part is absent. The
    longest importable module prefix is imported; the rest are attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = inspect.getattr_static(obj, name, MISSING) if inspect.isclass(obj) else getattr(obj, name, MISSING)
            if obj is MISSING:
                return MISSING
            if isinstance(obj, (staticmethod, classmethod)):
                obj = obj.__func__
        return obj
    return MISSING


def plain_default(value: Any) -> Any:
    """A parameter default as record data: JSON scalars as themselves, anything else by type name
    (reprs of objects carry addresses)."""
    if value is inspect.Parameter.empty:
        return NO_DEFAULT
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)) and all(x is None or isinstance(x, (bool, int, float, str)) for x in value):
        return list(value)
    return f"<{type(value).__name__}>"


def signature_of(obj: Any) -> list[list[Any]] | str:
    """[[name, kind, default], ...] of a callable (a class: of its __init__), or MISSING."""
    if obj is MISSING:
        return MISSING
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return "<no signature>"
    return [[p.name, p.kind.name, plain_default(p.default)] for p in sig.parameters.values()]


def shape_of(obj: Any, depth: int = 0) -> Any:
    """The runtime shape of a returned value: tensors as 'Tensor[dtype, ndim]' (floating dtypes as
    'float': they follow the run's numerics, which the env key already names), tuples/lists as a
    list of their elements' shapes (order kept), mappings by key, anything else by type name."""
    if isinstance(obj, torch.Tensor):  # a float tensor follows the run's dtype: "float", not the width
        kind = "float" if obj.is_floating_point() else str(obj.dtype).removeprefix("torch.")
        return f"Tensor[{kind}, {obj.dim()}d]"
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return type(obj).__name__
    if depth < 2 and isinstance(obj, (tuple, list)) and len(obj) <= 8:
        return {type(obj).__name__: [shape_of(x, depth + 1) for x in obj]}
    if depth < 2 and isinstance(obj, dict) and len(obj) <= 16:
        return {type(obj).__name__: {str(k): shape_of(v, depth + 1) for k, v in sorted(obj.items(), key=str)}}
    return type_name(obj)


def jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(x) for x in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, torch.Tensor):
        return value.tolist()
    return f"<{type(value).__name__}>"


@contextlib.contextmanager
def watch(code: Any, on_call: Callable[[Any], None] | None = None,
          on_return: Callable[[Any], None] | None = None) -> Iterator[None]:
    """Call `on_call(frame)` / `on_return(value)` for every call of the Python function with
    code object `code` while the block runs (sys.setprofile: sees calls through any reference)."""
    previous = sys.getprofile()

    def hook(frame, event, arg):
        if frame.f_code is code:
            if event == "call" and on_call is not None:
                on_call(frame)
            elif event == "return" and on_return is not None:
                on_return(arg)

    sys.setprofile(hook)
    try:
        yield
    finally:
        sys.setprofile(previous)


def code_of(obj: Any) -> Any:
    fn = inspect.unwrap(obj) if callable(obj) else None
    return getattr(fn, "__code__", None)


# ----------------------------------------------------------------------------------------------
# workloads: short generate() calls that exercise the entry points


def _run(zoo: Zoo, model_name: str, prompt: str = PROMPT, assistant: bool = False, **kwargs: Any) -> Any:
    model = zoo.load(model_name).model
    ids = zoo.prompt_ids(model_name, prompt)
    kwargs.setdefault("max_new_tokens", NEW_TOKENS)
    kwargs.setdefault("pad_token_id", PAD)
    if assistant:
        kwargs["assistant_model"] = zoo.load(ASSISTANT).model
    if kwargs.get("do_sample"):
        torch.manual_seed(0)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(ids, **kwargs)


WORKLOADS: dict[str, Callable[[Zoo], Any]] = {
    "plain": lambda zoo: _run(zoo, TARGET),
    "static": lambda zoo: _run(zoo, TARGET, cache_implementation="static"),
    "sliding": lambda zoo: _run(zoo, SLIDING, prompt="long-0"),
    "assisted": lambda zoo: _run(zoo, TARGET, assistant=True),
    "assisted-sample": lambda zoo: _run(zoo, TARGET, assistant=True, do_sample=True),
    "prompt-lookup": lambda zoo: _run(zoo, TARGET, prompt_lookup_num_tokens=3),
    "mtp": lambda zoo: _run(zoo, MTP, use_mtp=True),
}


# ----------------------------------------------------------------------------------------------
# probes


def probe_api_entry(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    """Field `signature` (exact): [[name, kind, default], ...] or "<missing>"; field `returns`
    (exact, when the case names a workload): the distinct shapes the entry point returned while
    the workload ran, [] when it was not called, with the workload's own error as an extra."""
    obj = resolve(params["target"])
    obs = Observation()
    obs.add("signature", signature_of(obj))
    workload = params.get("workload")
    if workload is None:
        return obs
    shapes: list[Any] = []
    code = code_of(obj) if obj is not MISSING else None

    def seen(value: Any) -> None:
        shape = shape_of(value)
        if shape not in shapes:
            shapes.append(shape)

    if code is None:
        obs.add("returns", MISSING if obj is MISSING else "<not a python function>")
        return obs
    with watch(code, on_return=seen):
        _, err = observe(lambda: WORKLOADS[workload](zoo))
    obs.add("returns", shapes, **({"workload_error": err} if err else {}))
    return obs


def _stage(zoo: Zoo, field: str, value: Any, run: dict[str, Any]) -> dict[str, Any]:
    """Where `GenerationConfig(field=value)` stops: 'init', 'validate', 'generate' (each with the
    exception type) or 'ran' (with the cache class generate() returned)."""
    from transformers import GenerationConfig

    config, err = observe(lambda: GenerationConfig(**{field: value}))
    if err:
        return {"stage": "init", "raises": err["type"], "message": err["message"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, err = observe(config.validate)
    if err:
        return {"stage": "validate", "raises": err["type"], "message": err["message"]}
    kwargs = dict(run)
    assistant = kwargs.pop("assistant", False)
    gen = GenerationConfig(max_new_tokens=NEW_TOKENS, pad_token_id=PAD, return_dict_in_generate=True,
                           **{field: value}, **kwargs)
    out, err = observe(lambda: _run(zoo, TARGET, assistant=assistant, generation_config=gen))
    if err:
        return {"stage": "generate", "raises": err["type"], "message": err["message"]}
    cache = getattr(out, "past_key_values", None)
    return {"stage": "ran", "cache": type(cache).__name__ if cache is not None else None}


def probe_genconfig_values(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    """Fields: `accepted` (capability, {value: ran}); `stages` (exact: per value the stage that
    refused it and the exception type, or the cache class produced; messages ride as extras);
    `declared` (capability: the values the version's own constant lists, where it has one)."""
    field, values = params["field"], params["values"]
    run = dict(params.get("run", ()))
    results = {str(v): _stage(zoo, field, v, run) for v in values}
    obs = Observation()
    obs.add("accepted", {k: r["stage"] == "ran" for k, r in results.items()}, "capability")
    obs.add("stages", {k: {x: y for x, y in r.items() if x != "message"} for k, r in results.items()},
            messages={k: first_line(r["message"]) for k, r in results.items() if "message" in r})
    declared = params.get("declared")
    if declared:
        found = resolve(declared)
        obs.add("declared", sorted(str(v) for v in found) if found is not MISSING else [], "capability",
                constant=declared)
    return obs


def probe_generation_defaults(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    """`model.generate(input_ids)` with nothing else: the GenerationConfig the decoding loop
    (GenerationMixin._sample) receives, as a dict (private keys, the version stamp and None values
    dropped: a key added with a None default is a new key - generation-config-keys - not a new default);
    plus the model's stored generation_config, the source those defaults started from."""
    from transformers import GenerationMixin

    model_name = params["model"]
    model = zoo.load(model_name).model
    ids = zoo.prompt_ids(model_name, PROMPT)
    captured: list[dict[str, Any]] = []

    def on_call(frame) -> None:
        config = frame.f_locals.get("generation_config")
        if config is not None:
            captured.append(config.to_dict())

    def clean(d: dict[str, Any]) -> dict[str, Any]:  # a new key defaulting to None changes no output
        return jsonable({k: v for k, v in d.items()
                         if not k.startswith("_") and k != "transformers_version" and v is not None})

    with watch(code_of(GenerationMixin._sample), on_call=on_call), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, err = observe(lambda: model.generate(ids))
    obs = Observation()
    obs.add("effective", clean(captured[0]) if captured else {"error": err, "captured": False})
    obs.add("stored", clean(model.generation_config.to_dict()))
    return obs


def probe_mtp_checkpoint(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    """The MTP checkpoint contract of one MTP model. Fields (exact):
    `checkpoint`: the MTP tensors model.safetensors holds (names >= num_hidden_layers, layer index
    folded); `expected`: the parameter names of the MTP layer the installed MtpModel builds for
    this config (constructed, not loaded; "<missing>" without MtpModel); `load`:
    MtpModel.from_pretrained(model) - raised (type, and the keys it names as missing, parsed from
    its message) or loaded ({"raises": None}); `expected` and `load` are outcome fields (extras
    outcome="error": a failure gone is fixed, one appearing broken; a layout that changed as the load
    went from failing to working follows that fix, extras follows="load"); `use_mtp` (capability): generate(use_mtp=True) ran and drafted."""
    import ast
    import re

    from safetensors import safe_open

    model_name = params["model"]
    lm = zoo.load(model_name)
    n = zoo.checkpoints.config_json(model_name)["num_hidden_layers"]
    with safe_open(str(zoo.checkpoints.directory(model_name) / "model.safetensors"), framework="pt") as f:
        held = [k for k in f.keys() if k.startswith(("mtp.", "model.mtp."))  # Mellum / Inkling layouts
                or ((m := re.match(r"model\.layers\.(\d+)\.", k)) and int(m.group(1)) >= n)]
    obs = Observation()
    obs.add("checkpoint", fold_keys(held))
    mtp_cls = resolve("transformers.modeling_layers.MtpModel")
    if mtp_cls is MISSING:
        obs.add("expected", MISSING)
        obs.add("load", MISSING)
    else:
        # a version whose config class does not map the checkpoint's MTP count has none (5.14 Mellum)
        layers = getattr(lm.model.config.get_text_config(), "num_mtp_layers", None)
        built, err = observe(lambda: mtp_cls(lm.model, layers)) if layers else (None, {
            "type": "missing", "message": "the config has no num_mtp_layers"})
        obs.add("expected", fold_keys([k for k, _ in built.named_parameters() if k.startswith("layers.")])
                if built is not None else {"error": err}, outcome="error", follows="load")
        try:
            mtp_cls.from_pretrained(lm.model)
            obs.add("load", {"raises": None}, outcome="error")
        except Exception as exc:  # a transformers exception is the observation; the harness's propagates
            from harness.subjects import error_of, is_subject_error

            if not is_subject_error(exc):
                raise
            listed = re.search(r"(\[[^\]]*\])", str(exc))
            named = sorted(ast.literal_eval(listed.group(1))) if listed else None
            obs.add("load", {"raises": type(exc).__name__, "missing": fold_keys(named) if named else None},
                    message=error_of(exc)["message"], outcome="error")
    out, err = observe(lambda: _run(zoo, model_name, use_mtp=True, return_dict_in_generate=True))
    obs.add("use_mtp", {"ran": err is None}, "capability", **({"error": err} if err else {}))
    return obs


def probe_stateful_paths(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    """A zoo model with recurrent-state (linear-attention) layers. Fields: `cache_layers` (exact):
    the layer class of each layer of DynamicCache(config=...); `paths` (capability): {path:
    generate() ran} for plain, prompt lookup and assisted decoding (the model as its own
    assistant), the refusals' messages as extras."""
    from transformers import DynamicCache

    model = zoo.load(params["model"]).model
    obs = Observation()
    cache, err = observe(lambda: DynamicCache(config=model.config))
    names = [type(layer).__name__ for layer in cache.layers] if cache is not None else []
    obs.add("cache_layers", names if cache is not None else {"error": err})
    ids = zoo.prompt_ids(params["model"], "short-0")
    runs = {"plain": {}, "prompt_lookup": {"prompt_lookup_num_tokens": 3}, "assisted": {"assistant_model": model}}
    ran, errors = {}, {}
    for path, kwargs in runs.items():
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, err = observe(lambda kwargs=kwargs: model.generate(ids, max_new_tokens=4, do_sample=False,
                                                                  pad_token_id=PAD, **kwargs))
        ran[path] = err is None
        if err:
            errors[path] = err
    obs.add("paths", ran, "capability", **({"errors": errors} if errors else {}))
    return obs


PROBES: dict[str, Callable[[Zoo, dict[str, Any], Path], Observation]] = {
    name.removeprefix("probe_"): fn for name, fn in globals().items() if name.startswith("probe_")
}
