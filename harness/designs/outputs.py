"""What generate() produces on one case (suites/test_outputs.py), as one `Observation`:

  error         exact   the exception transformers raised (type, first line) or None; error, tokens and
                        first_logits show beside them what the call really ran with (`ran_with`: the
                        cache class generate() returned, the attention implementation, the warnings it
                        emitted - harness/subjects/hf.py `ran_with`), never compared
  tokens        tokens  greedy/sampled ids with per-step top-2 margins; a seeded sampled stream that
                        differs while `distribution` still fits is `changed` (rng-stream), not a regression;
                        greedy: its oracle is the engine's decode (`equals_reference_engine`): a change
                        toward it is fixed, away from it broken (harness/checking/oracles.py)
  distribution  distribution  sampled cases: the path's first-2-token distribution over N seeds vs its
                        exact joint, one G-test of those counts, N sized for the case's two statistical
                        fields on a speculative path (harness/designs/sampling.py `observe`, with
                        processors and the bias_vs_target information row)
  text          exact   decoded text
  first_logits  tensor  scores of the first generated step (a vocabulary above 4096: its top 256,
                        sorted; harness/subjects/hf_cache.py `top_values`); on a lossless greedy path
                        and a plain sampled one its oracle is the engine's logits, processed for a
                        sampled call (`first_logits_vs_engine`): a change toward them is fixed, away
                        from them broken (harness/checking/oracles.py)
  target_forwards exact number of target forward passes
  scores_as_engine tensor (a reference) a lossless speculative path's (assisted, prompt lookup, MTP)
                        scores at every emitted token against the engine's logits after that token's own
                        prefix: first_logits sees only the first step, and equal tokens can hide a
                        verifier whose later logits are off (`scores_as_engine`)
  drafts        tokens  the drafter's proposals, flattened, with its own top-2 margins (greedy
                        speculative paths; prompt lookup has no margins)
  acceptance    exact   accepted / drafted tokens of a greedy speculative path (deterministic: compared
                        exactly); rate (Fisher test) for a sampled one - `not checked` when no
                        draft was proposed (a rate of 0 / 0 has nothing to count)
  acceptance_per_step exact per-step accepted / drafted counts (greedy paths; the report's chart)
  divergence_from_plain exact ensemble greedy: the first step where it leaves plain greedy (its bias)
  cache_ran_on  exact   `.static` cases: the family of the cache generate() returned ("static" - preallocated,
                        fixed-shape - or "dynamic"; the class beside it, `hf_cache.cache_family`), its
                        extras `asked` "static": running on it where the baseline fell back (5.14's
                        assisted / prompt-lookup / MTP paths ran on a DynamicCache, with a warning) is
                        feature-added, falling back where the baseline did not a regression; where it
                        falls back, every run also says so (info `cache_fallback`): every field of the
                        case describes the cache it ran on
A field derived from the token streams (text, target_forwards, acceptance, drafts) inherits a
tie-flip of the stream it follows across numerics (harness/checking/core.py), never a real change.
Computed in the same run:
  equals_plain_greedy      lossless greedy paths equal plain greedy token for token (same library,
                           same numerics: no near-tie allowance)
  first_logits_vs_engine   lossless greedy paths: the first step's scores equal the engine's logits at the
                           prompt's last position (its uncached forward; both at the same top-256
                           columns for a large vocabulary - `narrowed`), within the cross-implementation
                           tolerance; plain sampled: the same logits through the processors the harness
                           builds from the generation config the version handed its builder
                           (`processed_first_step`: its defaults' top-k and temperature), both sides'
                           values sorted (a near-tie at a cut is no change; filtered tokens -inf on
                           both), `not-checkable` where that list holds a processor the engine does
                           not implement; skipped with the reason where the engine has no such model
  acceptance_vs_engine     lossless greedy speculative paths, fp32: per step, the tokens drafted and
                           accepted equal the engine's run of the case (its own drafter), over the steps
                           that start with more than k new tokens left, before the streams part and before
                           a near-tied draft; in bf16 / fp16 prompt lookup only (`not-checkable` else)
  steps_as_engine          greedy plain and lossless paths: each token equals the engine's argmax after the
                           library's own prefix (teacher-forced, harness/engine/teacher_forced.py), each
                           step judged alone by the tie rule - a near-tie early in the stream does not end
                           the check, as it ends equals_reference_engine's
  drafted_within_k         greedy speculative paths: no step drafts more than k tokens (the library's own
                           drafts; every dtype)
  drafts_as_drafter        assisted, ensemble, MTP and early-exit greedy: each draft token equals the engine
                           drafter's choice after the same context (the prompt, the tokens emitted before the
                           step, the step's own earlier drafts; the MTP head fed the trunk's hidden states;
                           early exit: the engine's model cut after `early_exit_layer` layers, final norm, head),
                           teacher-forced, one row per draft for the tie rule - every dtype, where
                           acceptance_vs_engine is fp32's
  steps_as_ensemble        ensemble greedy: each emitted token equals the ensemble rule's choice (argmax of
                           w p + (1 - w) q at a drafted position, of p at the bonus one) on the engine's target
                           and assistant after the library's own context and drafts, one row per token for
                           the tie rule (log-probabilities: the dtype's fixed tie epsilon)
  ensemble_on_own_scores   ensemble greedy, any model (no engine needed): per step, each emitted token equals
                           the ensemble rule (harness/engine/verify.py `ensemble_greedy_on_scores`) applied to
                           the numbers the library's verifier had - the target's processed scores of the
                           emitted positions (generate()'s output scores) and the drafter's candidate logits
                           (get_candidates' return) - so no rounding lies between the two sides and no tie
                           allowance beyond 4 float32 units applies: a verifier that compares the drafts with
                           the wrong distribution is seen at any margin, in bf16 too
  equals_reference_engine  greedy paths (plain, lossless, ensemble-greedy) equal the engine's tokens
                           (different implementations: a flip at a near-tie is a tie-flip); skipped
                           with the reason for a model the engine does not implement (`Zoo.oracle.gap`);
                           under a user model's budget plan a lossless path and the static cache are
                           compared with the engine's plain dynamic decode (the same greedy tokens)
A path the installed version does not support records its capability and stops with the reason.
A speculative greedy path the installed version refuses with an error on a stateful,
linear-attention model (`engine_in_its_place`) is run by the reference engine instead:
  engine_acceptance          exact  accepted / drafted tokens of the engine's run (per-step counts ride
                                    along): what the path would accept on this model
  engine_equals_plain_greedy the engine's speculative tokens equal transformers' plain greedy tokens
                             (lossless paths; a flip at a near-tie is a tie-flip)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from harness.checking.compare import first_divergence
from harness.designs import sampling
from harness.engine import verify
from harness.engine.teacher_forced import Forced, ensemble_step, teacher_forced
from harness.schema import Case, Observation
from harness.settings.run import RunSettings
from harness.subjects import engine, hf
from harness.subjects.hf_cache import cache_family, narrowed, top_values

if TYPE_CHECKING:
    from harness.subjects.hf import Zoo


def observe(zoo: Zoo, case: Case, run: RunSettings, alpha: float) -> Observation:
    obs = Observation()
    if not hf.requires(obs, hf.PATH_FEATURE.get(case.path), probe=lambda: zoo.generate(case)):
        return obs
    got = zoo.generate(case)
    obs.add("error", got.error, show={"ran_with": got.setup} if got.setup else None)  # the setup, beside it
    if got.error is not None:
        if case.path != "plain" and case.decoding == "greedy" and zoo.checkpoints.stateful(case.model):
            obs.merge(engine_in_its_place(zoo, case))
        return obs
    if case.cache == "static":  # what every field below describes: the cache generate() really ran on
        ran_on = (got.setup or {}).get("cache")
        family = cache_family(ran_on)
        obs.add("cache_ran_on", family, asked="static", cache_class=ran_on)
        if family != "static":
            obs.info("cache_fallback", f"asked for a static cache (cache_implementation='static'); generate() ran on a "
                     f"{ran_on}: this case's fields describe that cache, not a static one",
                     diff={"asked": "static", "ran_on": ran_on})
    tok = zoo.load(case.model).tokenizer
    if case.decoding == "sample":  # the path's sampled distribution judges its seeded stream (rng-stream)
        context = {} if not zoo.checkpoints.is_user(case.model) else {"prompt": case.prompt}
        spec = sampling.SamplingSpec(case.model, case.path, "default", case.weight, case.assistant, **context)
        # one G-test of the counts (no twin); N sized for it and the sampled acceptance rate below
        obs.merge(sampling.observe(zoo, spec, run, alpha, field="distribution", whitebox=False,
                                   statistical=1 if case.path == "plain" else 2))
        obs.add("tokens", [got.tokens], kind="tokens", margins=[got.margins], seeded_by="distribution")
    else:  # greedy: its oracle is the reference engine's decode (equals_reference_engine, where it runs)
        obs.add("tokens", [got.tokens], kind="tokens", margins=[got.margins], oracle="equals_reference_engine",
                show={"ran_with": got.setup})
    obs.add("text", tok.decode(got.tokens), follows="tokens")
    sampled = case.decoding == "sample" and case.path == "plain" and got.built_config is not None
    judged = ((case.decoding == "greedy" and (case.lossless or case.path == "plain") or sampled)
              and bool(got.first_logits) and not zoo.oracle.gap(case.model))
    obs.add("first_logits", top_values(got.first_logits), kind="tensor", show={"ran_with": got.setup},
            **({"oracle": "first_logits_vs_engine"} if judged else {}))
    if judged:
        prompt = zoo.prompt_ids(case.model, case.prompt)[0].tolist()
        ours = engine.last_logits(zoo, case.model, prompt)
        if sampled:  # the scores a sampler draws from: the harness's processors on the engine's logits
            # sorted (1-Lipschitz in the max norm): a near-tie at a top-k cut that keeps another token
            # of the same value is no change
            mine = torch.tensor(got.first_logits[:1]).float().sort(dim=-1, descending=True).values
            try:
                theirs = processed_first_step(got.built_config, case, prompt, ours).sort(dim=-1, descending=True).values
            except ValueError as exc:  # a processor the engine does not implement (guidance, a watermark)
                obs.skipped("first_logits_vs_engine", "tensor", f"not checkable: {exc}", "not-checkable")
            else:
                obs.reference("first_logits_vs_engine", top_values(mine), top_values(theirs), kind="tensor")
        else:
            mine, theirs = narrowed(torch.tensor(got.first_logits[:1]), ours)
            obs.reference("first_logits_vs_engine", mine, theirs, kind="tensor")
    if case.lossless and case.path != "plain" and got.token_scores is not None and not zoo.oracle.gap(case.model):
        scores_as_engine(obs, zoo, case, got)
    obs.add("target_forwards", got.target_forwards, follows=["tokens", "drafts"])
    if case.path != "plain":
        accepted, drafted = got.acceptance_trace()
        if case.decoding != "greedy":  # seeded sampling: a count, judged statistically
            if sum(drafted) == 0:  # no draft proposed (prompt lookup found no n-gram): nothing to count
                obs.skipped("acceptance", "rate", f"no draft token was proposed in {len(got.tokens)} steps "
                            f"({case.path}): an acceptance rate has nothing to count")
            else:
                obs.add("acceptance", {"k": sum(accepted), "n": sum(drafted)}, kind="rate")
            return obs
        # greedy is deterministic: the drafts (with the drafter's own margins, where it has any) and
        # what the verifier accepted of them are exact, and consequences of both token streams
        obs.add("drafts", [[t for d in got.drafts for t in d]], kind="tokens", follows="tokens",
                margins=[[m for d in got.draft_margins for m in d]])
        obs.add("acceptance", {"k": sum(accepted), "n": sum(drafted)}, follows=["tokens", "drafts"])
        per_step = {"accepted_per_step": accepted, "drafted_per_step": drafted}
        obs.add("acceptance_per_step", per_step, show=per_step, follows=["tokens", "drafts"])
        drafted_within_k(obs, case, got)
    if case.decoding != "greedy":
        return obs
    plain = zoo.generate(case.plain()) if case.path != "plain" else None
    if plain is not None and plain.error is not None:
        obs.skipped("equals_plain_greedy" if case.lossless else "divergence_from_plain", "tokens",
                    f"plain greedy raised {plain.error['type']}: {plain.error['message']}")
        plain = None
    if case.lossless and plain is not None:
        obs.reference("equals_plain_greedy", [got.tokens], [plain.tokens], kind="tokens",
                      observed_extras={"margins": [got.margins], "scales": [got.scales]},
                      expected_extras={"margins": [plain.margins], "scales": [plain.scales]},
                      implementations_differ=False)
    if case.path == "ensemble" and got.drafts:
        ensemble_on_own_scores(obs, zoo, case, got)
    gap = _engine_gap(zoo, case)
    if gap:
        obs.skipped("equals_reference_engine", "tokens", gap)
    else:
        ours = _engine_decode(zoo, _engine_twin(zoo, case))
        obs.reference("equals_reference_engine", [got.tokens], [ours.tokens], kind="tokens",
                      observed_extras={"margins": [got.margins], "scales": [got.scales]},
                      expected_extras={"margins": [ours.margins], "scales": [ours.scales]})
        if case.lossless or case.path == "plain":
            steps_as_engine(obs, zoo, case, got.tokens)
        if case.path in ("assisted", "ensemble", "mtp", "early_exit") and got.drafts:
            drafts_as_drafter(obs, zoo, case, got)
        if case.path == "ensemble" and got.drafts:
            steps_as_ensemble(obs, zoo, case, got)
        if case.path != "plain" and case.lossless and _engine_twin(zoo, case) == case:
            acceptance_vs_engine(obs, got, ours, case, zoo.checkpoints.dtype_of(case.model), run.config.thresholds.tie_eps("fp32"))
    if case.path == "ensemble" and plain is not None:
        obs.add("divergence_from_plain", first_divergence(got.tokens, plain.tokens), w=case.weight, follows="tokens",
                show={"plain_text": tok.decode(plain.tokens), "ensemble_text": tok.decode(got.tokens)})
    return obs


def steps_as_engine(obs: Observation, zoo: Zoo, case: Case, tokens: list[int]) -> None:
    """steps_as_engine: each generated token against the engine's argmax after the library's own prefix
    (harness/engine/teacher_forced.py), one single-token row per step so that the tie rule judges each
    step alone - equals_reference_engine ends at the first near-tie, this does not (a bf16 state that
    drifts away from the engine's after an early near-tie)."""
    prompt = zoo.prompt_ids(case.model, case.prompt)[0].tolist()
    forced = teacher_forced(engine.logits_cached(zoo, case.model, [*prompt, *tokens]), len(prompt), tokens)
    engine.forced_reference(obs, "steps_as_engine", tokens, forced, [f"step {i}" for i in range(len(tokens))])


def drafted_within_k(obs: Observation, case: Case, got: Any) -> None:
    """drafted_within_k: no step drafts more than the k tokens asked (num_assistant_tokens, pinned
    constant; prompt_lookup_num_tokens; one MTP head), from the library's own drafts - no numerics
    involved, so in every dtype (a cap that does not bind: transformers PR #47195's class)."""
    k = case.draft_tokens or 1
    _, drafted = got.acceptance_trace()
    obs.reference("drafted_within_k", drafted, [min(d, k) for d in drafted], expected_extras={"k": k},
                  implementations_differ=False)


def speculative_steps(zoo: Zoo, case: Case, got: Any) -> Iterator[tuple[int, list[int], list[int], list[int]]]:
    """(step, its drafts, the context they were drafted from, the tokens the step emitted) per verification
    step of a speculative run: the context is the prompt and every token emitted before the step, the
    step emits its accepted drafts and one target token (`acceptance_trace`'s counting)."""
    prompt = zoo.prompt_ids(case.model, case.prompt)[0].tolist()
    accepted, _ = got.acceptance_trace()
    pos = 0
    for s, (draft, ok) in enumerate(zip(got.drafts, accepted, strict=True)):
        yield s, list(draft), [*prompt, *got.tokens[:pos]], list(got.tokens[pos:pos + ok + 1])
        pos += ok + 1


def drafts_as_drafter(obs: Observation, zoo: Zoo, case: Case, got: Any) -> None:
    """drafts_as_drafter: each token a model drafter proposed against the engine's drafter after the same
    context (teacher-forced, harness/engine/teacher_forced.py): the step's context is the prompt and
    the tokens emitted before it; an assistant's j-th draft is judged after its own first j drafts (the
    engine's assistant logits), an MTP head's draft by the engine's head fed the trunk's hidden states
    of that context. One single-token row per draft for the tie rule, so in bf16 a near-tied draft is a
    tie-flip and a head fed the wrong token (mtp-draft-shifted) is seen at the drafts it gets wrong."""
    tokens, parts, labels = [], [], []
    for s, draft, context, _ in speculative_steps(zoo, case, got):
        if not draft:
            continue
        if case.path == "mtp":  # one head, one draft; log-probabilities have no rounding scale of their own
            forced = teacher_forced(engine.mtp_draft_logprobs(zoo, case.model, context), 1, draft[:1])
            forced.scales = [None] * len(forced.best)
        elif case.path == "early_exit":  # the target's own first layers (harness/engine/drafters.py)
            forced = teacher_forced(engine.exit_logits_cached(zoo, case.model, [*context, *draft]), len(context), draft)
        else:
            forced = teacher_forced(engine.logits_cached(zoo, case.assistant, [*context, *draft]), len(context), draft)
        judged = draft[:len(forced.best)]
        tokens += judged
        parts.append(forced)
        labels += [f"step {s} draft {j}" for j in range(len(judged))]
    if tokens:
        engine.forced_reference(obs, "drafts_as_drafter", tokens, Forced.join(parts), labels)


def steps_as_ensemble(obs: Observation, zoo: Zoo, case: Case, got: Any) -> None:
    """steps_as_ensemble: each token an ensemble-greedy step emitted against the ensemble rule on the
    engine's target and assistant after the library's own context and drafts (harness/engine/
    teacher_forced.py `ensemble_step`: argmax of w p + (1 - w) q at a drafted position, of p at the
    bonus one), one single-token row per emitted token for the tie rule - so the rule is judged at every
    step, where equals_reference_engine ends at the first near-tie (greedy-ensemble-argmax-p in bf16)."""
    tokens, parts, labels = [], [], []
    for s, draft, context, emitted in speculative_steps(zoo, case, got):
        sequence = [*context, *draft]
        forced = ensemble_step(engine.logits_cached(zoo, case.model, sequence),
                               engine.logits_cached(zoo, case.assistant, sequence), len(context), draft, emitted,
                               float(case.weight))
        judged = emitted[:len(forced.best)]
        tokens += judged
        parts.append(forced)
        labels += [f"step {s} token {i}" for i in range(len(judged))]
    if tokens:
        engine.forced_reference(obs, "steps_as_ensemble", tokens, Forced.join(parts), labels, w=case.weight)


def ensemble_on_own_scores(obs: Observation, zoo: Zoo, case: Case, got: Any) -> None:
    """ensemble_on_own_scores: each token an ensemble-greedy step emitted against the ensemble rule on
    the library's own numbers - its processed target scores at the emitted positions and the drafter's
    candidate logits of the step (harness/engine/verify.py `ensemble_greedy_on_scores`, float32 as the
    verifier computes). The oracle is the documented rule; the inputs are what the verifier saw, so it
    judges the verification alone, at any margin and in every dtype (steps_as_ensemble, on the
    engine's numbers, must allow bf16's rounding and reads a small wrong choice as a tie-flip)."""
    name = "ensemble_on_own_scores"
    scores, drafted = got.token_scores, got.draft_scores
    if scores is None or drafted is None or len(scores) != len(got.tokens) or len(drafted) != len(got.drafts):
        obs.skipped(name, "exact", "not checkable: the verifier's own scores were not seen (generate() returned "
                    f"{0 if scores is None else len(scores)} score rows for {len(got.tokens)} tokens, "
                    f"{0 if drafted is None else len(drafted)} candidate-logit sets for {len(got.drafts)} steps)",
                    "not-checkable")
        return
    observed, expected, pos = {}, {}, 0
    for s, draft, _, emitted in speculative_steps(zoo, case, got):
        if draft and drafted[s] is not None:
            observed[f"step {s}"] = emitted
            expected[f"step {s}"] = verify.ensemble_greedy_on_scores(scores[pos:pos + len(emitted)], drafted[s],
                                                                     emitted, float(case.weight))
        pos += len(emitted)
    if not observed:
        obs.skipped(name, "exact", "not checkable: no step drafted with candidate logits", "not-checkable")
        return
    obs.reference(name, observed, expected, implementations_differ=False)


def acceptance_vs_engine(obs: Observation, got: Any, ours: Any, case: Case, dtype: str, near_tie: float) -> None:
    """A lossless greedy speculative path's drafting against the engine's run of the same case (its
    drafter - the assistant, the n-gram lookup, the MTP head - on its own cache): per step, how many
    tokens were drafted and how many accepted. A drafter that copies the wrong continuation, feeds
    its head the wrong token or ignores the draft length shows here on a first run; the tokens alone
    cannot show it (a lossless path emits plain greedy's tokens whatever it drafts).

    Compared over the steps both runs must draft alike: those that start with more than k new tokens
    left in the budget (at its end the engine drafts only what is left, transformers drafts k and
    crops), before the two token streams part (a tie-flip) and before a draft token the drafter chose
    at a near-tie (its top-2 margin under `near_tie`, fp32's tie epsilon: two implementations may pick
    either). In bf16 / fp16 only prompt lookup, whose drafts follow from the token stream alone: a
    model drafter's own rounding moves its drafts at near-ties (measured on the zoo in bf16: the
    assistant's and the MTP heads' counts move in 22 of 22 cases)."""
    if dtype != "fp32" and case.path != "prompt_lookup":
        obs.skipped("acceptance_vs_engine", "exact", f"not checkable in {dtype}: the drafter's own rounding moves its "
                    "drafts at its near-ties (two implementations); fp32 decides it", "not-checkable")
        return
    k = case.draft_tokens or 1
    parted = first_divergence(got.tokens, ours.tokens)
    margins = [m for step in got.draft_margins for m in step] if got.draft_margins else []
    steps, emitted, drafted_so_far = 0, 0, 0
    for step in ours.steps:
        end = emitted + len(step.tokens)
        near = any(m is not None and m < near_tie for m in margins[drafted_so_far:drafted_so_far + step.drafted])
        if case.new_tokens - emitted <= k or (parted is not None and end > parted) or near:
            break
        steps, emitted, drafted_so_far = steps + 1, end, drafted_so_far + step.drafted
    if not steps:
        obs.skipped("acceptance_vs_engine", "exact", f"not checkable: no step before the budget's last {k} tokens, a "
                    "divergence of the two streams or a near-tied draft", "not-checkable")
        return
    accepted, drafted = got.acceptance_trace()
    obs.reference("acceptance_vs_engine", {"accepted_per_step": accepted[:steps], "drafted_per_step": drafted[:steps]},
                  {"accepted_per_step": [s.accepted for s in ours.steps[:steps]],
                   "drafted_per_step": [s.drafted for s in ours.steps[:steps]]},
                  observed_extras={"steps_compared": steps, "steps": len(ours.steps)})


def processed_first_step(config: dict[str, Any], case: Case, prompt: list[int], logits: torch.Tensor) -> torch.Tensor:
    """The first step's scores of a sampled plain call from the engine's logits: the processor list the
    harness builds (harness/engine/pipeline.py) from the generation config the version handed its
    builder (its defaults in it: 5.x's top-k 50), do_sample and the call's max_new_tokens taking the
    case's values, applied by the engine's processors (harness/engine/processors.py `apply`) - never
    the list the version built. Filtered tokens are -inf on both sides."""
    from harness.engine import pipeline, processors

    asked = {"do_sample": True, "max_new_tokens": case.new_tokens}
    chain = pipeline.build(pipeline.requested(config, asked, len(prompt)), prompt)
    return processors.apply(logits[0], prompt, chain)[None]


def engine_in_its_place(zoo: Zoo, case: Case) -> Observation:
    """A speculative path the installed transformers refuses (assisted decoding and prompt lookup on
    a model with recurrent-state layers: "not supported with stateful models") is run by the
    reference engine instead - its recurrent caches roll back by snapshot - so the record shows
    what the path would accept on this model, and that it would stay lossless."""
    obs = Observation()
    gap = _engine_gap(zoo, case)
    if gap:
        obs.skipped("engine_equals_plain_greedy", "tokens", gap)
        return obs
    ours = _engine_decode(zoo, case)
    accepted, drafted = ours.acceptance
    obs.add("engine_acceptance", {"k": accepted, "n": drafted},
            accepted_per_step=[s.accepted for s in ours.steps], drafted_per_step=[s.drafted for s in ours.steps])
    if not case.lossless:
        return obs
    plain = zoo.generate(case.plain())
    if plain.error is not None:
        obs.skipped("engine_equals_plain_greedy", "tokens",
                    f"plain greedy raised {plain.error['type']}: {plain.error['message']}")
        return obs
    obs.reference("engine_equals_plain_greedy", [ours.tokens], [plain.tokens], kind="tokens",
                  observed_extras={"margins": [ours.margins], "scales": [ours.scales]},
                  expected_extras={"margins": [plain.margins], "scales": [plain.scales]})
    return obs


def _engine_twin(zoo: Zoo, case: Case) -> Case:
    """The case whose engine decode `equals_reference_engine` compares with: the case itself; under
    a user model's budget plan, for a lossless path or the static cache, plain greedy in the dynamic
    cache - the same expected tokens (greedy decoding is what a lossless path and either cache must
    emit), so the engine decodes the model once instead of once per case."""
    owner = zoo.checkpoints.user.get(case.model)
    if owner is None or not owner.plan.budgeted or not (case.lossless or case.path == "plain"):
        return case
    return replace(case.plain(), cache="dynamic")


def scores_as_engine(obs: Observation, zoo: Zoo, case: Case, got: hf.Generated) -> None:
    """Reference `scores_as_engine`: a lossless speculative path's scores at every emitted token - not
    only the first step's - against the engine's logits after that token's own prefix (teacher-forced
    over prompt + the emitted tokens): the verifier's logits must be the target's. Tokens that agree
    can hide scores that do not (5.25's assisted decoding on Qwen3.5's linear attention, 0.18 off
    after the first step); the cross-implementation tolerance of the run's dtype."""
    prompt = zoo.prompt_ids(case.model, case.prompt)[0].tolist()
    row = got.tokens[:got.token_scores.shape[0]]
    logits = engine.logits_cached(zoo, case.model, [*prompt, *row])
    mine, theirs = narrowed(got.token_scores[:len(row)], logits[len(prompt) - 1:len(prompt) - 1 + len(row)])
    obs.reference("scores_as_engine", mine, theirs, kind="tensor")


def _engine_gap(zoo: Zoo, case: Case) -> str:
    return zoo.oracle.gap(case.model) or (zoo.oracle.gap(case.assistant) if case.assistant else "")


def _engine_decode(zoo: Zoo, case: Case):
    return engine.decode_cached(zoo, case, zoo.prompt_ids(case.model, case.prompt)[0].tolist())
