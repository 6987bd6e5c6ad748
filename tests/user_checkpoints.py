"""Tiny checkpoints of a family the fixture zoo lacks (Qwen3: per-head q/k RMSNorm, which the
reference engine does not implement), written with save_pretrained into a test's tmp dir - the
stand-in for "your own model" in the user-model tests. Random weights (seeded), the zoo's
tokenizer (vocab 512), safetensors only.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from harness.zoo.specs import MODELS_DIR

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


def qwen3(directory: Path, layers: int = 2, hidden: int = 32, seed: int = 0, vocab: int = 512,
          spread: float | None = 0.5) -> Path:
    """A seeded random-init Qwen3ForCausalLM saved (safetensors) with the zoo's tokenizer; `spread`
    None keeps transformers' own init (std 0.02): a near-flat next-token distribution."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=hidden // 4,
                         max_position_embeddings=512, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                         pad_token_id=0)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():  # an init with some spread, so greedy steps are not near-ties
        for param in model.parameters():
            if param.dim() == 2 and spread is not None:
                param.normal_(0.0, spread)
    model.save_pretrained(str(directory), safe_serialization=True)
    for name in TOKENIZER_FILES:
        shutil.copy(MODELS_DIR / "llama-target" / name, directory / name)
    return directory


def other_tokenizer(directory: Path) -> Path:
    """A checkpoint like `qwen3` whose tokenizer is a different (word-level, 4-token) one."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    qwen3(directory, layers=1)
    for name in TOKENIZER_FILES:
        (directory / name).unlink()
    tok = Tokenizer(models.WordLevel({"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(str(directory))
    return directory


def perturb(directory: Path, name: str, scale: float = 1.5) -> None:
    """Scale one tensor of the checkpoint in place (the file is rewritten, safetensors)."""
    from safetensors.torch import load_file, save_file

    path = directory / "model.safetensors"
    tensors = load_file(str(path))
    tensors[name] = tensors[name] * scale
    save_file(tensors, str(path), metadata={"format": "pt"})
