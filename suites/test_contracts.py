"""API contracts an upgrade can silently break, probed on the installed transformers.

One test, parametrized by the case table `CONTRACTS`; each case names a probe (a function in
`PROBES`) and, where the probe needs a generation feature, the feature (`requires`, a key of
`harness.subjects.hf.capabilities()`). A version without that feature records
``supported = False`` (kind capability: the comparison says "feature added / removed", never a
crash or a regression) and the case skips with the reason.

Fields (exact unless said otherwise):
  generate-return-*      type       type name of generate()'s result ("torch.Tensor",
                                    "GenerateDecoderOnlyOutput"), its keys, the type of its scores
  tokenizer-*            type       tokenizer.encode() -> "list[int]", tokenizer(...) ->
                                    "BatchEncoding" with its keys and value types
  trust-remote-code-*    behaviour  what from_pretrained does with custom code when
                                    trust_remote_code is not passed: prompted?, raised?, ran the code?
  generation-config-keys capability the public attributes of GenerationConfig() (added keys show
                                    up as "feature added")
  genconfig-*            validation {"raises": type name or None, "message": first line} for the
                                    constructor and validate(strict=True), and the value stored
  generate-*             validation the same for errors generate() raises
  accept-*               capability whether use_mtp / assistant_ensemble_weight are accepted
                                    (decoding changed: MTP drafts appeared, or other tokens),
                                    ignored (ran, no observable effect) or rejected (raised), as a
                                    GenerationConfig field, a generate() keyword and inside a
                                    generation_config; the error messages ride along as extras
  capabilities           capability harness.subjects.hf.capabilities()
  cache-api              capability DynamicCache/StaticCache entry points the suites rely on
  cache-crop-positive    behaviour  DynamicCache.crop(<positive length>)
  forward-cache-keyword  capability which forward() keyword fills an explicit cache (and warnings);
                         exact      the keys of forward()'s output
  save-pretrained-side-effects      what save_pretrained changes on the saved model (config.dtype)
"""

from __future__ import annotations

import builtins
import copy
import inspect
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
from _common import (  # noqa: F401 - one_intra_op_thread is an autouse fixture
    cache_keyword,
    first_line,
    forward,
    loaded,
    observe,
    one_intra_op_thread,
    prompt_ids,
    type_name,
)

from harness.subjects import hf

TARGET, ASSISTANT, MTP = "llama-target", "llama-assistant", "glm4moe-mtp"
PROMPT = "short-0"
NEW_TOKENS = 12
PAD = 0


@dataclass(frozen=True)
class Contract:
    id: str
    probe: str
    requires: str | None = None  # hf.capabilities() feature the probe needs
    params: tuple[tuple[str, Any], ...] = ()

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)


def _p(**kwargs: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(kwargs.items()))


CONTRACTS: tuple[Contract, ...] = (
    Contract("generate-return-default", "generate_return"),
    Contract("generate-return-dict", "generate_return", params=_p(return_dict_in_generate=True)),
    Contract("generate-return-dict-scores", "generate_return",
             params=_p(return_dict_in_generate=True, output_scores=True, output_logits=True)),
    Contract("tokenizer-encode", "tokenizer", params=_p(call="encode")),
    Contract("tokenizer-call", "tokenizer", params=_p(call="__call__")),
    Contract("tokenizer-call-pt", "tokenizer", params=_p(call="__call__", return_tensors="pt")),
    Contract("trust-remote-code-default", "trust_remote_code", params=_p(model_type="harness_custom")),
    Contract("trust-remote-code-known-type", "trust_remote_code", params=_p(model_type="llama")),
    Contract("generation-config-keys", "generation_config_keys"),
    Contract("genconfig-ensemble-weight-0", "genconfig", "assistant_ensemble_weight",
             _p(assistant_ensemble_weight=0.0)),
    Contract("genconfig-ensemble-weight-1", "genconfig", "assistant_ensemble_weight",
             _p(assistant_ensemble_weight=1.0)),
    Contract("genconfig-ensemble-weight-1.5", "genconfig", "assistant_ensemble_weight",
             _p(assistant_ensemble_weight=1.5)),
    Contract("genconfig-ensemble-weight-neg", "genconfig", "assistant_ensemble_weight",
             _p(assistant_ensemble_weight=-0.1)),
    Contract("genconfig-ensemble-weight-0.5", "genconfig", "assistant_ensemble_weight",
             _p(assistant_ensemble_weight=0.5)),
    Contract("genconfig-use-mtp-true", "genconfig", "use_mtp", _p(use_mtp=True)),
    Contract("genconfig-max-new-tokens-neg", "genconfig", params=_p(max_new_tokens=-1)),
    Contract("genconfig-top-p-1.5", "genconfig", params=_p(do_sample=True, top_p=1.5)),
    Contract("genconfig-temperature-neg", "genconfig", params=_p(do_sample=True, temperature=-1.0)),
    Contract("genconfig-unknown-key", "genconfig", params=_p(harness_no_such_key=1)),
    Contract("generate-prompt-lookup-with-ensemble", "generate_error", "assistant_ensemble_weight",
             _p(prompt_lookup_num_tokens=3, assistant_ensemble_weight=0.5)),
    Contract("generate-ensemble-weight-1.5", "generate_error", "assistant_ensemble_weight",
             _p(assistant=True, assistant_ensemble_weight=1.5)),
    Contract("generate-use-mtp-without-heads", "generate_error", "use_mtp", _p(use_mtp=True)),
    Contract("accept-use-mtp", "acceptance", params=_p(feature="use_mtp", value=True, model=MTP)),
    Contract("accept-use-mtp-without-heads", "acceptance", params=_p(feature="use_mtp", value=True, model=TARGET)),
    Contract("accept-ensemble-weight", "acceptance",
             params=_p(feature="assistant_ensemble_weight", value=0.5, model=TARGET, assistant=True)),
    Contract("capabilities", "capabilities"),
    Contract("cache-api", "cache_api"),
    Contract("cache-crop-positive", "cache_crop_positive"),
    Contract("forward-cache-keyword", "forward_cache_keyword"),
    Contract("save-pretrained-side-effects", "save_pretrained_side_effects"),
)


