"""The installed transformers' GGUF load as a subject: `AutoModelForCausalLM.from_pretrained(folder,
gguf_file=name)` and `AutoTokenizer.from_pretrained(folder, gguf_file=name)` - transformers reading
llama.cpp's file itself (its reader, dequantization, tensor-name map, q / k un-permutation, config and
tokenizer from the metadata) - and what the loaded objects hold.

The `real` extra (gguf, accelerate: `pip install 'genharness[real]'`, pinned in constraints.txt) is
what transformers' GGUF path needs, and what the harness's own conversion (the oracle,
harness/zoo/gguf_convert.py) reads the file with: without it, or without the model in the
cache and no way to fetch it (harness/zoo/real.py), `require` / `model_files` raise
`MissingExtra` - the case is skipped (not observable) with the install line, never an error.

- `require()` -> the extra's versions; `model_files(dtype)` -> (the .gguf, the conversion's folder);
- `load_model(gguf, dtype)`, `load_tokenizer(gguf)` -> (object, error): the library's result or its
  exception as data (harness/subjects `observe`: the cache's path scrubbed);
- `config_values(config)`: the architecture fields of the config it built, read across 4.x / 5.x
  spellings (`rope_theta` inside 5.x's `rope_parameters`);
- `state(model)`: every tensor of its state dict, as loaded;
- `encode` / `decode` / `specials` / `pipeline`: the tokenizer's ids, text, named special ids and
  pipeline stages; `chat(tokenizer, messages, generation_prompt)`: `apply_chat_template` rendered
  and tokenized; `greedy(model, ids, n)`: generate()'s new tokens; `logits(model, ids)`.
Nothing here judges.
"""

from __future__ import annotations

import importlib.util
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch

from harness.schema import MissingExtra
from harness.subjects import observe

INSTALL = "pip install 'genharness[real]' -c constraints.txt"
EXTRA = ("gguf", "accelerate")
# the config fields a GGUF states (llama.cpp's llama.* / tokenizer.ggml.* keys) and the harness's conversion writes
ARCH_KEYS = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps",
             "rope_theta", "vocab_size", "tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id")


def require() -> dict[str, str]:
    """The real extra's versions; `MissingExtra` (skipped, with the install line) without it."""
    absent = [name for name in EXTRA if importlib.util.find_spec(name) is None]
    if absent:
        raise MissingExtra(f"the GGUF load needs {' and '.join(absent)}, the harness's optional `real` extra: {INSTALL}")
    return {name: version(name) for name in EXTRA}


def model_files(dtype: str) -> tuple[Path, Path]:
    """(the verified SmolLM2 .gguf, the harness's conversion of it in `dtype` - "float32" / "bfloat16"),
    fetched and converted once (harness/zoo/real.py); `MissingExtra` naming the command to run by
    hand where the cache lacks it and the fetch fails (offline)."""
    from harness.zoo import real

    try:
        converted = real.smollm2_model(progress=lambda line: None, dtype=dtype)
    except real.RealModelError as exc:
        raise MissingExtra(f"the real model is not in the cache and could not be fetched ({exc}); "
                           f"with the extra installed ({INSTALL}) the first run fetches it") from exc
    return real.cache_dir() / real.GGUF, converted


def _scrub(gguf: Path) -> dict[str, str]:
    return {str(gguf.parent): "<real-cache>"}


def load_model(gguf: Path, dtype: torch.dtype) -> tuple[Any, dict[str, str] | None]:
    """`AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=...)` (eval, CPU), or its error."""
    from transformers import AutoModelForCausalLM

    def call() -> Any:
        return AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=dtype,
                                                    trust_remote_code=False).eval()
    return observe(call, _scrub(gguf))


def load_tokenizer(gguf: Path) -> tuple[Any, dict[str, str] | None]:
    """`AutoTokenizer.from_pretrained(folder, gguf_file=name)`, or its error."""
    from transformers import AutoTokenizer

    return observe(lambda: AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, trust_remote_code=False),
                   _scrub(gguf))


