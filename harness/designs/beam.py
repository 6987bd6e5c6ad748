"""Beam search, and the decoding modes v5 moved out of the library (suites/test_beam.py; tables:
harness/cases/ `beam`, `beam_modes`).

**Beam search.** One generate() per case with num_beams (2-4), length_penalty (1.0, 0.0, 2.0),
early_stopping (False, True, "never"), num_return_sequences, on one prompt (the batch case: two,
cut to one length). So that hypotheses really finish early and the length penalty and
early_stopping decide something, each case adds one eos id to the model's own: the token the best
beam of the reference search (`search`, run with the model's eos only) produces at step
`PICK_FROM`, new to that row and not an eos id (`pick_eos`).

The oracle is `search`, a small beam search written here over a `next_logprobs(prefixes)`
callable (the model's plain uncached forward: harness/subjects/hf_beam.py `next_logprobs`) - not
transformers' beam code. It implements the documented algorithm, one prompt at a time (a batch
row must not depend on the other rows: transformers #38778):

  - K = max(2, 1 + number of eos ids) * num_beams candidates per step: the best accumulated
    log-probabilities sum(log p) over every running beam and token (one running beam at the start);
  - a candidate that ends in an eos id, or reaches max_new_tokens, is a finished hypothesis, scored
    sum(log p) / L**length_penalty with L its generated length (the eos included, the prompt
    not); only candidates ranked among the first num_beams are kept, in a pool of the num_beams best;
  - the num_beams best unfinished candidates run on (their slot is their rank: `beam_indices`);
  - the search stops at max_new_tokens, when early_stopping is True and the pool is full, or
    when the pool is full and the best running beam cannot beat the pool's worst: its score over
    L**length_penalty with L the current generated length - or, for early_stopping "never" with a
    positive length penalty, max_new_tokens (transformers #20901 / #21368's three values);
    after that nothing is added;
  - the result is the pool, best first, cut to num_return_sequences; shorter rows are padded.

Tokens are compared tie-aware: each step's margin is the gap at the edge of the step's selections
(`step_margin`: the num_beams best candidates, the num_beams best unfinished ones) - a near-tie
there can change what the beams hold across numerics; scores within the dtype's tolerance (the two
sides are different code: cached vs uncached forwards). A reference derived from the rows (scores,
beam indices) follows tokens_vs_reference: a tie-flip there is not a second finding.

  setup          exact   the generate() keywords of the case (eos list with the picked ids), prompt length,
                         rows (follows tokens: the picked ids come from the run's own near-tied beams)
  error          exact   the exception generate() raised, or None
  tokens         tokens  the returned rows' new tokens (pads included), with the reference's step margins
  pad_fill       exact   per row, the ids after its end (5.x fills with `pad_token_id or eos`: a pad id 0
                         is falsy, so the zoo's rows are filled with the eos id)
  sequences_scores tensor the returned rows' sequences_scores
  beam_indices   tokens  per row, the running slot (+ batch offset) each token extended, -1 past its end,
                         with the reference's slot margins (`slot_margins`: two near-tied running beams
                         swap slots without any selection moving - a tie-flip across numerics)
 references, computed in the run:
  tokens_vs_reference        tokens  each row up to its end equals `search`'s
  scores_vs_reference        tensor  sequences_scores equal `search`'s sum(log p) / L**lp
  beam_indices_vs_reference  tokens  beam_indices equal `search`'s (the batch row's offset included)
  scores_from_transitions    tensor  sequences_scores equal the library's own compute_transition_scores
                                     summed per row over L**lp (transformers #15869's consistency)
  rule_on_own_scores         exact   {steps, rows}: the steps the library's loop scored and each batch row's
                                     returned rows (sorted: the pool, not its order) equal
                                     `search` replayed on the library's own processed log-probabilities
                                     (`replay`: read by a pass-through processor, accumulated in float32
                                     as the loop does) - the oracle is the documented rule, the numbers
                                     the library's, so no rounding moves a decision and no tie allowance
                                     applies: it catches a wrong stop or selection at any margin, in bf16
                                     too. A prefix the rule extends that the loop never scored is run by
                                     the uncached forward (a correct loop scores them all); between two
                                     candidates that tie to the bit it follows the library's choice

**Moved modes.** Group (diverse) beam search (num_beam_groups, diversity_penalty), contrastive search
(penalty_alpha, top_k), constrained beam search (force_words_ids) and DoLa (dola_layers) moved to hub
`custom_generate` repos in v5; generate() is called with their settings and trust_remote_code left
False, and a hub repo is never fetched (hf_beam.py `no_custom_generate`).

  mode           exact   the GenerationMode the version's GenerationConfig resolves the settings to
  moved_to       exact   the hub repo the version names for it (None: the library runs it)
  outcome        exact   "ran", "refused" (generate() raised) or "redirected" (it asked for the repo)
  error          exact   the exception, or None
  custom_generate_requested exact  the repos generate() asked the (guarded) loader for
  tokens         tokens  the new tokens when it ran
A change here between versions is `changed` (a documented move) through the exact kind; a mode that
ran in both versions and now gives other tokens is a regression (tokens).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from harness.schema import Case, Observation
from harness.subjects.hf_beam import beam_run, mode_run, next_logprobs

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

PICK_FROM = 2  # the extra eos id is the best beam's token at this step: a hypothesis finishes early
NEG = -1.0e9  # a score no real hypothesis has


# ----------------------------------------------------------------------------------------------
# pure logic: the reference beam search


@dataclass(frozen=True)
class Hypothesis:
    score: float  # running: sum of log p; finished: sum of log p / L**length_penalty
    tokens: tuple[int, ...]
    slots: tuple[int, ...]  # the running slot each token extended


@dataclass
class Searched:
    rows: list[list[int]] = field(default_factory=list)  # best first, num_return_sequences rows, unpadded
    scores: list[float] = field(default_factory=list)
    slots: list[list[int]] = field(default_factory=list)
    margins: list[float] = field(default_factory=list)  # per step: `step_margin`
    steps: int = 0  # how many steps it scored (calls of next_logprobs)
    rank_margins: list[float] = field(default_factory=list)  # per step: `slot_margins`


def candidates_kept(num_beams: int, n_eos: int) -> int:
    """K: how many candidates a step keeps, so that num_beams unfinished ones remain even when
    every beam's best continuations are eos ids."""
    return max(2, 1 + n_eos) * num_beams


