"""What generate() produces, per path, against the golden record and the reference engine.

One test, parametrized by the case table (harness/fixtures/cases.py). Per case it records:
  error         exact   the exception transformers raised (type, first line) or None
  tokens        tokens  greedy/sampled ids with per-step top-2 margins
  text          exact   decoded text
  first_logits  tensor  scores of the first generated step
  target_forwards exact number of target forward passes
  acceptance    rate    accepted / drafted tokens (speculative paths)
and against the reference engine (our own decode loop):
  lossless greedy paths equal plain greedy token for token;
  greedy paths (plain, lossless, ensemble-greedy) equal the engine's tokens;
  ensemble greedy is reported against plain greedy as a bias (where it first differs).
A path the installed version does not support records its capability and skips with the reason.
"""

from __future__ import annotations

import pytest

from harness.compare import first_divergence
from harness.fixtures.cases import output_cases
from harness.schema import Case
from harness.subjects import engine, hf

FEATURE = {"mtp": "use_mtp", "ensemble": "assistant_ensemble_weight", "prompt_lookup": "prompt_lookup"}


@pytest.mark.parametrize("case", output_cases(), ids=lambda c: c.id)
def test_generate(case: Case, golden, zoo):
    feature = FEATURE.get(case.path)
    if feature is not None:
        supported = hf.capabilities()[feature]
        golden.check(f"supports_{feature}", supported, kind="capability")
        if not supported:
            pytest.skip(f"transformers {hf.version()} does not support {feature}")
    got = zoo.generate(case)
    golden.check("error", got.error)
    if got.error is not None:
        return
    tok = zoo.load(case.model).tokenizer
    golden.check("tokens", [got.tokens], kind="tokens", margins=[got.margins])
    golden.check("text", tok.decode(got.tokens))
    golden.check("first_logits", got.first_logits, kind="tensor")
    golden.check("target_forwards", got.target_forwards)
    if case.path != "plain":
        accepted, drafted = got.acceptance_trace()
        golden.check("acceptance", {"k": sum(accepted), "n": sum(drafted)}, kind="rate")
        golden.outcome("acceptance_per_step", "pass", kind="exact", against="baseline",
                       detail=f"{sum(accepted)}/{sum(drafted)} drafted tokens accepted over {len(drafted)} steps",
                       diff={"accepted_per_step": accepted, "drafted_per_step": drafted})
    if case.decoding != "greedy":
        return
    plain = zoo.generate(case.plain()) if case.path != "plain" else None
    if plain is not None and plain.error is not None:
        golden.outcome("equals_plain_greedy" if case.lossless else "bias_vs_plain_greedy", "skipped", kind="tokens",
                       category="not-applicable",
                       detail=f"plain greedy raised {plain.error['type']}: {plain.error['message']}")
        plain = None
    if case.lossless and plain is not None:
        golden.reference("equals_plain_greedy", [got.tokens], [plain.tokens], kind="tokens",
                         observed_extras={"margins": [got.margins]}, expected_extras={"margins": [plain.margins]})
    assistant = zoo.reference(case.assistant) if case.assistant else None
    ours = engine.decode_case(zoo.reference(case.model), assistant, case,
                              zoo.prompt_ids(case.model, case.prompt)[0].tolist())
    golden.reference("equals_reference_engine", [got.tokens], [ours.tokens], kind="tokens",
                     observed_extras={"margins": [got.margins]}, expected_extras={"margins": [ours.margins]})
    if case.path == "ensemble" and plain is not None:
        step = first_divergence(got.tokens, plain.tokens)
        detail = ("equals plain greedy" if step is None else
                  f"differs from plain greedy from step {step} (w={case.weight}); expected: the ensemble verifier is biased")
        golden.outcome("bias_vs_plain_greedy", "pass", kind="tokens", category="bias", detail=detail,
                       diff={"first_divergence_step": step, "w": case.weight,
                             "plain_text": tok.decode(plain.tokens), "ensemble_text": tok.decode(got.tokens)})
