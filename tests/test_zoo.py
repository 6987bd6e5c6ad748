"""The committed fixture zoo: hashes, loading through transformers, generation, acceptance rates."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from harness.engine.decode import decode
from harness.engine.drafters import AssistantDrafter, MtpDrafter
from harness.zoo import build, load, prompts
from harness.zoo.checkpoint import fingerprint
from harness.zoo.specs import BUILD_COMMAND, SPECS, spec

NAMES = [s.name for s in SPECS]
HELD_OUT = [p for p in prompts.PROMPTS if p.length == "short"]


def test_manifest_lists_every_model_and_sizes_are_small():
    """Sizes are measured on the committed files (the manifest's `bytes` must agree with them),
    and docs/zoo-and-engine.md's limit holds: each model under 2 MB."""
    models = load.manifest()["models"]
    assert sorted(models) == sorted(NAMES)
    sizes = {}
    for name, entry in models.items():
        sizes[name] = sum((load.MODELS_DIR / name / f).stat().st_size for f in entry["files"])
        assert entry["bytes"] == sizes[name], f"{name}: manifest says {entry['bytes']} bytes, files hold {sizes[name]}"
        assert sizes[name] < 2_000_000, f"{name} is {sizes[name]} bytes (limit 2 MB)"


@pytest.mark.parametrize("name", NAMES)
def test_files_match_manifest_hashes(name):
    directory = load.check_files(name)
    assert (directory / "model.safetensors").is_file()
    assert not list(directory.glob("*.bin")), "pickle weights must never ship"


def test_corpus_is_reproducible_and_prompts_are_held_out():
    from harness.zoo import corpus

    text = corpus.generate(corpus.CORPUS_SEED, corpus.CORPUS_STORIES)
    assert build.sha256(build.CORPUS_PATH) == load.manifest()["corpus"]["sha256"]
    assert build.CORPUS_PATH.read_text() == text
    for p in prompts.PROMPTS:
        assert p.text not in text, f"prompt {p.id} occurs in the training corpus"


@pytest.mark.parametrize("name", NAMES)
def test_loads_through_auto_class_and_generates(name):
    from harness.subjects.hf import family_gap

    gap = family_gap(json.loads((load.MODELS_DIR / name / "config.json").read_text()))
    if gap:  # 4.57 has no mellum / qwen3_5_text: a per-version fact, the suites skip these cases too
        pytest.skip(gap)
    model, tok = load.load_hf(name)
    assert type(model).__name__ == spec(name).architecture
    ids = tok(HELD_OUT[0].text, return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape == (1, ids.shape[1] + 8) or int(out[0, -1]) == tok.eos_token_id
    assert torch.equal(out[0, : ids.shape[1]], ids[0])


def test_missing_fixture_names_file_and_fix(tmp_path, monkeypatch):
    directory = tmp_path / "llama-target"
    shutil.copytree(load.MODELS_DIR / "llama-target", directory)
    (directory / "model.safetensors").unlink()
    with pytest.raises(load.FixtureError) as err:
        load.check_files("llama-target", directory)
    assert str(directory / "model.safetensors") in str(err.value) and BUILD_COMMAND in str(err.value)


def test_corrupt_fixture_names_file_and_fix(tmp_path):
    directory = tmp_path / "llama-target"
    shutil.copytree(load.MODELS_DIR / "llama-target", directory)
    with open(directory / "config.json", "a") as fh:
        fh.write(" ")
    with pytest.raises(load.FixtureError, match=r"config\.json is corrupt .*python -m harness.zoo build"):
        load.check_files("llama-target", directory)


def test_a_file_added_to_a_fixture_is_caught(tmp_path):
    """The manifest holds each model's checkpoint fingerprint (every file): a generation_config.json
    dropped into a zoo directory changes what loads, so it fails the check like a corrupt file."""
    directory = tmp_path / "llama-target"
    shutil.copytree(load.MODELS_DIR / "llama-target", directory)
    (directory / "generation_config.json").write_text('{"do_sample": true}')
    with pytest.raises(load.FixtureError, match=r"generation_config\.json is not in the manifest .*harness.zoo build"):
        load.check_files("llama-target", directory)
    (directory / "generation_config.json").unlink()
    (directory / "README.md").write_text("a model card is not what loads")
    assert load.check_files("llama-target", directory) == directory


def test_the_manifest_lists_each_models_fingerprint():
    """manifest.json is produced by the code (`python -m harness.zoo manifest` re-hashes without
    retraining): its files are exactly each directory's fingerprint."""
    entries = load.manifest(load.MODELS_DIR)["models"]
    for name, entry in entries.items():
        assert entry["files"] == fingerprint(load.MODELS_DIR / name), name


def _decode_rate(target, drafter, k: int) -> tuple[int, int]:
    accepted = drafted = 0
    for p in HELD_OUT:
        ids = target_tokenizer().encode(p.text).ids
        result = decode(target, ids, 32, drafter=drafter(), k=k)
        a, d = result.acceptance
        accepted, drafted = accepted + a, drafted + d
    return accepted, drafted


def target_tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(load.MODELS_DIR / "llama-target" / "tokenizer.json"))


@pytest.mark.parametrize("name, kind", [("llama-assistant", "assistant")]
                         + [(s.name, "mtp") for s in SPECS if s.role == "mtp"])
def test_recorded_acceptance_rates_are_reproduced_by_the_engine(name, kind):
    """The manifest's rates were measured at build time by teacher forcing through
    transformers; the reference engine's decode loop must count the same accepted/drafted."""
    recorded = load.manifest()["models"][name]["acceptance"][kind]
    if kind == "assistant":
        target, assistant = load.load_reference("llama-target"), load.load_reference(name)
        accepted, drafted = _decode_rate(target, lambda: AssistantDrafter(assistant), recorded["k"])
    else:
        target = load.load_reference(name)
        accepted, drafted = _decode_rate(target, lambda: MtpDrafter(target), 1)
    assert (accepted, drafted) == (recorded["accepted"], recorded["drafted"])
    assert recorded["rate"] == round(accepted / drafted, 4)
    # the zoo is only useful if drafts are mostly accepted (random weights would give ~0)
    assert accepted / drafted >= 0.5, f"{name}: greedy acceptance {accepted}/{drafted} measured, below 0.5"


def test_tokenizer_training_reproduces_the_committed_tokenizer(tmp_path):
    """The build's tokenizer step, rerun on the committed corpus: the same vocabulary and merges
    as every committed model's tokenizer.json, specials at fixed ids, any text encodable."""
    import json

    from transformers import AutoTokenizer

    from harness.zoo import tokenizer
    from harness.zoo.specs import VOCAB_SIZE

    tok = tokenizer.train(build.CORPUS_PATH.read_text(), VOCAB_SIZE)
    assert [tok.token_to_id(t) for t in tokenizer.SPECIAL_TOKENS] == [0, 1, 2]
    tokenizer.save(tok, tmp_path)
    committed = json.loads((load.MODELS_DIR / "llama-target" / "tokenizer.json").read_text())
    ours = json.loads((tmp_path / "tokenizer.json").read_text())
    assert ours["model"]["vocab"] == committed["model"]["vocab"] and ours["model"]["merges"] == committed["model"]["merges"]
    fast = AutoTokenizer.from_pretrained(tmp_path)
    assert (fast.pad_token_id, fast.bos_token_id, fast.eos_token_id) == (0, 1, 2)
    hostile = "nul\x00 esc\x1b emoji \U0001f600 \u00e9t\u00e9"
    assert fast.decode(fast(hostile).input_ids) == hostile  # byte-level: no unknown token


def test_build_command_line(monkeypatch, capsys):
    """`python -m harness.zoo build [--only NAME ...]` calls the build with the names; an
    unknown name is refused by argparse before anything is trained."""
    from harness.zoo import __main__ as zoo_cli

    calls = []
    monkeypatch.setattr(build, "build", lambda only: calls.append(only))
    assert zoo_cli.main(["build"]) == 0
    assert zoo_cli.main(["build", "--only", NAMES[0], NAMES[1]]) == 0
    assert calls == [None, [NAMES[0], NAMES[1]]]
    with pytest.raises(SystemExit) as exit_info:
        zoo_cli.main(["build", "--only", "no-such-model"])
    assert exit_info.value.code == 2 and "no-such-model" in capsys.readouterr().err
    assert calls == [None, [NAMES[0], NAMES[1]]]