def normalised(score: float, length: int, length_penalty: float) -> float:
    """A finished hypothesis' score: sum of log p over its generated length ** length_penalty."""
    return score / (length ** length_penalty)


def best_length(length: int, max_new: int, early_stopping: bool | str, length_penalty: float) -> int:
    """The generated length at which the best running beam is judged: the current one, or with
    early_stopping "never" and a positive length penalty the longest possible (longer is better then)."""
    return max_new if early_stopping == "never" and length_penalty > 0.0 else length


def can_improve(pool: Sequence[Hypothesis], num_beams: int, best_running: float, length: int, max_new: int,
                early_stopping: bool | str, length_penalty: float,
                divide: Callable[[float, int, float], float] = normalised) -> bool:
    """The pool is not full, or the best running beam (its score `divide`d as the pool's were) may
    still beat its worst hypothesis."""
    if len(pool) < num_beams:
        return True
    judged = best_length(length, max_new, early_stopping, length_penalty)
    return divide(best_running, judged, length_penalty) > min(h.score for h in pool)


def step_margin(scores: Sequence[float], finished: Sequence[bool], num_beams: int, keep: int) -> float:
    """How far a step's decisions are from flipping: the gap at the edge of each selection among the
    `keep` + 1 best candidates (sorted descending; `finished`: each ends in an eos id or at
    max_new_tokens) - the num_beams best (the ones a finished candidate must be among to enter the
    pool), and the num_beams best unfinished within the `keep` (the running beams)."""
    gaps = [scores[num_beams - 1] - scores[num_beams]] if len(scores) > num_beams else []
    running = [s for s, f in zip(scores[:keep], finished[:keep], strict=True) if not f]
    if len(running) > num_beams:
        gaps.append(running[num_beams - 1] - running[num_beams])
    elif len(running) == num_beams and len(scores) > keep:
        gaps.append(running[-1] - scores[keep])
    return min(gaps, default=math.inf)


def slot_margins(margins: Sequence[float], rank_gaps: Sequence[float]) -> list[float]:
    """Per step, how far the slot each token extended is from another one: the step's own margin,
    and the gap between consecutive running beams of the step before (their rank is their slot, so
    two near-tied running beams swap slots - the same rows, other beam_indices - without any
    selection moving). `rank_gaps[t]`: the smallest such gap among the beams step t kept."""
    return [min(m, rank_gaps[t - 1]) if t else m for t, m in enumerate(margins)]


