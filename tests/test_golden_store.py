"""harness/store/records.py: record format, validation, merging, atomic and concurrent writes."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.checking.compare import tensor_tolerance
from harness.schema import SCHEMA_VERSION, Field
from harness.store.records import (
    FLOAT_DIGITS,
    GoldenStore,
    Record,
    RecordError,
    dumps,
    normalize_field,
    round_float,
    to_plain,
)

KEY = "tf5.24.0-torch2.13.0-cpu-x86_64-fp32"
ENV = {"dtype": "fp32", "threads": 2}
REPO = Path(__file__).resolve().parents[1]


def fields(**values) -> dict[str, Field]:
    return {name: Field("exact", value) for name, value in values.items()}


# ----------------------------------------------------------------------------------------------
# format


def test_round_float_keeps_stated_precision():
    """Rounding to d significant digits moves x by at most half a unit in the d-th digit, a
    relative error <= 0.5 * 10^(1 - d); the stored records must stay inside the fp32 tensor
    tolerance (rtol of `tensor_tolerance('fp32')`) by a wide margin, and the bound is attained."""
    bound = 0.5 * 10.0 ** (1 - FLOAT_DIGITS)
    rtol_fp32, _ = tensor_tolerance("fp32")
    assert bound * 10 <= rtol_fp32  # rounding noise is below a tenth of the comparison's tolerance
    assert round_float(3.14159265358979) == float(f"{3.14159265358979:.{FLOAT_DIGITS}g}")
    assert round_float(-0.0) == 0.0 and str(round_float(-0.0)) == "0.0"
    assert round_float(1.23456789e-20) == pytest.approx(1.23456789e-20, rel=bound, abs=0)
    assert np.isnan(round_float(float("nan"))) and round_float(float("inf")) == float("inf")
    x = np.random.default_rng(0).normal(size=1000) * 10.0 ** np.random.default_rng(1).integers(-8, 8, 1000)
    rel = np.abs(np.array([round_float(float(v)) for v in x]) - x) / np.abs(x)
    assert rel.max() <= bound * (1 + 1e-9)
    # the worst case is a mantissa just above 1: 1.00000005 rounds to 1.0000001 (or 1.0)
    worst = 1.0 + bound * (1 - 1e-3)
    assert abs(round_float(worst) - worst) / worst == pytest.approx(bound, rel=1e-2)


def test_to_plain_converts_tensors_arrays_and_tuples():
    assert to_plain(torch.tensor([1.5, 2.0], dtype=torch.bfloat16)) == [1.5, 2.0]
    assert to_plain(torch.tensor([[1, 2]])) == [[1, 2]]
    assert to_plain(np.float32(0.1)) == 0.1
    assert to_plain((1, np.int64(2), {"a": (True, None)})) == [1, 2, {"a": [True, None]}]
    assert to_plain({1: "x"}) == {"1": "x"}
    with pytest.raises(TypeError, match="cannot store a value of type object"):
        to_plain(object())


def test_record_text_is_canonical(tmp_path):
    store = GoldenStore(tmp_path)
    store.update(KEY, "greedy", "c1", ENV, {"z": Field("tensor", [0.1234567891234, 2.0]), "a": Field("exact", (1, 2))})
    path = store.path(KEY, "greedy", "c1")
    text = path.read_text()
    data = json.loads(text)
    assert text == dumps(data) and text.endswith("}\n")
    assert list(data) == sorted(data) and list(data["fields"]) == ["a", "z"]
    assert data["schema"] == SCHEMA_VERSION and data["suite"] == "greedy" and data["case"] == "c1"
    assert data["fields"]["z"]["value"] == [0.12345679, 2.0]
    # writing the same observation again changes nothing, byte for byte
    store.update(KEY, "greedy", "c1", ENV, {"z": Field("tensor", [0.1234567891234, 2.0])}, overwrite=True)
    assert path.read_text() == text


def test_normalized_field_compares_equal_to_its_stored_form(tmp_path):
    store = GoldenStore(tmp_path)
    observed = Field("tokens", (1, 2), {"margins": np.array([0.123456789, 1.0])})
    store.update(KEY, "s", "c", ENV, {"tokens": observed})
    assert store.read(KEY, "s", "c").fields["tokens"] == normalize_field(observed)


def test_paths_and_env_keys(tmp_path):
    store = GoldenStore(tmp_path)
    assert store.env_keys() == []
    assert store.path(KEY, "greedy", "tiny/plain case") == tmp_path / KEY / "greedy" / "tiny_plain_case.json"
    store.update(KEY, "greedy", "c", ENV, fields(x=1))
    store.update("other-key", "greedy", "c", ENV, fields(x=1))
    (tmp_path / "empty-key").mkdir()
    (tmp_path / KEY / "greedy" / ".c.json.123.tmp").write_text("{half")  # a killed writer's leftovers
    assert store.env_keys() == sorted([KEY, "other-key"])
    assert [p.name for p in store.record_paths(KEY)] == ["c.json"]
    assert [r.case for r in store.records(KEY)] == ["c"]
    assert store.env_of(KEY) == ENV and store.env_of("missing") is None


# ----------------------------------------------------------------------------------------------
# validation: an unusable record is an error naming the file, and is never overwritten


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"schema": 1, "suite": "s", "case": "c", "env": {}, "fields": {', "not valid JSON"),
        ("", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"schema": 99, "suite": "s", "case": "c", "env": {}, "fields": {}}', "unknown schema version 99"),
        ('{"suite": "s", "case": "c", "env": {}, "fields": {}}', "unknown schema version None"),
        ('{"schema": 1, "suite": "s", "case": "other", "env": {}, "fields": {}}', "record is for case 'other'"),
        ('{"schema": 1, "suite": "t", "case": "c", "env": {}, "fields": {}}', "record is for suite 't'"),
        ('{"schema": 1, "suite": "s", "case": "c", "env": {}}', "missing key 'fields'"),
        ('{"schema": 1, "suite": "s", "case": "c", "env": {}, "fields": {"f": {"kind": "fuzzy", "value": 1}}}',
         "unknown kind 'fuzzy'"),
        ('{"schema": 1, "suite": "s", "case": "c", "env": {}, "fields": {"f": {"value": 1}}}', "needs 'kind'"),
    ],
)
def test_unusable_record_is_an_error_naming_the_file(tmp_path, text, reason):
    store = GoldenStore(tmp_path)
    path = store.path(KEY, "s", "c")
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(RecordError) as info:
        store.read(KEY, "s", "c")
    assert str(info.value).startswith(str(path)) and reason in str(info.value)
    assert info.value.path == path
    # a normal update refuses to touch it ...
    with pytest.raises(RecordError):
        store.update(KEY, "s", "c", ENV, fields(x=1))
    assert path.read_text() == text
    # ... a regen replaces it and says so
    report = store.update(KEY, "s", "c", ENV, fields(x=1), overwrite=True, replace_unreadable=True)
    assert reason in report.replaced_unreadable and report.written
    assert store.read(KEY, "s", "c").fields == fields(x=1)


# ----------------------------------------------------------------------------------------------
# merging


def test_update_merges_fields_and_only_regen_overwrites(tmp_path):
    store = GoldenStore(tmp_path)
    first = store.update(KEY, "s", "c", ENV, fields(a=1, b=2))
    assert [(c.field, c.change) for c in first.changes] == [("a", "new"), ("b", "new")] and first.written
    second = store.update(KEY, "s", "c", {"dtype": "fp32", "threads": 1}, fields(a=5, c=3))
    assert [(c.field, c.change) for c in second.changes] == [("a", "unchanged"), ("c", "new")]
    record = store.read(KEY, "s", "c")
    assert {n: f.value for n, f in record.fields.items()} == {"a": 1, "b": 2, "c": 3}
    assert record.env == ENV  # adding a field keeps the record's environment
    regen = store.update(KEY, "s", "c", {"dtype": "fp32", "threads": 1}, fields(a=5, b=2), overwrite=True)
    assert [(c.field, c.change) for c in regen.changes] == [("a", "changed"), ("b", "unchanged")]
    assert regen.changed_fields() == ["a"]
    record = store.read(KEY, "s", "c")
    assert {n: f.value for n, f in record.fields.items()} == {"a": 5, "b": 2, "c": 3}
    assert record.env["threads"] == 1
    unchanged = store.update(KEY, "s", "c", ENV, fields(a=5), overwrite=True)
    assert not unchanged.written


def test_write_whole_record(tmp_path):
    store = GoldenStore(tmp_path)
    record = Record(suite="s", case="c", env=ENV, fields=fields(x=[1, 2]))
    path = store.write(KEY, record)
    assert Record.from_json(json.loads(path.read_text()), path) == record
    assert not [p for p in path.parent.iterdir() if p.name != "c.json"]  # no temp files left


def _add_fields(args):
    root, worker, count = args
    store = GoldenStore(root)
    for i in range(count):
        store.update(KEY, "s", "shared", ENV, {f"w{worker}_{i}": Field("exact", [worker, i] * 50)})
    return worker


def test_concurrent_writers_never_lose_a_field(tmp_path):
    """3 processes add 25 fields each to one record at the same time: all 75 survive (without
    the lock, read-merge-write races drop fields)."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(3) as pool:
        assert sorted(pool.map(_add_fields, [(str(tmp_path), w, 25) for w in range(3)])) == [0, 1, 2]
    record = GoldenStore(tmp_path).read(KEY, "s", "shared")
    assert set(record.fields) == {f"w{w}_{i}" for w in range(3) for i in range(25)}