@dataclass
class Ctx:
    case: Contract
    golden: Any
    tmp_path: Any
    monkeypatch: Any
    notes: dict[str, Any] = field(default_factory=dict)


def _raised(err: dict | None) -> dict[str, Any]:
    return {"raises": err["type"] if err else None, "message": err["message"] if err else None}


@pytest.fixture(scope="module")
def setup_assistant():
    """The assistant with a pinned draft schedule (constant 4 tokens, no early stop)."""
    assistant = loaded(ASSISTANT).model
    assistant.generation_config.num_assistant_tokens = 4
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    assistant.generation_config.assistant_confidence_threshold = 0.0
    return assistant


def _generate(model_name: str, assistant=None, **kwargs: Any):
    model = loaded(model_name).model
    ids = prompt_ids(model_name, PROMPT)
    kwargs.setdefault("max_new_tokens", NEW_TOKENS)
    kwargs.setdefault("pad_token_id", PAD)
    if assistant is not None:
        kwargs["assistant_model"] = assistant
    drafts: list[list[int]] = []
    with hf.record_drafts(drafts), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.generate(ids, **kwargs)
    return out, ids.shape[1], drafts


# ----------------------------------------------------------------------------------------------
# probes


def probe_generate_return(ctx: Ctx) -> None:
    out, err = observe(lambda: _generate(TARGET, **ctx.case.kwargs)[0])
    if err:
        ctx.golden.check("result", {"error": err})
        return
    value: dict[str, Any] = {"type": type_name(out), "is_tensor": isinstance(out, torch.Tensor),
                             "is_mapping": isinstance(out, dict)}
    if isinstance(out, torch.Tensor):
        value |= {"dtype": str(out.dtype), "dims": out.dim()}
    if isinstance(out, dict):
        value |= {"keys": list(out.keys()),
                  "value_types": {k: type_name(v) for k, v in out.items()}}
    ctx.golden.check("result", value)


def probe_tokenizer(ctx: Ctx) -> None:
    kwargs = ctx.case.kwargs
    call = kwargs.pop("call")
    tok = loaded(TARGET).tokenizer
    text = "the cat sat on the mat"
    out, err = observe(lambda: getattr(tok, call)(text, **kwargs) if call != "__call__" else tok(text, **kwargs))
    if err:
        ctx.golden.check("result", {"error": err})
        return
    value: dict[str, Any] = {"type": type_name(out), "tokenizer_class": type(tok).__name__}
    if hasattr(out, "keys"):
        value |= {"keys": sorted(out.keys()), "value_types": {k: type_name(v) for k, v in out.items()}}
    ctx.golden.check("result", value)


CUSTOM_CONFIG = """\
import pathlib
from transformers import PretrainedConfig

pathlib.Path({marker!r}).write_text("ran")


class HarnessCustomConfig(PretrainedConfig):
    model_type = {model_type!r}
"""


