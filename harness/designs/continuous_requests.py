"""Continuous batching's manager, per version: requests that each ask for their own settings, streamed -
what `transformers serve` runs (`init_continuous_batching`, `add_request(..., streaming=True)`, the
results as they come; suites/test_continuous.py, case `<model>.cb.requests`; the call:
harness/subjects/hf_continuous.py `run_requests`).

The GenerationConfig samples (temperature 1.5, top-k 3: the processors exist, as the per-request
processors of transformers #45026 need) and the ContinuousBatchingConfig asks for per-request
processors; three requests go in at once, each with its own settings:

  greedy    short-0, top_k=1 (greedy by its own setting), 12 new tokens, the config's eos
  sampled   long-0, the config's sampling, 6 new tokens
  own eos   short-1, top_k=1, 20 new tokens, its own eos list: the model's eos plus a token the engine's
            stream of this request emits early and the greedy request's stream never does

The oracles are the reference engine (its logits, its processors with each request's own settings)
and the stop and stream rules, never the library:

  setup          exact   the requests (prompt, max_new_tokens, eos, settings) and the config's sampling
  takes          capability  which per-request settings the version's add_request takes (max_new_tokens,
                         eos_token_id, streaming, processor settings): one taken now is feature-added, one
                         no longer taken feature-removed (a setting taken but without effect is judged by
                         the references below, as a regression)
  error / request_errors / warnings   as the other continuous checks
  tokens         tokens  the greedy requests' tokens (greedy, own eos), with the engine's teacher-forced margins
  drawn          exact   the sampled request's tokens (seeded: logprobs_as_engine and in_support judge them)
 references, computed in the run:
  served_as_engine  exact   per request "served", or what failed (the manager's raise, the request's error):
                            the engine serves the same requests in this run (harness/designs/served.py) -
                            a raise fails a first run too, unless a declared known upstream failure
  tokens_as_engine  tokens  greedy, own eos: the engine's greedy stream of that prompt alone, cut at the
                            request's own max_new_tokens and eos list (tie-aware) - a per-request top_k
                            ignored (the config's top-k 3 at temperature 1.5 instead) or another request's
                            eos list shows here
  steps_as_engine   tokens  each of their tokens against the engine's choice after the request's own prefix
  lengths_as_asked  exact   every request ends where its own settings say (the stop rule on its own tokens:
                            at its first end token, else after exactly its max_new_tokens)
  in_support        exact   the sampled request's steps drawn outside the engine's kept set (top-3 after the
                            drawn prefix) - expected none; outside fp32 a token within the dtype's tie epsilon
                            of the kept set's lowest logit is a boundary tie, not outside
  draws_as_engine   exact   the sampled request's draws as draws against the engine's distributions (as the
                            batch case's: harness/engine/draws.py at the run's per-test alpha; 6 draws, so
                            its key states the large shift it can see - the batch case is the strong one)
  logprobs_as_engine tensor every request's returned log-probabilities against log_softmax of the engine's
                            logits processed with that request's own settings (top_k=1: 0 exactly; the
                            sampled one: temperature 1.5, top-3) - a setting taken from another request, or
                            the config's where the request set its own, is seen at every step; fp32 only,
                            `not checked` where the version returns none
  stream_as_result  exact   per request, each streamed update extends the one before by at most one token
                            (each token handed out in the step that decodes it) and the last equals the final
                            result (the streaming contract; `not checked` where add_request takes no streaming)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from harness.checking.compare import tie_eps_at
from harness.checking.policy import Policy
from harness.checking.rounding import LOW_PRECISION
from harness.designs.served import served_as_engine
from harness.engine import pipeline
from harness.engine.draws import draw_fit
from harness.engine.processors import Processor, apply
from harness.engine.teacher_forced import Forced, teacher_forced
from harness.schema import Case, Observation
from harness.settings.config import Thresholds
from harness.subjects import engine
from harness.subjects.hf_continuous import Request, Streamed, run_requests

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo

EOS = engine.EOS
SAMPLING = {"temperature": 1.5, "top_k": 3}  # the config's: what a request without its own settings draws with
GREEDY = {"top_k": 1}  # a request's own setting that makes it greedy whatever the temperature
# (prompt, max_new_tokens, own settings, own eos): the third request's eos list is filled in the run
REQUESTS = (("short-0", 12, GREEDY, False), ("long-0", 6, {}, False), ("short-1", 20, GREEDY, True))
NEEDS = {"tokens_as_engine": ("logit_processor_kwargs", "eos_token_id"),
         "steps_as_engine": ("logit_processor_kwargs",),
         "lengths_as_asked": ("max_new_tokens", "eos_token_id"),
         "logprobs_as_engine": ("logit_processor_kwargs",), "stream_as_result": ("streaming",)}
REFERENCES = (("tokens_as_engine", "tokens"), ("steps_as_engine", "tokens"), ("lengths_as_asked", "exact"),
              ("in_support", "exact"), ("draws_as_engine", "exact"), ("logprobs_as_engine", "tensor"),
              ("stream_as_result", "exact"))


# ----------------------------------------------------------------------------------------------
# pure logic: the rules the references hold the library to


def own_stop_token(stream: Sequence[int], others: Sequence[Sequence[int]], min_step: int = 2) -> int | None:
    """The first token of `stream` from `min_step` on that occurs neither earlier in it nor in any of
    `others`: an eos there stops this request at that step, and would stop no other."""
    for step in range(min_step, len(stream)):
        t = stream[step]
        if t not in stream[:step] and not any(t in o for o in others):
            return int(t)
    return None


def expected_end(row: Sequence[int], max_new_tokens: int, eos: Sequence[int]) -> int:
    """How many tokens a request with these settings emits, given its own tokens: up to and including
    its first end token, else exactly max_new_tokens (a row shorter than that without an end token
    stopped early; one longer ran past its limit)."""
    for i, t in enumerate(row[:max_new_tokens]):
        if t in eos:
            return i + 1
    return max_new_tokens


def stream_violations(updates: Sequence[Sequence[int]], final: Sequence[int]) -> list[str]:
    """Where a request's streamed updates break the streaming contract: an update that does not extend
    the one before (tokens taken back or changed), one that hands out more than one new token (a
    streamed request gets each token in the step that decodes it - one per step without speculation -,
    so a request held back and handed out whole, or in chunks, is seen here: its count of updates
    falls below its count of tokens), or a last update that is not the final result. An update adding
    no token (a status change) is allowed."""
    out = []
    for i in range(len(updates)):
        prev, cur = (updates[i - 1] if i else []), updates[i]
        if len(cur) < len(prev) or list(cur[:len(prev)]) != list(prev):
            out.append(f"update {i} does not extend update {i - 1}")
        elif len(cur) - len(prev) > 1:
            out.append(f"update {i} hands out {len(cur) - len(prev)} new tokens at once (one per decoded token "
                       f"expected; {len(updates)} updates for {len(final)} tokens)")
    if not updates or list(updates[-1]) != list(final):
        out.append("the last update is not the final result")
    return out


def outside_support(logits: torch.Tensor, prompt_length: int, drawn: Sequence[int], chain: Sequence[Processor],
                    context: Sequence[int], slack: Slack | None = None) -> list[int]:
    """The steps whose drawn token the engine's processors filter out (-inf) after the drawn prefix:
    `logits` [T, V] over prompt + drawn, step i read at position prompt_length - 1 + i. A token filtered
    out whose logit is within the step's `slack` of the lowest logit the filter kept is at the boundary
    of the kept set, not outside it: the model's own rounding (bf16) may order the two otherwise."""
    out = []
    for i, t in enumerate(drawn):
        ctx = list(context[:prompt_length + i])
        x = logits[prompt_length - 1 + i]
        z = apply(x, ctx, chain)
        if not torch.isfinite(z[t]):
            kept = torch.isfinite(z)
            lowest = float(x[kept].min()) if kept.any() else float("inf")
            if not kept.any() or lowest - float(x[t]) > (slack.at(x, lowest, float(x[t])) if slack else 0.0):
                out.append(i)
    return out