def search(next_logprobs: Callable[[list[list[int]]], torch.Tensor], prompt: Sequence[int], *, num_beams: int,
           max_new: int, eos: Sequence[int], length_penalty: float = 1.0, early_stopping: bool | str = False,
           num_return: int = 1, add: Callable[[float, float], float] = lambda a, b: a + b,
           divide: Callable[[float, int, float], float] = normalised,
           prefer: Callable[[Sequence[int]], int] | None = None) -> Searched:
    """Beam search over `next_logprobs(prefixes) -> [len(prefixes), V]` log-probabilities, as the
    module docstring states it; `add` accumulates a beam's log p and `divide` applies the length
    penalty (the replay: both in float32, as the library's loop does, so that its candidates' and
    hypotheses' scores, and the early-stopping comparison, are the library's to the bit); `prefer`
    breaks an exact tie between two candidates (a rank of their tokens, the lower first; the replay:
    the library's choice, read from what it returned and what it went on to score)."""
    keep = candidates_kept(num_beams, len(eos))
    tie_rank = prefer or (lambda tokens: 0)
    running = [Hypothesis(0.0, (), ())]
    pool: list[Hypothesis] = []
    margins: list[float] = []
    rank_gaps: list[float] = []
    improvable = True
    steps = 0
    for step in range(max_new):
        logprobs = next_logprobs([list(prompt) + list(h.tokens) for h in running])
        steps += 1
        cands = []
        for slot, h in enumerate(running):
            values, ids = torch.topk(logprobs[slot], min(keep, logprobs.shape[-1]))
            cands += [(add(h.score, float(v)), slot, int(t)) for v, t in zip(values, ids, strict=True)]
        cands.sort(key=lambda c: (-c[0], tie_rank(list(prompt) + list(running[c[1]].tokens) + [c[2]]), c[1], c[2]))
        cands = cands[:keep + 1]
        length, last = step + 1, step + 1 == max_new
        margins.append(step_margin([c[0] for c in cands], [last or c[2] in eos for c in cands], num_beams, keep))
        cands = cands[:keep]
        full = len(pool) == num_beams and early_stopping is True
        next_running = []
        for rank, (score, slot, token) in enumerate(cands):
            h = Hypothesis(score, running[slot].tokens + (token,), running[slot].slots + (slot,))
            if token in eos or last:
                if rank < num_beams and improvable and not full:
                    pool.append(Hypothesis(divide(score, length, length_penalty), h.tokens, h.slots))
            elif len(next_running) < num_beams:
                next_running.append(h)
        pool = sorted(pool, key=lambda h: -h.score)[:num_beams]
        rank_gaps.append(min((a.score - b.score for a, b in itertools.pairwise(next_running)), default=math.inf))
        if last or not next_running:
            break
        running = next_running
        improvable = improvable and can_improve(pool, num_beams, running[0].score, length, max_new, early_stopping,
                                                length_penalty, divide)
        if not improvable or (early_stopping is True and len(pool) == num_beams):
            break
    best = pool[:num_return]
    return Searched([list(h.tokens) for h in best], [h.score for h in best], [list(h.slots) for h in best],
                    margins, steps, slot_margins(margins, rank_gaps))


def add_float32(a: float, b: float) -> float:
    """a + b rounded to float32, as the library's loop accumulates a beam's log p (both operands float32)."""
    return float(np.float32(a) + np.float32(b))


def normalised_float32(score: float, length: int, length_penalty: float) -> float:
    """`normalised` in float32, as the library's loop divides a float32 score by the Python number
    length ** length_penalty (a scalar cast to the tensor's dtype): a finished hypothesis' score and
    the best running beam's, compared for early stopping. In float64 two sums one float32 ulp apart
    can stay apart where the loop's quotients round to one value (or the reverse), and the rule
    would stop where the loop, right by its own numbers, goes on."""
    return float(np.float32(score) / np.float32(length ** length_penalty))


@dataclass
class Replayed:
    result: Searched
    unscored: int | None = None  # the first step the rule extended a prefix the library never scored


