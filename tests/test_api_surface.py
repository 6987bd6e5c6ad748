"""The API-surface probes' pure parts (harness/subjects/hf_api.py): what a signature, a return
shape and an absent entry point look like as record data, and that the profiler hook sees calls
made through any reference - each check one that a wrong implementation fails."""

from __future__ import annotations

import functools

import pytest
import torch

from harness.subjects import hf_api


def _f(a, b: int = 3, *rest, key=None, obj=object(), **kw):  # noqa: B008 - an object default on purpose
    return a, b


@pytest.mark.parametrize(("dotted", "found"), [
    ("transformers.GenerationMixin.generate", True),
    ("transformers.cache_utils.DynamicCache.update", True),
    ("transformers.cache_utils.HarnessNoSuchClass", False),
    ("transformers.cache_utils.DynamicCache.harness_no_such_method", False),
    ("harness_no_such_package.x", False),
])
def test_resolve(dotted, found):
    assert (hf_api.resolve(dotted) is not hf_api.MISSING) == found


def test_signature_records_names_kinds_defaults():
    assert hf_api.signature_of(_f) == [
        ["a", "POSITIONAL_OR_KEYWORD", hf_api.NO_DEFAULT], ["b", "POSITIONAL_OR_KEYWORD", 3],
        ["rest", "VAR_POSITIONAL", hf_api.NO_DEFAULT], ["key", "KEYWORD_ONLY", None],
        ["obj", "KEYWORD_ONLY", "<object>"], ["kw", "VAR_KEYWORD", hf_api.NO_DEFAULT]]
    assert hf_api.signature_of(hf_api.MISSING) == hf_api.MISSING


def test_signature_of_a_class_is_its_init():
    class C:
        def __init__(self, config, max_len: int = 8): ...

    assert [p[0] for p in hf_api.signature_of(C)] == ["self", "config", "max_len"]


@pytest.mark.parametrize(("value", "shape"), [
    (torch.zeros(2, 3), "Tensor[float, 2d]"),
    (torch.zeros(2, 3, dtype=torch.bfloat16), "Tensor[float, 2d]"),
    ((torch.zeros(1, dtype=torch.long), None), {"tuple": ["Tensor[int64, 1d]", "NoneType"]}),
    ((3, [4, 5]), {"tuple": ["int", {"list": ["int", "int"]}]}),
    ({"b": 1.0, "a": "x"}, {"dict": {"a": "str", "b": "float"}}),
])
def test_shape_of_keeps_order_and_dtype(value, shape):
    assert hf_api.shape_of(value) == shape


def test_shape_of_distinguishes_a_changed_return_shape():
    """(tensor, tensor) and (tensor, None) - the same type name, not the same contract."""
    assert hf_api.shape_of((torch.zeros(1), torch.zeros(1))) != hf_api.shape_of((torch.zeros(1), None))


def test_watch_sees_calls_through_any_reference():
    seen, called = [], []
    alias = functools.partial(_f, 1)
    with hf_api.watch(hf_api.code_of(_f), on_call=lambda frame: called.append(frame.f_locals["a"]),
                      on_return=seen.append):
        alias(b=7)
        _f(2)
    assert called == [1, 2] and seen == [(1, 7), (2, 3)]
    _f(9)
    assert called == [1, 2]  # the hook is gone after the block
