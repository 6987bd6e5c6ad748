"""What generate() produces, per path, against the golden record and the reference engine.

One test, parametrized by the case table (harness/fixtures/cases.py `output_cases`: the zoo's rows and
each user model's, built from its config's paths and its prompts). Per case it records:
  error         exact   the exception transformers raised (type, first line) or None
  tokens        tokens  greedy/sampled ids with per-step top-2 margins; a seeded sampled stream that
                        differs while `distribution` still fits is `changed` (rng-stream), not a regression
  distribution  distribution  sampled cases: the path's first-2-token distribution over N seeds vs its
                        exact joint (harness/designs/sampling.py `observe`, with processors / bias_vs_target)
  text          exact   decoded text
  first_logits  tensor  scores of the first generated step (a vocabulary above 4096: its top 256,
                        sorted; harness/subjects/hf_cache.py `top_values`)
  target_forwards exact number of target forward passes
  drafts        tokens  the drafter's proposals, flattened, with its own top-2 margins (greedy
                        speculative paths; prompt lookup has no margins)
  acceptance    exact   accepted / drafted tokens of a greedy speculative path (deterministic: compared
                        exactly); rate (Fisher test) for a sampled one
A field derived from the token streams (text, target_forwards, acceptance, drafts) inherits a
tie-flip of the stream it follows across numerics (harness/checking/core.py), never a real change.
  acceptance_per_step exact per-step accepted / drafted counts (greedy paths; the report's chart)
  divergence_from_plain exact ensemble greedy: the first step where it leaves plain greedy (its bias)
and, computed in the same run:
  equals_plain_greedy      lossless greedy paths equal plain greedy token for token (same library,
                           same numerics: no near-tie allowance)
  equals_reference_engine  greedy paths (plain, lossless, ensemble-greedy) equal the engine's tokens
                           (different implementations: a flip at a near-tie is a tie-flip); skipped
                           with the reason for a model the engine does not implement (`Zoo.engine_gap`).
A path the installed version does not support records its capability and skips with the reason.
A speculative greedy path the installed version refuses with an error (assisted decoding and prompt
lookup on a stateful, linear-attention model) is run by the reference engine in its place:
  engine_acceptance        exact  accepted / drafted tokens of the engine's run (per-step counts ride along):
                                  what the path would accept on this model
  engine_equals_plain_greedy the engine's speculative tokens equal transformers' plain greedy tokens
                           (lossless paths; a flip at a near-tie is a tie-flip)
"""

from __future__ import annotations

import pytest

from harness.checking.compare import first_divergence
from harness.designs import sampling
from harness.fixtures.cases import output_cases
from harness.schema import Case
from harness.subjects import engine, hf
from harness.subjects.hf_cache import top_values

FEATURE = {"mtp": "use_mtp", "ensemble": "assistant_ensemble_weight", "prompt_lookup": "prompt_lookup"}