def replay(scored: dict[tuple[int, ...], torch.Tensor], fallback: Callable[[list[list[int]]], torch.Tensor],
           prompt: Sequence[int], returned: Sequence[Sequence[int]] = (), **rule: Any) -> Replayed:
    """`search` (the documented rule) run on the log-probabilities the library's own loop scored
    (`scored`: prefix -> row), accumulated in float32 as the loop does: every candidate score is the
    library's to the bit, so no rounding can move a decision and no tie allowance is needed. A
    prefix the library never scored - the rule extends a beam the library dropped or stopped - is
    scored by `fallback` (the model's uncached forward) and marks the replay `unscored` from that
    step: a correct loop scores every prefix the rule extends. Two candidates that tie to the bit
    (bf16 logits repeat) are both right under the rule, so the replay follows the library's choice
    between equals and nothing else: first a finished hypothesis the library returned (`returned`:
    this row's rows, new tokens up to their end - it entered the pool, so the loop ranked it among
    the num_beams best), then a prefix the library went on to score. Which of the two a tie puts
    first decides whether the pool is full - and with it whether early stopping may end the row:
    measured on llama-target in bf16 with the rows (short-2, short-0) as n3.batch's, where two
    finished hypotheses and the best running beam all score -2.42221 after three tokens (a clean run
    failed the rule there before this tie-break)."""
    seen: list[int] = []

    def table(prefixes: list[list[int]]) -> torch.Tensor:
        rows = [scored.get(tuple(p)) for p in prefixes]
        if any(r is None for r in rows):
            seen.append(len(prefixes[0]) - len(prompt))
            return fallback(prefixes)
        return torch.stack(rows)  # type: ignore[arg-type]

    kept = {tuple(row) for row in returned}

    def rank(tokens: Sequence[int]) -> int:
        return 0 if tuple(tokens[len(prompt):]) in kept else 1 if tuple(tokens) in scored else 2

    result = search(table, prompt, add=add_float32, divide=normalised_float32, prefer=rank, **rule)
    return Replayed(result, seen[0] if seen else None)


def pools(rows: Sequence[Sequence[int]], per: int) -> list[list[list[int]]]:
    """The returned rows of each batch row (`per` each), sorted: what the pool holds, not its order -
    two hypotheses whose normalised scores tie to the bit may come out in either order."""
    return [sorted(list(r) for r in rows[i:i + per]) for i in range(0, len(rows), per)]


def pick_eos(rows: Sequence[Sequence[int]], eos: Sequence[int], start: int | None = None) -> list[int]:
    """The extra eos ids: each row's token at step `start` (default `PICK_FROM`) that is not an eos
    id and new to its row, once each, in row order."""
    step = PICK_FROM if start is None else start
    picked: list[int] = []
    for row in rows:
        if step < len(row) and row[step] not in eos and row[step] not in row[:step] and row[step] not in picked:
            picked.append(int(row[step]))
    return picked


def row_ends(beam_indices: Sequence[Sequence[int]]) -> list[int]:
    """Each returned row's generated length: its beam indices that are not -1."""
    return [sum(1 for i in row if i != -1) for row in beam_indices]


def padded(rows: Sequence[Sequence[int]], fill: int) -> list[list[int]]:
    """Rows padded with `fill` to the longest."""
    width = max((len(r) for r in rows), default=0)
    return [list(r) + [fill] * (width - len(r)) for r in rows]


def with_offset(slots: Sequence[Sequence[int]], batch_row: int, num_beams: int) -> list[list[int]]:
    """Slots as transformers' beam_indices count them: batch row * num_beams + slot."""
    return [[batch_row * num_beams + s for s in row] for row in slots]


# ----------------------------------------------------------------------------------------------
# beam search


def _prompts(zoo: Zoo, case: Case) -> torch.Tensor:
    """The case's prompt ids: [1, T], or the two prompts cut to one length [2, L] (rows=2)."""
    ids = [zoo.prompt_ids(case.model, p) for p in case.param("prompts")]
    if case.param("rows", 1) == 1:
        return ids[0]
    length = min(i.shape[1] for i in ids)
    return torch.cat([i[:, :length] for i in ids])


def eos_ids(value: Any) -> list[int]:
    """A generation config's eos_token_id as a list (None: none)."""
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else [int(value)]


