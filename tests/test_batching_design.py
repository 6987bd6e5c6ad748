"""The batching suite's pure logic (harness/designs/batching.py): how a batch is padded, what a
row's mask and position ids say over the forward calls, what a solo run's row must look like in a
batch; its case table; and that the references catch a batch that is not its solo runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness import cases
from harness.checking.compare import compare_field
from harness.checking.policy import Policy
from harness.designs import batching
from harness.schema import Status
from harness.subjects.hf_batching import Forward


@pytest.mark.parametrize(("side", "ids", "mask"), [
    ("left", [[0, 0, 7, 8], [5, 6, 7, 8]], [[0, 0, 1, 1], [1, 1, 1, 1]]),
    ("right", [[7, 8, 0, 0], [5, 6, 7, 8]], [[1, 1, 0, 0], [1, 1, 1, 1]]),
])
def test_rows_are_padded_to_the_longest_on_their_side(side, ids, mask):
    assert batching.pad_rows([[7, 8], [5, 6, 7, 8]], 0, side) == (ids, mask)


def test_rows_of_one_length_are_not_padded():
    assert batching.pad_rows([[1, 2], [3, 4]], 9, "left") == ([[1, 2], [3, 4]], [[1, 1], [1, 1]])


@pytest.mark.parametrize(("values", "expected"), [
    ([0, 0, 1, 1, 1], [[0, 2], [1, 3]]),
    ([1, 1, 0, 0, 1], [[1, 2], [0, 2], [1, 1]]),  # right padding, then a generated token
    ([1], [[1, 1]]),
    ([], []),
])
def test_a_mask_as_runs(values, expected):
    assert batching.runs(values) == expected


@pytest.mark.parametrize(("row_runs", "expected"), [
    ([[0, 63], [1, 20]], [[1, 20]]),
    ([[1, 20], [0, 63], [1, 1]], [[1, 20], [0, 63], [1, 1]]),  # pads after real tokens stay: not as solo
    ([[1, 5]], [[1, 5]]),
])
def test_leading_pads_are_dropped_and_only_they(row_runs, expected):
    assert batching.without_leading_pads(row_runs) == expected


# a left-padded batch of 2 (row 0: 2 pads, 2 tokens; row 1: 4 tokens), a prefill and one decode step
PREFILL = Forward([[0, 0, 1, 1], [1, 1, 1, 1]], [[0, 0, 0, 1], [0, 1, 2, 3]], 4)
DECODE = Forward([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]], [[2], [4]], 5)


def test_real_positions_keep_the_unmasked_query_tokens_over_the_calls():
    assert batching.real_positions([PREFILL, DECODE], 0) == [0, 1, 2]
    assert batching.real_positions([PREFILL, DECODE], 1) == [0, 1, 2, 3, 4]
    # positions counted from the first pad: what the position-ids fault does
    wrong = Forward(PREFILL.attention_mask, [[0, 0, 2, 3], [0, 1, 2, 3]], 4)
    assert batching.real_positions([wrong], 0) == [2, 3]


def test_real_positions_of_a_call_without_mask_or_ids():
    one_row = Forward(None, [[0, 1, 2]], 3)  # one row of ids broadcasts; no mask: every query token is real
    assert batching.real_positions([one_row], 1) == [0, 1, 2]
    assert batching.real_positions([PREFILL, Forward(DECODE.attention_mask, None, 5)], 0) is None


def test_attended_reads_a_missing_mask_as_all_keys():
    assert batching.attended([PREFILL, DECODE], 0) == [[[1, 2]], [[1, 3]]]
    assert batching.attended([Forward(None, [[0, 1]], 2), Forward(None, [[2]], 3)], 0) == [[[1, 2]], [[1, 3]]]
    assert batching.attended([Forward(None, [[0, 1]], None)], 0) == [None]


@pytest.mark.parametrize(("rows", "solos", "steps"), [
    ([[1, 2, 3], [4, 5, 6]], [[1, 2, 3], [4, 5, 6]], 3),
    ([[1, 2, 3], [4, 9, 6]], [[1, 2, 3], [4, 5, 6]], 2),  # row 1 leaves at step 1: its scores there still count
    ([[1, 2, 0], [4, 5, 6]], [[1, 2], [4, 5, 6]], 2),      # row 0's solo run stopped after 2 tokens (eos)
    ([[7, 2, 3]], [[1, 2, 3]], 1),
])
def test_the_steps_whose_scores_follow_the_solo_prefix(rows, solos, steps):
    assert batching.comparable_steps(rows, solos) == steps


def test_a_solo_row_that_stopped_is_filled_with_pads_and_divergences_are_per_row():
    assert batching.padded_to([5, 2], 4, 0) == [5, 2, 0, 0]
    assert batching.padded_to([5, 6], 2, 0) == [5, 6]
    assert batching.divergences([[1, 2, 3], [1, 2, 3]], [[1, 2, 3], [1, 9, 3]]) == [None, 1]


@pytest.mark.parametrize(("config_pad", "tok_pad", "eos", "expected"), [
    (0, 5, 2, 0), (None, 5, 2, 5), (None, None, [7, 8], 7), (None, None, 2, 2), (None, None, None, 0),
])
def test_the_pad_token_a_batch_uses(config_pad, tok_pad, eos, expected):
    class Obj:
        def __init__(self, **kw):
            self.__dict__.update(kw)

    model = Obj(config=Obj(pad_token_id=config_pad), generation_config=Obj(eos_token_id=eos))
    assert batching.pad_id(model, Obj(pad_token_id=tok_pad)) == expected


def test_padding_warnings_are_kept_from_the_library_s_loggers_even_when_it_is_quieted():
    import logging
    import warnings

    from harness.subjects.hf_batching import record_padding_warnings

    library = logging.getLogger("transformers")
    before = library.level
    library.setLevel(logging.ERROR)  # TRANSFORMERS_VERBOSITY=error
    try:
        sink: list[str] = []
        with record_padding_warnings(sink):
            logging.getLogger("transformers.generation.utils").warning("right-padding was detected!")
            logging.getLogger("transformers.generation.utils").warning("something else")
            warnings.warn("Padding side matters", UserWarning, stacklevel=1)
        assert sink == ["right-padding was detected!", "Padding side matters"]
        assert library.level == logging.ERROR
    finally:
        library.setLevel(before)


def test_the_table_names_each_case_once_and_reaches_a_user_model():
    from harness.settings.models import UserModel
    from harness.zoo.prompts import BY_ID

    zoo = cases.batching()
    assert len({c.id for c in zoo}) == len(zoo)
    assert {c.param("check") for c in zoo if c.model == cases.TARGET} == set(cases.BATCH_CHECKS)
    assert {c.model for c in zoo} == {cases.TARGET, *cases.BATCH_ALSO}
    lengths = [len(BY_ID[p].text) for p in cases.BATCH_PROMPTS]
    assert max(lengths) > 2 * min(lengths)  # clearly different lengths: the short rows are padded

    class Run:
        user_models = (UserModel("mine", Path("/nowhere"), "--model", paths=("plain", "prompt_lookup"),
                                 prompts=(BY_ID["short-0"], BY_ID["long-0"])),)
        deep = False

    mine = [c for c in cases.batching(Run()) if c.model == "mine"]
    assert {c.param("check") for c in mine} == {"greedy", "right-padded", "tokenizer-padded", "prompt_lookup"}
    assert all(c.param("prompts") == ("short-0", "long-0") for c in mine)


# ----------------------------------------------------------------------------------------------
# the references catch a batch that is not its solo runs (llama-target, the real library)


def _verdicts(obs) -> dict[str, Status]:
    return {name: compare_field(name, r.observed, r.expected, Policy(implementations_differ=r.implementations_differ)).status
            for name, r in obs.references.items()}


@pytest.fixture(scope="module")
def zoo():
    from harness.subjects.hf import Zoo

    return Zoo()


GREEDY = next(c for c in cases.batching() if c.id == f"{cases.TARGET}.batch.greedy")


def test_a_clean_batch_passes_every_reference(zoo):
    assert set(_verdicts(batching.observe(zoo, GREEDY)).values()) == {Status.PASS}


def test_the_references_catch_a_perturbed_batch(zoo, monkeypatch):
    """The batched call (not the solo runs) is perturbed after it ran: row 0's positions shifted by
    its pads, its mask's pads unmasked, its first scores moved, a sure token replaced - each
    reference names its own perturbation (the first scores both against the solo run and against
    the engine's logits)."""
    real = batching.batch_run

    def perturbed(model, input_ids, attention_mask, *args, **kwargs):
        got = real(model, input_ids, attention_mask, *args, **kwargs)
        if input_ids.shape[0] == 1:
            return got
        pads = int((attention_mask[0] == 0).sum())
        got.forwards = [dataclasses.replace(
            f, position_ids=[[p + pads for p in f.position_ids[0]], *f.position_ids[1:]],
            attention_mask=[[1] * len(f.attention_mask[0]), *f.attention_mask[1:]]) for f in got.forwards]
        got.scores[0][0] = [s + 0.01 * i for i, s in enumerate(got.scores[0][0])]
        step = max(range(len(got.margins[0])), key=lambda i: got.margins[0][i])  # where the row is surest
        got.rows[0] = list(got.rows[0])
        got.rows[0][step] = (got.rows[0][step] + 1) % 512
        return got

    monkeypatch.setattr(batching, "batch_run", perturbed)
    assert _verdicts(batching.observe(zoo, GREEDY)) == {
        "tokens_as_solo": Status.REGRESSION, "first_logits_as_solo": Status.REGRESSION,
        "first_logits_vs_engine": Status.REGRESSION, "scores_as_solo": Status.REGRESSION,
        "positions_as_solo": Status.REGRESSION, "mask_as_solo": Status.REGRESSION}
