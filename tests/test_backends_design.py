"""The backends suite's declared default (harness/designs/backends.py `declared_default_attn`): the
attention implementation a plain from_pretrained must choose, read from what the checkpoint and the
class declare - the oracle of `default_attn_as_declared`."""

from __future__ import annotations

import pytest

from harness.designs.backends import declared_default_attn
from harness.fixtures.load import load_hf
from harness.subjects.hf_cache import attn_implementation


class Declares:
    _supports_sdpa = True


class DeclaresNothing:
    pass


class RefusesSdpa:
    _supports_sdpa = False


@pytest.mark.parametrize(("config", "model", "expected"), [
    ({}, Declares(), "sdpa"),
    ({}, DeclaresNothing(), "eager"),
    ({}, RefusesSdpa(), "eager"),  # Gemma 2 in 5.24: "sdpa does not support softcapping"
    ({"attn_implementation": "eager"}, Declares(), "eager"),  # the checkpoint's own choice wins
])
def test_the_declared_default_is_sdpa_where_the_class_supports_it_unless_the_config_names_one(config, model, expected):
    declared = declared_default_attn(config, model)
    assert declared["expected"] == expected and declared["because"]


def test_the_zoo_target_loads_with_the_declared_default_and_an_explicit_eager_is_not_it():
    model, _ = load_hf("llama-target")
    assert attn_implementation(model) == declared_default_attn({}, model)["expected"] == "sdpa"
    eager, _ = load_hf("llama-target", attn_implementation="eager")
    assert attn_implementation(eager) != declared_default_attn({}, eager)["expected"]