def draws_as_engine(obs: Observation, steps: Sequence[torch.Tensor], drawn: Sequence[int], alpha: float) -> None:
    """draws_as_engine: the served draws against the engine's distributions (harness/engine/draws.py's
    log-likelihood z-test at the run's per-test `alpha`); `not checked` where no draw could tell
    (every step had one token left, or none was drawn inside the support)."""
    fit = draw_fit(steps, drawn, alpha)
    if fit.n == 0 or fit.detectable == float("inf"):
        obs.skipped("draws_as_engine", "exact", f"no draw could tell: {fit.n} draws inside the support, every step "
                    "with one token left", category="not-checked")
        return
    claim = (f"the draws fit the engine's distributions (alpha {alpha:.2g}: log-likelihood z = {fit.z:.2f}, detects "
             f"{fit.detectable:.3f} nats per draw at power 0.8; {fit.modes} of {fit.n} draws the mode, "
             f"{fit.modes_expected:.1f} expected, all {fit.n} would have p = {fit.all_modes:.2g})")
    obs.reference("draws_as_engine", {claim: fit.fits(alpha)}, {claim: True}, implementations_differ=False,
                  observed_extras=fit.as_data())


@dataclass(frozen=True)
class Slack:
    """How far below the kept set's lowest logit a drawn token may lie and still be a boundary tie, per
    step: 0 in fp32 (the library's logits and the engine's agree to ~1e-6 there); in bf16 / fp16 the tie
    rule of harness/checking/compare.py `tie_eps_at` - the per-element rounding rule - applied to the two
    logits whose order decides:

        slack = min(tie_eps_<dtype>, k * u * (|x_low| + |x_t| + 2 rms(x)))

    x_low the lowest kept logit, x_t the drawn token's, u the dtype's unit roundoff, k the case's
    tie_rounding_ulps (witness-scaled for its model). The fixed tie_eps_<dtype> alone (0.75 in bf16) let a
    top-k built k + 1 through on llama-target, whose third and fourth logits often lie that close."""

    dtype: str
    thresholds: Thresholds

    @property
    def fixed(self) -> float:
        """The cap: the dtype's fixed tie epsilon (0: fp32 has no boundary ties)."""
        return self.thresholds.tie_eps(self.dtype) if self.dtype in LOW_PRECISION else 0.0

    def at(self, x: torch.Tensor, low: float, drawn: float) -> float:
        if self.dtype not in LOW_PRECISION:
            return 0.0
        rms = float(x.float().pow(2).mean().sqrt())
        return tie_eps_at(Policy(thresholds=self.thresholds), self.dtype, [abs(low) + abs(drawn) + 2 * rms])


