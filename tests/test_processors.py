"""The engine's processors (harness/engine/processors.py) and the pipeline the harness builds from a
generation config (harness/engine/pipeline.py): each processor on cases whose answer follows from its
definition (built here by code), then - a cross-check only - against transformers' own processor on
random scores, and the pipeline against the list the installed version builds for the same config."""

from __future__ import annotations

import math

import pytest
import torch

from harness.engine import pipeline
from harness.engine import processors as pr

V = 32


def _row(seed: int = 0, scale: float = 3.0) -> torch.Tensor:
    return torch.randn(V, generator=torch.Generator().manual_seed(seed)) * scale


def _banned(before: torch.Tensor, after: torch.Tensor) -> set[int]:
    return set(torch.nonzero(torch.isinf(after) & (after < 0) & torch.isfinite(before)).flatten().tolist())


# ----------------------------------------------------------------------------------------------
# each processor from its definition


def test_no_repeat_ngram_bans_exactly_the_followers_of_the_tail():
    """n = 3: with c ending in (a, b), every x that followed an earlier (a, b) is banned, nothing else."""
    ctx = [4, 5, 6, 9, 4, 5, 7, 1, 4, 5]
    z = _row()
    want = {ctx[i + 2] for i in range(len(ctx) - 2) if ctx[i:i + 2] == ctx[-2:]}
    assert _banned(z, pr.no_repeat_ngram(z, ctx, 3)) == want and want
    assert _banned(z, pr.no_repeat_ngram(z, ctx[:2], 3)) == set()  # shorter than n: no n-gram yet


def test_encoder_no_repeat_ngram_bans_the_prompts_continuations():
    prompt = [1, 2, 3, 8, 1, 2, 9]
    ngrams = pr.prompt_ngrams(prompt, 3)
    z = _row(1)
    for ctx in ([5, 1, 2], [5, 2, 1]):
        want = {prompt[i + 2] for i in range(len(prompt) - 2) if prompt[i:i + 2] == ctx[-2:]}
        assert _banned(z, pr.encoder_no_repeat_ngram(z, ctx, ngrams)) == want
    assert _banned(z, pr.encoder_no_repeat_ngram(z, [5, 1, 2], ngrams))  # the prompt's (1, 2) has followers


def test_sequence_bias_adds_only_where_the_prefix_matches():
    z = _row(2)
    biases = (((7,), 1.5), ((3, 4, 8), -2.0), ((9, 10), 0.5))
    out = pr.sequence_bias(z, [1, 3, 4], biases)
    delta = {i: float(out[i] - z[i]) for i in range(V) if out[i] != z[i]}
    assert delta == pytest.approx({7: 1.5, 8: -2.0})
    assert pr.sequence_bias(z, [4], biases)[8] == z[8]  # the prefix (3, 4) is longer than a match here


def test_bad_words_ban_the_completion_of_each_word():
    z = _row(3)
    assert _banned(z, pr.bad_words(z, [2, 6], ((11,), (6, 12), (5, 13)))) == {11, 12}


@pytest.mark.parametrize("length", [3, 4, 5])
def test_eos_is_banned_only_before_the_minimum(length):
    z, eos = _row(4), (1, 2)
    ctx = [7] * 4
    assert _banned(z, pr.ban_eos_before(z, ctx, length, eos)) == (set(eos) if len(ctx) < length else set())


def test_forced_token_at_its_length_only():
    z = _row(5)
    out = pr.force_at(z, [3, 4], 2, (6,))
    assert torch.softmax(out, -1)[6] == 1.0
    assert torch.equal(pr.force_at(z, [3], 2, (6,)), z)


def test_exponential_decay_grows_the_end_logit_by_its_formula():
    z, start, f = _row(6), 5, 1.7
    for extra in range(4):
        ctx = [3] * (start + extra)
        out = pr.exponential_decay_length(z, ctx, start, f, (2,))
        want = z[2] + abs(z[2]) * (f ** extra - 1) if extra > 0 else z[2]
        assert float(out[2]) == pytest.approx(float(want), rel=1e-6)
        assert torch.equal(torch.cat([out[:2], out[3:]]), torch.cat([z[:2], z[3:]]))


def test_suppress_and_begin_suppress():
    z = _row(7)
    assert _banned(z, pr.suppress(z, (4, 9))) == {4, 9}
    assert _banned(z, pr.suppress_at(z, [1] * 6, (4,), 6)) == {4}
    assert _banned(z, pr.suppress_at(z, [1] * 7, (4,), 6)) == set()