def beam(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    lm = zoo.load(case.model)
    model, n = lm.model, case.new_tokens
    ids = _prompts(zoo, case)
    step = next_logprobs(model)
    num_beams, lp, es = case.param("num_beams"), case.param("length_penalty"), case.param("early_stopping")
    num_return = case.param("num_return_sequences")
    eos = eos_ids(model.generation_config.eos_token_id)
    first = zoo.memo(("beam-pick", case.model, tuple(ids[0].tolist()), num_beams, n, tuple(eos)),
                     lambda: search(step, ids[0].tolist(), num_beams=num_beams, max_new=n, eos=eos,
                                    num_return=num_beams))
    picked = pick_eos(first.rows, eos)
    if not picked:
        obs.skipped("tokens_vs_reference", "tokens", f"no token of the reference's beams can serve as an eos id: "
                                                     f"{first.rows}")
        return obs.stop("no token of the reference's beams can serve as an eos id")
    eos_list = [*eos, *picked]
    pad = model.config.pad_token_id
    settings = dict(num_beams=num_beams, length_penalty=lp, early_stopping=es, num_return_sequences=num_return,
                    eos_token_id=eos_list, max_new_tokens=n, pad_token_id=pad)
    # the extra eos ids come from this run's reference beams: across numerics (fp32 vs bf16) near-tied
    # beams pick other ids, so the setup follows the tokens' tie-flip
    obs.add("setup", {**settings, "prompt_tokens": ids.shape[1], "rows": ids.shape[0]}, follows="tokens")
    got = beam_run(model, ids, settings)
    obs.add("error", got.error)
    if got.error is not None:
        return obs
    expected = [search(step, row.tolist(), num_beams=num_beams, max_new=n, eos=eos_list, length_penalty=lp,
                       early_stopping=es, num_return=num_return) for row in ids]
    margins = [e.margins for e in expected for _ in range(num_return)]
    slot_gaps = [e.rank_margins for e in expected for _ in range(num_return)]
    ends = row_ends(got.beam_indices)
    obs.add("tokens", got.rows, kind="tokens", margins=margins)
    obs.add("pad_fill", [row[end:] for row, end in zip(got.rows, ends, strict=True)], follows="tokens")
    obs.add("sequences_scores", got.scores, kind="tensor", follows="tokens")
    obs.add("beam_indices", got.beam_indices, kind="tokens", margins=slot_gaps, follows="tokens")
    trimmed = [row[:end] for row, end in zip(got.rows, ends, strict=True)]
    obs.reference("tokens_vs_reference", trimmed, [r for e in expected for r in e.rows], kind="tokens",
                  expected_extras={"margins": margins})
    obs.reference("scores_vs_reference", got.scores, [s for e in expected for s in e.scores], kind="tensor",
                  observed_extras={"follows": "tokens_vs_reference"})
    want = padded([s for b, e in enumerate(expected) for s in with_offset(e.slots, b, num_beams)], -1)
    obs.reference("beam_indices_vs_reference", got.beam_indices, want, kind="tokens",
                  observed_extras={"follows": "tokens_vs_reference"}, expected_extras={"margins": slot_gaps})
    replayed = [replay(got.scored, step, row.tolist(), trimmed[b * num_return:(b + 1) * num_return],
                       num_beams=num_beams, max_new=n, eos=eos_list, length_penalty=lp, early_stopping=es,
                       num_return=num_return) for b, row in enumerate(ids)]
    obs.reference("rule_on_own_scores", {"steps": got.steps, "rows": pools(trimmed, num_return)},
                  {"steps": max(r.result.steps for r in replayed), "rows": [sorted(r.result.rows) for r in replayed]},
                  implementations_differ=False)
    obs.reference("scores_from_transitions", got.scores,
                  [normalised(s, max(end, 1), lp) for s, end in zip(got.transition_sums, ends, strict=True)],
                  kind="tensor", implementations_differ=False)
    return obs


# ----------------------------------------------------------------------------------------------
# decoding modes moved out of the library


def mode(zoo: Zoo, case: Case) -> Observation:
    obs = Observation()
    lm = zoo.load(case.model)
    model = lm.model
    ids = zoo.prompt_ids(case.model, case.prompt)
    settings: dict[str, Any] = dict(case.param("settings"))
    if case.param("force_prompt_token"):  # constrained beam search: force the prompt's last token
        settings["force_words_ids"] = [[int(ids[0, -1])]]
    settings.update(max_new_tokens=case.new_tokens, pad_token_id=model.config.pad_token_id)
    got = mode_run(model, ids, settings)
    obs.add("mode", got.mode)
    obs.add("moved_to", got.moved_to)
    outcome = "redirected" if got.custom_generate_requested else "refused" if got.error else "ran"
    obs.add("outcome", outcome)
    obs.add("error", got.error)
    obs.add("custom_generate_requested", got.custom_generate_requested)
    if got.error is None:
        obs.add("tokens", got.tokens, kind="tokens")
    return obs
