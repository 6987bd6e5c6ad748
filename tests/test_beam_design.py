"""The beam suite's pure logic (harness/designs/beam.py): the reference beam search on a toy
language model (its length penalty, early_stopping's three values, num_return_sequences, the slots
it records), checked against brute-force enumeration; the helpers that pick the extra eos ids and
shape the rows; that the references catch a perturbed observation; and its case tables."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch

from harness import cases
from harness.checking.core import CaseCheck, Rules
from harness.designs import beam
from harness.schema import Field, Status
from harness.settings.config import Thresholds

EOS = 0
# a toy language model over 4 tokens: the next token's probabilities depend only on the last one
TABLE = {
    None: [0.05, 0.5, 0.3, 0.15],  # after the prompt
    1: [0.4, 0.1, 0.3, 0.2],
    2: [0.05, 0.15, 0.2, 0.6],
    3: [0.1, 0.45, 0.05, 0.4],
}
PROMPT = [9, 9]


# eos very likely after the first token: two beams both finish at step 2
EARLY = {None: [0.0001, 0.5, 0.4, 0.0999], 1: [0.6, 0.1, 0.1, 0.2], 2: [0.5, 0.2, 0.1, 0.2],
         3: [0.01, 0.3, 0.3, 0.39]}


def model_of(table):
    def step(prefixes: list[list[int]]) -> torch.Tensor:
        rows = [table[p[-1] if len(p) > len(PROMPT) else None] for p in prefixes]
        return torch.tensor(rows, dtype=torch.float64).log()
    return step


toy = model_of(TABLE)


def logp(tokens: tuple[int, ...]) -> float:
    total, last = 0.0, None
    for t in tokens:
        total += math.log(TABLE[last][t])
        last = t
    return total


def finished_sequences(max_new: int) -> list[tuple[int, ...]]:
    """Every sequence beam search can return: ending in eos, or reaching max_new without one."""
    out = []
    for n in range(1, max_new + 1):
        for seq in itertools.product(range(4), repeat=n):
            if EOS in seq[:-1]:
                continue
            if seq[-1] == EOS or n == max_new:
                out.append(seq)
    return out


@pytest.mark.parametrize("length_penalty", [0.0, 1.0, 2.0, -1.0])
@pytest.mark.parametrize("early_stopping", [False, "never"])
def test_an_exhaustive_beam_is_brute_force_enumeration(length_penalty, early_stopping):
    # num_beams above the number of sequences: nothing is pruned, the pool never fills, so the
    # result is the best finished sequences by sum(log p) / L**length_penalty
    got = beam.search(toy, PROMPT, num_beams=60, max_new=3, eos=[EOS], length_penalty=length_penalty,
                      early_stopping=early_stopping, num_return=4)
    ranked = sorted(finished_sequences(3), key=lambda s: -logp(s) / len(s) ** length_penalty)[:4]
    assert [tuple(r) for r in got.rows] == ranked
    assert got.scores == pytest.approx([logp(s) / len(s) ** length_penalty for s in ranked])


def test_the_length_penalty_decides_between_a_short_and_a_long_row():
    short = beam.search(toy, PROMPT, num_beams=2, max_new=4, eos=[EOS], length_penalty=0.0)
    long = beam.search(toy, PROMPT, num_beams=2, max_new=4, eos=[EOS], length_penalty=2.0)
    assert len(short.rows[0]) < len(long.rows[0])


def test_early_stopping_true_stops_when_the_pool_is_full_and_never_searches_on():
    # two beams, both finish at step 2 (the pool is full): True stops there, "never" with a
    # positive length penalty searches on (a longer row may still win), and a longer row wins
    kwargs = dict(num_beams=2, max_new=5, eos=[EOS], length_penalty=2.0, num_return=2)
    true = beam.search(model_of(EARLY), PROMPT, early_stopping=True, **kwargs)
    never = beam.search(model_of(EARLY), PROMPT, early_stopping="never", **kwargs)
    assert [len(r) for r in true.rows] == [2, 2] and len(true.margins) == 2
    assert len(never.margins) == 5 and len(never.rows[0]) > 2
    assert never.scores[0] > true.scores[0]


def test_the_rows_are_best_first_cut_to_num_return_with_their_slots():
    got = beam.search(toy, PROMPT, num_beams=3, max_new=3, eos=[EOS], num_return=2)
    assert len(got.rows) == len(got.scores) == len(got.slots) == 2
    assert got.scores == sorted(got.scores, reverse=True)
    assert all(len(s) == len(r) and s[0] == 0 and max(s) < 3 for s, r in zip(got.slots, got.rows, strict=True))


def test_slot_margins_hold_the_gap_between_running_beams_whose_rank_is_their_slot():
    """Two running beams 1e-3 apart in log p swap slots under other numerics with every selection
    kept: beam_indices differ while the rows do not. The slot margin of the step after is that gap
    (the step margin alone, far larger, would call the swap a real change)."""
    near = {None: [0.2, 0.3, 0.3003, 0.1997], 1: [0.1, 0.5, 0.2, 0.2], 2: [0.1, 0.2, 0.5, 0.2],
            3: [0.1, 0.2, 0.2, 0.5]}
    got = beam.search(model_of(near), PROMPT, num_beams=2, max_new=3, eos=[EOS])
    gap = math.log(0.3003) - math.log(0.3)
    assert got.rank_margins[0] == got.margins[0]
    assert got.rank_margins[1] == pytest.approx(gap) and gap < got.margins[1] / 100
    assert all(r <= m for r, m in zip(got.rank_margins, got.margins, strict=True))
    assert beam.slot_margins([0.5, 0.4, 0.3], [0.1, math.inf, 0.2]) == [0.5, 0.1, 0.3]


@pytest.mark.parametrize(("pool", "best", "length", "early", "lp", "improves"), [
    ([], -9.0, 3, False, 1.0, True),                      # not full
    ([-1.0, -2.0], -9.0, 3, False, 1.0, False),            # -3 <= -2
    ([-1.0, -2.0], -5.0, 3, False, 1.0, True),             # -1.67 > -2
    ([-1.0, -2.0], -9.0, 3, "never", 1.0, True),           # judged at max_new 6: -1.5 > -2
    ([-1.0, -2.0], -9.0, 3, "never", 0.0, False),          # no positive penalty: the current length
    ([-1.0, -2.0], -9.0, 3, "never", -1.0, False),
])
def test_can_improve_judges_the_best_running_beam(pool, best, length, early, lp, improves):
    hyps = [beam.Hypothesis(s, (), ()) for s in pool]
    assert beam.can_improve(hyps, 2, best, length, 6, early, lp) is improves


@pytest.mark.parametrize(("num_beams", "n_eos", "keep"), [(2, 0, 4), (2, 1, 4), (3, 2, 9), (4, 3, 16)])
def test_candidates_kept(num_beams, n_eos, keep):
    assert beam.candidates_kept(num_beams, n_eos) == keep


@pytest.mark.parametrize(("scores", "finished", "margin"), [
    # two beams, K = 4: the edge of the 2 best (-1.5 / -1.6), and of the 2 best unfinished (-1.5 / -3.0)
    ([-1.0, -1.5, -1.6, -3.0, -3.01], [False] * 5, 0.1),
    # the best is finished: the running edge is -1.6 / -3.0; the pool's edge -1.5 / -1.6
    ([-1.0, -1.5, -1.6, -3.0, -3.01], [True, False, False, False, False], 0.1),
    ([-1.0, -1.5, -2.5, -3.0, -3.01], [True, False, False, False, False], 0.5),
    # only two unfinished within K: their edge against the first dropped candidate
    ([-1.0, -1.2, -2.0, -2.5, -4.0], [True, True, False, False, False], 0.8),
])
def test_step_margin_is_the_gap_at_each_selection_s_edge(scores, finished, margin):
    assert beam.step_margin(scores, finished, num_beams=2, keep=4) == pytest.approx(margin)
    assert beam.step_margin(scores[:1], finished[:1], num_beams=2, keep=4) == math.inf


def test_pick_eos_takes_each_row_s_new_token_at_the_step_once():
    rows = [[5, 6, 7, 8], [5, 6, 5, 8], [5, 6, 7, 9], [5, 6, 2, 1]]
    assert beam.pick_eos(rows, eos=[2], start=2) == [7]  # 5 repeats its row, 7 once, 2 is an eos id
    assert beam.pick_eos(rows, eos=[2], start=3) == [8, 9, 1]
    assert beam.pick_eos([[5]], eos=[2], start=2) == []


def test_row_shapes():
    assert beam.row_ends([[0, 1, -1], [0, 0, 0]]) == [2, 3]
    assert beam.padded([[1, 2], [3]], fill=-1) == [[1, 2], [3, -1]]
    assert beam.with_offset([[0, 1], [2, 0]], batch_row=1, num_beams=3) == [[3, 4], [5, 3]]
    assert beam.normalised(-6.0, 3, 1.0) == -2.0 and beam.normalised(-6.0, 3, 0.0) == -6.0


def _check(name: str, observed, expected, kind: str) -> Status:
    rules = Rules(alpha=0.01, thresholds=Thresholds(), env={"dtype": "fp32"})
    check = CaseCheck("beam", "toy", rules)
    return check.reference(name, Field(kind, observed), Field(kind, expected)).status


def test_the_references_catch_a_perturbed_observation():
    ref = beam.search(toy, PROMPT, num_beams=3, max_new=4, eos=[EOS], length_penalty=1.0, num_return=3)
    assert _check("scores_vs_reference", ref.scores, ref.scores, "tensor") == Status.PASS
    # the length penalty with the prompt counted (#26624): each score over (2 + L) instead of L
    wrong = [s * len(r) / (len(r) + len(PROMPT)) for s, r in zip(ref.scores, ref.rows, strict=True)]
    assert _check("scores_vs_reference", wrong, ref.scores, "tensor") == Status.REGRESSION
    # beam indices without the batch row's offset (#18839), on a second batch row
    second = beam.with_offset(ref.slots, 1, 3)
    assert _check("beam_indices_vs_reference", ref.slots, second, "tokens") == Status.REGRESSION
    # a row cut one token short
    assert _check("tokens_vs_reference", [r[:-1] for r in ref.rows], ref.rows, "tokens") == Status.REGRESSION


def test_the_tables_name_each_case_once_and_reach_a_user_model():
    from harness.settings.models import UserModel
    from harness.zoo.prompts import BY_ID

    table = cases.beam() + cases.beam_modes()
    ids = [c.id for c in table]
    assert len(ids) == len(set(ids))
    assert {c.param("early_stopping") for c in cases.beam()} == {False, True, "never"}
    assert {c.param("length_penalty") for c in cases.beam()} >= {0.0, 1.0, 2.0}
    assert any(c.param("rows") == 2 for c in cases.beam())
    # the zoo's two batches: which row finishes first depends on the numbers (BEAM_SECOND_BATCH)
    batches = {c.id: c.param("prompts") for c in cases.beam() if c.param("rows") == 2}
    name, order = cases.BEAM_SECOND_BATCH
    assert batches == {"llama-target.beam.n3.batch": tuple(reversed(cases.BEAM_PROMPTS)),
                       f"llama-target.beam.{name}": order}

    class Run:
        user_models = (UserModel("mine", Path("/nowhere"), "--model", paths=("plain",),
                                 prompts=(BY_ID["short-0"],)),)
        deep = False

    mine = [c for c in cases.beam(Run()) + cases.beam_modes(Run()) if c.model == "mine"]
    assert len(mine) == len(cases.BEAM_SETTINGS) + len(cases.BEAM_MODES)


def test_a_reference_derived_from_tie_flipped_rows_inherits_the_tie_flip():
    rules = Rules(alpha=0.01, thresholds=Thresholds(), env={"dtype": "fp32"})
    check = CaseCheck("beam", "toy", rules)
    check.reference("tokens_vs_reference", Field("tokens", [[1, 2, 3]]), Field("tokens", [[1, 2, 4]],
                                                                               {"margins": [[5.0, 5.0, 1e-5]]}))
    check.reference("scores_vs_reference", Field("tensor", [-1.0], {"follows": "tokens_vs_reference"}),
                    Field("tensor", [-2.0]))
    check.reference("unrelated", Field("tensor", [-1.0]), Field("tensor", [-2.0]))
    got = {o.field: (o.status, o.category.value) for o in check.outcomes()}
    assert got["tokens_vs_reference"] == (Status.PASS, "tie-flip")
    assert got["scores_vs_reference"] == (Status.PASS, "tie-flip")
    assert got["unrelated"][0] == Status.REGRESSION


# ----------------------------------------------------------------------------------------------
# the replay: the documented rule on the library's own scores


def recorded(step, table: dict):
    """`step`, keeping every prefix it scored (as the library's pass-through processor does), in float32."""
    def run(prefixes: list[list[int]]) -> torch.Tensor:
        out = step(prefixes).float()
        for p, row in zip(prefixes, out, strict=True):
            table.setdefault(tuple(p), row)
        return out
    return run


def never(prefixes: list[list[int]]) -> torch.Tensor:
    raise AssertionError(f"the replay asked for {prefixes} outside the table")


RULE = dict(num_beams=2, max_new=4, eos=[EOS], length_penalty=1.0, num_return=2)


def test_the_replay_of_a_loop_that_followed_the_rule_is_that_loop():
    table: dict = {}
    loop = beam.search(recorded(toy, table), PROMPT, add=beam.add_float32, **RULE)
    got = beam.replay(table, never, PROMPT, **RULE)
    assert got.unscored is None
    assert (got.result.rows, got.result.steps) == (loop.rows, loop.steps)


def test_a_loop_that_stopped_early_leaves_prefixes_the_rule_extends_unscored():
    # the loop stops after 2 steps (as early_stopping "never" judged at the current length did):
    # the rule extends a prefix it never scored, and runs on to its own steps
    table: dict = {}
    stopped = beam.search(recorded(toy, table), PROMPT, **{**RULE, "max_new": 2})
    got = beam.replay(table, toy, PROMPT, **RULE)
    assert got.unscored == 2
    assert got.result.steps > stopped.steps


def test_an_exact_tie_follows_the_choice_the_library_made():
    # tokens 1 and 2 tie to the bit after the prompt: with one beam either is right; the replay
    # takes the one the library went on to score, whichever it was
    tied = {None: [0.1, 0.4, 0.4, 0.1], 1: [0.7, 0.1, 0.1, 0.1], 2: [0.1, 0.1, 0.1, 0.7], 3: [0.9, 0.05, 0.03, 0.02]}
    rule = dict(num_beams=1, max_new=3, eos=[EOS], num_return=1)
    for chosen in (1, 2):
        table: dict = {}
        recorded(model_of(tied), table)([PROMPT])
        recorded(model_of(tied), table)([[*PROMPT, chosen]])
        got = beam.replay(table, model_of(tied), PROMPT, **rule)
        assert got.result.rows[0][0] == chosen


def test_a_tie_at_the_pools_edge_follows_what_the_library_returned():
    # after the prompt eos and token 1 tie to the bit; with one beam only the first-ranked candidate
    # may enter the pool. eos first: the pool is full and the running beam (token 1, the same score)
    # cannot beat it, so the row stops at [eos]; token 1 first: the pool stays empty and the row runs
    # on. Both loops follow the rule; the replay must follow each, read from the rows it returned.
    tied = {None: [0.4, 0.4, 0.1, 0.1], 1: [0.1, 0.1, 0.1, 0.7], 2: [0.7, 0.1, 0.1, 0.1], 3: [0.9, 0.05, 0.03, 0.02]}
    rule = dict(num_beams=1, max_new=3, eos=[EOS], num_return=1)
    rows = []
    for first in (EOS, 1):
        table: dict = {}
        loop = beam.search(recorded(model_of(tied), table), PROMPT, add=beam.add_float32,
                           divide=beam.normalised_float32, prefer=lambda t, f=first: 0 if t[-1] == f else 1, **rule)
        got = beam.replay(table, never, PROMPT, loop.rows, **rule)
        assert (got.result.rows, got.result.steps) == (loop.rows, loop.steps)
        rows.append(loop.rows)
    assert rows[0] == [[EOS]] and rows[1] != rows[0]


def test_normalised_float32_divides_as_the_loops_float32_tensor():
    score = -2.4222111701965332
    for length, lp in ((3, 1.0), (4, 2.0), (5, 0.5)):
        want = float(torch.tensor([score], dtype=torch.float32) / (length ** lp))
        assert beam.normalised_float32(score, length, lp) == want
    # float32 sums one ulp apart whose float32 quotients over 3 are one value, where float64 keeps
    # them apart (sums in [3, 4): quotients in [1, 4/3), where the float32 step is larger than a
    # third of the sums'): the rule's comparison must be made on the loop's numbers
    xs = [torch.tensor(-3.5, dtype=torch.float32)]
    for _ in range(64):
        xs.append(torch.nextafter(xs[-1], torch.tensor(0.0)))
    pairs = [(float(x), float(y)) for x, y in itertools.pairwise(xs)]
    collide = [(x, y) for x, y in pairs if beam.normalised_float32(x, 3, 1.0) == beam.normalised_float32(y, 3, 1.0)]
    assert collide and all(x / 3 != y / 3 for x, y in collide)


def test_add_float32_rounds_as_a_float32_sum():
    a, b = -1.2345678901234, -0.000012345678
    assert beam.add_float32(a, b) == float(torch.tensor(a, dtype=torch.float32) + torch.tensor(b, dtype=torch.float32))
    assert beam.add_float32(a, b) != a + b


def test_pools_compare_what_each_row_holds_not_its_order():
    assert beam.pools([[2, 0], [1, 0], [3], [1]], 2) == [[[1, 0], [2, 0]], [[1], [3]]]


def test_the_pass_through_processor_changes_nothing_and_keeps_each_prefix_once():
    from harness.subjects.hf_beam import Scored

    seen = Scored()
    ids, scores = torch.tensor([[5, 6], [5, 7]]), torch.tensor([[0.0, -1.0], [-2.0, -3.0]])
    assert seen(ids, scores) is scores
    seen(torch.tensor([[5, 6]]), torch.tensor([[9.0, 9.0]]))  # a prefix seen again keeps its first row
    assert set(seen.table) == {(5, 6), (5, 7)}
    assert seen.table[(5, 6)].tolist() == [0.0, -1.0]
