"""The backends suite's declared default (harness/designs/backends.py `declared_default_attn`): the
attention implementation a plain from_pretrained must choose, read from what the checkpoint and the
class declare - the oracle of `default_attn_as_declared`."""

from __future__ import annotations

import pytest

from harness.designs.backends import declared_default_attn
from harness.subjects.hf_cache import attn_implementation
from harness.zoo.load import load_hf


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


class _Zoo:
    """What attention_as_defined asks of the zoo: the engine's model (`oracle`) and the checkpoint's
    config.json (`checkpoints`)."""

    class oracle:
        @staticmethod
        def model(name):
            from harness.zoo.load import load_reference

            return load_reference(name)

        @staticmethod
        def gap(name):
            return ""

    class checkpoints:
        @staticmethod
        def config_json(name):
            import json

            from harness.zoo.load import check_files

            return json.loads((check_files(name) / "config.json").read_text())


def _attention_as_defined(name: str, dtype, fault: str | None = None, attn: str = "eager"):
    import torch

    from harness.designs.backends import attention_as_defined
    from harness.faults.catalogue import inject
    from harness.schema import Case, Observation

    model, tok = load_hf(name, dtype=dtype, attn_implementation=attn)
    ids = torch.tensor([tok.encode("the little fox ran to the river and then the fox saw a bird in the tree")])
    undo = inject(fault) if fault else None
    try:
        obs = Observation()
        attention_as_defined(obs, _Zoo(), Case(name, "plain"), model, ids)
    finally:
        if undo:
            undo()
    return obs.references["attention_as_defined"]


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_the_attention_function_each_layer_called_is_the_definition_with_the_config_s_cap(dtype_name):
    import torch

    ref = _attention_as_defined("gemma2-softcap", getattr(torch, dtype_name))
    assert ref.expected.extras["softcap"] == 50.0
    layers = _Zoo().checkpoints.config_json("gemma2-softcap")["num_hidden_layers"]
    assert ref.observed.value == ref.expected.value == {"beyond_bound": [0] * layers}  # every layer, within 64 units
    # the zoo's scores are far below the cap: each layer's query is scaled up until its top score is the cap
    assert all(b > 1 for b in ref.observed.extras["query_scaled_by"])


@pytest.mark.parametrize("fault", ["attention-softcap-dropped", "attention-softcap-not-passed"])
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_a_cap_dropped_in_the_function_or_at_its_call_is_seen_in_every_dtype(fault, dtype_name):
    import torch

    ref = _attention_as_defined("gemma2-softcap", getattr(torch, dtype_name), fault)
    assert all(n > 0 for n in ref.observed.value["beyond_bound"])  # every layer's replay is off the definition


def test_sdpa_which_has_no_cap_is_seen_where_the_version_lets_gemma_2_run_it():
    """transformers 4.57.6 - 5.14.0 run Gemma 2 on SDPA by default and drop its cap; 5.24.0 refuses."""
    import torch

    try:
        ref = _attention_as_defined("gemma2-softcap", torch.float32, attn="sdpa")
    except ValueError as exc:  # 5.24.0: "sdpa does not support softcapping"
        pytest.skip(f"this version refuses SDPA for Gemma 2: {exc}")
    assert ref.observed.extras["functions"] == ["sdpa_attention_forward"]
    assert all(n > 0 for n in ref.observed.value["beyond_bound"])
