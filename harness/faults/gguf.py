"""Catalogue faults of transformers' GGUF load (suites/test_gguf.py: SmolLM2-135M-Instruct's Q4_1 file
loaded with `gguf_file=`, against the harness's own conversion of the same file).

Each `Fault` row names what it breaks, the `Catch` that must report it and the upstream bug it is
modelled on; harness/faults/catalogue.py joins every family's `FAULTS`. Each is a one-line edit of
transformers' GGUF code as 5.24 has it (the legacy loader llama files take,
`modeling_gguf_pytorch_utils`, and the tokenizer builder, `integrations/gguf/gguf_tokenizer_mapping`);
every one is seen on a first run, by a reference against the conversion."""

from __future__ import annotations

from harness.faults.patches import Catch, Fault, edit

LOADER = "transformers.modeling_gguf_pytorch_utils"
TOKENIZER = "transformers.integrations.gguf.gguf_tokenizer_mapping"
CASE = "smollm2-135m.gguf"

FAULTS: tuple[Fault, ...] = (
    Fault("gguf-v-proj-from-next-layer", "checkpoints",
          "transformers' GGUF tensor-name map sends blk.N.attn_v to layer N - 1 (a layer index off by one for one "
          "projection): every layer's v_proj holds the next layer's, the last one's is left initialized, the load says "
          "nothing but a missing-weight warning",
          Catch("gguf", CASE, "tensors_as_converted"),
          (edit(LOADER, "get_gguf_hf_weights_map",
                ("gguf_to_hf_name_map[gguf_name + suffix] = qual_name + hf_name",
                 'gguf_to_hf_name_map[re.sub(r"^blk\\.(\\d+)\\.attn_v$", lambda m: f"blk.{int(m.group(1)) + 1}.attn_v", '
                 "gguf_name) + suffix] = qual_name + hf_name")),),
          notes="the class of intel/auto-round #1926 (a gemma-4 GGUF evaluating at accuracy 0 in transformers: \"when "
                "loading the gemma4 gguf model, some layer names are mapped incorrectly, causing the weights to fail to "
                "load properly\") - a GGUF tensor landing in the wrong module; the config, the tokenizer and the load's "
                "success hold, the tensors against the conversion do not (and the tokens with them)"),
    Fault("gguf-qk-not-unpermuted", "checkpoints",
          "transformers' GGUF loader leaves q_proj and k_proj in llama.cpp's rotary row order (the test that picks the "
          "attention tensors to un-permute never holds): the weights load, attention rotates the wrong pairs",
          Catch("gguf", CASE, "tensors_as_converted"),
          (edit(LOADER, "LlamaTensorProcessor.process",
                ('if ".attn_k." in name or ".attn_q." in name:', 'if ".attn_k." in name and ".attn_q." in name:')),),
          notes="the class of huggingface/transformers #31766 (\"The conversion of the llama3 model back from gguf seems "
                "weird\": only q_proj and k_proj differed from the original, fixed by PR #31788 - the k permutation "
                "must use num_key_value_heads) and vllm-project/vllm-metal #480 (a llama .gguf \"loads cleanly but "
                "produces broken attention\" until q / k are un-permuted): names, shapes and the config hold, the "
                "q / k values do not"),
    Fault("gguf-rope-theta-not-read", "checkpoints",
          "transformers' GGUF config mapping skips llama.rope.freq_base: the model gets the config class's default "
          "rope_theta (10000) instead of the file's (100000), every weight right",
          Catch("gguf", CASE, "config_as_converted"),
          (edit(LOADER, "load_gguf_checkpoint",
                ("renamed_config_key = parameter_renames[prefix][config_key]",
                 'renamed_config_key = parameter_renames[prefix][config_key] if config_key != "rope.freq_base" '
                 "else None")),),
          notes="the class of huggingface/candle #565 (\"Get the rms epsilon from GGUF\": a hyperparameter the file "
                "states taken from a default instead) and pytorch/executorch #2521 (a GGUF util without "
                "rope_freq_base falling back to the default): the tensors and the tokenizer hold, the config "
                "against the conversion's does not"),
    Fault("gguf-control-tokens-not-special", "tokenizers",
          "the tokenizer built from GGUF metadata skips every CONTROL token of a byte-level vocabulary (the byte-alphabet "
          "filter's comparison reversed): <|im_start|>, <|im_end|> and the other 15 are cut into pieces wherever a text "
          "or the chat template writes them",
          Catch("gguf", CASE, "ids_as_converted"),
          (edit(TOKENIZER, "add_gguf_special_tokens",
                ("if token_type == 3 and (spelled is None or set(token) <= spelled)",
                 "if token_type == 3 and (spelled is None or set(token) >= spelled)")),),
          notes="the class of sgl-project/sglang #3427 (\"[Bug] GGUF tokenizations issues\": special tokens from the "
                "GGUF metadata not used, a chat-template token that takes one id encoded as `<`, `|`, `User`, `|`, "
                "`>`) and huggingface/candle #3641 (added tokens of the GGUF metadata ignored, `<think>` not one "
                "token): the vocabulary, the named special ids and the model hold; the ids of any text holding a "
                "control token do not, nor the chat prompt's"),
    Fault("gguf-merges-truncated", "tokenizers",
          "the tokenizer built from GGUF metadata keeps only the first half of tokenizer.ggml.merges: the vocabulary "
          "and the special ids hold, every token formed by a later merge is spelled in pieces",
          Catch("gguf", CASE, "ids_as_converted"),
          (edit(TOKENIZER, "get_merges",
                ('return [tuple(merge.split(" ")) for merge in tokenizer_dict["merges"]]',
                 'return [tuple(merge.split(" ")) for merge in tokenizer_dict["merges"][: len(tokenizer_dict["merges"]) '
                 '// 2]]')),),
          notes="the class of huggingface/transformers #31630 (\"The behavior of the tokenizer loaded from GGUF file is "
                "incorrect\": Llama-3's GGUF tokenizer splitting text the trained one keeps whole) and ggml-org/llama.cpp "
                "#9692 / PR #9696 (transformers 4.45's list-of-pairs merges serialization read as no merges at all): "
                "merges lost between formats. On SmolLM2 the unicode, whitespace and special-token texts part from the "
                "conversion's ids (72 -> 82 ids for the unicode text); the prose and code texts do not"),
    Fault("gguf-chat-template-dropped", "chat",
          "the tokenizer built from GGUF metadata leaves out tokenizer.chat_template: apply_chat_template has no "
          "template to render",
          Catch("gguf", CASE, "chat_as_converted"),
          (edit(TOKENIZER, "get_gguf_tokenizer",
                ('tokenizer, tokenizer_config = grouped["tokenizer"], grouped["tokenizer_config"]',
                 'tokenizer, tokenizer_config = grouped["tokenizer"], {k: v for k, v in grouped["tokenizer_config"]'
                 '.items() if k != "chat_template"}')),),
          notes="huggingface/transformers PR #32908 (\"Add chat_template for tokenizer extracted from GGUF model\": "
                "\"Currently, tokenizer extracted from GGUF model misses a chat_template\") - the bug as it was "
                "before that fix: ids, decode and the model hold, the chat template's digest and every rendered "
                "conversation do not"),
)
