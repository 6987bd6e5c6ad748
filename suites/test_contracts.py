"""API contracts an upgrade can silently break, probed on the installed transformers.

One test, parametrized by the case table `CONTRACTS`; each case (a `schema.Case` named by its
contract id) names a probe (harness/subjects/hf_contracts.py `PROBES`) and, where the probe needs
a generation feature, the feature (`requires`, a key of `harness.subjects.hf.capabilities()`).
A version without that feature records ``supported = False`` (kind capability: the comparison
says "feature added / removed", never a crash or a regression) and the case skips with the reason.

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
  api-<entry point>      signature  [[name, kind, default], ...] of each public generation / cache
                                    entry point in `ENTRY_POINTS` ("<missing>" where absent);
                         returns    the distinct runtime shapes it returned while a short generate()
                                    workload ran ("Tensor[float32, 4d]", tuples in order, [] = not called)
  genconfig-values-<field> capability {value: generate() ran} for each candidate value of an
                                    enum-like GenerationConfig field (`ENUM_FIELDS`);
                         stages     per value: refused at init / validate / generate (exception
                                    type; the message an extra) or ran (the cache class produced);
                         declared   capability: the values the version's own constant lists
  generation-defaults-<model> effective  the GenerationConfig generate(input_ids) decodes with when the
                                    caller passes nothing; stored: the model's generation_config
  mtp-checkpoint-<model> checkpoint  the MTP tensors the checkpoint holds (layer index folded);
                         expected   the parameter names of the MTP layer this version's MtpModel builds;
                         load       MtpModel.from_pretrained: raised (type, the keys it names missing) or not;
                         use_mtp    capability: generate(use_mtp=True) ran
  stateful-paths-<arch>  cache_layers the cache layer classes DynamicCache(config=) builds for a hybrid
                                    linear-attention model (in memory, seeded random weights);
                         paths      capability: {plain, prompt_lookup, assisted: generate() ran}
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.engine.cache import has_linear_attention
from harness.fixtures.cases import model_cases
from harness.fixtures.zoo import SPECS
from harness.schema import Case
from harness.subjects import hf
from harness.subjects.hf_contracts import MTP, PROBES, TARGET

PROBE_KEYS = ("probe", "requires")


def contract(id: str, probe: str, requires: str | None = None, params: tuple[tuple[str, Any], ...] = (),
             model: str = TARGET) -> Case:
    """One row of the table: a case named `id` that runs `probe` with `params` (on `model`)."""
    return Case(model, name=id, params=_p(probe=probe, requires=requires, **dict(params)))


def _p(**kwargs: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(kwargs.items()))


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
      for c in model_cases()),
    *(contract(f"mtp-checkpoint-{s.name}", "mtp_checkpoint", params=_p(model=s.name), model=s.name)
      for s in SPECS if s.role == "mtp"),
    *(contract(f"stateful-paths-{name}", "stateful_paths", params=_p(model=name), model=name) for name in STATEFUL),
)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CONTRACTS + API])
def test_contract(case: Case, golden, zoo, tmp_path):
    requires = case.param("requires")
    if requires is not None:
        supported = hf.capabilities().get(requires, False)
        golden.check("supported", supported, kind="capability", feature=requires)
        if not supported:
            reason = f"transformers {hf.version()} does not support {requires!r}: probe {case.param('probe')} not run"
            golden.outcome("result", "skipped", "exact", reason, "unsupported")
            pytest.skip(reason)
    params = {k: v for k, v in case.params if k not in PROBE_KEYS}
    golden.check_all(PROBES[case.param("probe")](zoo, params, tmp_path))