def probe_trust_remote_code(ctx: Ctx) -> None:
    """A local checkpoint whose config.json points AutoConfig at custom code (auto_map); loaded
    without passing trust_remote_code. A prompt for consent is answered as a non-interactive
    session would (EOF). Does the custom code run?"""
    from transformers import AutoConfig

    model_type = ctx.case.kwargs["model_type"]
    directory = ctx.tmp_path / "custom"
    directory.mkdir()
    marker = ctx.tmp_path / "custom_code_ran"
    (directory / "config.json").write_text(json.dumps(
        {"model_type": model_type, "auto_map": {"AutoConfig": "custom_config.HarnessCustomConfig"}}))
    (directory / "custom_config.py").write_text(CUSTOM_CONFIG.format(marker=str(marker), model_type=model_type))
    prompts: list[str] = []

    def no_tty(prompt: str = "") -> str:
        prompts.append(first_line(prompt))
        raise EOFError("harness: no interactive input")

    ctx.monkeypatch.setattr(builtins, "input", no_tty)
    config, err = observe(lambda: AutoConfig.from_pretrained(str(directory)), scrub={str(directory): "<dir>"})
    ctx.golden.check("result", {
        "prompted": bool(prompts), **_raised(err),
        "config_class": type(config).__name__ if config is not None else None,
        "custom_code_ran": marker.exists(),
    })


def _public_keys(obj: Any) -> list[str]:
    return sorted(k for k in vars(obj) if not k.startswith("_"))


def probe_generation_config_keys(ctx: Ctx) -> None:
    from transformers import GenerationConfig

    ctx.golden.check("keys", _public_keys(GenerationConfig()), kind="capability")


def probe_genconfig(ctx: Ctx) -> None:
    from transformers import GenerationConfig

    kwargs = ctx.case.kwargs
    config, init_err = observe(lambda: GenerationConfig(**kwargs))
    value: dict[str, Any] = {"init": _raised(init_err)}
    if config is not None:
        value["stored"] = {k: getattr(config, k, "<absent>") for k in kwargs}
        strict = "strict" in inspect.signature(config.validate).parameters
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, val_err = observe(lambda: config.validate(strict=True) if strict else config.validate())
        value["validate_strict" if strict else "validate"] = _raised(val_err)
    ctx.golden.check("result", value)


def probe_generate_error(ctx: Ctx, setup_assistant=None) -> None:
    kwargs = ctx.case.kwargs
    assistant = setup_assistant if kwargs.pop("assistant", False) else None
    _, err = observe(lambda: _generate(TARGET, assistant=assistant, **kwargs))
    ctx.golden.check("result", _raised(err))


def _pathway(run: Callable[[], Any], plain: tuple[list[int], list[list[int]]]) -> tuple[str, dict | None]:
    """'rejected' (raised), 'accepted' (MTP drafts or different tokens than without the
    feature) or 'ignored' (ran, no observable effect)."""
    result, err = observe(run)
    if err is not None:
        return "rejected", err
    out, prompt_len, drafts = result
    tokens = out[0, prompt_len:].tolist()
    if tokens != plain[0] or (any(drafts) and not any(plain[1])):
        return "accepted", None
    return "ignored", None


def probe_acceptance(ctx: Ctx, setup_assistant=None) -> None:
    from transformers import GenerationConfig

    kw = ctx.case.kwargs
    feature, value, model = kw["feature"], kw["value"], kw["model"]
    assistant = setup_assistant if kw.get("assistant") else None
    out, prompt_len, drafts = _generate(model, assistant=assistant)
    plain = (out[0, prompt_len:].tolist(), drafts)
    config, init_err = observe(lambda: GenerationConfig(**{feature: value}))
    stored = config is not None and getattr(config, feature, None) == value
    as_kwarg, kwarg_err = _pathway(lambda: _generate(model, assistant=assistant, **{feature: value}), plain)
    as_config, config_err = _pathway(lambda: _generate(model, assistant=assistant, generation_config=GenerationConfig(
        max_new_tokens=NEW_TOKENS, pad_token_id=PAD, **{feature: value})), plain)
    errors = {k: v for k, v in (("init", init_err), ("generate_kwarg", kwarg_err),
                                ("generation_config", config_err)) if v}
    ctx.golden.check("acceptance", {
        "config_field": "rejected" if init_err else "stored" if stored else "dropped",
        "generate_kwarg": as_kwarg,
        "generation_config": as_config,
    }, kind="capability", **({"errors": errors} if errors else {}))


