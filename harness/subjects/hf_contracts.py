"""API contracts of the installed transformers, probed as plain data.

Each probe is ``probe_<name>(zoo, params, tmp) -> Observation``: it drives transformers and
returns named fields (see suites/test_contracts.py for the table of cases and what each field
means). `PROBES` maps the probe name to its function.
"""

from __future__ import annotations

import builtins
import copy
import inspect
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from harness.cases import ASSISTANT, TARGET
from harness.schema import Observation
from harness.subjects import first_line, hf_api, observe, type_name
from harness.subjects.hf import Zoo, capabilities, draft_schedule, record_drafts
from harness.subjects.hf_cache import cache_keyword, forward

PROMPT = "short-0"
NEW_TOKENS = 12
PAD = 0
DRAFT_TOKENS = 4  # the assistant's pinned schedule: constant 4 tokens, no early stop


def _raised(err: dict | None) -> dict[str, Any]:
    return {"raises": err["type"] if err else None, "message": err["message"] if err else None}


def _generate(zoo: Zoo, model_name: str, assistant: bool = False, **kwargs: Any):
    """(output, prompt length, drafts) of generate() on the short prompt."""
    model = zoo.load(model_name).model
    ids = zoo.prompt_ids(model_name, PROMPT)
    kwargs.setdefault("max_new_tokens", NEW_TOKENS)
    kwargs.setdefault("pad_token_id", PAD)
    helper = zoo.load(ASSISTANT).model if assistant else None
    if helper is not None:
        kwargs["assistant_model"] = helper
    drafts: list[list[int]] = []
    with (record_drafts(drafts), draft_schedule(helper, DRAFT_TOKENS), torch.no_grad(),
          warnings.catch_warnings()):
        warnings.simplefilter("ignore")
        out = model.generate(ids, **kwargs)
    return out, ids.shape[1], drafts