# ----------------------------------------------------------------------------------------------
# killed mid-regen

REGEN_SCRIPT = """
import sys
from harness.store.records import GoldenStore
from harness.schema import Field
store = GoldenStore(sys.argv[1])
n = 0
while True:  # regenerate every record, alternating two versions, until killed
    for case in range(6):
        version = n % 2
        big = [version] * 40000  # ~120 kB of JSON: each write takes a while
        store.update("K", "suite", f"case{case}", {"v": version},
                     {"big": Field("exact", big), "version": Field("exact", version)},
                     overwrite=True, replace_unreadable=True)
        if n == 0 and case == 5:
            print("ready", flush=True)
    n += 1
"""


def test_sigkill_during_regen_leaves_every_record_complete(tmp_path):
    """SIGKILL a regenerating subprocess at 4 different moments: every record is readable and
    complete (entirely the old or entirely the new version), never truncated or mixed."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    store = GoldenStore(tmp_path)
    for delay in (0.0, 0.07, 0.15, 0.26):
        proc = subprocess.Popen([sys.executable, "-c", REGEN_SCRIPT, str(tmp_path)], stdout=subprocess.PIPE, env=env)
        try:
            assert proc.stdout.readline().strip() == b"ready"
            time.sleep(delay)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        records = list(store.records("K"))
        assert len(records) == 6
        for record in records:
            version = record.fields["version"].value
            assert record.env == {"v": version}
            assert record.fields["big"].value == [version] * 40000


def test_listing_validates_records_against_their_path(tmp_path):
    store = GoldenStore(tmp_path)
    store.update(KEY, "greedy", "tiny/plain", ENV, fields(x=1))  # stored as tiny_plain.json
    assert [r.case for r in store.records(KEY)] == ["tiny/plain"]
    moved = tmp_path / KEY / "greedy" / "other.json"
    store.path(KEY, "greedy", "tiny/plain").rename(moved)
    with pytest.raises(RecordError, match="other.json: record is for greedy/tiny/plain, which does not belong"):
        list(store.records(KEY))


# ----------------------------------------------------------------------------------------------
# file modes, locks


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_written_records_get_the_usual_mode(tmp_path, umask):
    store = GoldenStore(tmp_path)
    old = os.umask(umask)
    try:
        updated = store.update(KEY, "s", "c", ENV, fields(x=1)).path
        whole = store.write(KEY, Record(suite="s", case="d", env=ENV, fields=fields(x=2)))
        store.replace_records(KEY, [Record(suite="s", case="e", env=ENV, fields=fields(x=3))])
    finally:
        os.umask(old)
    for path in (updated, whole, store.path(KEY, "s", "e"), store.lock_path(KEY)):
        assert path.stat().st_mode & 0o777 == 0o666 & ~umask, path


def test_lock_lives_next_to_the_store_and_only_writers_take_it(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "no-such-tmp"))  # nothing may go there
    store = GoldenStore(tmp_path / "records")
    store.update(KEY, "s", "c", ENV, fields(x=1))
    lock = tmp_path / ".harness-locks" / f"records.{KEY}.lock"  # beside the committed tree, not in it
    assert lock.is_file() and store.env_keys() == [KEY] and store.lock_path(KEY) == lock
    assert not [p for p in store.root.rglob("*") if p.name.endswith(".lock")]
    assert (lock.parent / ".gitignore").read_text().splitlines()[-1] == "*"  # git never sees the locks
    lock.unlink()
    # a run that writes nothing (existing fields, no regen) reads without any lock
    report = store.update(KEY, "s", "c", ENV, fields(x=1))
    assert not report.written and not lock.exists()
    assert store.update(KEY, "s", "c", ENV, fields(x=9)).changes[0].change == "unchanged"
    assert not lock.exists()
    assert not (tmp_path / "no-such-tmp").exists()


def test_a_lock_that_cannot_be_taken_names_the_lock_file(tmp_path):
    import fcntl

    store = GoldenStore(tmp_path)
    store.update(KEY, "s", "c", ENV, fields(x=1))
    with open(store.lock_path(KEY), "a+") as holder:  # another process's lock (flock is per open file)
        fcntl.flock(holder.fileno(), fcntl.LOCK_EX)
        with pytest.raises(TimeoutError) as info, store.lock(KEY, timeout=0.2):
            pass
    assert info.value.filename == str(store.lock_path(KEY)) and "held for over 0.2 s by" in str(info.value)


# ----------------------------------------------------------------------------------------------
# regen transactions


def _versioned(version: int, cases=range(4)) -> list[Record]:
    return [Record(suite="s", case=f"c{i}", env={"v": version}, fields=fields(version=version, i=i)) for i in cases]


def _env_state(store: GoldenStore) -> dict[str, int]:
    return {f"{r.suite}/{r.case}": r.fields["version"].value for r in store.records(KEY)}


def test_replace_records_swaps_in_the_full_new_set(tmp_path):
    store = GoldenStore(tmp_path)
    store.replace_records(KEY, _versioned(0))
    (tmp_path / KEY / "s" / ".c0.json.abc.tmp").write_text("{")  # a stray temp file of a killed write
    store.update("other-env", "s", "c0", ENV, fields(x=1))
    store.replace_records(KEY, _versioned(1, cases=[0, 5]), remove=[("s", "c1")])
    assert _env_state(store) == {"s/c0": 1, "s/c2": 0, "s/c3": 0, "s/c5": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([KEY, "other-env"])
    assert not list(tmp_path.rglob("*.tmp"))
    assert store.env_keys() == sorted([KEY, "other-env"])


KILL_SCRIPT = """
import os, sys
import harness.store.records as golden
from harness.store.records import GoldenStore
from harness.schema import Field, Record

