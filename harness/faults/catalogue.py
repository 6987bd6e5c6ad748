"""The fault catalogue: named, injectable defects of the installed transformers that the suites
must catch - the harness's proof of sensitivity. Each row names what it breaks and the `Catch`
(suite, case glob, field glob) that must report it as a regression; `harness faults`
(harness/cli/faults.py) runs the catching cases under every fault and writes the sensitivity
table (docs/faults.md). Adding a fault is adding one `Fault(...)` row to `FAULTS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.faults.patches import (
    Catch,
    ExtraAllocation,
    Fault,
    FaultError,
    SetItems,
    SlowForward,
    Undo,
    Wrap,
    edit,
)

# ----------------------------------------------------------------------------------------------
# wrappers (the faults that change arguments or results rather than one line)

def _rename_checkpoint_key(load: Callable[..., Any]) -> Callable[..., Any]:
    """model.norm.weight is read as model.final_norm.weight (a rename without a load-time remap)."""
    def convert_and_load_state_dict_in_model(*args: Any, **kwargs: Any) -> Any:
        state = kwargs.get("state_dict")
        if state is not None and "model.norm.weight" in state:
            state = dict(state)
            state["model.final_norm.weight"] = state.pop("model.norm.weight")
            kwargs["state_dict"] = state
        return load(*args, **kwargs)
    return convert_and_load_state_dict_in_model


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


_ONE_BACK: dict[str, Any] = {}  # the MTP layer's last hidden states, for `mtp-draft-sampled-one-back`


def _mtp_layer_keeps_hidden(forward_layer: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    @functools.wraps(forward_layer)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        _ONE_BACK["hidden"], _ONE_BACK["mtp"] = forward_layer(self, *args, **kwargs), self
        return _ONE_BACK["hidden"]
    return wrapped


def _mtp_samples_one_back(get_candidates: Callable[..., Any]) -> Callable[..., Any]:
    """The draft is re-drawn from the MTP layer's prediction one position back (its second-to-last
    hidden state, processed), while the candidate logits - the verifier's q - stay the right position's."""
    import functools

    import torch

    @functools.wraps(get_candidates)
    def wrapped(self: Any, input_ids: Any, *args: Any, **kwargs: Any) -> Any:
        ids, logits = get_candidates(self, input_ids, *args, **kwargs)
        hidden = _ONE_BACK.pop("hidden", None)
        if hidden is not None and hidden.shape[1] >= 2 and ids.shape[1] > input_ids.shape[1]:
            wrong = _ONE_BACK["mtp"]._project_to_logits(hidden[:, -2:-1])[:, -1].float()
            if self.logits_processor is not None:
                wrong = self.logits_processor(input_ids, wrong)
            ids = ids.clone()
            ids[:, input_ids.shape[1]] = torch.multinomial(torch.softmax(wrong, dim=-1), 1)[:, 0]
        return ids, logits
    return wrapped


def _dtype_auto_as_unset(get_dtype: Callable[..., Any]) -> Callable[..., Any]:
    """from_pretrained's default dtype "auto" reaches `_get_dtype` as if no dtype had been given."""
    import functools

    @functools.wraps(get_dtype)
    def wrapped(dtype: Any, *args: Any, **kwargs: Any) -> Any:
        return get_dtype(None if isinstance(dtype, str) and dtype == "auto" else dtype, *args, **kwargs)
    return wrapped


def _assistant_falls_back_to_plain(get_mode: Callable[..., Any]) -> Callable[..., Any]:
    """With an assistant model the generation mode is the base one (greedy or sample) instead of
    assisted generation: generate() takes the assistant, raises nothing, and decodes without it."""
    import functools

    @functools.wraps(get_mode)
    def wrapped(self: Any, assistant_model: Any = None, *args: Any, **kwargs: Any) -> Any:
        mode = get_mode(self, assistant_model, *args, **kwargs)
        if assistant_model is not None and mode == "assisted_generation":
            return get_mode(self, None, *args, **kwargs) if not (self.use_mtp or self.prompt_lookup_num_tokens) else mode
        return mode
    return wrapped