@pytest.mark.cases(table=output_cases)
def test_generate(case: Case, golden, zoo, require_feature):
    if case.path in FEATURE:
        require_feature(FEATURE[case.path])
    got = zoo.generate(case)
    golden.check("error", got.error)
    if got.error is not None:
        if case.path != "plain" and case.decoding == "greedy" and zoo.stateful(case.model):
            _engine_in_its_place(case, golden, zoo)
        return
    tok = zoo.load(case.model).tokenizer
    if case.decoding == "sample":  # the path's sampled distribution judges its seeded stream (rng-stream)
        context = {} if not zoo.is_user(case.model) else {"prompt": case.prompt}
        sampling.observe(golden, zoo, sampling.Spec(case.model, case.path, "default", case.weight, case.assistant,
                                                    **context), field="distribution")
        golden.check("tokens", [got.tokens], kind="tokens", margins=[got.margins], seeded_by="distribution")
    else:
        golden.check("tokens", [got.tokens], kind="tokens", margins=[got.margins])
    golden.check("text", tok.decode(got.tokens), follows="tokens")
    golden.check("first_logits", top_values(got.first_logits), kind="tensor")
    golden.check("target_forwards", got.target_forwards, follows=["tokens", "drafts"])
    if case.path != "plain":
        accepted, drafted = got.acceptance_trace()
        if case.decoding != "greedy":  # seeded sampling: a count, judged statistically
            golden.check("acceptance", {"k": sum(accepted), "n": sum(drafted)}, kind="rate")
            return
        # greedy is deterministic: the drafts (with the drafter's own margins, where it has any) and
        # what the verifier accepted of them are exact, and consequences of both token streams
        golden.check("drafts", [[t for d in got.drafts for t in d]], kind="tokens", follows="tokens",
                     margins=[[m for d in got.draft_margins for m in d]])
        golden.check("acceptance", {"k": sum(accepted), "n": sum(drafted)}, follows=["tokens", "drafts"])
        per_step = {"accepted_per_step": accepted, "drafted_per_step": drafted}
        golden.check("acceptance_per_step", per_step, show=per_step, follows=["tokens", "drafts"])
    if case.decoding != "greedy":
        return
    plain = zoo.generate(case.plain()) if case.path != "plain" else None
    if plain is not None and plain.error is not None:
        golden.outcome("equals_plain_greedy" if case.lossless else "divergence_from_plain", "skipped", kind="tokens",
                       category="not-applicable",
                       detail=f"plain greedy raised {plain.error['type']}: {plain.error['message']}")
        plain = None
    if case.lossless and plain is not None:
        golden.reference("equals_plain_greedy", [got.tokens], [plain.tokens], kind="tokens",
                         observed_extras={"margins": [got.margins]}, expected_extras={"margins": [plain.margins]},
                         implementations_differ=False)
    gap = zoo.engine_gap(case.model) or (zoo.engine_gap(case.assistant) if case.assistant else "")
    if gap:
        golden.outcome("equals_reference_engine", "skipped", "tokens", gap, "not-applicable")
    else:
        _vs_engine(case, golden, zoo, got)
    if case.path == "ensemble" and plain is not None:
        golden.check("divergence_from_plain", first_divergence(got.tokens, plain.tokens), w=case.weight, follows="tokens",
                     show={"plain_text": tok.decode(plain.tokens), "ensemble_text": tok.decode(got.tokens)})


def _engine_in_its_place(case: Case, golden, zoo) -> None:
    """A speculative path the installed transformers refuses (assisted decoding and prompt lookup on
    a model with recurrent-state layers: "not supported with stateful models") is run by the
    reference engine instead - its recurrent caches roll back by snapshot - so the record shows
    what the path would accept on this model, and that it would stay lossless."""
    gap = zoo.engine_gap(case.model) or (zoo.engine_gap(case.assistant) if case.assistant else "")
    if gap:
        golden.outcome("engine_equals_plain_greedy", "skipped", "tokens", gap, "not-applicable")
        return
    assistant = zoo.reference(case.assistant) if case.assistant else None
    ours = engine.decode_case(zoo.reference(case.model), assistant, case,
                              zoo.prompt_ids(case.model, case.prompt)[0].tolist())
    accepted, drafted = ours.acceptance
    golden.check("engine_acceptance", {"k": accepted, "n": drafted},
                 accepted_per_step=[s.accepted for s in ours.steps], drafted_per_step=[s.drafted for s in ours.steps])
    if not case.lossless:
        return
    plain = zoo.generate(case.plain())
    if plain.error is not None:
        golden.outcome("engine_equals_plain_greedy", "skipped", "tokens",
                       f"plain greedy raised {plain.error['type']}: {plain.error['message']}", "not-applicable")
        return
    golden.reference("engine_equals_plain_greedy", [ours.tokens], [plain.tokens], kind="tokens",
                     observed_extras={"margins": [ours.margins]}, expected_extras={"margins": [plain.margins]})


def _vs_engine(case: Case, golden, zoo, got: hf.Generated) -> None:
    assistant = zoo.reference(case.assistant) if case.assistant else None
    ours = engine.decode_case(zoo.reference(case.model), assistant, case,
                              zoo.prompt_ids(case.model, case.prompt)[0].tolist())
    golden.reference("equals_reference_engine", [got.tokens], [ours.tokens], kind="tokens",
                     observed_extras={"margins": [got.margins]}, expected_extras={"margins": [ours.margins]})