def support_slack(dtype: str, thresholds: Thresholds) -> Slack:
    """The case's `Slack` for its model's dtype (none in fp32)."""
    return Slack(dtype, thresholds)


def step_logprobs(logits: torch.Tensor, prompt_length: int, drawn: Sequence[int], chain: Sequence[Processor],
                  context: Sequence[int]) -> list[torch.Tensor]:
    """Per step: log_softmax of the engine's processed logits after the drawn prefix (-inf off the
    kept set) - the distribution each draw came from, as the engine's processors make it."""
    return [torch.log_softmax(apply(logits[prompt_length - 1 + i].float(), list(context[:prompt_length + i]), chain),
                              dim=-1) for i in range(len(drawn))]


def engine_logprobs(logits: torch.Tensor, prompt_length: int, drawn: Sequence[int], chain: Sequence[Processor],
                    context: Sequence[int]) -> list[float]:
    """Per step: log_softmax of the engine's processed logits at the drawn token."""
    return [float(lp[t]) for lp, t in zip(step_logprobs(logits, prompt_length, drawn, chain, context), drawn, strict=True)]



# ----------------------------------------------------------------------------------------------
# observation


def _chain(settings: dict[str, Any], prompt: list[int]) -> list:
    """The engine's processors for a request: the config's sampling with the request's own settings over it."""
    return pipeline.build({"do_sample": True, **SAMPLING, **settings}, prompt)


