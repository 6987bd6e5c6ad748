"""A loaded model is shared by every case of a worker, so the state transformers' generate() leaves
on it (a static cache's remembered length, a compiled forward, an assistant's draft schedule) must
not reach the next case (harness/subjects/hf_state.py, `Zoo.fresh`): the same cases in two orders
observe the same fields. The control shows the order did matter without the reset."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness import cases as tables
from harness.designs import outputs
from harness.settings.config import load_config
from harness.settings.run import RunSettings
from harness.subjects import hf

ROOT = Path(__file__).parents[1]
MODEL = "llama-target"
SHORT = f"{MODEL}.prompt_lookup.static.short-0.greedy"  # writes past a static cache of its own length
LONG_STATIC = 96  # new tokens of an earlier static-cache call: a longer cache than SHORT's


@pytest.fixture(scope="module")
def config():
    return load_config(ROOT)


def a_long_static_call(zoo: hf.Zoo) -> None:
    """What another case of the worker may have done: a longer static-cache generate()."""
    hf.generate(zoo.load(MODEL).model, zoo.prompt_ids(MODEL, "short-0"), LONG_STATIC, cache="static")


def test_a_static_cache_call_leaves_state_that_fresh_takes_back(config):
    zoo = hf.Zoo(config.models_dir)
    zoo.load(MODEL)
    (state,) = zoo._states
    assert state.drift() == [] and zoo.fresh() == []
    a_long_static_call(zoo)
    drifted = state.drift()
    assert "attribute _previous_max_cache_length" in drifted or "attribute _cache" in drifted  # 5.x / 4.x
    assert zoo.fresh() == drifted and state.drift() == []
    assistant = zoo.load("llama-assistant").model
    assistant.generation_config.num_assistant_tokens = 7  # the heuristic schedule writes its length back
    assert zoo.fresh() == ["generation_config"]
    assert assistant.generation_config == zoo._states[-1].generation_config


def test_the_order_of_cases_does_not_change_what_a_case_observes(config, tmp_path):
    """SHORT observed first, and after a longer static call (with the reset the `fresh_models`
    fixture does before each test), gives the same observation; without the reset it does not."""
    (case,) = [c for c in tables.outputs() if c.id == SHORT]
    run = RunSettings(config, tmp_path, tmp_path / "results.json")

    def observed(after_long: bool):
        zoo = hf.Zoo(config.models_dir)
        if after_long:
            a_long_static_call(zoo)
            zoo.fresh()
        return outputs.observe(zoo, case, run, 0.01)

    alone = observed(after_long=False)
    assert observed(after_long=True) == alone
    # control: the same call without the reset depends on the order
    zoo = hf.Zoo(config.models_dir)
    a_long_static_call(zoo)
    model = zoo.load(MODEL).model
    stale = hf.generate(model, zoo.prompt_ids(MODEL, case.prompt), case.new_tokens, **zoo.path_args(case),
                        cache=case.cache)
    assert (stale.error is None) != (alone.fields["error"].value is None)


def test_a_failed_call_that_leaves_the_config_changed_says_so_and_the_next_case_gets_the_model_as_loaded(config):
    """transformers 5.0.0's early exit sets the model's num_hidden_layers to the exit layer, raises in
    get_candidates, and never puts it back: every later call on that model runs half of it. Modelled
    here by a call that does the same (any version): the failed call's error says what it left
    (`left_changed`), and the next case's call sees the model as loaded."""
    zoo = hf.Zoo(config.models_dir)
    model = zoo.load(MODEL).model
    layers = model.config.num_hidden_layers
    case = tables.Case(MODEL, "plain", "dynamic", "short-0", "greedy", None, None, None, None, 4)
    clean = zoo.generate(case)
    original = model.generate

    def cut_then_raise(*args, **kwargs):
        model.config.num_hidden_layers = 1  # what EarlyExitCandidateGenerator.get_candidates leaves on a raise
        return original(*args, **kwargs, not_a_generate_argument=1)  # transformers raises (unused model kwargs)

    model.generate = cut_then_raise
    failed = zoo.generate(tables.Case(MODEL, "plain", "dynamic", "short-0", "greedy", None, None, None, None, 5))
    model.generate = original
    assert failed.error is not None and failed.error["left_changed"] == [f"config.num_hidden_layers: {layers} -> 1"]
    zoo.fresh()
    assert model.config.num_hidden_layers == layers
    again = hf.generate(model, zoo.prompt_ids(MODEL, "short-0"), 4)
    assert again.tokens == clean.tokens