def probe_generate_return(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    obs = Observation()
    out, err = observe(lambda: _generate(zoo, TARGET, **params)[0])
    if err:
        obs.add("result", {"error": err})
        return obs
    value: dict[str, Any] = {"type": type_name(out), "is_tensor": isinstance(out, torch.Tensor),
                             "is_mapping": isinstance(out, dict)}
    if isinstance(out, torch.Tensor):
        value |= {"dtype": str(out.dtype), "dims": out.dim()}
    if isinstance(out, dict):
        value |= {"keys": list(out.keys()), "value_types": {k: type_name(v) for k, v in out.items()}}
    obs.add("result", value)
    return obs


def probe_tokenizer(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    obs = Observation()
    kwargs = dict(params)
    call = kwargs.pop("call")
    tok = zoo.load(TARGET).tokenizer
    text = "the cat sat on the mat"
    out, err = observe(lambda: getattr(tok, call)(text, **kwargs) if call != "__call__" else tok(text, **kwargs))
    if err:
        obs.add("result", {"error": err})
        return obs
    value: dict[str, Any] = {"type": type_name(out), "tokenizer_class": type(tok).__name__}
    if hasattr(out, "keys"):
        value |= {"keys": sorted(out.keys()), "value_types": {k: type_name(v) for k, v in out.items()}}
    obs.add("result", value)
    return obs


CUSTOM_CONFIG = """\
import pathlib
from transformers import PretrainedConfig

pathlib.Path({marker!r}).write_text("ran")


class HarnessCustomConfig(PretrainedConfig):
    model_type = {model_type!r}
"""


def probe_trust_remote_code(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    """A local checkpoint whose config.json points AutoConfig at custom code (auto_map); loaded
    without passing trust_remote_code. A prompt for consent is answered as a non-interactive
    session would (EOF). Does the custom code run? Its oracle is the contract (`custom_code_not_run`:
    never without consent), so accepting the load where the baseline refused it is no relaxation
    when the code ran (the `result` field is broken by its oracle), and a first run catches it too."""
    from transformers import AutoConfig

    model_type = params["model_type"]
    directory = tmp / "custom"
    directory.mkdir()
    marker = tmp / "custom_code_ran"
    (directory / "config.json").write_text(json.dumps(
        {"model_type": model_type, "auto_map": {"AutoConfig": "custom_config.HarnessCustomConfig"}}))
    (directory / "custom_config.py").write_text(CUSTOM_CONFIG.format(marker=str(marker), model_type=model_type))
    prompts: list[str] = []

    def no_tty(prompt: str = "") -> str:
        prompts.append(first_line(prompt))
        raise EOFError("harness: no interactive input")

    with mock.patch.object(builtins, "input", no_tty):
        config, err = observe(lambda: AutoConfig.from_pretrained(str(directory)), scrub={str(directory): "<dir>"})
    obs = Observation()
    obs.add("result", {"prompted": bool(prompts), **_raised(err),
                       "config_class": type(config).__name__ if config is not None else None,
                       "custom_code_ran": marker.exists()}, oracle="custom_code_not_run")
    # the contract itself, checked in every run (a first run too): a checkpoint's code runs only with consent
    obs.reference("custom_code_not_run", {"custom_code_ran": marker.exists()}, {"custom_code_ran": False})
    return obs


def probe_generation_config_keys(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    from transformers import GenerationConfig

    obs = Observation()
    obs.add("keys", sorted(k for k in vars(GenerationConfig()) if not k.startswith("_")), "capability")
    return obs


def probe_genconfig(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    from transformers import GenerationConfig

    config, init_err = observe(lambda: GenerationConfig(**params))
    value: dict[str, Any] = {"init": _raised(init_err)}
    if config is not None:
        value["stored"] = {k: getattr(config, k, "<absent>") for k in params}
        strict = "strict" in inspect.signature(config.validate).parameters
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, val_err = observe(lambda: config.validate(strict=True) if strict else config.validate())
        value["validate_strict" if strict else "validate"] = _raised(val_err)
    obs = Observation()
    obs.add("result", value)
    return obs


def probe_generate_error(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    kwargs = dict(params)
    assistant = kwargs.pop("assistant", False)
    _, err = observe(lambda: _generate(zoo, TARGET, assistant=assistant, **kwargs))
    obs = Observation()
    obs.add("result", _raised(err))
    return obs


def _pathway(run: Callable[[], Any], plain: tuple[list[int], list[list[int]]]) -> tuple[str, dict | None]:
    """'rejected' (raised), 'accepted' (an observable effect: other tokens, or other drafts - MTP
    drafting where there was none, or an ensemble verifier accepting differently, which changes
    what is drafted next, even where the tokens happen to coincide) or 'ignored' (no effect)."""
    result, err = observe(run)
    if err is not None:
        return "rejected", err
    out, prompt_len, drafts = result
    tokens = out[0, prompt_len:].tolist()
    if tokens != plain[0] or drafts != plain[1]:
        return "accepted", None
    return "ignored", None


def probe_acceptance(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    from transformers import GenerationConfig

    feature, value, model = params["feature"], params["value"], params["model"]
    assistant = bool(params.get("assistant"))
    out, prompt_len, drafts = _generate(zoo, model, assistant=assistant)
    plain = (out[0, prompt_len:].tolist(), drafts)
    config, init_err = observe(lambda: GenerationConfig(**{feature: value}))
    stored = config is not None and getattr(config, feature, None) == value
    as_kwarg, kwarg_err = _pathway(lambda: _generate(zoo, model, assistant=assistant, **{feature: value}), plain)
    as_config, config_err = _pathway(lambda: _generate(zoo, model, assistant=assistant, generation_config=GenerationConfig(
        max_new_tokens=NEW_TOKENS, pad_token_id=PAD, **{feature: value})), plain)
    errors = {k: v for k, v in (("init", init_err), ("generate_kwarg", kwarg_err),
                                ("generation_config", config_err)) if v}
    obs = Observation()
    obs.add("acceptance", {"config_field": "rejected" if init_err else "stored" if stored else "dropped",
                           "generate_kwarg": as_kwarg, "generation_config": as_config},
            "capability", **({"errors": errors} if errors else {}))
    return obs


def probe_capabilities(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    obs = Observation()
    obs.add("capabilities", capabilities(), "capability")
    return obs


def probe_cache_api(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    from transformers import DynamicCache, StaticCache, cache_utils

    def names(fn) -> list[str]:
        return [p for p in inspect.signature(fn).parameters if p != "self"]

    obs = Observation()
    obs.add("api", {
        "get_layer_types_and_kwargs": hasattr(cache_utils, "get_layer_types_and_kwargs"),
        "DynamicCache(config=)": "config" in names(DynamicCache.__init__),
        "StaticCache(config=, max_cache_len=)": {"config", "max_cache_len"} <= set(names(StaticCache.__init__)),
        "DynamicCache.crop": hasattr(DynamicCache, "crop"),
        "DynamicSlidingWindowLayer.activate_past_recording":
            hasattr(getattr(cache_utils, "DynamicSlidingWindowLayer", None), "activate_past_recording"),
        "DynamicSlidingWindowLayer(config=)": "config" in names(cache_utils.DynamicSlidingWindowLayer.__init__),
    }, "capability", layer_classes=sorted(n for n, c in vars(cache_utils).items()
                                           if inspect.isclass(c) and n.endswith("Layer")))
    return obs


def probe_cache_crop_positive(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    """crop(n) with n > 0 (keep the first n tokens) on a filled DynamicCache of full layers."""
    from transformers import DynamicCache

    model = zoo.load(TARGET).model
    ids = zoo.prompt_ids(TARGET, PROMPT)
    cache = DynamicCache(config=model.config)
    forward(model, ids, cache)
    keep = ids.shape[1] - 2
    _, err = observe(lambda: cache.crop(keep))
    after = cache.get_seq_length()
    obs = Observation()
    obs.add("result", {**_raised(err), "cache_after": "cropped" if after == keep else
                       "unchanged" if after == ids.shape[1] else f"{after} of {ids.shape[1]} tokens"})
    return obs


def probe_forward_cache_keyword(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    """`fills_cache` (capability): per spelling of forward()'s cache keyword (`cache`, and v4's
    `past_key_values` that v5 keeps), whether it is honoured - "accepted" (the cache holds the prompt
    afterwards), "ignored" (no error, the cache left empty: a regression, feature-ignored) or
    "rejected" (raised); `output_keys`: the output's keys."""
    from transformers import DynamicCache

    model = zoo.load(TARGET).model
    ids = zoo.prompt_ids(TARGET, PROMPT)
    fills, warned = {}, {}
    for keyword in ("cache", "past_key_values"):
        cache = DynamicCache(config=model.config)
        with warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter("always")
            _, err = observe(lambda keyword=keyword, cache=cache: model(ids, use_cache=True, **{keyword: cache}))
        # honoured: accepted (the cache holds the prompt), ignored (no error, cache left empty) or rejected
        fills[keyword] = "rejected" if err is not None else (
            "accepted" if cache.get_seq_length() == ids.shape[1] else "ignored")
        warned[keyword] = sorted({w.category.__name__ for w in caught})
    with torch.no_grad():
        out = model(ids, use_cache=True)
    obs = Observation()
    obs.add("fills_cache", fills, "capability", signature=cache_keyword(model), warnings=warned)
    obs.add("output_keys", list(out.keys()), output_type=type(out).__name__)
    return obs


def probe_tokenizer_decode(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    """`tok.<call>(ids)` on a batch of two id lists (v5 folds batch_decode into decode: a batch in
    gives a list of texts out; 4.57's decode took one sequence): the returned type, the types of its
    items, or the error."""
    tok = zoo.load(TARGET).tokenizer
    batch = [tok.encode("the cat sat"), tok.encode("on the mat")]
    obs = Observation()
    method = getattr(tok, params["call"], None)
    if method is None:
        obs.add("result", {"missing": True})
        return obs
    out, err = observe(lambda: method(batch))
    if err:
        obs.add("result", {"error": err})
        return obs
    items = sorted({type_name(x) for x in out}) if isinstance(out, (list, tuple)) else None
    obs.add("result", {"type": type_name(out), "items": items})
    return obs


def probe_save_pretrained_side_effects(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    """What save_pretrained changes on the model it saves (5.13 - 5.24: config.dtype becomes a
    str, which 5.24's MtpModel.from_pretrained then fails on)."""
    model = copy.deepcopy(zoo.load(ASSISTANT).model)
    before = type_name(model.config.dtype)
    _, err = observe(lambda: model.save_pretrained(str(tmp / "saved")))
    obs = Observation()
    obs.add("result", {**_raised(err), "config.dtype": {"before": before, "after": type_name(model.config.dtype)}})
    return obs


def probe_load_dtype_keywords(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    """`honoured` (capability): from_pretrained(dtype=float16) and v4's spelling
    torch_dtype=float16 (v5 keeps it, deprecated), each checked for its effect - "accepted" (the
    parameters arrive in float16), "ignored" (loads, in another dtype: a regression,
    feature-ignored) or "rejected" (raised); `arrived`: the dtype each load's parameters have."""
    from transformers import AutoModelForCausalLM

    honoured, arrived = {}, {}
    for keyword in ("dtype", "torch_dtype"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model, err = observe(lambda keyword=keyword: AutoModelForCausalLM.from_pretrained(
                str(zoo.checkpoints.directory(TARGET)), trust_remote_code=False, **{keyword: torch.float16}))
        dtype = None if model is None else str(next(model.parameters()).dtype)
        honoured[keyword] = "rejected" if err is not None else ("accepted" if dtype == "torch.float16" else "ignored")
        arrived[keyword] = dtype or err
    obs = Observation()
    obs.add("honoured", honoured, "capability", arrived=arrived)
    return obs


def _honoured(err: dict | None, effective: bool) -> str:
    """A keyword's pathway (compare.py PATHWAY): raised, took effect, or ran without effect."""
    return "rejected" if err is not None else ("accepted" if effective else "ignored")


def probe_generate_cache_keyword(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    """`fills_cache` (capability): per spelling of generate()'s cache keyword (v4's
    `past_key_values`; `cache`, the name 5.24 gives it, keeping `past_key_values` deprecated), a
    DynamicCache passed to greedy generate(), checked for its effect - "accepted" (generate()
    decoded into it: afterwards it holds every token of the output but the last, which no forward
    pass consumed), "ignored" (no error, the cache left without them: a regression, feature-ignored)
    or "rejected" (raised); `held`: the tokens each cache holds afterwards and how many it should."""
    from transformers import DynamicCache

    model = zoo.load(TARGET).model
    ids = zoo.prompt_ids(TARGET, PROMPT)
    fills, held, warned = {}, {}, {}
    for keyword in ("past_key_values", "cache"):
        cache = DynamicCache(config=model.config)
        with warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter("always")
            out, err = observe(lambda keyword=keyword, cache=cache: model.generate(
                ids, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=PAD, **{keyword: cache}))
        expected = None if out is None else out.shape[1] - 1
        held[keyword] = {"held": cache.get_seq_length(), "expected": expected}
        fills[keyword] = _honoured(err, expected is not None and held[keyword]["held"] == expected)
        warned[keyword] = sorted({w.category.__name__ for w in caught})
    obs = Observation()
    obs.add("fills_cache", fills, "capability", held=held, warnings=warned)
    return obs


SPECIAL = "<harness_special>"


def _is_special(tok: Any) -> bool:
    """SPECIAL is one of the tokenizer's special tokens: one id, dropped by skip_special_tokens."""
    ids = tok.encode(SPECIAL, add_special_tokens=False)
    return len(ids) == 1 and tok.decode(ids, skip_special_tokens=True).strip() == ""


def probe_tokenizer_special_keywords(zoo: Zoo, params: dict[str, Any], tmp: Path) -> Observation:
    """`honoured` (capability): AutoTokenizer.from_pretrained(extra_special_tokens=[t]) and v4's
    spelling additional_special_tokens=[t] (v5 converts it, the migration guide), each checked for
    its effect - "accepted" (t became a special token: it encodes as one id that
    decode(skip_special_tokens=True) drops), "ignored" (loads, t stays ordinary text: a
    regression, feature-ignored) or "rejected" (raised); `encoded`: the number of ids t encodes
    to under each spelling (None: raised)."""
    from transformers import AutoTokenizer

    honoured, encoded = {}, {}
    for keyword in ("extra_special_tokens", "additional_special_tokens"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tok, err = observe(lambda keyword=keyword: AutoTokenizer.from_pretrained(
                str(zoo.checkpoints.directory(TARGET)), trust_remote_code=False, **{keyword: [SPECIAL]}))
        special, err = (False, err) if tok is None else observe(lambda tok=tok: _is_special(tok))
        honoured[keyword] = _honoured(err, bool(special))
        encoded[keyword] = None if tok is None else len(tok.encode(SPECIAL, add_special_tokens=False))
    obs = Observation()
    obs.add("honoured", honoured, "capability", encoded=encoded)
    return obs


PROBES: dict[str, Callable[[Zoo, dict[str, Any], Path], Observation]] = {
    name.removeprefix("probe_"): fn for name, fn in globals().items() if name.startswith("probe_")
} | hf_api.PROBES
