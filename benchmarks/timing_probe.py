"""A pytest plugin that says where a suites run spends its time (benchmarks/time_to_verdict.py loads
it with ``-p benchmarks.timing_probe``): per test its wall and CPU seconds, and per activity the
wall seconds spent inside it - model loading, transformers' generate(), the reference engine,
statistics, record I/O - attributed exclusively (a second activity started inside the first counts
for the second only, so the shares add up). Each process (each xdist worker) writes its own part
to ``$HARNESS_TIMING_DIR/<pid>.json``; the benchmark adds them up.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

# activity -> (module, qualified name) of the functions whose time is that activity's
ACTIVITIES: dict[str, tuple[tuple[str, str], ...]] = {
    "model loading": (("harness.subjects.hf", "from_pretrained"), ("transformers", "AutoTokenizer.from_pretrained"),
                      ("harness.zoo.load", "load_reference"), ("harness.zoo.load", "check_models")),
    "transformers generate()": (("transformers", "GenerationMixin.generate"),),
    "reference engine": (("harness.engine.model", "Model.forward"),),
    "statistics": (("harness.checking.stats", "g_test"), ("harness.checking.stats", "g_test_two_sample"),
                   ("harness.checking.stats", "samples_needed"), ("harness.checking.stats", "detectable_tv"),
                   ("harness.checking.stats", "slowdown_test"), ("harness.checking.stats", "binomial_test"),
                   ("harness.checking.stats", "two_proportion_test"), ("harness.checking.stats", "tv_upper_bound")),
    "record I/O": (("harness.store.records", "GoldenStore.read"), ("harness.store.records", "GoldenStore.update"),
                   ("harness.store.records", "GoldenStore.read_file")),
}

_stack: list[list[Any]] = []  # [activity, start]
_spent: dict[str, float] = {}
_loads: dict[str, float] = {}
_tests: list[dict[str, Any]] = []


def _timed(activity: str, fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        now = time.perf_counter()
        if _stack:  # pause the enclosing activity
            outer = _stack[-1]
            _spent[outer[0]] = _spent.get(outer[0], 0.0) + now - outer[1]
        _stack.append([activity, now])
        try:
            return fn(*args, **kwargs)
        finally:
            end = time.perf_counter()
            _, start = _stack.pop()
            _spent[activity] = _spent.get(activity, 0.0) + end - start
            if activity == "model loading" and args:
                _loads[str(args[0])] = _loads.get(str(args[0]), 0.0) + end - start
            if _stack:
                _stack[-1][1] = end
    return wrapper


def _install() -> None:
    for activity, targets in ACTIVITIES.items():
        for module, qualname in targets:
            try:
                owner: Any = importlib.import_module(module)
                *path, name = qualname.split(".")
                for part in path:
                    owner = getattr(owner, part)
            except (ImportError, AttributeError):
                continue
            original = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name)
            if isinstance(original, (staticmethod, classmethod)):
                setattr(owner, name, type(original)(_timed(activity, original.__func__)))
            else:
                setattr(owner, name, _timed(activity, getattr(owner, name)))


def pytest_configure(config: pytest.Config) -> None:
    _install()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any):
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        return (yield)
    finally:
        _tests.append({"nodeid": item.nodeid, "suite": Path(str(item.path)).stem.removeprefix("test_"),
                       "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu})


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("HARNESS_TIMING_DIR")
    if not out:
        return
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"{os.getpid()}.json").write_text(json.dumps(
        {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "activities": _spent, "loads": _loads,
         "tests": _tests, "cpu": time.process_time()}))
