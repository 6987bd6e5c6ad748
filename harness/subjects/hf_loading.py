"""The installed transformers' load contract: what `AutoModelForCausalLM.from_pretrained(path)`
resolves when the caller passes nothing, and which source wins when a generation setting is given
in more than one place (harness/designs/loading.py decides what to call; this module calls it).

- `plain_load`: ``from_pretrained(path)`` with no dtype, attention implementation or generation
  config (``trust_remote_code=False`` only, which is its default: no checkpoint code runs);
- `resolved`: the parameters' dtype, the config's dtype and attention implementation, and the
  generation config the model built - its values, the defaults they are compared with, and
  whether transformers stamped it as built from config.json (`_from_model_config`);
- `generate_once`: one greedy ``generate()`` with the routes a caller has for a setting
  (``model.generation_config``, ``model.config``, a ``GenerationConfig`` argument, keyword
  arguments), observing the GenerationConfig the decoding loop received (its `_sample`, wrapped on
  the model's class for the call), the logits-processor list it built (`_get_logits_processor`,
  wrapped the same way: each processor read as the engine's entry, with the generation config and
  prompt length it was built from - harness/subjects/hf_processors.py), the cache object the first
  forward got, and the new tokens. A harness stopping criterion ends every call after at
  most `cap` new tokens: it leaves the generation config alone, so a user checkpoint whose file
  asks for 2,048 new tokens still costs a few forwards.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from harness.subjects import observe
from harness.subjects.hf import LOAD_SEED, loaded_as
from harness.subjects.hf_api import jsonable
from harness.subjects.hf_processors import processor_lists
from harness.zoo import load as zoo_load

# the generation config's bookkeeping, not settings
METADATA = ("transformers_version", "_from_model_config", "_commit_hash", "_original_object_hash")
# the effective settings recorded from the config the decoding loop receives
EFFECTIVE_KEYS = ("max_length", "max_new_tokens", "min_new_tokens", "repetition_penalty", "top_k", "do_sample",
                  "cache_implementation")


def plain_load(directory: Path) -> Any:
    """AutoModelForCausalLM.from_pretrained(directory) with nothing the caller would choose (no
    dtype, device, attention implementation or generation config), eval. Weights a version fails
    to find get a seeded init."""
    from transformers import AutoModelForCausalLM

    zoo_load.refuse_remote_code(Path(directory))  # checked up front; a harness error here, never data
    torch.manual_seed(LOAD_SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoModelForCausalLM.from_pretrained(str(directory), trust_remote_code=False).eval()


def tokenizer_ids(directory: Path, text: str) -> torch.Tensor:
    """[1, T] ids of `text` under the checkpoint's own tokenizer (no model loaded for it)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(directory), trust_remote_code=False)
    return tok(text, return_tensors="pt").input_ids


def generation_dicts(model: Any) -> dict[str, Any]:
    """The model's generation config and a default GenerationConfig(), as plain dicts without the
    bookkeeping keys, plus transformers' own stamp of where it was built from."""
    from transformers import GenerationConfig

    def clean(d: dict[str, Any]) -> dict[str, Any]:
        return jsonable({k: v for k, v in d.items() if k not in METADATA and not k.startswith("_")})

    config = model.generation_config
    return {"values": clean(config.to_dict()), "defaults": clean(GenerationConfig().to_dict()),
            "from_model_config": bool(getattr(config, "_from_model_config", False))}


def resolved(model: Any) -> dict[str, Any]:
    """What the plain load resolved: the parameters' dtype, config.dtype, the attention implementation."""
    from harness.store.env import canonical_dtype

    config_dtype = getattr(model.config, "dtype", None)
    try:
        config_dtype = canonical_dtype(config_dtype) if config_dtype is not None else None
    except ValueError:
        config_dtype = str(config_dtype)
    return {"parameters": loaded_as(model)["dtype"], "config": config_dtype,
            "attn_implementation": getattr(model.config, "_attn_implementation", None),
            "kernels": kernels_of(model)}


def kernels_of(model: Any) -> dict[str, Any]:
    """Whether the load kernelized the model with the `kernels` library's hub kernels (`use_kernels`:
    5.25 does by default, earlier releases do not; None where the model has no such attribute) and the
    layers that name a hub kernel (`kernel_layer_name`: RMSNorm, SiLU, ...)."""
    use = getattr(model, "use_kernels", None)
    return {"use_kernels": use if isinstance(use, bool) else None,
            "kernel_layers": sorted({str(m.kernel_layer_name) for m in model.modules() if hasattr(m, "kernel_layer_name")})}