def test_encoder_repetition_penalty_favours_the_prompt():
    z = _row(8)
    out = pr.encoder_repetition_penalty(z, [3, 4], 2.0)
    for x in (3, 4):
        assert float(out[x]) == pytest.approx(float(z[x] * 2 if z[x] > 0 else z[x] / 2))
    assert torch.equal(out[5:], z[5:])


def test_remove_inf_nan():
    z = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0])
    out = pr.remove_inf_nan(z)
    info = torch.finfo(torch.float32)
    assert out.tolist() == [0.0, info.max, info.min, 1.0]


def _entropy(p: torch.Tensor) -> float:
    p = p[p > 0]
    return float(-(p * p.log()).sum())


def test_typical_keeps_the_most_typical_prefix_reaching_the_mass():
    z = _row(9)
    p = torch.softmax(z, -1)
    s = (-p.log() - _entropy(p)).abs().tolist()
    ranked = sorted(range(V), key=lambda i: s[i])
    kept, mass = [], 0.0
    for i in ranked:
        kept.append(i)
        mass += float(p[i])
        if mass >= 0.6:
            break
    assert set(torch.nonzero(pr.typical_mask(z, 0.6)).flatten().tolist()) == set(kept)


def test_epsilon_and_eta_cut_at_their_thresholds():
    z = _row(10)
    p = torch.softmax(z, -1)
    eps = 0.02
    assert set(torch.nonzero(pr.epsilon_mask(z, eps)).flatten().tolist()) == {i for i in range(V) if p[i] >= eps}
    eta = min(eps, math.sqrt(eps) * math.exp(-_entropy(p)))
    assert set(torch.nonzero(pr.eta_mask(z, eps)).flatten().tolist()) == {i for i in range(V) if p[i] >= eta}
    assert pr.epsilon_mask(z, 0.99).sum() == 1  # the most likely token always survives


def test_top_h_keeps_a_prefix_by_entropy():
    z = _row(11)
    top = torch.sort(z, descending=True)
    p = torch.softmax(top.values, -1)
    terms = (-p * p.log()).tolist()
    tau, run, kept = 0.5 * sum(terms), 0.0, []
    for i, t in zip(top.indices.tolist(), terms, strict=True):
        run += t
        if run > tau and kept:
            break
        kept.append(i)
    assert set(torch.nonzero(pr.top_h_mask(z, 0.5, top_n=V)).flatten().tolist()) == set(kept)


# ----------------------------------------------------------------------------------------------
# the pipeline built from a config

CONFIG = dict(do_sample=True, sequence_bias=[[[4], 1.5], [[3, 5, 8], -2.0]], encoder_repetition_penalty=1.3,
              repetition_penalty=1.4, no_repeat_ngram_size=2, encoder_no_repeat_ngram_size=3,
              bad_words_ids=[[6], [5, 10], [1]], min_length=15, min_new_tokens=5, forced_bos_token_id=0,
              remove_invalid_values=True, exponential_decay_length_penalty=(1, 1.7), suppress_tokens=[12, 13],
              begin_suppress_tokens=[14], temperature=0.7, top_h=0.6, top_k=30, top_p=0.95, min_p=0.01,
              typical_p=0.9, epsilon_cutoff=1e-3, eta_cutoff=1e-3, renormalize_logits=True, eos_token_id=[1, 2],
              max_length=20, forced_eos_token_id=2)
PROMPT = [3, 5, 7, 3, 5, 9, 11, 2, 3, 5]


def test_pipeline_resolves_prompt_relative_settings():
    built = {p.name: p for p in pipeline.build(CONFIG, PROMPT)}
    assert built["min_new_tokens"]["start"] == len(PROMPT)
    assert built["exponential_decay_length_penalty"]["start"] == len(PROMPT) + 1
    assert built["begin_suppress_tokens"]["begin"] == len(PROMPT)
    assert (1,) not in built["bad_words"]["words"]  # a single end token is never a bad word
    assert list(built)[-1] == "renormalize_logits"
    assert not any(p.name == "top_k" for p in pipeline.build({**CONFIG, "do_sample": False}, PROMPT))


