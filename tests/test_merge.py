"""`harness merge DIR...` (harness/cli/merge.py): record sets from CI runners into the store."""

from pathlib import Path

import pytest

from harness.cli.merge import merge
from harness.cli.project import UsageError
from harness.schema import Field
from harness.store.records import GoldenStore

KEY_A, KEY_B = "tf5.13.1-torch2.13.0-cpu-x86_64-fp32", "tf5.14.0-torch2.13.0-cpu-x86_64-fp32"


def env_of(key: str) -> dict:
    """A fingerprint naming `key` (merge checks each record's env against its directory)."""
    tf, torch, device, arch, dtype = key.split("-")
    return {"transformers": tf[2:], "torch": torch[5:], "device": {"type": device, "arch": arch}, "dtype": dtype}


def cell(root: Path, key: str, value: int = 1, case: str = "c1") -> Path:
    """One runner's upload: root/<key>/outputs/<case>.json."""
    GoldenStore(root).update(key, "outputs", case, env_of(key), {"tokens": Field("tokens", [1, 2, value])})
    return root


def test_imports_each_cell_and_identical_sets_are_fine(tmp_path):
    store = GoldenStore(tmp_path / "store")
    store.root.mkdir()
    a, b = cell(tmp_path / "a", KEY_A), cell(tmp_path / "b", KEY_B)
    again = cell(tmp_path / "a-rerun", KEY_A)
    lines = merge(store, [str(a), str(b), str(again)])
    assert store.env_keys() == [KEY_A, KEY_B]
    assert store.read(KEY_B, "outputs", "c1").fields["tokens"].value == [1, 2, 1]
    assert lines[0].startswith(f"{KEY_A}: added 1 records from {a / KEY_A}")
    assert "nothing to write" in merge(store, [str(a)])[0]  # the store already holds that set


def test_two_different_sets_for_one_key_are_refused_naming_both_paths(tmp_path):
    store = GoldenStore(tmp_path / "store")
    store.root.mkdir()
    a, b = cell(tmp_path / "a", KEY_A, 1), cell(tmp_path / "b", KEY_A, 2)
    with pytest.raises(UsageError) as info:
        merge(store, [str(a), str(b)])
    message = str(info.value)
    assert "\n" not in message and str(a / KEY_A) in message and str(b / KEY_A) in message
    assert "first difference: outputs/c1" in message and "nothing was merged" in message
    assert store.env_keys() == []


def test_a_different_set_than_the_store_holds_needs_replace(tmp_path):
    store = GoldenStore(tmp_path / "store")
    cell(store.root, KEY_A, 1, case="old-case")
    new = cell(tmp_path / "new", KEY_A, 2)
    with pytest.raises(UsageError, match="pass --replace"):
        merge(store, [str(new)])
    assert [p.stem for p in store.record_paths(KEY_A)] == ["old-case"]
    assert "replaced 1 records" in merge(store, [str(new)], replace=True)[0]
    assert [p.stem for p in store.record_paths(KEY_A)] == ["c1"]  # the imported set, whole


def test_unusable_inputs_are_usage_errors(tmp_path):
    store = GoldenStore(tmp_path / "store")
    store.root.mkdir()
    with pytest.raises(UsageError, match="not a directory"):
        merge(store, [str(tmp_path / "nope")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="no records"):
        merge(store, [str(tmp_path / "empty")])
    bad = cell(tmp_path / "bad", KEY_A)
    (bad / KEY_A / "outputs" / "c1.json").write_text("[1, 2")
    with pytest.raises(UsageError, match="refused record .*c1.json: not valid JSON"):
        merge(store, [str(bad)])