def _stop_after(prompt_len: int, cap: int) -> Any:
    from transformers import StoppingCriteria, StoppingCriteriaList

    class StopAfter(StoppingCriteria):
        """Done once `cap` new tokens are in (a harness bound, not a generation setting)."""

        def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
            done = input_ids.shape[1] - prompt_len >= cap
            return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([StopAfter()])


@contextmanager
def _set_attributes(obj: Any, values: dict[str, Any]) -> Iterator[None]:
    """Set attributes for the block; restore (or delete) them after."""
    missing = object()
    before = {k: getattr(obj, k, missing) for k in values}
    for k, v in values.items():
        setattr(obj, k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is missing:
                delattr(obj, k)
            else:
                setattr(obj, k, v)


@contextmanager
def _decoding_loop_config(model: Any, sink: list[dict[str, Any]]) -> Iterator[None]:
    """Record the EFFECTIVE_KEYS of the GenerationConfig the greedy decoding loop (`_sample`)
    receives, by wrapping it on the model's own class for the block (a profiler hook would see it
    too, at 100 times the cost of a short generate()); the class is left as it was."""
    cls = type(model)
    original = cls._sample
    had_own = "_sample" in vars(cls)
    signature = inspect.signature(original)

    def _sample(self: Any, *args: Any, **kwargs: Any) -> Any:
        config = signature.bind_partial(self, *args, **kwargs).arguments.get("generation_config")
        if config is not None and not sink:
            sink.append({k: getattr(config, k, None) for k in EFFECTIVE_KEYS})
        return original(self, *args, **kwargs)

    cls._sample = _sample
    try:
        yield
    finally:
        if had_own:
            cls._sample = original
        else:
            del cls._sample


def _cache_summary(cache: Any) -> dict[str, Any] | None:
    if cache is None:
        return None
    layers: dict[str, int] = {}
    for layer in getattr(cache, "layers", None) or []:
        layers[type(layer).__name__] = layers.get(type(layer).__name__, 0) + 1
    return {"class": type(cache).__name__, "layers": layers}


def generate_once(model: Any, ids: torch.Tensor, cap: int, *, generation_config_attrs: dict[str, Any] | None = None,
                  model_config_attrs: dict[str, Any] | None = None, argument: dict[str, Any] | None = None,
                  kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """One greedy generate() on `ids`: `generation_config_attrs` set on a copy of
    model.generation_config, `model_config_attrs` on model.config (both restored after),
    `argument` as a GenerationConfig(**argument) passed as generation_config=, `kwargs` as keyword
    arguments. Returns {"effective": the EFFECTIVE_KEYS of the config the decoding loop received
    (max_length as given: the caller subtracts the prompt), "cache": the cache object the first
    forward received, "new_tokens", "processors": the list built, its config and prompt length (None:
    none seen)} or {"error": ...} when transformers raised."""
    from transformers import Cache, GenerationConfig

    captured: list[dict[str, Any]] = []
    caches: list[Any] = []
    lists: list[dict[str, Any]] = []

    def pre_hook(module: Any, args: Any, kw: dict[str, Any]) -> None:
        if not caches:
            caches.append(next((v for v in kw.values() if isinstance(v, Cache)), None))

    def call() -> Any:  # the argument is built and the attributes set inside the observed call: a version
        # may refuse any of them
        call_kwargs = dict(kwargs or {})
        if argument is not None:
            call_kwargs["generation_config"] = GenerationConfig(**argument)
        with (_set_attributes(model, {"generation_config": copy.deepcopy(model.generation_config)}),
              _set_attributes(model.generation_config, generation_config_attrs or {}),
              _set_attributes(model.config, model_config_attrs or {})):
            return model.generate(ids, stopping_criteria=_stop_after(ids.shape[1], cap), **call_kwargs)

    handle = model.register_forward_pre_hook(pre_hook, with_kwargs=True)
    try:
        with _decoding_loop_config(model, captured), processor_lists(model, lists), torch.no_grad(), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out, err = observe(call)
    finally:
        handle.remove()
    if err is not None:
        return {"error": err}
    return {"effective": jsonable(captured[0]) if captured else None,
            "cache": _cache_summary(caches[0] if caches else None),
            "new_tokens": int(out.shape[1] - ids.shape[1]), "processors": lists[0] if lists else None}
