"""A checkpoint's fingerprint (harness/zoo/checkpoint.py) and its comparison (kind "checkpoint"):
every file that loads, by sha256; a change is `changed` (checkpoint-changed), never a regression by
itself, and the findings put it first (tests/test_words.py, tests/test_journey.py end to end)."""

from __future__ import annotations

import hashlib

from harness.checking.compare import compare_field
from harness.plugin.fixtures import user_checkpoint
from harness.schema import Field, Status, malformed
from harness.settings.models import UserModel
from harness.zoo.checkpoint import fingerprint, fingerprint_changes


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_every_file_that_loads_is_hashed_hidden_files_and_model_cards_are_not(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    (tmp_path / "tokenizer").mkdir()
    (tmp_path / "tokenizer" / "vocab.txt").write_text("a\nb\n")
    (tmp_path / "README.md").write_text("card")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref")
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "blob").write_text("x")
    assert fingerprint(tmp_path) == {"config.json": sha(b"{}"), "model.safetensors": sha(b"weights"),
                                     "tokenizer/vocab.txt": sha(b"a\nb\n")}
    assert set(fingerprint(tmp_path, prefix="assistant/")) == {"assistant/config.json", "assistant/model.safetensors",
                                                               "assistant/tokenizer/vocab.txt"}


def test_a_rewritten_file_is_rehashed(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"one")
    before = fingerprint(tmp_path)
    path.write_bytes(b"two-")  # another size: the per-process cache (path, size, mtime) cannot hold it
    assert fingerprint(tmp_path) != before


def test_changes_name_each_file():
    old = {"config.json": "a" * 64, "model.safetensors": "1" * 64, "vocab.txt": "v" * 64}
    new = {"config.json": "a" * 64, "model.safetensors": "2" * 64, "generation_config.json": "3" * 64}
    assert fingerprint_changes(old, new) == ["generation_config.json added (sha256 333333333333)",
                                             "model.safetensors sha256 111111111111 -> 222222222222",
                                             "vocab.txt removed"]


def test_a_changed_checkpoint_is_changed_not_a_regression():
    old = {"model.safetensors": "1" * 64}
    same = compare_field("checkpoint", Field("checkpoint", old), Field("checkpoint", dict(old)))
    assert same.status is Status.PASS
    moved = compare_field("checkpoint", Field("checkpoint", {"model.safetensors": "2" * 64}), Field("checkpoint", old))
    assert (moved.status, moved.category) == (Status.CHANGED, "checkpoint-changed")
    assert moved.detail == "the checkpoint changed (model.safetensors sha256 111111111111 -> 222222222222)"
    assert malformed("checkpoint", ["x"], {}) and not malformed("checkpoint", old, {})


def test_a_user_models_cases_carry_its_fingerprint_and_its_assistants_when_they_use_it(tmp_path):
    model, assistant = tmp_path / "m", tmp_path / "a"
    for directory in (model, assistant):
        directory.mkdir()
        (directory / "model.safetensors").write_bytes(directory.name.encode())
    user = UserModel("mine", model, "--model", assistant=assistant)
    assert user_checkpoint(user, with_assistant=False) == {"model.safetensors": sha(b"m")}
    assert user_checkpoint(user, with_assistant=True) == {"model.safetensors": sha(b"m"),
                                                          "assistant/model.safetensors": sha(b"a")}
