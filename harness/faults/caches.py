"""Catalogue faults of caches, attention backends and checkpoints (suites/test_caches.py,
test_backends.py, test_loading.py).

Each `Fault` row names what it breaks, the `Catch` that must report it and the upstream bug it
is modelled on; harness/faults/catalogue.py joins every family's `FAULTS`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.faults.patches import Catch, Fault, SetItems, Wrap, edit
from harness.faults.targets import CACHE, MASK, QWEN3_5


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


def _dtype_auto_as_unset(get_dtype: Callable[..., Any]) -> Callable[..., Any]:
    """from_pretrained's default dtype "auto" reaches `_get_dtype` as if no dtype had been given."""
    import functools

    @functools.wraps(get_dtype)
    def wrapped(dtype: Any, *args: Any, **kwargs: Any) -> Any:
        return get_dtype(None if isinstance(dtype, str) and dtype == "auto" else dtype, *args, **kwargs)
    return wrapped


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


FAULTS: tuple[Fault, ...] = (
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
                ("last_recurrent_state = last_recurrent_state * decay_t", "last_recurrent_state = last_recurrent_state")),),
          notes=("in bf16 the faulty tokens leave the engine's at step 6 / 8 with margins 0.05-0.06, inside the "
                 "bf16 per-step tie allowance there (0.32-0.39), so equals_reference_engine calls it a tie-flip "
                 "(fp32 catches it at margin 0.015); on an empty bf16 store steps_as_engine sees it - each token "
                 "against the engine's argmax after the library's own prefix (teacher-forced), so the steps after "
                 "that near-tie are still judged, and the undecayed state picks tokens the engine never would")),
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
                    (("_supports_sdpa", False),)),),
          notes="only a baseline sees it: the declaration itself flips, and default_attn_as_declared reads the "
                "class's declaration (eager is then the declared default) - the `supports` capability and "
                "default_attn_implementation against the record see the class lose SDPA"),
    Fault("eager-instead-of-sdpa", "backends",
          "from_pretrained without attn_implementation chooses eager attention instead of SDPA",
          Catch("backends", "llama-target", "default_attn_implementation"),
          (edit("transformers.modeling_utils", "PreTrainedModel.get_correct_attn_implementation",
                ('applicable_attention = "sdpa" if requested_attention is None',
                 'applicable_attention = "eager" if requested_attention is None')),),
          notes="on an empty store default_attn_as_declared sees it: the class declares _supports_sdpa, the plain "
                "load chose eager"),
    Fault("attention-softcap-dropped", "backends",
          "Gemma 2's attention skips its logit soft-cap (cap * tanh(w / cap) before the softmax): the attention "
          "weights of a soft-capped model go in raw, and its logits move by ~0.02 (no error, no warning)",
          Catch("backends", "gemma2-softcap", "attention_as_defined"),
          (edit("transformers.models.gemma2.modeling_gemma2", "eager_attention_forward",
                ("if softcap is not None:", "if softcap is None:")),),
          notes="re-creates vllm-project/vllm-metal #665 (\"attn_logit_softcapping is hardcoded to 0.0 in the paged "
                "SDPA kernel call\": Gemma 2 ran without its attention cap while the output cap was applied) in "
                "transformers' eager attention; transformers 5.14.0 and 4.57.6 do the same for real on their SDPA "
                "path (the committed records: logits 0.0406 from the engine's), which 5.24.0 refuses "
                "(`_supports_sdpa = False  # sdpa does not support softcapping`). The line is the same in 4.57.6, "
                "5.13.1, 5.14.0 and 5.24.0. In the logits the cap moves them by 0.016, inside bf16's own rounding "
                "(the batched first step is 0.0371 from the bf16 engine's under the fault, 0.0356 clean), so the "
                "engine's logits see it in fp32 only; attention_as_defined replays the attention function the "
                "layer called in fp32, its query scaled so the top score is the cap, and sees it in every dtype "
                "(and 4.57.6 / 5.14.0's SDPA default dropping the cap, on an empty store)"),
    Fault("attention-softcap-not-passed", "backends",
          "Gemma 2's attention layer calls its attention function with softcap=None: whatever function the "
          "implementation maps to runs uncapped, though each one applies a cap it is given",
          Catch("backends", "gemma2-softcap", "attention_as_defined"),
          (edit("transformers.models.gemma2.modeling_gemma2", "Gemma2Attention.forward",
                ("softcap=self.attn_logit_softcapping,", "softcap=None,")),),
          notes="re-creates vllm-project/vllm-metal #665 at its own place: the call site (\"attn_logit_softcapping is "
                "hardcoded to 0.0 in the paged SDPA kernel call\"), where attention-softcap-dropped breaks the function "
                "itself; a function judged alone with a cap handed to it would pass. attention_as_defined replays the "
                "call with the keywords the layer passed and holds it to config.json's cap (the line is the same in "
                "4.57.6, 5.0.0, 5.13.1, 5.14.0 and 5.24.0)"),
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
                "never see it. Only a baseline sees it: the default is a release's choice (v4 loads fp32, v5 the "
                "config's dtype) and nothing the run computes says which one a version must make"),
)
