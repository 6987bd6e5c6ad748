"""The everyday command's speed-ups change no verdict: the suites decide the same on two xdist
workers as in one process, and with the reference engine's answers read from the on-disk cache as
computed afresh (`--harness-no-cache`) - the outcome set (suite, case, field, against) -> (status,
category) is identical: one process computing every answer afresh (an empty cache) = two workers
reading them back. `--harness-no-cache` computing without writing is
`test_a_disabled_cache_computes_every_time_and_writes_nothing`; two workers computing and writing
one cache at once is benchmarks/verdict_equality.py's. A subset of cases that exercises the engine's cached answers (greedy decode,
a forward's logits, the rollback) keeps this inside the test budget; the whole run's equality is
checked by benchmarks/verdict_equality.py (docs/commands.md, "Time to verdict")."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.verdict_equality import outcomes
from harness.store.cache import AnswerCache

SUBSET = ("outputs:llama-target.*.dynamic.short-0.greedy", "caches:llama-target", "backends:llama-target",
          "bias:lossless.ctx0")


def run_suites(tmp: Path, name: str, *args: str) -> dict[tuple[str, ...], tuple[str, str]]:
    """The strict subset run's outcome set (benchmarks/verdict_equality.py runs the whole one)."""
    return outcomes(tmp, name, *(a for c in SUBSET for a in ("--harness-case", c)), *args)[0]


@pytest.mark.long
def test_parallel_and_cached_runs_decide_as_a_serial_uncached_one(tmp_path):
    serial = run_suites(tmp_path, "serial")  # an empty cache: every answer computed afresh, then stored
    entries = sorted((tmp_path / "cache" / "genharness").rglob("*.pt"))
    stamps = [p.stat().st_mtime_ns for p in entries]
    warm = run_suites(tmp_path, "warm", "-n", "2")  # two workers read them back
    assert entries and [p.stat().st_mtime_ns for p in entries] == stamps  # read, not recomputed and rewritten
    assert len(serial) > 50 and serial == warm


def test_a_cache_entry_is_used_only_for_exactly_its_question(tmp_path):
    cache = AnswerCache(tmp_path)
    calls = []

    def compute(value):
        calls.append(value)
        return value

    assert cache.get({"q": 1}, lambda: compute(10)) == 10
    assert cache.get({"q": 1}, lambda: compute(11)) == 10  # read back
    assert cache.get({"q": 2}, lambda: compute(12)) == 12  # another question
    (entry,) = [p for p in tmp_path.rglob("*.pt") if cache.path('{"q":1}') == p]
    entry.write_bytes(b"not a torch file")
    assert cache.get({"q": 1}, lambda: compute(13)) == 13  # unreadable: recomputed, rewritten
    assert calls == [10, 12, 13] and (cache.hits, cache.misses) == (1, 3)


def test_an_entry_holding_another_question_is_never_trusted(tmp_path):
    import torch

    cache = AnswerCache(tmp_path)
    path = cache.path('{"q":1}')
    path.parent.mkdir(parents=True)
    torch.save({"key": '{"q":999}', "value": "stale"}, path)  # a file at q=1's place, for another key
    assert cache.get({"q": 1}, lambda: "fresh") == "fresh" and cache.get({"q": 1}, lambda: "again") == "fresh"


def test_a_disabled_cache_computes_every_time_and_writes_nothing(tmp_path):
    cache = AnswerCache(tmp_path / "c", enabled=False)
    assert [cache.get({"q": 1}, lambda i=i: i) for i in range(3)] == [0, 1, 2]
    assert not (tmp_path / "c").exists()
