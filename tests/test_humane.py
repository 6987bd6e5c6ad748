"""Exact-field differences as "key: old -> new" lines (harness/checking/humane.py and compare_exact)."""

from harness.checking.compare import compare_field
from harness.checking.humane import change_detail, change_lines, change_set, text_around
from harness.schema import Field


def test_leaf_changes_are_key_old_new():
    assert change_lines({"n": 12}, {"n": 13}) == ["n: 12 -> 13"]
    assert change_lines({"a": {"b": [1, 2]}}, {"a": {"b": [1, 3]}}) == ["a.b[1]: 2 -> 3"]
    assert change_lines(["past", "x"], ["cache", "x"]) == ["root[0]: 'past' -> 'cache'"]


def test_whole_value_replaced_is_root_and_shortened():
    line = change_lines({"dtype": "bool", "shape": [1, 1, 83, 91], "pad": "x" * 100}, None)[0]
    assert line.startswith('root: {"dtype": "bool"') and line.endswith("... -> None") and len(line) < 90


def test_keys_added_and_removed():
    assert change_lines({"embed_out.weight": ""}, {"lm_head.weight": ""}) == [
        "embed_out.weight: removed (was '')", "lm_head.weight: added ''"]


def test_long_strings_show_text_around_the_first_divergence():
    old = "Once upon a time the fox ran to the river and drank the cold water"
    new = "Once upon a time the fox ran to the forest and slept under a tree"
    line = text_around(old, new)
    assert "(from char 36)" in line and "river" in line and "forest" in line and "Once" not in line


def test_detail_limits_lines():
    assert change_detail({"a": 1, "b": 1, "c": 1, "d": 1}, {"a": 2, "b": 2, "c": 2, "d": 2}) == \
        "a: 1 -> 2; b: 1 -> 2; c: 1 -> 2 (+1 more)"


def test_compare_exact_detail_is_humane_and_keeps_deepdiff():
    outcome = compare_field("result", Field("exact", {"n": 13}), Field("exact", {"n": 12}))
    assert outcome.detail == "n: 12 -> 13" and "Value of" not in outcome.detail
    assert outcome.diff["deepdiff"]["values_changed"]["root['n']"] == {"new_value": 13, "old_value": 12}


def test_a_tokens_divergence_shows_the_recorded_text_around_it():
    from harness.checking.core import CaseCheck, Rules
    from harness.schema import Record
    from harness.settings.config import Thresholds

    env = {"dtype": "fp32"}
    old_text = "the fox ran to the river and drank"
    new_text = "the fox ran to the forest and slept"
    baseline = Record("outputs", "m.plain", env, {"tokens": Field("tokens", [1, 2, 3, 4]),
                                                  "text": Field("exact", old_text)})
    check = CaseCheck("outputs", "m.plain", Rules(0.01, Thresholds(), env), baseline=baseline)
    check.observe("tokens", Field("tokens", [1, 2, 9, 4]))
    check.observe("text", Field("exact", new_text))
    tokens = next(o for o in check.outcomes() if o.field == "tokens")
    assert "tokens differ from step 2" in tokens.detail
    assert "text: 'the fox ran to the river and drank' -> 'the fox ran to the forest and slept' (from char 19)" \
        in tokens.detail
    assert tokens.diff["old_text"] == old_text and tokens.diff["divergences"][0]["step"] == 2


def test_change_set_reads_a_detail_back_and_nothing_from_a_cut_one():
    old, new = {"eos": 2, "pad": 2}, {"eos": 1, "pad": None}
    assert change_set(change_detail(old, new)) == set(change_lines(old, new))
    cut = change_detail({k: 1 for k in "abcd"}, {k: 2 for k in "abcd"})
    assert "more)" in cut and change_set(cut) == set()
