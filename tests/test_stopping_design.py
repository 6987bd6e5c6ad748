"""The stopping suite's pure logic (harness/designs/stopping.py, harness/subjects/hf_stopping.py):
where a row must stop on a stream and why, what the library's criteria calls say, the pieces a
case picks from its own stream, what a streamer must hand out; and its case tables."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness import cases
from harness.designs import stopping
from harness.engine.stopping import StopRule
from harness.subjects.hf_stopping import SuppressUntil, first_stops

TEXTS = ["P", "P a", "P a b", "P a bc", "P a bcd"]  # prompt "P", then tokens " a", " b", "c", "d"


def test_the_first_stop_on_a_stream_names_every_reason_at_that_step():
    stream = [10, 11, 12, 13]

    def rule(**kwargs):
        return StopRule.of(prompt_len=1, **kwargs)

    assert rule(eos=[12], max_new_tokens=4).stop(stream, TEXTS) == {"new_tokens": 3, "by": ["eos"]}
    # a stop string completed by the token that is also an eos id, at the last allowed step: three reasons
    assert rule(eos=[12], stop_strings=["bc"], max_new_tokens=3).stop(stream, TEXTS)["by"] == \
        ["eos", "max_length", "stop_string"]
    assert rule(stop_strings=["@"], max_new_tokens=2).stop(stream, TEXTS) == {"new_tokens": 2, "by": ["max_length"]}
    # a stream shorter than max_new that nothing stops (cannot happen in a run: recorded as it is)
    assert rule(max_new_tokens=4).stop(stream[:1], TEXTS)["new_tokens"] is None


def test_a_stop_string_hit_in_the_prompt_tail_and_first_token_counts():
    assert StopRule.of(2, stop_strings=["key"], max_new_tokens=5).stop([7], ["the ke", "the key"])["by"] == \
        ["stop_string"]


def test_the_picked_token_is_new_to_the_stream_not_eos_and_not_in_the_other_row():
    stream = [5, 6, 5, 7, 8]
    assert stopping.pick_token(stream, eos=[2]) == (3, 7)  # step 2 repeats 5
    assert stopping.pick_token(stream, eos=[7]) == (4, 8)
    assert stopping.pick_token(stream, eos=[2], avoid=[7, 9, 9, 9]) == (4, 8)  # the other row has 7 by step 3
    assert stopping.pick_token(stream, eos=[2], avoid=[9, 9, 9, 9, 7]) == (3, 7)  # ... only after it: it stops later
    assert stopping.pick_token([5, 5, 5, 5], eos=[2]) is None


def test_the_picked_word_is_a_word_the_text_before_it_does_not_hold():
    pieces = [" the", " key", " the", ",", " harbor", " key"]
    texts = ["", " the", " the key", " the key the", " the key the,", " the key the, harbor", "..."]
    assert stopping.pick_word(pieces, texts) == "harbor"
    assert stopping.pick_word([" a", " b", " key"], ["", " a", "key a b", "key a b key"]) is None  # in the text


def test_the_library_s_first_stop_per_row_from_its_criteria_calls():
    calls = [("max_length", [False, False], 11), ("eos", [False, True], 11),
             ("max_length", [False, False], 12), ("eos", [False, True], 12),
             ("max_length", [True, True], 13), ("eos", [True, True], 13)]
    assert first_stops(calls, rows=2, prompt_len=10) == [
        {"new_tokens": 3, "by": ["eos", "max_length"]}, {"new_tokens": 1, "by": ["eos"]}]
    assert first_stops([], rows=1, prompt_len=10) == [{"new_tokens": None, "by": []}]


def test_what_filled_a_row_after_the_library_stopped_it():
    row = [4, 5, 0, 0]
    assert stopping.fill_after(row, 2) == [0, 0]
    assert stopping.fill_after(row, None) == []


@pytest.mark.parametrize(("value", "ids"), [(None, []), (2, [2]), ([2, 7], [2, 7]), ((3,), [3])])
def test_eos_ids_of_a_generation_config(value, ids):
    assert stopping.eos_ids(value) == ids


def test_what_a_streamer_must_hand_out():
    assert stopping.expected_stream_text(" a b", "TextIteratorStreamer") == " a b"
    assert stopping.expected_stream_text("P a b", "TextStreamer") == "P a b\n"  # print()'s closing newline


def test_suppress_until_masks_the_ids_only_before_the_count():
    scores = torch.zeros(1, 6)
    masked = SuppressUntil(prompt_len=3, count=2, ids=[1, 4])(torch.zeros(1, 4, dtype=torch.long), scores)
    assert masked[0, [1, 4]].tolist() == [float("-inf")] * 2 and masked[0, [0, 2, 3, 5]].eq(0).all()
    assert scores.eq(0).all()  # the input is not changed in place
    assert SuppressUntil(3, 2, [1, 4])(torch.zeros(1, 5, dtype=torch.long), scores) is scores


def test_the_tables_name_each_case_once_and_reach_a_user_model():
    from harness.settings.models import UserModel
    from harness.zoo.prompts import BY_ID

    zoo = cases.stopping() + cases.streaming()
    ids = [c.id for c in zoo]
    assert len(ids) == len(set(ids))
    assert {c.param("check") for c in cases.stopping()} == set(cases.STOP_CHECKS)
    assert any(c.path == "assisted" and c.assistant == cases.ASSISTANT for c in cases.streaming())

    class Run:
        user_models = (UserModel("mine", Path("/nowhere"), "--model", paths=("plain",),
                                 prompts=(BY_ID["short-0"],)),)
        deep = False

    mine = [c for c in cases.stopping(Run()) + cases.streaming(Run()) if c.model == "mine"]
    assert {c.param("check") for c in mine} == {*cases.STOP_CHECKS, "stream", "stream-batch"}
    assert all(c.param("prompts") == ("short-0", "short-0") for c in mine)  # one prompt: the batch repeats it
    assert not any(c.path == "assisted" for c in mine)  # no assistant: no assisted streaming
