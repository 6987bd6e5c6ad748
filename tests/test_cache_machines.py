"""Stateful tests of harness/engine/cache.py: one hypothesis RuleBasedStateMachine per cache
kind (full, static, sliding, chunked, static sliding, static chunked).

Each machine runs random append (1..4 tokens) / rewind sequences against a cache and a naive
model: the full history as a list, one unique stamp per written token (k = stamp, v = -stamp,
so a stale entry left behind by a rewind is told apart from its overwrite). After every step
a copy of the cache receives a fresh query at the next position, and the set of
(position, k, v) that the cache returns *and* `visible` marks visible must equal what the
naive history gives under the same rule. Every append also checks the new queries this way.

Rewinds are drawn both within the documented guarantee (new length >= high water - slack:
must succeed) and beyond it (may raise CacheRewindError, which must then leave the cache
unchanged; if it succeeds, the visibility check must still hold).
"""

from __future__ import annotations

import copy

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness.engine.cache import (
    CacheOverflowError,
    CacheRewindError,
    ChunkedCache,
    FullCache,
    SlidingCache,
    StaticCache,
    StaticChunkedCache,
    StaticSlidingCache,
    visible,
)

H, D = 2, 3
MACHINE_SETTINGS = settings(max_examples=20, stateful_step_count=20, derandomize=True, database=None,
                            deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _machine(name: str, make, kind: str, static: bool):
    class Machine(RuleBasedStateMachine):
        @initialize(size=st.integers(1, 6), slack=st.integers(0, 4), max_len=st.integers(3, 30))
        def start(self, size, slack, max_len):
            self.size = None if kind == "full" else size
            self.slack, self.max_len = slack, max_len
            self.cache = make(size, slack, max_len)
            self.history: list[int] = []  # stamp of the token at each position
            self.high = 0  # high water: the longest length reached
            self.stamp = 0

        def _tokens(self, T):
            stamps = torch.arange(self.stamp + 1, self.stamp + 1 + T, dtype=torch.float32)
            self.stamp += T
            k = stamps.view(1, T, 1).expand(H, T, D).clone()
            return k, -k, stamps.long().tolist()

        def _check_visible(self, q_pos, keys, values, k_pos, history):
            assert keys.shape[1] == values.shape[1] == k_pos.shape[0]
            # every head / channel of an entry carries its stamp: compare one of each
            assert torch.equal(keys, keys[:1, :, :1].expand_as(keys))
            assert torch.equal(values, values[:1, :, :1].expand_as(values))
            entries = list(zip(k_pos.tolist(), keys[0, :, 0].tolist(), values[0, :, 0].tolist(), strict=True))
            mask = visible(kind, q_pos, k_pos, self.size).tolist()
            naive = torch.arange(len(history))
            want_mask = visible(kind, q_pos, naive, self.size).tolist()
            for q, row, want_row in zip(q_pos.tolist(), mask, want_mask, strict=True):
                got = {e for e, m in zip(entries, row, strict=True) if m}
                want = {(p, float(history[p]), -float(history[p])) for p, m in enumerate(want_row) if m}
                assert got == want, f"query {q}: cache sees {sorted(got)}, naive sees {sorted(want)}"

        @rule(T=st.integers(1, 4))
        def append(self, T):
            s = self.cache.seq_len
            k, v, stamps = self._tokens(T)
            if static and s + T > self.max_len:
                try:
                    self.cache.update(k, v, torch.arange(s, s + T))
                except CacheOverflowError as e:
                    assert f"max_len={self.max_len}" in str(e) and f"{s + T} tokens" in str(e)
                    assert self.cache.seq_len == s
                    return
                raise AssertionError("expected CacheOverflowError")
            keys, values, k_pos = self.cache.update(k, v, torch.arange(s, s + T))
            self.history += stamps
            self.high = max(self.high, len(self.history))
            self._check_visible(torch.arange(s, s + T), keys, values, k_pos, self.history)
            if kind != "full":
                assert self.cache.held <= self.size - 1 + self.slack

        @precondition(lambda self: self.cache.seq_len > 0)
        @rule(data=st.data())
        def rewind(self, data):
            n = data.draw(st.integers(1, min(self.cache.seq_len, self.slack + 3)), label="n")
            new_len = self.cache.seq_len - n
            guaranteed = kind == "full" or new_len >= self.high - self.slack
            before = (self.cache.seq_len, self.cache.held, self.cache.positions.tolist())
            try:
                self.cache.rewind(n)
            except CacheRewindError as e:
                assert not guaranteed, f"rewind({n}) to {new_len} (high water {self.high}) must succeed: {e}"
                assert (self.cache.seq_len, self.cache.held, self.cache.positions.tolist()) == before
                return
            del self.history[new_len:]

        @invariant()
        def lengths_agree(self):
            if hasattr(self, "cache"):
                assert self.cache.seq_len == len(self.history)
                assert 0 <= self.cache.held <= self.cache.seq_len

        @invariant()
        def next_query_sees_what_naive_sees(self):
            if not hasattr(self, "cache") or (static and self.cache.seq_len >= self.max_len):
                return
            probe = copy.deepcopy(self.cache)
            s = probe.seq_len
            k = torch.full((H, 1, D), -0.5)
            keys, values, k_pos = probe.update(k, -k, torch.tensor([s]))
            self._check_visible(torch.tensor([s]), keys, values, k_pos, self.history + [-0.5])

    Machine.__name__ = Machine.__qualname__ = name
    Machine.TestCase.settings = MACHINE_SETTINGS
    return Machine


FullMachine = _machine("FullMachine", lambda size, slack, max_len: FullCache(slack), "full", False)
StaticMachine = _machine("StaticMachine", lambda size, slack, max_len: StaticCache(max_len, slack), "full", True)
SlidingMachine = _machine("SlidingMachine", lambda size, slack, max_len: SlidingCache(size, slack),
                          "sliding", False)
ChunkedMachine = _machine("ChunkedMachine", lambda size, slack, max_len: ChunkedCache(size, slack),
                          "chunked", False)
StaticSlidingMachine = _machine("StaticSlidingMachine",
                                lambda size, slack, max_len: StaticSlidingCache(max_len, size, slack),
                                "sliding", True)
StaticChunkedMachine = _machine("StaticChunkedMachine",
                                lambda size, slack, max_len: StaticChunkedCache(max_len, size, slack),
                                "chunked", True)

TestFullCache = FullMachine.TestCase
TestStaticCache = StaticMachine.TestCase
TestSlidingCache = SlidingMachine.TestCase
TestChunkedCache = ChunkedMachine.TestCase
TestStaticSlidingCache = StaticSlidingMachine.TestCase
TestStaticChunkedCache = StaticChunkedMachine.TestCase
