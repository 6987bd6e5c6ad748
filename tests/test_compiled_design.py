"""The compiled static-cache suite's pieces (harness/designs/compiled.py, harness/subjects/hf_compiled.py):
what a compile config asks for, how compiles are counted, and the case table."""

from __future__ import annotations

import torch

from harness import cases
from harness.designs import compiled
from harness.subjects import hf_compiled


def test_the_config_compiles_on_every_device_through_torchs_own_backend_by_name():
    config, knobs = hf_compiled.compile_config("aot_eager")
    assert config._compile_all_devices is True and config.backend == "aot_eager" and config.mode is None
    assert knobs == {"backend": "aot_eager", "mode": None, "fullgraph": False, "dynamic": False,
                     "_compile_all_devices": True, "cache_implementation": "static"}


def test_a_compile_is_counted_a_call_of_the_same_shapes_is_not_and_a_new_shape_is():
    hf_compiled.reset()
    fn = torch.compile(lambda x: torch.tanh(x) * 2, backend="aot_eager", dynamic=False)
    counts = []
    for shape in ((3,), (3,), (5,)):
        before = hf_compiled.graphs_compiled()
        fn(torch.ones(shape))
        counts.append(hf_compiled.graphs_compiled() - before)
    hf_compiled.reset()
    assert counts == [1, 0, 1]


def test_a_recompile_is_a_guard_that_failed_not_a_first_compile():
    """first_call_compiles_once's count: a new shape (a guard on the size fails) or a Python int the
    graph reads that moves (#44609's sliding length) fails the guards of the graphs cached before it
    (each one checked counts); the first compile and a call that reuses its graph fail none."""
    hf_compiled.reset()
    fn = torch.compile(lambda x, n: torch.tanh(x) * n, backend="aot_eager", dynamic=False)
    counts = []
    for shape, n in (((3,), 2), ((3,), 2), ((5,), 2), ((5,), 3)):
        before = hf_compiled.recompiles_so_far()
        fn(torch.ones(shape), n)
        counts.append(hf_compiled.recompiles_so_far() - before)
    hf_compiled.reset()
    assert counts[:2] == [0, 0] and all(c >= 1 for c in counts[2:])


def test_the_calls_within_the_first_calls_cache_are_the_ones_held_to_no_recompile():
    lengths = {name: n for name, _, n in compiled.CALLS}
    assert set(compiled.WITHIN_CACHE) == {n for n, p, k in compiled.CALLS if n != "first" and k <= lengths["first"]}
    assert lengths["longer"] > lengths["first"]  # the one call that may recompile: recorded, not judged


def test_the_table_runs_aot_eager_by_default_and_inductor_in_deep_mode():
    """llama-target, and mistral-sliding's sliding-window cache layers (transformers #44609's recompiles) in a
    full run: the quick tier keeps llama-target alone."""
    from types import SimpleNamespace


    assert [c.id for c in cases.compiled()] == ["llama-target.compiled.aot_eager", "mistral-sliding.compiled.aot_eager"]
    assert [c.id for c in cases.compiled() if cases.suite("compiled").keeps(c)] == ["llama-target.compiled.aot_eager"]
    deep = cases.compiled(SimpleNamespace(deep=True, user_models=()))
    assert [c.id for c in deep] == ["llama-target.compiled.aot_eager", "llama-target.compiled.inductor",
                                    "mistral-sliding.compiled.aot_eager"]
    assert all(c.cache == "static" for c in deep)
