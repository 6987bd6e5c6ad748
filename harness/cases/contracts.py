"""The contracts suite's table (suites/test_contracts.py; probes: harness/subjects/hf_contracts.py):
API contracts, the API surface v5 changed, per-model defaults, MTP checkpoints, stateful paths."""

from __future__ import annotations

from typing import Any

from harness.cases.common import MTP, TARGET, _p, models
from harness.cases.registry import Suite, Table
from harness.engine.cache import has_linear_attention
from harness.schema import Case
from harness.settings.run import RunSettings
from harness.zoo.specs import SPECS


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


def _contracts(run: RunSettings | None = None) -> list[Case]:
    """The contracts suite's table (the same in every run)."""
    return [*CONTRACTS, *API, *API_V4]


contracts = Table("contracts", _contracts)

SUITE = Suite("contracts", (contracts,), api='the API contract')
