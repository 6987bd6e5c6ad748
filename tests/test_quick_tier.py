"""The quick tier (harness/cases/tier.py): what `harness check` runs of the zoo by default is a
selection of the recorded grid that keeps every suite, model, path and cache covered, leaves the
per-test alpha that of the whole grid, and gives way to a full run whenever one is asked for."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import cases
from harness.cases.sampling import COMBINED, QUICK_WEIGHT
from harness.plugin.selection import select, tier_left_out
from harness.schema import Case
from harness.settings.config import load_config
from harness.settings.run import RunSettings

REPO = Path(__file__).resolve().parents[1]


def keeps(suite: str, case) -> bool:
    return cases.suite(suite).keeps(case)


def settings(**given) -> RunSettings:
    return RunSettings.make(load_config(REPO), given, ci=False)


def item(suite: str, case) -> SimpleNamespace:
    """A collected golden test of `suite` on `case`, as selection.py reads one."""
    return SimpleNamespace(fixturenames=("golden", "case"), callspec=SimpleNamespace(params={"case": case}, id=case.id),
                           module=SimpleNamespace(__name__=f"suites.test_{suite}"), path=Path(f"test_{suite}.py"),
                           get_closest_marker=lambda name: None, name=case.id)


def zoo_items() -> list[SimpleNamespace]:
    return [item(suite, c) for suite, table in (("outputs", cases.outputs), ("sampling", cases.sampling),
                                                 ("bias", cases.bias), ("latency", cases.latency),
                                                 ("beam", cases.beam)) for c in table(None)]


def test_the_tier_keeps_every_model_path_and_cache_of_outputs():
    every = {(c.model, c.path, c.weight, c.cache) for c in cases.outputs(None)}
    kept = {(c.model, c.path, c.weight, c.cache) for c in cases.outputs(None) if keeps("outputs", c)}
    assert kept == every
    dropped = [c for c in cases.outputs(None) if not keeps("outputs", c)]
    assert dropped and all(c.decoding == "sample" or (c.path != "plain" and c.prompt != "short-0") for c in dropped)
    # plain decoding keeps the long prompt on every model (it crosses the sliding / chunked windows)
    assert {c.model for c in cases.outputs(None) if c.path == "plain" and c.prompt.startswith("long")} == \
        {c.model for c in cases.outputs(None) if keeps("outputs", c) and c.path == "plain"
         and c.prompt.startswith("long")}


def test_the_tier_samples_every_path_and_every_plain_setting():
    grid = cases.sampling(None)
    kept = [c for c in grid if keeps("sampling", c)]
    assert {c.path for c in kept} == {c.path for c in grid}
    assert {c.weight for c in kept if c.path == "ensemble"} == {QUICK_WEIGHT}  # w0.7: the bias suite's
    assert any(keeps("bias", c) and c.weight == 0.7 for c in cases.bias(None))
    plain = {c.param("setting") for c in grid if c.path == "plain"}
    assert {c.param("setting") for c in kept if c.path == "plain"} == plain - set(COMBINED)
    combined = cases.SAMPLING_SETTINGS["combined"]  # ... whose processors the combined case chains, each set
    assert all(getattr(combined, name) not in (None, 1.0, 0, 0.0) for name in
               ("temperature", "top_k", "top_p", "min_p", "repetition_penalty"))
    assert len(kept) < len(grid)


def test_the_tier_keeps_each_verifier_and_the_prefill_and_decode_timings():
    assert {c.weight for c in cases.bias(None) if keeps("bias", c)} == {c.weight for c in cases.bias(None)}
    assert sorted(c.id.rsplit(".", 1)[1] for c in cases.latency(None) if keeps("latency", c)) == \
        ["decode", "prefill"]
    assert all(keeps("beam", c) for c in cases.beam(None))  # a suite without a rule runs whole


def test_the_tier_narrows_what_runs_not_the_alpha():
    items = zoo_items()
    kept, dropped, m = select(items, settings())
    assert dropped and len(kept) + len(dropped) == len(items)
    full_kept, full_dropped, full_m = select(items, settings(budget="full"))
    assert (len(full_kept), full_dropped, full_m) == (len(items), [], m)
    line = tier_left_out(items, settings())
    assert f"{len(dropped)} of the zoo's {len(items)} cases not run" in line and "--budget full" in line
    assert tier_left_out(items, settings(budget="full")) == ""


@pytest.mark.parametrize("given", [dict(budget="full"), dict(deep=True), dict(regen=True), dict(fault="x"),
                                   dict(cases=("outputs:*",))])
def test_a_full_run_whenever_one_is_asked_for(given):
    assert settings(**given).full
    items = zoo_items()
    kept, _, _ = select(items, settings(**given))
    wanted = [i for i in items if i.module.__name__ == "suites.test_outputs"] if "cases" in given else items
    assert kept == wanted  # every case the run selects, none held back by the tier


def test_an_explicit_pytest_selection_runs_what_it_names():
    assert not settings().full
    kept, dropped, _ = select(zoo_items(), settings(), explicit=True)
    assert dropped == []


def test_a_case_of_your_own_model_is_never_tiered():
    ours = Case("mine", "assisted", prompt="long-0", decoding="greedy", assistant="x")
    run = settings()
    assert not keeps("outputs", ours)  # the zoo's rule would drop it ...
    users = (SimpleNamespace(name="mine"),)
    object.__setattr__(run, "user_models", users)
    kept, dropped, _ = select([item("outputs", ours)], run)
    assert len(kept) == 1 and dropped == []  # ... but your models' cases follow their own plan