def probe_capabilities(ctx: Ctx) -> None:
    ctx.golden.check("capabilities", hf.capabilities(), kind="capability")


def probe_cache_api(ctx: Ctx) -> None:
    from transformers import DynamicCache, StaticCache, cache_utils

    def params(fn) -> list[str]:
        return [p for p in inspect.signature(fn).parameters if p != "self"]

    ctx.golden.check("api", {
        "get_layer_types_and_kwargs": hasattr(cache_utils, "get_layer_types_and_kwargs"),
        "DynamicCache(config=)": "config" in params(DynamicCache.__init__),
        "StaticCache(config=, max_cache_len=)": {"config", "max_cache_len"} <= set(params(StaticCache.__init__)),
        "DynamicCache.crop": hasattr(DynamicCache, "crop"),
        "DynamicSlidingWindowLayer.activate_past_recording":
            hasattr(getattr(cache_utils, "DynamicSlidingWindowLayer", None), "activate_past_recording"),
        "DynamicSlidingWindowLayer(config=)": "config" in params(cache_utils.DynamicSlidingWindowLayer.__init__),
    }, kind="capability", layer_classes=sorted(n for n, c in vars(cache_utils).items()
                                                if inspect.isclass(c) and n.endswith("Layer")))


def probe_cache_crop_positive(ctx: Ctx) -> None:
    """crop(n) with n > 0 (keep the first n tokens) on a filled DynamicCache of full layers."""
    from transformers import DynamicCache

    model = loaded(TARGET).model
    ids = prompt_ids(TARGET, PROMPT)
    cache = DynamicCache(config=model.config)
    forward(model, ids, cache)
    keep = ids.shape[1] - 2
    _, err = observe(lambda: cache.crop(keep))
    after = cache.get_seq_length()
    ctx.golden.check("result", {**_raised(err), "cache_after": "cropped" if after == keep else
                                "unchanged" if after == ids.shape[1] else f"{after} of {ids.shape[1]} tokens"})


def probe_forward_cache_keyword(ctx: Ctx) -> None:
    from transformers import DynamicCache

    model = loaded(TARGET).model
    ids = prompt_ids(TARGET, PROMPT)
    fills, warned = {}, {}
    for keyword in ("cache", "past_key_values"):
        cache = DynamicCache(config=model.config)
        with warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter("always")
            _, err = observe(lambda keyword=keyword, cache=cache: model(ids, use_cache=True, **{keyword: cache}))
        fills[keyword] = err is None and cache.get_seq_length() == ids.shape[1]
        warned[keyword] = sorted({w.category.__name__ for w in caught})
    ctx.golden.check("fills_cache", fills, kind="capability", signature=cache_keyword(model), warnings=warned)
    with torch.no_grad():
        out = model(ids, use_cache=True)
    ctx.golden.check("output_keys", list(out.keys()), output_type=type(out).__name__)


def probe_save_pretrained_side_effects(ctx: Ctx) -> None:
    """What save_pretrained changes on the model it saves (5.13 - 5.24: config.dtype becomes a
    str, which 5.24's MtpModel.from_pretrained then fails on)."""
    model = copy.deepcopy(loaded(ASSISTANT).model)
    before = type_name(model.config.dtype)
    _, err = observe(lambda: model.save_pretrained(str(ctx.tmp_path / "saved")))
    ctx.golden.check("result", {**_raised(err), "config.dtype": {"before": before,
                                                                   "after": type_name(model.config.dtype)}})


PROBES: dict[str, Callable[..., None]] = {
    name.removeprefix("probe_"): fn for name, fn in globals().items() if name.startswith("probe_")
}


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CONTRACTS])
def test_contract(case: Contract, golden, tmp_path, monkeypatch, request):
    if case.requires is not None:
        supported = hf.capabilities().get(case.requires, False)
        golden.check("supported", supported, kind="capability", feature=case.requires)
        if not supported:
            reason = f"transformers {hf.version()} does not support {case.requires!r}: probe {case.probe} not run"
            golden.outcome("result", "skipped", "exact", reason, "unsupported")
            pytest.skip(reason)
    probe = PROBES[case.probe]
    ctx = Ctx(case, golden, tmp_path, monkeypatch)
    if "setup_assistant" in inspect.signature(probe).parameters:
        probe(ctx, setup_assistant=request.getfixturevalue("setup_assistant"))
    else:
        probe(ctx)
