"""The load contract's design (harness/designs/loading.py) and case table (harness/cases/
`loading`): lengths as budgets, what counts as a non-default generation setting, the checkpoint
variants written to disk, the routes' values that tell the winning source apart, and the rows a
route's result becomes. Pure: nothing here loads a model (suites/test_loading.py does)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import cases
from harness.designs import loading
from harness.settings.models import UserModel
from harness.zoo.prompts import Prompt
from harness.zoo.specs import SPECS

ERROR = {"type": "ValueError", "message": "no"}


def test_absolute_turns_only_the_budget_keys_into_total_lengths():
    assert loading.absolute({"max_length": 6, "max_new_tokens": 5, "top_k": 7}, 10) == \
        {"max_length": 16, "max_new_tokens": 5, "top_k": 7}
    assert loading.absolute({"max_length": None}, 10) == {"max_length": None}


def test_non_default_keeps_what_differs_or_is_absent_from_the_defaults_sorted():
    values = {"top_k": 7, "max_length": 20, "custom": 1, "do_sample": False}
    defaults = {"top_k": None, "max_length": 20, "do_sample": False}
    got = loading.non_default(values, defaults)
    assert got == {"custom": 1, "top_k": 7} and list(got) == ["custom", "top_k"]


def test_built_from_names_the_file():
    assert loading.built_from(True) == "config.json"
    assert loading.built_from(False) == "generation_config.json"


def test_a_variant_edits_config_json_and_writes_its_generation_file(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "model.safetensors").write_bytes(b"weights")
    (source / "tokenizer.json").write_text("{}")
    (source / "config.json").write_text(json.dumps({"model_type": "llama", "dtype": "float32", "eos_token_id": 2}))
    (source / "generation_config.json").write_text(json.dumps({"top_k": 99}))
    for name, variant in loading.VARIANTS.items():
        built = loading.build(source, variant, tmp_path / "out", 10)
        assert built.name == name
        linked = sorted(p.name for p in built.iterdir() if p.is_symlink())
        assert linked == ["model.safetensors", "tokenizer.json"]
        config = json.loads((built / "config.json").read_text())
        for key in variant.config_drop:
            assert key not in config
        assert {k: config[k] for k, _ in variant.config_set} == loading.absolute(dict(variant.config_set), 10)
        generation = built / "generation_config.json"
        if variant.generation_file is None:
            assert not generation.exists()  # the source's file is not carried over
        else:
            assert json.loads(generation.read_text()) == loading.absolute(dict(variant.generation_file), 10)


def test_the_as_shipped_checkpoint_is_not_rebuilt():
    assert not loading.AS_SHIPPED.edits and not loading.OWN.edits
    assert all(v.edits for v in loading.VARIANTS.values())


def _values(pairs, key):
    return [v for k, v in pairs if k == key]


def test_each_source_of_a_setting_sets_its_own_number():
    """A record says which source won only if no two sources give the same value: the file, the
    legacy config.json, model.generation_config, model.config, a GenerationConfig argument and
    keyword arguments each set repetition_penalty to a number of its own (the route at the global
    default aside, whose 1.0 is the point)."""
    rp = loading.RP
    sources: dict[str, set[float]] = {"file": set(_values(loading.FILE_SETTINGS, rp)),
                                      "legacy": set(_values(loading.LEGACY_SETTINGS, rp))}
    for name, route in loading.SETTINGS_ROUTES.items():
        if name == "argument-at-global-default":
            assert route.argument == ((rp, 1.0),)
            continue
        for source, pairs in (("generation_config", route.generation_config_attrs),
                              ("model.config", route.model_config_attrs), ("argument", route.argument or ()),
                              ("kwargs", route.kwargs)):
            sources.setdefault(source, set()).update(_values(pairs, rp))
    assert all(len(values) == 1 for values in sources.values()), sources
    numbers = [v for values in sources.values() for v in values]
    assert len(numbers) == len(set(numbers)) == 6 and 1.0 not in numbers


def test_every_length_a_source_sets_is_distinct_and_under_the_cap():
    """The checkpoint's lengths (file, legacy config.json) and the caller's (keywords, argument)
    never coincide, and the harness's stopping criterion (CAP) never binds before any of them."""
    lengths = {v for variant in loading.VARIANTS.values()
               for k, v in (*variant.config_set, *(variant.generation_file or ())) if k.startswith("max_")}
    routes = {v for r in loading.LENGTH_ROUTES.values() for pairs in (r.argument or (), r.kwargs) for _, v in pairs}
    assert lengths and routes and not routes & lengths
    assert max(lengths | routes) < loading.CAP


def test_a_route_call_makes_lengths_absolute():
    route = loading.LENGTH_ROUTES["max_length+max_new_tokens"]
    assert route.call(10) == {"generation_config_attrs": {}, "model_config_attrs": {}, "argument": None,
                              "kwargs": {"max_length": 14, "max_new_tokens": 2}}
    assert loading.LENGTH_ROUTES["argument-max_length"].call(10)["argument"] == {"max_length": 14}


@pytest.mark.parametrize("row", ["settings", "length", "plain"])
def test_an_error_stays_the_row(row):
    result = {"error": ERROR}
    got = {"settings": lambda: loading.settings_row(result), "length": lambda: loading.length_row(result, 5),
           "plain": lambda: loading.plain_row(result, 5)}[row]()
    assert got == {"error": ERROR}


def test_rows_report_lengths_as_budgets():
    result = {"effective": {"max_length": 16, "max_new_tokens": None, "repetition_penalty": 1.3, "top_k": 7},
              "cache": {"class": "DynamicCache", "layers": {"DynamicLayer": 2}}, "new_tokens": 6}
    assert loading.length_row(result, 10) == {"budget": 6, "max_new_tokens": None, "new_tokens": 6}
    assert loading.plain_row(result, 10) == {"budget": 6, "max_new_tokens": None, "cache": result["cache"]}
    assert loading.settings_row(result) == {"repetition_penalty": 1.3, "top_k": 7}
    assert loading.budget(None, 10) == {"budget": None, "max_new_tokens": None}


def test_the_table_has_every_zoo_model_the_variants_then_your_models():
    user = UserModel("prod", Path("/nowhere"), "--model", prompts=(Prompt("story", "Anna had", "short"),))
    table = cases.loading(SimpleNamespace(user_models=(user,), deep=False))
    ids = [c.id for c in table]
    assert len(ids) == len(set(ids))
    shipped = [s for s in SPECS if s.role != cases.LONG_CONTEXT]  # the rope fixtures: the long_context suite's
    assert [c.id for c in table[:len(shipped)]] == [f"{s.name}.as-shipped" for s in shipped]
    assert {c.param("variant") for c in table if c.model == cases.TARGET} == {"as-shipped", *cases.LOAD_VARIANTS}
    assert set(cases.LOAD_VARIANTS) == set(loading.VARIANTS)
    (own,) = [c for c in table if c.model == "prod"]
    assert own.id == "prod.as-shipped" and own.prompt == "story" and loading.variant_of(own) is loading.OWN
    assert all(loading.variant_of(c) is loading.AS_SHIPPED for c in table[:len(shipped)])
    assert cases.loading() == table[:-1]
