"""Catalogue faults of batching: left padding, masks and positions (suites/test_batching.py).

Each `Fault` row names what it breaks, the `Catch` that must report it and the upstream bug it
is modelled on; harness/faults/catalogue.py joins every family's `FAULTS`."""

from __future__ import annotations

from harness.faults.patches import Catch, Fault, edit
from harness.faults.targets import GEN, MASK

FAULTS: tuple[Fault, ...] = (
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
)
