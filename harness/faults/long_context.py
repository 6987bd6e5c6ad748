"""Catalogue faults of long context: RoPE scaling and sliding windows (suites/test_long_context.py).

Each `Fault` row names what it breaks, the `Catch` that must report it and the upstream bug it
is modelled on; harness/faults/catalogue.py joins every family's `FAULTS`."""

from __future__ import annotations

from harness.faults.patches import Catch, Fault, edit
from harness.faults.targets import CACHE, ROPE

FAULTS: tuple[Fault, ...] = (
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
)