root, mode = sys.argv[1], sys.argv[2]
new = [Record(suite="s", case=f"c{i}", env={"v": 1}, fields={"version": Field("exact", 1), "i": Field("exact", i)})
       for i in (0, 1, 2, 5)]
die = lambda *a, **k: os._exit(9)
if mode == "mid-write":  # killed after two of the new records are written
    calls = []
    real = golden.atomic_write_json
    golden.atomic_write_json = lambda *a: (calls.append(1), die() if len(calls) > 2 else real(*a))
elif mode == "before-swap":
    golden.GoldenStore._swap = staticmethod(die)
elif mode == "after-swap":  # killed before the old tree is removed
    real_swap = golden.GoldenStore._swap
    golden.GoldenStore._swap = staticmethod(lambda *a: (real_swap(*a), die()))
elif mode == "between-renames":  # no RENAME_EXCHANGE: killed after parking the old tree
    golden._rename_exchange = lambda a, b: False
    real_rename, renames = os.rename, []
    os.rename = lambda a, b: (renames.append(1), die() if len(renames) > 1 else real_rename(a, b))
elif mode == "fallback":
    golden._rename_exchange = lambda a, b: False
GoldenStore(root).replace_records(sys.argv[3], new, remove=[("s", "c3")])
"""


@pytest.mark.parametrize("mode, expect", [("mid-write", 0), ("before-swap", 0), ("after-swap", 1),
                                          ("between-renames", 0), ("fallback", 1)])
def test_killed_regen_leaves_the_old_or_the_new_set_whole(tmp_path, mode, expect):
    store = GoldenStore(tmp_path)
    store.replace_records(KEY, _versioned(0))
    old_state = _env_state(store)
    new_state = {"s/c0": 1, "s/c1": 1, "s/c2": 1, "s/c5": 1}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", KILL_SCRIPT, str(tmp_path), mode, KEY], env=env, timeout=120)
    assert proc.returncode == (0 if mode == "fallback" else 9)
    if mode == "between-renames":  # the env dir is parked under a dot name until the next regen
        assert store.env_keys() == [] and (tmp_path / f".{KEY}.regen-old").is_dir()
    else:
        assert _env_state(store) == (old_state if expect == 0 else new_state)
    assert store.env_keys() in ([KEY], [])  # scratch trees are never env keys
    assert not list((tmp_path / KEY).rglob("*.tmp")) if (tmp_path / KEY).exists() else True
    # the next regen rolls back / cleans up what the killed one left, then applies its own set
    store.replace_records(KEY, [Record(suite="s", case="c9", env={"v": 2}, fields=fields(version=2))])
    assert _env_state(store) == {**(old_state if expect == 0 else new_state), "s/c9": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == [KEY]


def test_interrupted_regen_keeps_the_old_set(tmp_path, monkeypatch):
    store = GoldenStore(tmp_path)
    store.replace_records(KEY, _versioned(0))
    old_state = _env_state(store)
    import harness.store.records as golden

    real, calls = golden.atomic_write_json, []

    def interrupt(*args):
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt
        real(*args)

    monkeypatch.setattr(golden, "atomic_write_json", interrupt)
    with pytest.raises(KeyboardInterrupt):
        store.replace_records(KEY, _versioned(1))
    assert _env_state(store) == old_state
    assert sorted(p.name for p in tmp_path.iterdir()) == [KEY]