def _transformers_list(config: dict, prompt: list[int]):
    """The installed version's own list for `config` (a tiny random llama: only its _get_logits_processor runs)."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    known = {k: v for k, v in config.items() if hasattr(GenerationConfig(), k)}
    gc = GenerationConfig(**known)
    gc._eos_token_tensor = torch.tensor(pipeline.end_tokens(config))
    ids = torch.tensor([prompt])
    return model._get_logits_processor(gc, input_ids_seq_length=len(prompt), encoder_input_ids=ids, device="cpu",
                                       model_kwargs={"attention_mask": torch.ones_like(ids)}), gc


def test_pipeline_equals_the_installed_versions_list():
    """Cross-check: the harness's rule builds what the installed transformers builds for a config that
    asks for every processor (class, parameters, order)."""
    from harness.subjects import hf_processors

    theirs, gc = _transformers_list(CONFIG, PROMPT)
    assert [p.spec() for p in hf_processors.as_engine(theirs)] == \
        [p.spec() for p in pipeline.build(hf_processors.config_values(gc), PROMPT)]


@pytest.mark.parametrize("seed", range(3))
def test_every_engine_processor_matches_transformers_on_random_scores(seed):
    """Cross-check: each processor of the full list, applied by the engine and by transformers to the
    same random rows after contexts of every length that moves a length-dependent processor."""
    from harness.subjects import hf_processors

    theirs, _ = _transformers_list(CONFIG, PROMPT)
    gen = torch.Generator().manual_seed(seed)
    for extra in range(0, 9):
        ctx = PROMPT + torch.randint(0, V, (extra,), generator=gen).tolist()
        ids = torch.tensor([ctx])
        for obj in theirs:
            mine = hf_processors.read(obj)
            z = torch.randn(V, generator=gen) * 3
            want = obj(ids, z[None].clone())[0]
            got = pr.apply(z, ctx, [mine])
            assert torch.equal(torch.isinf(got), torch.isinf(want)), (mine.name, extra)
            fin = torch.isfinite(want)
            torch.testing.assert_close(got[fin], want[fin], rtol=1e-5, atol=1e-6, msg=f"{mine.name} at +{extra}")


def test_requested_keeps_a_setting_the_version_dropped():
    """The caller's settings win over the config the version received, so a dropped one is still expected."""
    asked = pipeline.requested({"repetition_penalty": None, "top_k": 50, "do_sample": True},
                               {"repetition_penalty": 1.5, "max_new_tokens": 4}, len(PROMPT))
    names = [p.name for p in pipeline.build(asked, PROMPT)]
    assert names == ["repetition_penalty", "top_k"] and asked["max_length"] == len(PROMPT) + 4


def test_loading_processors_built_tells_a_missing_processor():
    """The loading suite's reference: a call whose config holds a penalty but whose list is empty differs."""
    from harness.designs.loading import processors_built
    from harness.schema import Observation

    config = {"repetition_penalty": 1.3}
    want = [p.spec() for p in pipeline.build(config, PROMPT)]
    for built, same in ((want, True), ([], False)):
        obs = Observation()
        processors_built(obs, {"plain_generate": ({"processors": {"built": built, "config": config}}, {})}, PROMPT)
        ref = obs.references["processors_built"]
        assert (ref.observed.value == ref.expected.value) is same


def test_a_sampled_first_step_oracle_is_the_harness_list_on_the_engine_logits():
    """outputs' `first_logits_vs_engine` on a plain sampled case: the list the harness builds from the
    config the version handed its builder (here: top-k 2, temperature 2, the case's do_sample), applied
    to the engine's logits - whatever the config's own do_sample says."""
    from harness.designs.outputs import processed_first_step
    from harness.schema import Case

    z = torch.tensor([[1.0, 3.0, 2.0, 0.5]])
    out = processed_first_step({"top_k": 2, "temperature": 2.0, "do_sample": False}, Case("m", new_tokens=4), [5, 6], z)
    assert out.tolist() == [[-math.inf, 1.5, 1.0, -math.inf]]


def test_a_sampled_first_step_oracle_refuses_a_processor_the_engine_lacks():
    """Classifier-free guidance needs a second forward: no engine counterpart, so outputs' reference is
    `not-checkable` (ValueError here, caught there), never a crash or a pass."""
    from harness.designs.outputs import processed_first_step
    from harness.schema import Case

    with pytest.raises(ValueError, match="no engine counterpart"):
        processed_first_step({"guidance_scale": 1.5}, Case("m", new_tokens=4), [5, 6], torch.zeros(1, 4))