def config_values(config: Any) -> dict[str, Any]:
    """The ARCH_KEYS of a loaded config (None where it has none); rope_theta from 5.x's rope_parameters."""
    out = {key: getattr(config, key, None) for key in ARCH_KEYS}
    rope = getattr(config, "rope_parameters", None) or {}
    if out["rope_theta"] is None and isinstance(rope, dict):
        out["rope_theta"] = rope.get("rope_theta")
    return out


def state(model: Any) -> dict[str, torch.Tensor]:
    """Every tensor of the model's state dict as loaded (tied ones under each name)."""
    return {name: tensor.detach() for name, tensor in model.state_dict().items()}


def encode(tokenizer: Any, text: str) -> tuple[list[int] | None, dict[str, str] | None]:
    """`tokenizer(text)["input_ids"]` (special tokens added as the tokenizer does by default), or the error."""
    return observe(lambda: list(tokenizer(text)["input_ids"]))


def decode(tokenizer: Any, ids: list[int], skip_special_tokens: bool) -> tuple[str | None, dict[str, str] | None]:
    return observe(lambda: tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))


def specials(tokenizer: Any) -> dict[str, Any]:
    """The named special tokens' ids, the special ids the tokenizer lists, and its length (the vocabulary
    with the added tokens)."""
    return {"bos": tokenizer.bos_token_id, "eos": tokenizer.eos_token_id, "unk": tokenizer.unk_token_id,
            "pad": tokenizer.pad_token_id, "all_special_ids": sorted(set(tokenizer.all_special_ids)),
            "vocab_size": len(tokenizer)}


def pipeline(tokenizer: Any) -> dict[str, Any]:
    """The type of each stage of the `tokenizers` pipeline transformers built (a Sequence: its members')."""
    import json

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return {"backend": type(tokenizer).__name__}
    spec = json.loads(backend.to_str())

    def kind(stage: Any) -> Any:
        if not isinstance(stage, dict):
            return None
        members = stage.get("pretokenizers") or stage.get("decoders") or stage.get("normalizers") or stage.get("processors")
        return [kind(m) for m in members] if stage.get("type") == "Sequence" and members else stage.get("type")
    return {stage: kind(spec.get(stage)) for stage in ("normalizer", "pre_tokenizer", "model", "post_processor", "decoder")}


def chat(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool) -> dict[str, Any]:
    """`apply_chat_template` rendered (tokenize=False) and tokenized (tokenize=True): {"text", "ids",
    "error"} - the error of whichever call raised (the other's value then None)."""
    text, error = observe(lambda: tokenizer.apply_chat_template(messages, tokenize=False,
                                                                add_generation_prompt=generation_prompt))
    if error is not None:
        return {"text": None, "ids": None, "error": error}

    def tokenized() -> list[int]:
        out = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=generation_prompt)
        ids = out["input_ids"] if hasattr(out, "keys") else out  # 5.x: a BatchEncoding; 4.x: the ids
        return [int(i) for i in (ids[0] if ids and isinstance(ids[0], list) else ids)]
    ids, error = observe(tokenized)
    return {"text": text, "ids": ids, "error": error}


def greedy(model: Any, ids: list[int], new_tokens: int) -> tuple[list[int] | None, dict[str, str] | None]:
    """generate()'s greedy new tokens after `ids` (the model's own generation config: its eos stops it)."""
    def call() -> list[int]:
        prompt = torch.tensor([ids])
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                                 do_sample=False)
        return [int(t) for t in out[0, prompt.shape[1]:]]
    return observe(call)


def logits(model: Any, ids: list[int]) -> torch.Tensor:
    """The model's logits [T, V] over `ids` (no cache), float32."""
    with torch.no_grad():
        return model(torch.tensor([ids]), use_cache=False).logits[0].float()
