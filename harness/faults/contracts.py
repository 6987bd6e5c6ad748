"""Catalogue faults of API contracts (suites/test_contracts.py).

Each `Fault` row names what it breaks, the `Catch` that must report it and the upstream bug it
is modelled on; harness/faults/catalogue.py joins every family's `FAULTS`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.faults.patches import Catch, Fault, Wrap, edit
from harness.faults.targets import GEN


def _generate_returns_dict(generate: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    @functools.wraps(generate)  # generate()'s signature is introspected (capabilities)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("return_dict_in_generate", True)
        return generate(self, *args, **kwargs)
    return wrapped


def _encode_returns_tensors(encode: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    @functools.wraps(encode)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("return_tensors", "pt")
        return encode(self, *args, **kwargs)
    return wrapped


def _trust_remote_code_by_default(resolve: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    @functools.wraps(resolve)
    def wrapped(trust_remote_code: Any, *args: Any, **kwargs: Any) -> Any:
        return resolve(True if trust_remote_code is None else trust_remote_code, *args, **kwargs)
    return wrapped


FAULTS: tuple[Fault, ...] = (
    # contracts -----------------------------------------------------------------------------------
    Fault("generate-returns-dict", "contracts",
          "generate() returns a GenerateDecoderOnlyOutput by default instead of a tensor",
          Catch("contracts", "generate-return-default", "result"),
          (Wrap(GEN, "GenerationMixin.generate", _generate_returns_dict),)),
    Fault("encode-returns-tensors", "contracts",
          "tokenizer.encode() returns a torch.Tensor instead of a list of ids",
          Catch("contracts", "tokenizer-encode", "result"),
          (Wrap("transformers.tokenization_utils_base", "PreTrainedTokenizerBase.encode", _encode_returns_tensors),),
          fast=True),
    Fault("trust-remote-code-default-on", "contracts",
          "trust_remote_code defaults to True: a checkpoint's custom code runs without consent",
          Catch("contracts", "trust-remote-code-default", "result"),
          (Wrap("transformers.dynamic_module_utils", "resolve_trust_remote_code", _trust_remote_code_by_default),)),
    Fault("ensemble-weight-ignored", "contracts",
          "GenerationConfig.assistant_ensemble_weight is stored but silently ignored by generate()",
          Catch("contracts", "accept-ensemble-weight", "acceptance"),
          (edit(GEN, "GenerationMixin._assisted_decoding",
                ("assistant_ensemble_weight = generation_config.assistant_ensemble_weight",
                 "assistant_ensemble_weight = None")),)),
    Fault("max-new-tokens-yields-to-file-max-length", "contracts",
          "generate(max_new_tokens=N) is overridden by a max_length from the checkpoint's generation_config.json: "
          "max_new_tokens is honoured only when max_length is the global default",
          Catch("loading", "llama-target.genconfig-file", "length_precedence"),
          (edit(GEN, "GenerationMixin._prepare_generated_length",
                ("if generation_config.max_new_tokens is not None:",
                 "if generation_config.max_new_tokens is not None and has_default_max_length:")),),
          notes="imitates transformers #13983 (4.11: \"Parameter max_new_tokens is always overshadow by max_length\", "
                "max_length defaulting from the model's config), the precedence PR #21347 settled (max_new_tokens "
                "wins, with a warning) and that #35765 / PR #34026 revisited: one condition of the length "
                "preparation"),
    Fault("genconfig-argument-overwritten-by-model", "contracts",
          "a GenerationConfig passed to generate() is overwritten by the model's generation_config "
          "(generation_config.json): the caller's values lose to the file's",
          Catch("loading", "llama-target.genconfig-file", "settings_precedence"),
          (edit(GEN, "GenerationMixin._prepare_generation_config",
                ("generation_config.update(**self.generation_config.to_dict(), defaults_only=True,",
                 "generation_config.update(**self.generation_config.to_dict(), defaults_only=False,")),),
          notes="imitates transformers #35372 (4.47.1: \"'do_sample' model default cannot be overridden\" - the "
                "model's generation config beat the caller's setting) in the merge PR #36684 introduced (a custom "
                "generation_config's unset values are filled from the model's): one keyword of that merge, "
                "`defaults_only`, flipped, so the file's values overwrite the ones the caller did set"),
)