def observe(zoo: Zoo, case: Case, thresholds: Thresholds, alpha: float = 0.01) -> Observation:
    obs = Observation()
    lm = zoo.load(case.model)
    prompts = [zoo.prompt_ids(case.model, p)[0].tolist() for p, *_ in REQUESTS]
    streams = [engine.decode_cached(zoo, Case(case.model, prompt=p, new_tokens=n), ids)
               for (p, n, _, _), ids in zip(REQUESTS, prompts, strict=True)]
    early = own_stop_token(streams[2].tokens, [streams[0].tokens])
    eos = [[EOS], [EOS], [EOS] + ([early] if early is not None else [])]
    requests = [Request(ids, n, e if own else None, dict(settings))
                for (_, n, settings, own), ids, e in zip(REQUESTS, prompts, eos, strict=True)]
    served: Streamed = zoo.memo(("continuous-requests", case), lambda: run_requests(
        lm.model, requests, sampling=SAMPLING, eos_token_id=EOS, pad_token_id=0, seed=case.seed or 0))
    obs.add("setup", {"requests": [{"prompt": p, "tokens": len(ids), "max_new_tokens": n, "settings": s,
                                    "eos_token_id": e if own else "the config's"}
                                   for (p, n, s, own), ids, e in zip(REQUESTS, prompts, eos, strict=True)],
                      "sampling": SAMPLING, "eos_token_id": EOS},
            show={"placed": served.setup.get("placed"),
                  **({"left_attention": served.setup["left_attention"]} if "left_attention" in served.setup else {})})
    obs.add("takes", served.took, "capability")
    obs.add("error", served.error)
    obs.add("warnings", served.warnings, presentation=True)
    served_as_engine(obs, served, len(requests))
    why = (f"the manager raised {served.error['type']}: {served.error['message']}" if served.error is not None
           else next((f"a request failed: {e}" for e in served.request_errors if e is not None), ""))
    if served.error is None:
        obs.add("request_errors", served.request_errors, outcome="each")
    if why:
        for name, kind in REFERENCES:
            obs.skipped(name, kind, why, category="not-checked")
        return obs
    greedy = (0, 2)
    rows = [served.rows[i] for i in greedy]
    forced = [teacher_forced(engine.logits_cached(zoo, case.model, [*prompts[i], *served.rows[i]]), len(prompts[i]),
                             served.rows[i]) for i in greedy]
    obs.add("tokens", rows, kind="tokens", margins=[f.gaps for f in forced], scales=[f.scales for f in forced],
            oracle="tokens_as_engine")
    obs.add("drawn", served.rows[1], seeded_by="draws_as_engine")
    if zoo.oracle.gap(case.model):
        for name, kind in REFERENCES:
            obs.skipped(name, kind, zoo.oracle.gap(case.model))
        return obs
    missing = {name: [s for s in needs if not served.took.get(s)] for name, needs in NEEDS.items()}

    def lacks(name: str, kind: str) -> bool:
        if missing.get(name):
            obs.skipped(name, kind, f"this version's add_request takes no {', '.join(missing[name])}: the requests ran "
                        "on the config's", category="not-checked")
        return bool(missing.get(name))

    if not lacks("tokens_as_engine", "tokens"):
        expected = [_cut(streams[i].tokens, REQUESTS[i][1], eos[i]) for i in greedy]
        obs.reference("tokens_as_engine", rows, expected, kind="tokens",
                      expected_extras={"margins": [streams[i].margins[:len(e)] for i, e in zip(greedy, expected, strict=True)],
                                       "scales": [streams[i].scales[:len(e)] for i, e in zip(greedy, expected, strict=True)]})
    if not lacks("steps_as_engine", "tokens"):
        engine.forced_reference(obs, "steps_as_engine", [t for r in rows for t in r],
                                Forced.join(forced),
                                [f"request {r} step {i}" for r, row in zip(greedy, rows, strict=True) for i in range(len(row))])
    if not lacks("lengths_as_asked", "exact"):
        obs.reference("lengths_as_asked", [len(r) for r in served.rows],
                      [expected_end(r, n, e) for r, (_, n, _, _), e in zip(served.rows, REQUESTS, eos, strict=True)],
                      implementations_differ=False)
    _sampling_references(zoo, case, obs, served, prompts, lacks, thresholds, alpha)
    if not lacks("stream_as_result", "exact"):
        obs.reference("stream_as_result", [stream_violations(u, r) for u, r in zip(served.updates, served.rows, strict=True)],
                      [[] for _ in served.rows], implementations_differ=False)
    return obs


def _cut(stream: Sequence[int], max_new_tokens: int, eos: Sequence[int]) -> list[int]:
    """The engine's stream as a request with these settings emits it."""
    out = list(stream[:max_new_tokens])
    return out[:expected_end(out, max_new_tokens, eos)]


def _sampling_references(zoo: Zoo, case: Case, obs: Observation, served: Streamed, prompts: list[list[int]],
                         lacks: Any, thresholds: Thresholds, alpha: float) -> None:
    p, drawn = prompts[1], served.rows[1]
    context = [*p, *drawn]
    logits = engine.logits_cached(zoo, case.model, context)
    outside = outside_support(logits, len(p), drawn, _chain({}, p), context,
                              support_slack(zoo.checkpoints.dtype_of(case.model), thresholds))
    obs.reference("in_support", outside, [], implementations_differ=False)
    draws_as_engine(obs, step_logprobs(logits, len(p), drawn, _chain({}, p), context), drawn, alpha)
    if lacks("logprobs_as_engine", "tensor"):
        return
    if zoo.checkpoints.dtype_of(case.model) != "fp32":
        obs.skipped("logprobs_as_engine", "tensor", f"the model runs in {zoo.checkpoints.dtype_of(case.model)}, the engine in fp32: "
                    "a log-probability's rounding is not bounded by the dtype's rule - the fp32 run checks it",
                    category="not-checked")
        return
    if not all(served.logprobs):
        obs.skipped("logprobs_as_engine", "tensor", "this version's manager returns no log-probabilities "
                    "(no return_logprobs): the draws' probabilities cannot be read", category="not-checked")
        return
    ours, theirs = [], []
    for ids, row, lp, (_, _, settings, _) in zip(prompts, served.rows, served.logprobs, REQUESTS, strict=True):
        ctx = [*ids, *row]
        ours += engine_logprobs(engine.logits_cached(zoo, case.model, ctx), len(ids), row, _chain(settings, ids),
                                ctx)[:len(lp)]
        theirs += lp[:len(row)]
    obs.reference("logprobs_as_engine", theirs, ours, kind="tensor")
