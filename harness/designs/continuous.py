"""Continuous batching, per version: several requests of clearly different lengths served at once by
`generate_batch` (paged attention, one packed token stream, each request finishing on its own;
suites/test_continuous.py; table: harness/cases/ `continuous`; the call: harness/subjects/hf_continuous.py).

The oracle is the reference engine (harness/engine/: its model's logits, its processors, its stop
rule), never the library: each request's expected stream is the engine's greedy decode of that prompt
alone. `generate()` of the same request alone is a second library path, shown beside it as a
secondary reference - a bug in code both paths share (the model's forward) moves both, so it never
stands in for the engine. The checks (`check`):

  greedy      three prompts (20, 83 and 19 tokens), greedy, one eos list for all: the model's eos plus
              `early_stop_token`, a token the engine's stream of one request emits early and no other
              request's stream holds - that request must stop there (eos included), the others must not
  sample      the same prompts, sampled (temperature 3, top-k 3, seeded: the fourth token carries mass
              at steps where its logit is well below the third's, so a top-k of k + 1 draws it beyond bf16's
              rounding too - at temperature 1.5 its draws were near-ties only), with the chosen tokens'
              log-probabilities where the version returns them (`return_logprobs`): white-box checks of
              each draw against the engine (below); the draw itself is not checked (one stream per
              request: the sampling suite's statistics judge samplers)
  processors  greedy with suppress_tokens and a repetition penalty: which processors the version says
              it drops (`dropped`, recorded per version - 5.13+ drop RepetitionPenaltyLogitsProcessor,
              transformers #45026 `drop_unsupported_processors`) and the tokens against the engine
              applying every processor the config asks for except those declared dropped - a processor
              dropped without saying so (or applied to the wrong request's context) shows as tokens
  beam        greedy with num_beams=2, a feature the path does not have (transformers #45582: generate()'s
              continuous-batching branch only warns): what the version does with it is the record -
              an error, a warning, or greedy tokens (`beam_outcome`)

A version whose generate_batch fails (4.57 / 5.0 on CPU: the cache sizing reads a GPU's memory;
5.13 / 5.14 without psutil: "more than available memory 0") records that error - a per-version
finding -, fails `served_as_engine` unless the failure is a declared known one (both of these are),
and the references that needed the served tokens are `not checked` with it.

  setup          exact   prompts, their lengths, new tokens, the eos list (where each option went beside it,
                         never compared: the harness's own adaptation to the version's API)
  error          exact   the call's exception (type, first line), or None
  request_errors exact   per request: the library's error for it (a failed generation loop), or None - an
                         outcome per request: one served now that failed before is fixed, the reverse broken
  tokens         tokens  per request: the new tokens, with the engine's margins after that request's
                         own served prefix (teacher-forced: at any step where two served streams part,
                         their shared prefix's margin)
  dropped        exact   processors: the processor classes the version's warnings say it drops
  warnings       exact   the continuous-batching logger's warnings; presentation (a reworded one is `changed`)
  beam_outcome   exact   beam: "raised" / "ignored: greedy tokens" (those of the same generate_batch without
                         num_beams: same path, numerics and batch) / "other tokens", and whether it warned
 references, computed in the run:
  served_as_engine   exact   greedy, sample, processors: per request "served", or what failed (the call's
                             raise, the request's error) - its oracle is the engine serving the same
                             prompts in this run (harness/designs/served.py): a raise fails a first run
                             too, unless it is a declared known upstream failure (its releases, its
                             precondition here, its message), then listed as `known_upstream_failure`
  tokens_as_engine   tokens  greedy, processors: per request, the engine's stream (its processors, its
                             stop rule: the eos list, or max_new_tokens); tie-aware (a near-tie flips
                             across implementations: paged attention vs the engine's)
  steps_as_engine    tokens  greedy, processors: each served token against the engine's choice after that
                             request's own served prefix (teacher-forced: harness/engine/teacher_forced.py),
                             each step judged alone by the tie rule, so a near-tie early in a row does not
                             end the check - in bf16, where tokens_as_engine's first divergence is often a
                             near-tie, a token from another request or a processor dropped is still seen
  tokens_as_generate tokens  greedy: per request, generate() of the prompt alone, cut at the same eos
                             list (secondary; tie-aware with both sides' margins: generate()'s own, and
                             beside the served tokens the engine's after the served prefix - teacher-
                             forced, so a margin at the first divergence is the shared prefix's, never
                             that of the engine's own stream once it went another way)
  served_together    exact   greedy: the requests were decoded on one shared schedule - at most the
                             longest row's length in forwards plus one prefill per request (one at a
                             time, or one request alone and the rest together, takes more); its oracle
                             is that arithmetic on the served rows, so it holds on a model the engine
                             does not implement too (the counts and the bound ride along)
  in_support         exact   sample: per request, the steps whose drawn token lies outside the engine's
                             kept set (top-k of the engine's logits after the drawn prefix) - expected
                             none; detects a dropped or mis-sized top-k only on a step that draws
                             outside it (under no filter, each step does so with the mass outside the
                             top 3 - a few % here: a weak check, the next one is the strong one); in
                             bf16 a draw within the step's rounding of the kept set's lowest logit is a
                             boundary tie (continuous_requests.py `Slack`: the tie rule's per-step
                             epsilon, not the fixed 0.75 that let a top-k of k + 1 through)
  logprobs_as_engine tensor  sample: each drawn token's log-probability as the library returned it
                             against log_softmax of the engine's processed logits at that token (fp32
                             tolerance, the dtype's rounding rule otherwise): detects with certainty a
                             temperature or top-k dropped or taken from another request, a request's
                             scores read from another request's row; `not checked` where the version
                             returns no log-probabilities, and outside fp32 (the engine is an fp32
                             oracle; a log-probability's rounding is not bounded by the dtype's rule)
  draws_as_engine    exact   sample: the draws themselves against the engine's processed distributions
                             after each drawn prefix - the log-likelihood z-test of harness/engine/draws.py
                             at the run's per-test alpha, fp32 and bf16 (a rounding of the logits moves
                             log p far less than the shift it detects) joined with the count of draws
                             that are their step's mode (all-mode: p = prod of the modes' probabilities);
                             its key names z, the shift detected at power 0.8, the modes drawn and
                             expected: a sampler that takes the argmax and reports that token's true
                             log-probability passes the two checks above and fails this one
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from harness.designs import continuous_requests
from harness.designs.continuous_requests import (
    draws_as_engine,
    outside_support,
    step_logprobs,
    support_slack,
)
from harness.designs.served import served_as_engine
from harness.engine import pipeline
from harness.engine.decode import top2_margin, top2_scale
from harness.engine.processors import Processor, apply
from harness.engine.teacher_forced import Forced, teacher_forced
from harness.schema import Case, Observation
from harness.settings.config import Thresholds
from harness.subjects import engine
from harness.subjects.hf_continuous import Served, run_batch

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

EOS = engine.EOS
SAMPLING = {"temperature": 3.0, "top_k": 3}
PROCESSORS = {"suppress_tokens": [301], "repetition_penalty": 1.3}
DROPPED = re.compile(r"Processor (\w+) isn't supported by CB\. Dropping it")
# the library's class of a processor -> the engine's name of it (harness/engine/processors.py APPLY)
ENGINE_NAME = {"RepetitionPenaltyLogitsProcessor": "repetition_penalty", "SuppressTokensLogitsProcessor": "suppress_tokens",
               "NoRepeatNGramLogitsProcessor": "no_repeat_ngram", "MinNewTokensLengthLogitsProcessor": "min_new_tokens",
               "MinLengthLogitsProcessor": "min_length", "TemperatureLogitsWarper": "temperature",
               "TopKLogitsWarper": "top_k", "TopPLogitsWarper": "top_p"}


# ----------------------------------------------------------------------------------------------
# pure logic


def early_stop_token(streams: Sequence[Sequence[int]], min_step: int = 2) -> tuple[int, int, int] | None:
    """(token, request, step): the first position, in step order from `min_step` (then request order),
    whose token occurs nowhere else in its own stream before it and in no other request's stream - an
    eos there stops that request at that step and no other. None when there is none."""
    longest = max((len(s) for s in streams), default=0)
    for step in range(min_step, longest):
        for r, stream in enumerate(streams):
            if step >= len(stream):
                continue
            t = stream[step]
            if t in stream[:step] or any(t in other for i, other in enumerate(streams) if i != r):
                continue
            return int(t), r, step
    return None


def stopped(stream: Sequence[int], eos: Sequence[int]) -> list[int]:
    """The stream as a request with end tokens `eos` emits it: up to and including the first end token."""
    for i, t in enumerate(stream):
        if t in eos:
            return list(stream[:i + 1])
    return list(stream)


def dropped_processors(warnings: Sequence[str]) -> list[str]:
    """The processor classes the warnings say are dropped ("Processor X isn't supported by CB.
    Dropping it."), sorted, each once."""
    return sorted({m.group(1) for w in warnings for m in DROPPED.finditer(w)})


def kept_chain(chain: Sequence[Processor], dropped: Sequence[str]) -> list[Processor]:
    """The engine's processors less those the library declares dropped (by `ENGINE_NAME`)."""
    gone = {ENGINE_NAME.get(name, name) for name in dropped}
    return [p for p in chain if p.name not in gone]


def processed_greedy(logits_of: Callable[[list[int]], torch.Tensor], prompt: Sequence[int], new_tokens: int,
                     chain: Sequence[Processor], eos: Sequence[int]) -> tuple[list[int], list[float], list[float]]:
    """Greedy decoding by the engine: at each step the argmax of `chain` applied to the logits of the
    last position (`logits_of(tokens)` -> [T, V]) after the prompt and the tokens so far; stops after
    an end token or `new_tokens` tokens. Returns (tokens, top-2 margins, top-2 scales) of the
    processed logits."""
    tokens, margins, scales = [], [], []
    for _ in range(new_tokens):
        context = [*prompt, *tokens]
        z = apply(logits_of(context)[-1], context, chain)
        tokens.append(int(torch.argmax(z)))
        margins.append(top2_margin(z))
        scales.append(top2_scale(z))
        if tokens[-1] in eos:
            break
    return tokens, margins, scales


def beam_outcome(served: Served, greedy: Sequence[Sequence[int]]) -> str:
    """What num_beams=2 did: raised, or its tokens are those of the same call without num_beams
    (`greedy`: ignored) or other ones."""
    if served.error is not None:
        return f"raised {served.error['type']}"
    if any(e is not None for e in served.request_errors):
        return "a request failed"
    return "ignored: greedy tokens" if [list(r) for r in served.rows] == [list(g) for g in greedy] else "other tokens"


# ----------------------------------------------------------------------------------------------
# observation


def _engine_stream(zoo: Zoo, case: Case, prompt: str, ids: list[int]):
    """The engine's greedy decode of one prompt alone (model eos only), through the answer cache."""
    return engine.decode_cached(zoo, Case(case.model, prompt=prompt, new_tokens=case.new_tokens), ids)


def _logits_of(zoo: Zoo, name: str) -> Callable[[list[int]], torch.Tensor]:
    return lambda tokens: engine.logits_cached(zoo, name, tokens)


def _failed(obs: Observation, served: Served, names: Sequence[tuple[str, str]]) -> bool:
    """A call or any request that failed: every reference `not checked` with the library's reason."""
    why = (f"generate_batch raised {served.error['type']}: {served.error['message']}" if served.error is not None
           else next((f"a request failed: {e}" for e in served.request_errors if e is not None), ""))
    for name, kind in names if why else ():
        obs.skipped(name, kind, why, category="not-checked")
    return bool(why)


def observe(zoo: Zoo, case: Case, thresholds: Thresholds, alpha: float = 0.01) -> Observation:
    """The case's fields; `alpha`: the run's per-test level (draws_as_engine's)."""
    if case.param("check") == "requests":  # the manager, each request with its own settings, streamed
        return continuous_requests.observe(zoo, case, thresholds, alpha)
    obs = Observation()
    check, names = case.param("check"), list(case.param("prompts"))
    lm = zoo.load(case.model)
    prompts = [zoo.prompt_ids(case.model, p)[0].tolist() for p in names]
    gap = zoo.oracle.gap(case.model)
    streams = None if gap else [_engine_stream(zoo, case, n, p) for n, p in zip(names, prompts, strict=True)]
    eos: list[int] = [EOS]
    if check == "greedy" and streams is not None:
        early = early_stop_token([s.tokens for s in streams])
        eos += [early[0]] if early else []
    setup = {"prompts": names, "prompt_tokens": [len(p) for p in prompts], "new_tokens": case.new_tokens,
             "eos_token_id": eos}
    kwargs: dict[str, Any] = {"eos_token_id": eos if len(eos) > 1 else eos[0], "pad_token_id": 0}
    if check == "sample":
        kwargs.update(sampling=SAMPLING, logprobs=True, seed=case.seed)
        setup["sampling"] = SAMPLING
    elif check == "processors":
        kwargs["extra"] = PROCESSORS
        setup["processors"] = PROCESSORS
    elif check == "beam":
        kwargs["extra"] = {"num_beams": 2}
    served = zoo.memo(("continuous", case), lambda: run_batch(lm.model, prompts, case.new_tokens, **kwargs))
    # where each option went follows the version's API (block_size -> page_size in 5.17): shown, never compared
    obs.add("setup", setup, show={"placed": served.setup.get("placed"),
                                  **({"left_attention": served.setup["left_attention"]} if "left_attention" in served.setup else {})})
    obs.add("error", served.error)
    obs.add("warnings", served.warnings, presentation=True)
    if check != "beam":  # num_beams is a feature the path lacks: a raise there is an answer (beam_outcome)
        served_as_engine(obs, served, len(prompts))
    if served.error is not None:
        _failed(obs, served, _references(check))
        return obs
    obs.add("request_errors", served.request_errors, outcome="each")
    if any(e is not None for e in served.request_errors):  # the generation loop failed: nothing to judge
        obs.add("tokens", served.rows, kind="tokens")
        _failed(obs, served, _references(check))
        return obs
    if check == "processors":
        obs.add("dropped", dropped_processors(served.warnings))
    if check == "greedy":
        served_together(obs, served)
    if gap:  # no engine oracle for this model: generate() alone is still another path to compare with
        solos = [_solo(zoo, case, n, eos) for n in names] if check == "greedy" else []
        obs.add("tokens", served.rows, kind="tokens",
                **({"margins": [s[1] for s in solos], "scales": [s[2] for s in solos]} if solos else {}))
        for name, kind in _references(check):
            if name == "tokens_as_generate" and solos:
                _as_generate(obs, served, solos)
            elif name != "served_together":
                obs.skipped(name, kind, gap)
        return obs
    if check == "beam":  # against the same call without num_beams: same path, same numerics, same batch
        greedy = zoo.memo(("continuous-greedy", case.model, tuple(names), case.new_tokens),
                          lambda: run_batch(lm.model, prompts, case.new_tokens, eos_token_id=EOS, pad_token_id=0))
        obs.add("tokens", served.rows, kind="tokens", margins=[s.margins for s in streams],
                scales=[s.scales for s in streams])
        obs.add("beam_outcome", {"outcome": beam_outcome(served, greedy.rows), "warned": bool(served.warnings)},
                follows="tokens")
        return obs
    if check == "sample":
        return _sampled(zoo, case, obs, served, prompts, thresholds, alpha)
    chain: list[Processor] = []
    if check == "processors":
        chain = kept_chain(pipeline.build({"do_sample": False, **PROCESSORS, "eos_token_id": eos}, prompts[0]),
                           dropped_processors(served.warnings))
        expected = [processed_greedy(_logits_of(zoo, case.model), p, case.new_tokens, chain, eos) for p in prompts]
    else:
        expected = [(stopped(s.tokens, eos), s.margins, s.scales) for s in streams]
    rows, margins, scales = [e[0] for e in expected], [e[1] for e in expected], [e[2] for e in expected]
    # the engine after each request's own served prefix (teacher-forced): at the first divergence of two
    # served streams (this run's and the record's, or generate()'s) their shared prefix's margin - the
    # engine's own stream's margins hold that only up to where it went another way
    forced = [teacher_forced(engine.logits_cached(zoo, case.model, [*p, *row]), len(p), row, chain, [*p, *row])
              for p, row in zip(prompts, served.rows, strict=True)]
    served_margins = {"margins": [f.gaps for f in forced], "scales": [f.scales for f in forced]}
    obs.add("tokens", served.rows, kind="tokens", **served_margins, oracle="tokens_as_engine")
    obs.reference("tokens_as_engine", served.rows, rows, kind="tokens", expected_extras={"margins": margins,
                                                                                         "scales": scales})
    steps_as_engine(obs, served.rows, forced)
    if check == "greedy":
        _as_generate(obs, served, [_solo(zoo, case, n, eos) for n in names], served_margins)
    return obs


def served_together(obs: Observation, served: Served) -> None:
    """served_together: the requests were decoded together, on the shared schedule. Its oracle is
    arithmetic on the served rows alone: submitted at once, the requests advance one token per shared
    forward, so the whole call takes at most the longest row's length (one forward per new token; the
    prefill's gives the first) plus one prefill forward per request - a bound the version's prefill
    chunking or padding cannot pass for rows this short. Serving one request alone and the others
    together (24 forwards for rows 12 / 7 / 12 against 12 served together; transformers' clean 5.24.0
    run makes exactly 12) passes "fewer than one at a time" (31) but not this bound (15). The counted
    forwards, the bound and the one-at-a-time sum ride along. Deterministic where a wall clock on a
    background thread is not (the latency suite times the call)."""
    alone = sum(len(r) for r in served.rows)
    bound = max((len(r) for r in served.rows), default=0) + len(served.rows)
    if sum(1 for r in served.rows if len(r) > 1) < 2:
        obs.skipped("served_together", "exact", "fewer than two requests decoded more than one token: nothing "
                    "they could share")
    elif not served.forwards:
        obs.skipped("served_together", "exact", "the version's generate_batch called no forward of the model the "
                    "harness counts (model.forward)", category="not-checked")
    else:
        obs.reference("served_together", {"within the shared schedule (longest row + one prefill per request)":
                                          served.forwards <= bound},
                      {"within the shared schedule (longest row + one prefill per request)": True},
                      implementations_differ=False,
                      observed_extras={"forwards": served.forwards, "bound": bound, "one_at_a_time": alone})


def steps_as_engine(obs: Observation, rows: Sequence[Sequence[int]], forced: Sequence[Forced]) -> None:
    """steps_as_engine: every served token against the engine's argmax after that row's own prefix
    (`forced`: harness/engine/teacher_forced.py), one single-token row per (request, step) so that each
    step is judged by the tie rule on its own: `tokens_as_engine` ends at a row's first near-tie, this
    does not."""
    engine.forced_reference(obs, "steps_as_engine", [t for row in rows for t in row], Forced.join(forced),
                            [f"request {r} step {i}" for r, row in enumerate(rows) for i in range(len(row))])


def _as_generate(obs: Observation, served: Served, solos: list[tuple[list[int], list[float], list[float]]],
                 observed_extras: dict[str, Any] | None = None) -> None:
    """tokens_as_generate: each request's tokens against generate() of its prompt alone (`_solo`),
    tie-aware on generate()'s own margins (and the engine's beside the served side, where it ran)."""
    obs.reference("tokens_as_generate", served.rows, [s[0] for s in solos], kind="tokens",
                  observed_extras=observed_extras,
                  expected_extras={"margins": [s[1] for s in solos], "scales": [s[2] for s in solos]})


def _references(check: str) -> tuple[tuple[str, str], ...]:
    return {"greedy": (("tokens_as_engine", "tokens"), ("steps_as_engine", "tokens"), ("tokens_as_generate", "tokens"),
                       ("served_together", "exact")),
            "processors": (("tokens_as_engine", "tokens"), ("steps_as_engine", "tokens")),
            "sample": (("in_support", "exact"), ("draws_as_engine", "exact"), ("logprobs_as_engine", "tensor")),
            "beam": ()}[check]


def _solo(zoo: Zoo, case: Case, prompt: str, eos: list[int]) -> tuple[list[int], list[float], list[float]]:
    """generate() of one prompt alone, greedy (the model's eos), cut by `stopped` at the case's eos
    list - greedy is deterministic, so the cut stream is the one an eos list would stop; (tokens,
    margins, scales) of generate()'s own scores."""
    got = zoo.generate(Case(case.model, prompt=prompt, new_tokens=case.new_tokens))
    tokens = stopped(got.tokens, eos)
    return tokens, got.margins[:len(tokens)], got.scales[:len(tokens)]


def _sampled(zoo: Zoo, case: Case, obs: Observation, served: Served, prompts: list[list[int]],
             thresholds: Thresholds, alpha: float) -> Observation:
    obs.add("tokens", served.rows, kind="tokens", seeded_by="draws_as_engine")
    chain = pipeline.build({"do_sample": True, **SAMPLING}, prompts[0])
    outside, ours, theirs, steps, draws = [], [], [], [], []
    for p, drawn, logprobs in zip(prompts, served.rows, served.logprobs, strict=True):
        context = [*p, *drawn]
        logits = engine.logits_cached(zoo, case.model, context)
        outside.append(outside_support(logits, len(p), drawn, chain, context, support_slack(zoo.checkpoints.dtype_of(case.model), thresholds)))
        row = step_logprobs(logits, len(p), drawn, chain, context)
        steps += row
        draws += list(drawn)
        if logprobs:  # the engine's log-probability of each drawn token: the same distributions, read at it
            ours.append([float(lp[t]) for lp, t in zip(row, drawn, strict=True)][:len(logprobs)])
            theirs.append(logprobs[:len(ours[-1])])
    obs.reference("in_support", outside, [[] for _ in prompts], implementations_differ=False)
    draws_as_engine(obs, steps, draws, alpha)
    if zoo.checkpoints.dtype_of(case.model) != "fp32":
        obs.skipped("logprobs_as_engine", "tensor", f"the model runs in {zoo.checkpoints.dtype_of(case.model)}, the engine in fp32: "
                    "a log-probability's rounding follows the logits' magnitude over the temperature (|z| u / T), not its "
                    "own, so the dtype's per-element rule does not bound it - the fp32 run checks it",
                    category="not-checked")
        return obs
    if len(theirs) != len(prompts):
        obs.skipped("logprobs_as_engine", "tensor", "this version's generate_batch returns no log-probabilities "
                    "(no return_logprobs): the draws' probabilities cannot be read", category="not-checked")
        return obs
    obs.reference("logprobs_as_engine", [x for row in theirs for x in row], [x for row in ours for x in row],
                  kind="tensor")
    return obs
