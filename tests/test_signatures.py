"""Entry points by compatibility (harness/checking/signatures.py): signatures recorded from real
Python functions by the subject's own `signature_of`, compared as a caller of the baseline sees them."""

from __future__ import annotations

import pytest

from harness.checking.compare import compare_field
from harness.schema import Category, Field, Status
from harness.subjects.hf_api import MISSING, signature_of


def mask(input_shape, inputs_embeds, past_key_values_length, sliding_window=None):
    """The baseline's entry point."""


def appended(input_shape, inputs_embeds, past_key_values_length, sliding_window=None, allow_is_causal_skip=False):
    """A parameter appended with a default."""


def renamed(input_shape, inputs_embeds, cache_length, sliding_window=None):
    """A parameter renamed."""


def redefaulted(input_shape, inputs_embeds, past_key_values_length, sliding_window=4096):
    """A default changed."""


def required_added(input_shape, inputs_embeds, past_key_values_length, dtype, sliding_window=None):
    """A required parameter added."""


def keyword_only(input_shape, inputs_embeds, *, past_key_values_length, sliding_window=None):
    """A positional parameter made keyword-only."""


def with_kwargs(input_shape, inputs_embeds, past_key_values_length, sliding_window=None, **kwargs):
    """**kwargs added."""


def _judge(old, new) -> tuple[Status, Category, str]:
    out = compare_field("signature", Field("exact", new), Field("exact", old))
    return out.status, out.category, out.detail


@pytest.mark.parametrize("new", [appended, with_kwargs])
def test_an_added_parameter_with_a_default_is_compatible(new):
    status, category, detail = _judge(signature_of(mask), signature_of(new))
    assert (status, category) == (Status.CHANGED, Category.FEATURE_ADDED)
    assert detail.startswith("compatible") and "added" in detail


@pytest.mark.parametrize("new", [renamed, redefaulted, required_added, keyword_only])
def test_a_change_that_breaks_a_caller_is_a_regression(new):
    status, category, detail = _judge(signature_of(mask), signature_of(new))
    assert (status, category) == (Status.REGRESSION, Category.REAL_CHANGE)
    assert detail.startswith("incompatible") and "'<missing>'" not in detail


def test_an_entry_point_that_exists_is_compatible_and_one_removed_a_regression():
    status, category, detail = _judge(MISSING, signature_of(appended))
    assert (status, category) == (Status.CHANGED, Category.FEATURE_ADDED)
    assert detail.startswith("exists in this version, absent in the baseline: (input_shape, ")
    status, category, detail = _judge(signature_of(mask), MISSING)
    assert (status, category) == (Status.REGRESSION, Category.FEATURE_REMOVED)
    assert detail.startswith("absent in this version, exists in the baseline")