def _trust_remote_code_by_default(resolve: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    @functools.wraps(resolve)
    def wrapped(trust_remote_code: Any, *args: Any, **kwargs: Any) -> Any:
        return resolve(True if trust_remote_code is None else trust_remote_code, *args, **kwargs)
    return wrapped


GEN = "transformers.generation.utils"
CAND = "transformers.generation.candidate_generator"
GEN_CONFIG = "transformers.generation.configuration_utils"
CACHE = "transformers.cache_utils"
MASK = "transformers.masking_utils"
QWEN3_5 = "transformers.models.qwen3_5.modeling_qwen3_5"
PROC = "transformers.generation.logits_process"
STOP = "transformers.generation.stopping_criteria"
STREAM = "transformers.generation.streamers"
ROPE = "transformers.modeling_rope_utils"
TOK = "transformers.tokenization_utils_base"
TOK_BACKEND = "transformers.tokenization_utils_tokenizers"


# ----------------------------------------------------------------------------------------------
# the catalogue

FAULTS: tuple[Fault, ...] = (
    # verifier ------------------------------------------------------------------------------------
    Fault("ensemble-weight-one-minus", "verifier",
          "the static-ensemble acceptance ratio uses 1 - w where it should use w (v = (1-w) p + w q)",
          Catch("bias", "w0.3.ctx0", "acceptance"),
          (edit(GEN, "_speculative_sampling",
                ("1.0 - assistant_ensemble_weight + assistant_ensemble_weight * (p_i / q_i)",
                 "assistant_ensemble_weight + (1.0 - assistant_ensemble_weight) * (p_i / q_i)")),)),
    Fault("residual-from-target", "verifier",
          "after a rejection the correction token is drawn from p instead of the renormalised residual "
          "norm([p - q]+) (the residual's mass is never taken out)",
          Catch("bias", "lossless.ctx0", "first_token"),
          (edit(GEN, "_speculative_sampling",
                ("p_prime = torch.clamp((p_n_plus_1 - q_n_plus_1), min=0)", "p_prime = p_n_plus_1.clone()")),),
          notes="a literally un-renormalised residual is invisible (torch.multinomial normalises its input), so "
                "the catalogue's form draws from p. It was once caught only at the G-test's Monte Carlo floor "
                "(p = 1e-5 with B capped at 100,000), which a run of more than 249 golden tests could not reject "
                "at; the sequential Besag-Clifford p-value (harness/checking/stats.py `sequential_g_pvalue`, up to 20 / "
                "alpha resamples) has no such floor."),
    Fault("acceptance-wrong-draft-position", "verifier",
          "the acceptance ratio p/q is read at the token before the draft (position i - 1) instead of the "
          "drafted token",
          Catch("sampling", "llama-target.assisted.default.*", "exact_acceptance"),
          (edit(GEN, "_speculative_sampling",
                ("q_i = q[:, torch.arange(candidate_length), new_candidate_input_ids]",
                 "q_i = q[:, torch.arange(candidate_length), candidate_input_ids[:, -candidate_length - 1:-1]]"),
                ("p_i = p[:, torch.arange(candidate_length), new_candidate_input_ids]",
                 "p_i = p[:, torch.arange(candidate_length), candidate_input_ids[:, -candidate_length - 1:-1]]")),)),
    Fault("greedy-ensemble-argmax-p", "verifier",
          "greedy static-ensemble verification compares the drafts with argmax p instead of argmax v",
          Catch("outputs", "llama-target.ensemble.w0.3.dynamic.short-0.greedy", "equals_reference_engine"),
          (edit(GEN, "GenerationMixin._assisted_decoding",
                ("selected_tokens = torch.cat([nu_probs.argmax(dim=-1), bonus_logits.argmax(dim=-1)], dim=-1)",
                 "selected_tokens = torch.cat([p_probs.argmax(dim=-1), bonus_logits.argmax(dim=-1)], dim=-1)")),)),
    # drafting ------------------------------------------------------------------------------------
    Fault("mtp-draft-shifted", "drafting",
          "the MTP head is fed the token one position before the one each hidden state predicts",
          Catch("outputs", "glm4moe-mtp.mtp.dynamic.short-0.greedy", "drafts"),
          (edit(CAND, "MTPCandidateGenerator.get_candidates",
                ("mtp_input_ids = input_ids[:, -num_last_main_model_tokens:]",
                 "mtp_input_ids = input_ids[:, -num_last_main_model_tokens - 1:-1]")),)),
    Fault("prompt-lookup-off-by-one", "drafting",
          "prompt lookup copies the continuation one token after the matched n-gram's end",
          Catch("outputs", "llama-target.prompt_lookup.dynamic.short-0.greedy", "drafts"),
          (edit(CAND, "PromptLookupCandidateGenerator.get_candidates",
                ("start_idx = idx + ngram_size", "start_idx = idx + ngram_size + 1")),)),
    Fault("assistant-falls-back-to-plain", "drafting",
          "generate(assistant_model=...) silently decodes without the assistant: the generation mode stays "
          "greedy / sample, no candidate generator is consulted, no error (the outputs equal plain decoding)",
          Catch("outputs", "llama-target.assisted.dynamic.short-0.greedy", "supports_assistant_model"),
          (Wrap(GEN_CONFIG, "GenerationConfig.get_generation_mode", _assistant_falls_back_to_plain),),
          notes="modelled on huggingface/transformers#30778 (a generate() refactor silently dropped a property of "
                "assisted decoding - the assistant's greedy drafting - with no error; restored in that PR) and on "
                "the candidate-generator refactor of #27979 / #28030 (the assisted path's classes moved and renamed): "
                "a path judged by a class name, or by its keyword, stays green when the call no longer runs it"),
    Fault("assistant-ignores-num-tokens", "drafting",
          "assisted drafting ignores num_assistant_tokens and drafts up to 20 tokens a step",
          Catch("outputs", "llama-target.assisted.dynamic.short-0.greedy", "drafts"),
          (edit(CAND, "AssistedCandidateGenerator._calculate_new_tokens",
                ("min(int(self.num_assistant_tokens),", "min(20,")),)),
    # caches --------------------------------------------------------------------------------------
    Fault("crop-leaves-stale-entry", "caches",
          "DynamicCache.crop after a rejected draft keeps one of the rejected entries",
          Catch("caches", "llama-target", "rollback"),
          (edit(CACHE, "DynamicLayer.crop",
                ("self.keys = self.keys[..., : -abs(tokens_to_remove), :]",
                 "self.keys = self.keys[..., : self.keys.shape[-2] - abs(tokens_to_remove) + 1, :]"),
                ("self.values = self.values[..., : -abs(tokens_to_remove), :]",
                 "self.values = self.values[..., : self.values.shape[-2] - abs(tokens_to_remove) + 1, :]")),),
          fast=True),
    Fault("static-slot-reused", "caches",
          "a StaticCache decode step writes into the previous token's slot; its own slot is never "
          "overwritten (keeps the buffer's zeros)",
          Catch("caches", "llama-target", "static_vs_dynamic"),
          (edit(CACHE, "StaticLayer.update",
                ("cache_position = torch.arange(kv_length, device=self.device) + self.cumulative_length",
                 "cache_position = torch.arange(kv_length, device=self.device) + self.cumulative_length"
                 " - (1 if kv_length == 1 else 0)")),)),
    Fault("layer-dispatch-swap", "caches",
          "the cache's layer-type dispatch swaps full and sliding-window attention layers",
          Catch("caches", "qwen2-hybrid", "dynamic_layers_vs_reference"),
          (Wrap(CACHE, "get_layer_types_and_kwargs", lambda original: _swap_layer_types(original)),)),
    Fault("delta-rule-decode-no-decay", "caches",
          "the one-token decode step of the gated delta rule (linear attention) skips the recurrent state's "
          "decay; the prefill, which runs the chunked kernel, stays right",
          Catch("outputs", "qwen3_5-linear.plain.*.greedy", "equals_reference_engine"),
          (edit(QWEN3_5, "torch_recurrent_gated_delta_rule",
                ("last_recurrent_state = last_recurrent_state * decay_t", "last_recurrent_state = last_recurrent_state")),)),
    Fault("chunk-boundary-off-by-one", "attention",
          "the chunked-attention mask puts every chunk boundary one token early",
          Catch("backends", "llama4-chunked", "sdpa_mask_vs_reference"),
          (edit(MASK, "chunked_overlay",
                ("return (kv_idx - left_padding[batch_idx]) // chunk_size",
                 "return (kv_idx - left_padding[batch_idx] + 1) // chunk_size")),)),
    Fault("sliding-window-off-by-one", "attention",
          "the sliding-window mask lets each query see one key more than the window",
          Catch("backends", "mistral-sliding", "sdpa_mask_vs_reference"),
          (edit(MASK, "sliding_window_overlay",
                ("return kv_idx > q_idx - sliding_window", "return kv_idx >= q_idx - sliding_window")),)),
    # backends and checkpoints --------------------------------------------------------------------
    Fault("sdpa-flag-flipped", "backends",
          "MistralPreTrainedModel._supports_sdpa flipped to False: the model silently falls back to eager",
          Catch("backends", "mistral-sliding", "default_attn_implementation"),
          (SetItems("transformers.models.mistral.modeling_mistral", "MistralPreTrainedModel",
                    (("_supports_sdpa", False),)),)),
    Fault("eager-instead-of-sdpa", "backends",
          "from_pretrained without attn_implementation chooses eager attention instead of SDPA",
          Catch("backends", "llama-target", "default_attn_implementation"),
          (edit("transformers.modeling_utils", "PreTrainedModel.get_correct_attn_implementation",
                ('applicable_attention = "sdpa" if requested_attention is None',
                 'applicable_attention = "eager" if requested_attention is None')),)),
    Fault("checkpoint-key-renamed", "checkpoints",
          "the checkpoint key model.norm.weight is renamed (model.final_norm.weight) without a load-time "
          "remap: the final norm is re-initialised",
          Catch("backends", "llama-target", "loading_info"),
          (Wrap("transformers.modeling_utils", "convert_and_load_state_dict_in_model", _rename_checkpoint_key),)),
    Fault("dtype-auto-dropped", "checkpoints",
          "from_pretrained(path) without a dtype loads in torch's default dtype (fp32) instead of v5's "
          "dtype=\"auto\" (the config's dtype): a checkpoint whose config says float16 arrives in fp32",
          Catch("loading", "llama-target.config-fp16", "dtype"),
          (Wrap("transformers.modeling_utils", "_get_dtype", _dtype_auto_as_unset),),
          notes="imitates the default that PR #42805 changed (v5: dtype=\"auto\", so facebook/opt-125m, whose "
                "config says float16, arrives in fp16 where v4 gave fp32; PR #42883 documents it), run backwards: "
                "the one line `if dtype is None: dtype = \"auto\"` of PreTrainedModel.from_pretrained lost in a "
                "refactor. A Wrap of `_get_dtype`, which receives that default, because from_pretrained uses "
                "super() and cannot be recompiled by a SourceEdit; the harness's own loads pass a dtype and "
                "never see it"),
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
    # sampling (caught by the sampling suite's white-box fields, suites/test_sampling.py) ------------
    Fault("temperature-applied-twice", "sampling",
          "the temperature warper divides the scores by T twice (T^2)",
          Catch("sampling", "*plain.temperature*", "exact_emitted"),
          (edit(PROC, "TemperatureLogitsWarper.__call__",
                ("scores_processed = scores / self.temperature",
                 "scores_processed = scores / self.temperature / self.temperature")),)),
    Fault("top-p-one-fewer", "sampling",
          "top-p keeps one token fewer than the smallest set whose mass reaches p",
          Catch("sampling", "*plain.top_p*", "exact_emitted"),
          (edit(PROC, "TopPLogitsWarper.__call__",
                ("sorted_indices_to_remove = cumulative_probs <= (1 - self.top_p)",
                 "sorted_indices_to_remove = cumulative_probs <= (1 - self.top_p)\n"
                 "    sorted_indices_to_remove[..., 1:] |= sorted_indices_to_remove[..., :-1].clone()")),)),
    Fault("mtp-draft-sampled-one-back", "sampling",
          "the MTP draft is sampled from the MTP layer's prediction one position back, while the verifier gets "
          "the right position's logits as q",
          Catch("sampling", "mellum-mtp.mtp.default.*", "exact_emitted"),
          (Wrap("transformers.modeling_layers", "MtpModel.forward_layer", _mtp_layer_keeps_hidden),
           Wrap(CAND, "MTPCandidateGenerator.get_candidates", _mtp_samples_one_back))),
    Fault("mtp-logits-before-processors", "sampling",
          "the MTP head hands the verifier its raw logits as q while the draft is sampled from the processed "
          "ones (the acceptance test and the residual use another q than the draft's)",
          Catch("sampling", "mellum-mtp.mtp.default.*", "exact_emitted"),
          (edit("transformers.modeling_layers", "MtpModel.forward",
                ("drafted_logits.append(next_token_logits[:, None, :])", "pass  # appended before the processors"),
                ("next_token_logits = logits[:, -1, :].to(device=input_ids.device)",
                 "next_token_logits = logits[:, -1, :].to(device=input_ids.device); "
                 "drafted_logits.append(next_token_logits[:, None, :])")),),
          notes="re-creates a real upstream bug: transformers 5.14.0's MtpModel.forward appends the drafted logits "
                "before the logits processors (modeling_layers.py, 5.14.0 L533 vs the processors at L537), fixed in "
                "5.24.0 (\"Append the drafted logits AFTER logits processors\"); the committed 5.14.0 records carry it "
                "as a known deviation on glm4moe-mtp. A small bias under the default top-k alone"),
    Fault("top-k-one-more", "sampling",
          "top-k keeps k + 1 tokens (the (k + 1)-th most likely token survives the cut)",
          Catch("sampling", "llama-target.plain.top_k.*", "exact_emitted"),
          (edit(PROC, "TopKLogitsWarper.__call__",
                ("top_k = min(self.top_k, scores.size(-1))", "top_k = min(self.top_k + 1, scores.size(-1))")),),
          notes="imitates kingoflolz/mesh-transformer-jax#164 (\"top-k sampling off by 1 bug\": the mask "
                "`indices_range > top_k` kept k + 1 tokens, fixed to `>=`); caught at top_k = 8, where the 9th "
                "token carries mass, against the harness-built list (the version's list still says top_k 8); under "
                "5.x's default top-k of 50 it moves only the 51st token's mass (TV ~1e-7, below float tolerance)"),
    Fault("repetition-penalty-not-built", "sampling",
          "generate() never adds the RepetitionPenaltyLogitsProcessor to the list it builds: repetition_penalty "
          "is accepted and silently has no effect",
          Catch("sampling", "llama-target.plain.repetition.*", "exact_emitted"),
          (edit(GEN, "GenerationMixin._get_logits_processor",
                ("if generation_config.repetition_penalty is not None and generation_config.repetition_penalty != 1.0:",
                 "if False:  # the penalty is never built")),),
          notes="modelled on transformers #29080 (\"repetition_penalty not being applied\": the same text with "
                "repetition_penalty 1 and 2); the harness builds the list from the generation config itself "
                "(harness/engine/pipeline.py), so `processors_built` and `exact_emitted` see it on a first run, and "
                "the loading suite's `processors_built` on every route that sets the penalty"),
    Fault("no-repeat-ngram-one-back", "sampling",
          "NoRepeatNGramLogitsProcessor matches the n-grams against the n - 1 tokens ending one position back "
          "(not the last n - 1): it bans the wrong tokens and lets the repeated n-gram through",
          Catch("sampling", "llama-target.plain.constraints.*", "exact_emitted"),
          (edit(PROC, "NoRepeatNGramLogitsProcessor.__call__",
                ("prefix = input_ids[:, cur_len + 1 - self.ngram_size :]",
                 "prefix = input_ids[:, cur_len - self.ngram_size : cur_len - 1]")),),
          notes="modelled on facebookresearch/fairseq#5206 (\"Repetitions are generated although no_repeat_ngram_size "
                "is activated\": ngram_repeat_block.py sliced the tokens to check at the wrong offset, "
                "`cpu_tokens[bbsz_idx][-(no_repeat_ngram_size - 1):]` instead of `[check_start_pos:step + 1]`)"),
    Fault("begin-suppress-one-late", "sampling",
          "begin_suppress_tokens are suppressed one position late: at the second generated token instead of the "
          "first (begin_index = prompt length + 1 whether or not a BOS is forced)",
          Catch("sampling", "llama-target.plain.constraints.*", "exact_emitted"),
          (edit(GEN, "GenerationMixin._get_logits_processor",
                ("begin_index = input_ids_seq_length\n", "begin_index = input_ids_seq_length + 1\n")),),
          notes="modelled on the begin-index arithmetic of `_get_logits_processor` (transformers PR #21455, \"Fix "
                "Whisper Positional Embeddings when using decoder context\", which re-indexed the forced tokens by "
                "the decoder prompt's length there): an off-by-one in that offset moves the suppression to the "
                "wrong step; the list built says begin_index P + 1 against the harness's P, and the first "
                "position's emitted distribution keeps the suppressed token"),
    # stopping (suites/test_stopping.py: where each row stops, against the library's unstopped run) ---
    Fault("stop-string-single-char-raises", "stopping",
          "StopStringCriteria's preprocessing takes max() over the stop strings' internal positions without its "
          "fallback: a one-character stop string has none, so generate(stop_strings=...) raises ValueError",
          Catch("stopping", "llama-target.stop.stop-string-never", "error"),
          (edit(STOP, "StopStringCriteria._stop_string_create_embedding_vec",
                ("max_valid_positions = max(all_valid_positions) if all_valid_positions else 1",
                 "max_valid_positions = max(all_valid_positions)")),),
          notes="re-creates transformers #31435 (\"stop_strings Argument in model.generate() Results in Exception if "
                "Generation Completes Without stop_string Being Generated\", 4.41.2: stop_strings=\"a\"), fixed by "
                "#31448 (\"Fix single letter stop strings\": the max() gets a minimum of 1) - the fix reverted"),
    Fault("eos-list-first-id-only", "stopping",
          "EosTokenCriteria keeps only the first id of an eos list: generation runs past the other eos ids "
          "(a list like Llama 3's [<|end_of_text|>, <|eot_id|>] stops only on the first)",
          Catch("stopping", "llama-target.stop.eos-list", "stops_as_specified"),
          (edit(STOP, "EosTokenCriteria.__init__",
                ("self.eos_token_id = eos_token_id", "self.eos_token_id = eos_token_id[:1]")),),
          notes="modelled on transformers #26959 (\"Generation doesn't stop despite provide stop tokens\": an eos "
                "list that did not stop generation on each of its ids) - the eos mismatch that lets generation run "
                "unbounded"),
    Fault("min-new-tokens-released-late", "stopping",
          "min_new_tokens releases the eos ids one step late: min_new_tokens=N forces N + 1 tokens before an eos",
          Catch("stopping", "llama-target.stop.min-new-tokens-release", "stops_as_specified"),
          (edit(PROC, "MinNewTokensLengthLogitsProcessor.__call__",
                ("if new_tokens_length < self.min_new_tokens:", "if new_tokens_length <= self.min_new_tokens:")),),
          notes="imitates vllm-project/vllm #46243 (\"Fix min_tokens off-by-one in the V2 GPU sampler\": stop tokens "
                "were suppressed while pos < min_len with pos one behind the length, so min_tokens=N forced N + 1 "
                "non-EOS tokens) in transformers' own MinNewTokensLengthLogitsProcessor"),
    Fault("stopping-criteria-one-step-late", "stopping",
          "the decoding loop judges its stopping criteria on the ids without the token just appended: eos, "
          "max_length and stop strings all stop one step late, while every criterion's own verdict reads on time",
          Catch("stopping", "llama-target.stop.*", "stops_as_specified"),
          (edit(GEN, "GenerationMixin._sample",
                ("unfinished_sequences = unfinished_sequences & ~stopping_criteria(input_ids, scores)",
                 "unfinished_sequences = unfinished_sequences & ~stopping_criteria(input_ids[:, :-1], scores)")),),
          notes="modelled on transformers #27785 (\"max_new_tokens is set, but longer output is generated\": rows "
                "longer than the limit asked for) and on 5.24's DeferredStopCheck, which reports the stop one step "
                "late by design and must undo that step - here the late verdict without the undo"),
    # streaming (suites/test_stopping.py: the streamed text against the tokenizer's decode) -----------
    Fault("streamer-skip-prompt-streams-prompt", "streaming",
          "TextStreamer.put clears its skip_prompt flag on the prompt but does not return: the prompt is streamed "
          "although skip_prompt=True (TextIteratorStreamer inherits it)",
          Catch("stopping", "llama-target.stream.plain", "streamed_equals_decode"),
          (edit(STREAM, "TextStreamer.put",
                ("self.next_tokens_are_prompt = False\n        return", "self.next_tokens_are_prompt = False")),),
          notes="modelled on huggingface/trl #1866 (a chat CLI streaming the user's prompt back: TextIteratorStreamer "
                "without a working skip_prompt; fixed by trl #2193 passing skip_prompt=True)"),
    Fault("assisted-stream-drops-bonus-token", "streaming",
          "assisted decoding streams the accepted drafts of each step but not the target's own next token "
          "(the returned ids keep it)",
          Catch("stopping", "llama-target.stream.assisted", "streamed_equals_decode"),
          (edit(GEN, "GenerationMixin._assisted_decoding",
                ("streamer.put(valid_tokens.cpu())", "streamer.put(valid_tokens[:, :-1].cpu())")),),
          notes="modelled on neuralmagic/deepsparse #1292 (\"streaming skips generated token added from last prompt "
                "token\": the token the model adds after the last known token was returned but never streamed), in "
                "the one loop that streams several tokens a step"),
    Fault("streamer-holds-text-until-end", "streaming",
          "TextStreamer.put caches the new ids and returns: nothing is handed out until end(), which flushes the "
          "whole text at once (TextIteratorStreamer inherits it) - the text is right, it just is not streamed",
          Catch("stopping", "llama-target.stream.plain", "pieces_as_formed"),
          (edit(STREAM, "TextStreamer.put",
                ("self.token_cache.extend(value.tolist())", "self.token_cache.extend(value.tolist()); return")),),
          notes="modelled on transformers #28849 (\"TextStreamer: An option to print / put every single token\") and "
                "PR #36708 (\"Fix long lagging when streaming text without spaces\": TextStreamer refused to flush its "
                "buffer until a space came, so text without one arrived only at the end) - taken to every text"),
    # long context (suites/test_long_context.py: far positions against the engine's scaled RoPE) -----
    Fault("llama3-rope-returns-unscaled", "long context",
          "the llama3 RoPE init computes the scaled frequencies and returns the unscaled ones: positions past "
          "original_max_position_embeddings rotate as if the model had no rope scaling",
          Catch("long_context", "llama-rope-llama3.far", "*_vs_engine"),
          (edit(ROPE, "_compute_llama3_parameters",
                ("return inv_freq_llama, attention_factor", "return inv_freq, attention_factor")),),
          notes="re-creates transformers PR #32330 (\"Llama 3.1: Fix incorrect `inv_freq` assignment\": the refactored "
                "_compute_llama3_parameters returned `inv_freq`, not `inv_freq_llama`, so Llama 3.1's RoPE frequencies "
                "were wrong - the 4.43 RoPE scaling trouble, invisible at short positions) - the fix reverted"),
    Fault("yarn-attention-factor-dropped", "long context",
          "the YaRN RoPE init never applies the paper's attention factor: with no attention_factor in the config "
          "it is 1.0 instead of 0.1 * ln(factor) + 1 (1.1386 at factor 4), so cos/sin are not scaled and every "
          "position's attention logits are too flat",
          Catch("long_context", "llama-rope-yarn.far", "*_vs_engine"),
          (edit(ROPE, "_compute_yarn_parameters",
                ("            attention_factor = get_mscale(factor)\n", "            attention_factor = 1.0\n")),),
          notes="re-creates turboderp-org/exllamav3 #259 (\"YaRN attn_factor collapses to 1.0 for models with "
                "mscale == mscale_all_dim == 1.0\": the YaRN attention scaling lost, fluent but wrong output) in "
                "transformers' own init, whose mscale handling has been fixed before (transformers PR #47435 \"Fix "
                "yarn `mscale_all_dim` for DeepSeek v2 and Mistral 4\": the mscale missing from the attention "
                "scaling); a fp32 scalar, so it must be caught at fp32 tolerance in a bf16 run too"),
    Fault("rope-type-from-legacy-key", "long context",
          "standardize_rope_params sets rope_type from 4.x's `type` key instead of defaulting to it: a config that "
          "names its rope_type (every v5 config.json) is read as default RoPE, the scaling ignored",
          Catch("long_context", "llama-rope-*.far", "*_vs_engine"),
          (edit(ROPE, "RotaryEmbeddingConfigMixin.standardize_rope_params",
                ('rope_parameters.setdefault("rope_type", rope_parameters.get("type", "default"))',
                 'rope_parameters["rope_type"] = rope_parameters.get("type", "default")')),),
          notes="modelled on the `type` -> `rope_type` rename of Llama 3.1's release (4.43: configs with "
                "`rope_type` failed 4.42's validation, \"`rope_scaling` must be a dictionary with two fields, `type` "
                "and `factor`\"; mosaicml/llm-foundry #1393 bumped to 4.43.2 for \"the rope incompatibility issue in "
                "4.43.1\") and on v5's rope_scaling -> rope_parameters move that left scaling silently unread "
                "(unslothai/unsloth #6907 \"Fix llama3 RoPE scaling dropped on transformers v5\"): the key read wrong"),
    Fault("sliding-window-mask-offset", "long context",
          "DynamicSlidingWindowLayer.get_mask_sizes places a full window's keys one position early: once the "
          "cache slides, the mask's key positions are off by one - the window's oldest key falls out and a padded "
          "row reads the padding mask one key off; a row alone goes wrong the same way, so only the engine sees it",
          Catch("long_context", "mistral-sliding.batch-past-window", "batch_*"),
          (edit(CACHE, "DynamicSlidingWindowLayer.get_mask_sizes",
                ("kv_offset = max(self.cumulative_length - self.sliding_window + 1, 0)",
                 "kv_offset = max(self.cumulative_length - self.sliding_window, 0)")),),
          notes="modelled on transformers #37574 (\"Wrong KV cache update for sliding-window attention (SWA) layers "
                "when total sequence length reaches window size\", fixed by PR #38046 \"Fix cache update!\") and PR "
                "#35681 (\"Fix mask slicing for models with HybridCache\": mask slicing wrong whenever the sequence "
                "is longer than the window, garbage with padding) - the off-by-one at the window's edge"),
    # batching (suites/test_batching.py: each prompt in a left-padded batch against its solo run) ----
    Fault("position-ids-ignore-padding", "batching",
          "generate() derives position ids from a mask of ones instead of the attention mask: a left-padded row's "
          "tokens are counted from the first pad (positions 63..82 for a 20-token prompt behind 63 pads, not 0..19)",
          Catch("batching", "llama-target.batch.greedy", "positions_as_solo"),
          (edit(GEN, "GenerationMixin._prepare_position_ids_for_generation",
                ("position_ids = attention_mask.long().cumsum(-1) - 1",
                 "position_ids = torch.ones_like(attention_mask).long().cumsum(-1) - 1")),),
          notes="the class of unslothai/unsloth #3699 (\"batched generation with left-padding produces garbage for "
                "shorter sequences\"; fixed by unsloth #3795 \"compute position_ids from attention_mask for batched "
                "generation\": position_ids had been the cache_position shared by the batch) and TransformerLens #1609 "
                "(\"ignores attention_mask when deriving position_ids, so left-padded input silently returns wrong "
                "logits\"), in transformers' own derivation; the line is the same in 5.13.1, 5.14.0 and 5.24.0"),
    Fault("sdpa-prefill-skips-left-padding", "batching",
          "the SDPA mask builder's prefill shortcut (is_causal instead of a materialised mask when the cache is "
          "empty) checks only the last query's padding column: a left-padded prompt's first step attends to its pads",
          Catch("batching", "llama-target.batch.greedy", "first_logits_as_solo"),
          (edit(MASK, "_ignore_causal_mask_sdpa",
                ("fast_all(padding_mask[:, :q_length])", "fast_all(padding_mask[:, q_length - 1])")),),
          notes="the class of transformers #48821 (\"Always materialize the causal mask in Doge so sdpa stays causal\": "
                "create_causal_mask returned None - the is_causal skip - where the mask was not plain causal) and "
                "ml-explore/mlx-lm #1906 (\"batch generation ignores the left-padding mask\": the prompt pass got the "
                "plain causal mask); the outcome is #47651's (\"Major Bug in parallel generation / left padding\": "
                "left-padded logits differ from solo). The prefill shortcut exists from 5.14.0: on 5.13.1 the edit "
                "does not apply (FaultError)"),
    Fault("sdpa-decode-skips-left-padding", "batching",
          "a misplaced parenthesis in the SDPA mask builder's skip test: a decode step (one query) skips the mask "
          "whether or not the batch is padded, so after a correct first step the padded rows attend to their pads",
          Catch("batching", "llama-target.batch.greedy", "scores_as_solo"),
          (edit(MASK, "_ignore_causal_mask_sdpa",
                ("if (q_length == 1 or kv_length == q_length) and (padding_mask is None or fast_all(padding_mask)):",
                 "if q_length == 1 or (kv_length == q_length and (padding_mask is None or fast_all(padding_mask))):")),),
          notes="the class of OpenNMT/OpenNMT-py #2532 (\"Apply the attention mask in all decoding steps (LM inference)\": "
                "outputs degraded for heterogeneous batches because the padding mask was applied on the first step "
                "only) and mlx-lm #1906's decode steps (\"every decode step takes the N == 1 branch and runs with no mask "
                "at all\"); the first step is right, so first_logits_as_solo stays clean: the later steps' scores show it "
                "(the tokens flip only at step 9, at a margin of 0.03). The "
                "condition has this form from 5.14.0: on 5.13.1 the edit does not apply (FaultError)"),
    Fault("padding-mask-first-row", "batching",
          "the 2D padding mask is read at batch row 0 for every row (a dropped batch index): each row is masked "
          "with the first row's padding, in every materialised mask (eager attention and SDPA alike)",
          Catch("batching", "gemma2-softcap.batch.greedy", "first_logits_as_solo"),
          (edit(MASK, "padding_mask_function",
                ("return padding_mask[batch_idx, kv_idx]", "return padding_mask[0, kv_idx]")),),
          notes="the class of microsoft/onnxruntime-genai #1639 (\"Fix attention-mask stride bug for static masking "
                "(batch > 1)\": the rows' masks laid out as one row's) in transformers' own mask function; the line is "
                "the same in 5.13.1, 5.14.0 and 5.24.0, and it reaches Gemma 2's eager soft-capped attention"),
    # tokenizers (suites/test_text.py: a text set encoded and decoded, against the same tokenizer's single calls) --
    Fault("batch-decode-ignores-skip-special-tokens", "tokenizers",
          "decode of a batch (a list of id lists, and batch_decode, which forwards to it) drops skip_special_tokens: "
          "special tokens stay in every batch-decoded text while a single decode removes them",
          Catch("text", "llama-target.tokenizer", "batch_decode_equals_single"),
          (edit(TOK, "PreTrainedTokenizerBase.decode",
                ("token_ids=seq,\n                skip_special_tokens=skip_special_tokens,",
                 "token_ids=seq,\n                skip_special_tokens=False,")),),
          notes="modelled on transformers #10202 (\"Fast Tokenizers instantiated via vocab/merge files do not respect "
                "skip_special_tokens=True\") and #44811 / PR #44820 (\"fix(whisper): respect skip_special_tokens in "
                "batch_decode\": batched input ignored the flag) in the one loop v5's decode runs for a batch"),
    Fault("bpe-clean-up-strips-spaces", "tokenizers",
          "the BPE guard of TokenizersBackend._decode loses its `not`: clean_up_tokenization_spaces=True runs the "
          "WordPiece clean-up on byte-level BPE text again, deleting real spaces (`x != y` -> `x!= y`, ` ,` -> `,`)",
          Catch("text", "llama-target.tokenizer", "decoded_clean_up"),
          (edit(TOK_BACKEND, "TokenizersBackend._decode",
                ("and not self.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output",
                 "and self.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output")),),
          notes="undoes transformers PR #44915 (\"skip `clean_up_tokenization` for BPE tokenizers\": Llama 3 configs "
                "set clean_up_tokenization_spaces=true and decode turned `x != y` into `x!= y`) - the space damage in "
                "decoded code behind #31890 (\"[Severe Bug] Performance Degradation Starting from v4.42.*\": extra / "
                "lost spaces cut BigCodeBench scores) and sglang #1510 (HumanEval spaces dropped by the clean-up)"),
    # chat templates (suites/test_text.py: a Llama-3-shaped template rendered, tokenized, generated from) -------
    Fault("chat-generation-prompt-dropped", "chat",
          "apply_chat_template no longer passes add_generation_prompt to the template: the assistant header is "
          "never appended, and generate() continues the user's turn",
          Catch("text", "llama-target.chat", "generation_prompt_appended"),
          (edit(TOK, "PreTrainedTokenizerBase.apply_chat_template",
                ("add_generation_prompt=add_generation_prompt,\n        **template_kwargs,", "**template_kwargs,")),),
          notes="modelled on transformers #30893 (\"add_generation_prompt=False in Tokenizer.apply_chat_template has no "
                "effect\") and #27926 (\"Can't get add_generation_prompt to work correctly in apply_chat_template\"): "
                "the flag not reaching the rendered text"),
    Fault("chat-sanitize-keyword-removed", "chat",
          "apply_chat_template no longer takes sanitize_control_tokens (the parameter and its code path removed, "
          "**kwargs kept): a caller's sanitize_control_tokens=True lands in the template's kwargs and is silently "
          "ignored, so special-token text in a user message becomes control tokens again",
          Catch("text", "llama-target.chat", "sanitized_content_is_text"),
          (edit(TOK, "PreTrainedTokenizerBase.apply_chat_template",
                ("sanitize_control_tokens: bool = False,", ""),
                ("if sanitize_control_tokens:", "if False:"),
                ("sanitize_control_tokens=sanitize_control_tokens,", "sanitize_control_tokens=False,")),),
          notes="a keyword removed in a release while **kwargs swallows it, the way vllm #17805 removed "
                "`trust_remote_code` from its chat-template helper and broke ray #52975 (fixed by vllm #18098), and "
                "as mlx-lm #1221 notes, \"the HF Jinja path silently ignores unknown kwargs\": the reference that "
                "needs the keyword cannot run; against a baseline where it ran that is `reference-lost`, on a first "
                "run `not checked` (a regression only under --strict)"),
    Fault("chat-template-returns-ids-list", "chat",
          "apply_chat_template(tokenize=True) returns a list of ids by default again instead of v5's BatchEncoding",
          Catch("text", "llama-target.chat", "return_types"),
          (edit(TOK, "PreTrainedTokenizerBase.apply_chat_template",
                ("return_dict: bool = True,", "return_dict: bool = False,")),),
          notes="re-creates what transformers PR #42567 fixed (\"[V5] Return a BatchEncoding dict from "
                "apply_chat_template by default again\": PR #41626's v5 default was clobbered in the tokenizer "
                "refactor) - the return type every caller indexes (trl #4448, vllm #33372 adapted to it)"),
    # beam search (suites/test_beam.py: against the harness's reference beam search) -------------------
    Fault("beam-length-penalty-counts-prompt", "beam",
          "a finished hypothesis' score is divided by (prompt + generated length) ** length_penalty instead of its "
          "generated length: sequences_scores shrink, and a decoder-only model's beam search prefers short rows",
          Catch("beam", "llama-target.beam.n3", "scores_vs_reference"),
          (edit(GEN, "GenerationMixin._update_finished_beams",
                ("topk_log_probs / ((cur_len + 1 - decoder_prompt_len) ** length_penalty)",
                 "topk_log_probs / ((cur_len + 1) ** length_penalty)")),),
          notes="re-creates transformers #26624 (\"Beam search calculates mean logprobs wrong?\": the sum of the "
                "generated log-probs divided by the whole sequence length, prompt included), fixed by #27351 "
                "(\"Fix beam score calculation issue for decoder-only models\": decoder_prompt_len) - the fix "
                "reverted"),
    Fault("beam-indices-no-batch-offset", "beam",
          "the beam index stored for each new token is the beam's slot in its own batch row, without the row's "
          "offset (row * num_beams): beam_indices of every row but the first point into the first row, and the "
          "cache is reordered from the first row's beams",
          Catch("beam", "llama-target.beam.n3.batch", "beam_indices_vs_reference"),
          (edit(GEN, "GenerationMixin._get_top_k_continuations",
                ("batch_modified_indices = topk_current_beam_indices + batch_offset",
                 "batch_modified_indices = topk_current_beam_indices")),),
          notes="re-creates transformers #18839 (\"BUG for beam_indices from model.generate()\": with a batch of 2 "
                "the beam indices of the second row were wrong, so compute_transition_beam_scores disagreed with "
                "sequences_scores), fixed by #18851 (\"Generate: get the correct beam index on eos token\": the "
                "index was right only for the first batch member)"),
    Fault("beam-early-stopping-never-as-false", "beam",
          "early_stopping=\"never\" judges the best running beam at the current length, as early_stopping=False "
          "does, instead of the longest possible one: with a positive length penalty the search stops while a "
          "longer hypothesis could still win",
          Catch("beam", "llama-target.beam.n3.early-never", "tokens_vs_reference"),
          (edit(GEN, "GenerationMixin._check_early_stop_heuristic",
                ("best_hypothetical_length = max_length - decoder_prompt_len",
                 "best_hypothetical_length = cur_len - decoder_prompt_len")),),
          notes="re-creates the PyTorch side of transformers #20901 (\"Generate: correct beam search best possible "
                "score computation and handling\": the best possible score taken at the current length although a "
                "positive length penalty rewards longer rows), settled by #21368 (\"Generate: standardize beam "
                "search behavior across frameworks\": early_stopping=\"never\" uses the maximum length)"),
    Fault("beam-heuristic-across-batch", "beam",
          "a batch row whose early-stopping heuristic is satisfied (no running beam can beat its finished ones) "
          "still takes new finished hypotheses while another row runs on: a row's result depends on the batch",
          Catch("beam", "llama-target.beam.n3.batch", "tokens_vs_reference"),
          (edit(GEN, "GenerationMixin._update_finished_beams",
                ("topk_log_probs += (~is_early_stop_heuristic_unsatisfied).to(torch.float32) * -1.0e9",
                 "topk_log_probs += (~is_early_stop_heuristic_unsatisfied.any()).to(torch.float32) * -1.0e9")),),
          notes="re-creates transformers #38778 (\"fix(generation): stop beam search per-instance when heuristic "
                "satisfied\": since the vectorised rewrite #35802 (4.50) the heuristic was judged across the whole "
                "batch, so a finished row kept taking hypotheses - batch-dependent output, parity with < 4.50 "
                "restored by the fix); the class of #38116 (\"4.51.2 vs 4.51 Beam search is sometimes different\": "
                "batched beam search differing from 4.46 on ~10 % of inputs)"),
    # latency -------------------------------------------------------------------------------------
    Fault("slower-forward-15", "latency",
          "every forward of a generating model is 15 % slower, computing (CPU busy wait after it returns)",
          Catch("latency", "llama-target.*", "*"),
          (SlowForward(0.15),),
          notes="a release that computes more per forward (an extra copy, a slower kernel choice); "
                "benchmarks/latency_power.py measures its detection in full runs"),
    Fault("waiting-forward-15", "latency",
          "every forward of a generating model takes 15 % longer, waiting (a sleep after it returns: a "
          "synchronisation, a lock, I/O) - the CPU time does not grow",
          Catch("latency", "llama-target.*", "*"),
          (SlowForward(0.15, waits=True),),
          notes="modelled on host-device synchronisations in the generation loop (transformers #43089: 3.25 GPU "
                "syncs per generated token); a wait is invisible to a CPU-time clock"),
    Fault("forward-allocates-30pct-more", "latency",
          "every forward of a generating model keeps, until it returns, a buffer of 30 % of each op's output "
          "(a debugging copy or an upcast left in): on these tiny models peak memory grows several-fold",
          Catch("latency", "llama-target.*", "memory_*"),
          (ExtraAllocation(0.30),),
          notes="modelled on transformers #34796 (4.45.0 copied the entire logits at generate()'s first step "
                "instead of the last position's) and PR #33902 (logits.float() doubling peak inference memory); "
                "deterministic: one call shows it"),
)


def _swap_layer_types(original: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    swap = {"full_attention": "sliding_attention", "sliding_attention": "full_attention"}

    @functools.wraps(original)
    def get_layer_types_and_kwargs(config: Any) -> Any:
        types, kwargs = original(config)
        if not {"full_attention", "sliding_attention"} <= set(types):
            return types, kwargs
        window = next(k["sliding_window"] for t, k in zip(types, kwargs, strict=True) if t == "sliding_attention")
        swapped = [swap.get(t, t) for t in types]
        return swapped, [{"sliding_window": window} if t == "sliding_attention" else
                         {k: v for k, v in kw.items() if k != "sliding_window"}
                         for t, kw in zip(swapped, kwargs, strict=True)]
    return get_layer_types_and_kwargs


BY_NAME: dict[str, Fault] = {f.name: f for f in FAULTS}


def get(name: str) -> Fault:
    """The fault called `name`; an unknown name lists every known one (and the nearest)."""
    try:
        return BY_NAME[name]
    except KeyError:
        import difflib

        near = difflib.get_close_matches(name, list(BY_NAME), n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise FaultError(f"--inject-fault {name}: no such fault{hint}. The catalogue's {len(BY_NAME)} faults "
                         f"(`harness faults --list` describes each): {', '.join(BY_NAME)}") from None


def inject(name: str) -> Undo:
    """Apply the fault `name` to the installed transformers; returns the undo."""
    return get(name).apply()


def describe(fault: Fault) -> dict[str, Any]:
    """The fault as results.json's meta.injected_fault (and the report's banner)."""
    return {"name": fault.name, "area": fault.area, "breaks": fault.breaks,
            "catch": {"suite": fault.catch.suite, "case": fault.catch.case, "field": fault.catch.field}}
