"""Catalogue faults of the verifier and the drafters (suites/test_bias.py, test_outputs.py, test_sampling.py).

Each `Fault` row names what it breaks, the `Catch` that must report it and the upstream bug it
is modelled on; harness/faults/catalogue.py joins every family's `FAULTS`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.faults.patches import Catch, Fault, Wrap, edit
from harness.faults.targets import CAND, GEN, GEN_CONFIG


def _assistant_falls_back_to_plain(get_mode: Callable[..., Any]) -> Callable[..., Any]:
    """With an assistant model the generation mode is the base one (greedy or sample) instead of
    assisted generation: generate() takes the assistant, raises nothing, and decodes without it."""
    import functools

    @functools.wraps(get_mode)
    def wrapped(self: Any, assistant_model: Any = None, *args: Any, **kwargs: Any) -> Any:
        mode = get_mode(self, assistant_model, *args, **kwargs)
        if assistant_model is not None and mode == "assisted_generation":
            return get_mode(self, None, *args, **kwargs) if not (self.use_mtp or self.prompt_lookup_num_tokens) else mode
        return mode
    return wrapped


def _exit_moved(exit_of: Callable[[Any, int], int]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A wrapper of the early-exit generator's get_candidates that drafts from `exit_of(generator,
    asked)` layers instead of the asked exit (its method calls super(), which a source edit cannot
    recompile: the exit is moved for the call, then put back)."""
    import functools

    def wrap(get_candidates: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(get_candidates)
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            asked = self.assistant_early_exit
            self.assistant_early_exit = exit_of(self, asked)
            try:
                return get_candidates(self, *args, **kwargs)
            finally:
                self.assistant_early_exit = asked
        return wrapped
    return wrap


def _full_depth(generator: Any, asked: int) -> int:
    """The model's own layer count: an exit that changes nothing."""
    return getattr(generator.assistant_model, generator.assistant_model.base_model_prefix).config.num_hidden_layers


FAULTS: tuple[Fault, ...] = (
    # verifier ------------------------------------------------------------------------------------
    Fault("ensemble-weight-one-minus", "verifier",
          "the static-ensemble acceptance ratio uses 1 - w where it should use w (v = (1-w) p + w q)",
          Catch("bias", "w0.3.ctx0", "acceptance"),
          (edit(GEN, "_speculative_sampling",
                ("1.0 - assistant_ensemble_weight + assistant_ensemble_weight * (p_i / q_i)",
                 "assistant_ensemble_weight + (1.0 - assistant_ensemble_weight) * (p_i / q_i)")),)),
    Fault("residual-from-target", "verifier",
          "after a rejection the correction token is drawn from p instead of the renormalised residual "
          "norm([p - q]+) (the residual's mass is never taken out)",
          Catch("bias", "lossless.ctx0", "first_token"),
          (edit(GEN, "_speculative_sampling",
                ("p_prime = torch.clamp((p_n_plus_1 - q_n_plus_1), min=0)", "p_prime = p_n_plus_1.clone()")),),
          notes="a literally un-renormalised residual is invisible (torch.multinomial normalises its input), so "
                "the catalogue's form draws from p. It was once caught only at the G-test's Monte Carlo floor "
                "(p = 1e-5 with B capped at 100,000), which a run of more than 249 golden tests could not reject "
                "at; the sequential Besag-Clifford p-value (harness/checking/stats.py `sequential_g_pvalue`, up to 20 / "
                "alpha resamples) has no such floor."),
    Fault("acceptance-wrong-draft-position", "verifier",
          "the acceptance ratio p/q is read at the token before the draft (position i - 1) instead of the "
          "drafted token",
          Catch("sampling", "llama-target.assisted.default.*", "exact_acceptance"),
          (edit(GEN, "_speculative_sampling",
                ("q_i = q[:, torch.arange(candidate_length), new_candidate_input_ids]",
                 "q_i = q[:, torch.arange(candidate_length), candidate_input_ids[:, -candidate_length - 1:-1]]"),
                ("p_i = p[:, torch.arange(candidate_length), new_candidate_input_ids]",
                 "p_i = p[:, torch.arange(candidate_length), candidate_input_ids[:, -candidate_length - 1:-1]]")),)),
    Fault("greedy-ensemble-argmax-p", "verifier",
          "greedy static-ensemble verification compares the drafts with argmax p instead of argmax v",
          Catch("outputs", "llama-target.ensemble.w0.3.dynamic.short-0.greedy", "ensemble_on_own_scores"),
          (edit(GEN, "GenerationMixin._assisted_decoding",
                ("selected_tokens = torch.cat([nu_probs.argmax(dim=-1), bonus_logits.argmax(dim=-1)], dim=-1)",
                 "selected_tokens = torch.cat([p_probs.argmax(dim=-1), bonus_logits.argmax(dim=-1)], dim=-1)")),),
          notes=("argmax p and argmax v part only where v is a near-tie on this model: the faulty token is "
                 "0.010-0.029 below the mixture's best in log-probability. steps_as_ensemble (the rule on the "
                 "engine's p and q) sees that in fp32 (tie epsilon 1e-3) but reads it as a tie-flip in bf16 "
                 "(0.34-0.75); ensemble_on_own_scores applies the rule to the numbers the verifier itself had "
                 "(generate()'s output scores and the candidate logits) with no allowance beyond 4 float32 "
                 "units, so it sees it on an empty store in every dtype, as beam's rule_on_own_scores does")),
    # drafting ------------------------------------------------------------------------------------
    Fault("mtp-draft-shifted", "drafting",
          "the MTP head is fed the token one position before the one each hidden state predicts",
          Catch("outputs", "glm4moe-mtp.mtp.dynamic.short-0.greedy", "drafts"),
          (edit(CAND, "MTPCandidateGenerator.get_candidates",
                ("mtp_input_ids = input_ids[:, -num_last_main_model_tokens:]",
                 "mtp_input_ids = input_ids[:, -num_last_main_model_tokens - 1:-1]")),),
          notes=("the class of transformers #30413 (\"Assisted decoding results are not correct\": the speculative "
                 "loop fed the model inconsistent cache positions, no error raised) - a position misaligned in the "
                 "draft step; a lossless path emits plain greedy's "
                 "tokens whatever it drafts, so on an empty store only the engine's own MTP run sees it "
                 "(acceptance_vs_engine); missed on an empty bf16 store: that reference is fp32-only for a model "
                 "drafter (the MTP head's own near-ties move its drafts in bf16)")),
    Fault("prompt-lookup-off-by-one", "drafting",
          "prompt lookup copies the continuation one token after the matched n-gram's end",
          Catch("outputs", "llama-target.prompt_lookup.dynamic.short-0.greedy", "drafts"),
          (edit(CAND, "PromptLookupCandidateGenerator.get_candidates",
                ("start_idx = idx + ngram_size", "start_idx = idx + ngram_size + 1")),),
          notes=("the class of transformers PR #47195 (\"Fix prompt lookup decoding length cap\": "
                 "PromptLookupCandidateGenerator compared slice indices into input_ids with max_length, so the cap "
                 "never bound) - an index of the candidate slice one off; on an empty store the engine's n-gram "
                 "drafter sees it (acceptance_vs_engine), in bf16 too (its drafts follow from the tokens alone)")),
    Fault("early-exit-one-layer-late", "drafting",
          "self-speculation by early exit drafts from one layer past the one asked (assistant_early_exit=E runs "
          "E + 1 layers before the head): lossless still, every draft from the wrong depth",
          Catch("outputs", "llama-target.early_exit.dynamic.short-0.greedy", "drafts_as_drafter"),
          (Wrap(CAND, "EarlyExitCandidateGenerator.get_candidates", _exit_moved(lambda generator, asked: asked + 1)),),
          notes=("the exit layer of transformers PR #34240 (\"Self-speculation (Layer-Skip Llama)\": the early-exit "
                 "candidate generator sets config.num_hidden_layers for the draft) off by one - the class of "
                 "facebookresearch/LayerSkip #15 (an exit layer that seemed to change nothing: a lossless path's "
                 "output cannot show which layer drafted). The tokens equal greedy's; on an empty store the "
                 "engine's early-exit drafter, teacher-forced on the library's own drafts, sees every draft "
                 "the deeper exit changed (drafts_as_drafter), in bf16 too")),
    Fault("early-exit-layer-ignored", "drafting",
          "self-speculation by early exit drafts with the whole model (the exit layer asked is not applied): 100 % "
          "acceptance, no speed-up, no error - the output is greedy's either way",
          Catch("outputs", "llama-target.early_exit.dynamic.short-0.greedy", "drafts_as_drafter"),
          (Wrap(CAND, "EarlyExitCandidateGenerator.get_candidates", _exit_moved(_full_depth)),),
          notes=("modelled on facebookresearch/LayerSkip #15 (\"eval.py gives same result even if I change the exit "
                 "layer number\") and on the layer slice transformers PR #34240 added to Llama's forward for "
                 "self-speculation: a modeling refactor looping over self.layers drops it and the exit changes "
                 "nothing (a refactor that only drops the slice crashes instead, on the draft cache sized for the "
                 "exit: IndexError). Caught on an empty store by drafts_as_drafter (the engine's model cut at the "
                 "exit layer), never by the tokens")),
    Fault("assistant-falls-back-to-plain", "drafting",
          "generate(assistant_model=...) silently decodes without the assistant: the generation mode stays "
          "greedy / sample, no candidate generator is consulted, no error (the outputs equal plain decoding)",
          Catch("outputs", "llama-target.assisted.dynamic.short-0.greedy", "supports_assistant_model"),
          (Wrap(GEN_CONFIG, "GenerationConfig.get_generation_mode", _assistant_falls_back_to_plain),),
          notes="modelled on huggingface/transformers#30778 (a generate() refactor silently dropped a property of "
                "assisted decoding - the assistant's greedy drafting - with no error; restored in that PR) and on "
                "the candidate-generator refactor of #27979 / #28030 (the assisted path's classes moved and renamed): "
                "a path judged by a class name, or by its keyword, stays green when the call no longer runs it"),
    Fault("assistant-ignores-num-tokens", "drafting",
          "assisted drafting ignores num_assistant_tokens and drafts up to 20 tokens a step",
          Catch("outputs", "llama-target.assisted.dynamic.short-0.greedy", "drafts"),
          (edit(CAND, "AssistedCandidateGenerator._calculate_new_tokens",
                ("min(int(self.num_assistant_tokens),", "min(20,")),),
          notes=("the class of transformers PR #47195 (a draft-length cap that does not bind: more candidate tokens "
                 "than asked); on an empty store the engine's assistant run drafts num_assistant_tokens "
                 "(acceptance_vs_engine, drafted_per_step); missed on an empty bf16 store: that reference is "
                 "fp32-only for a model drafter")),
    Fault("assisted-scores-one-behind", "verifier",
          "assisted decoding stores, for each token a verification step emits after its first, the verifier's "
          "scores of the position before: the tokens, the first step's scores and every count stay right, the "
          "scores handed back for later tokens belong to another position",
          Catch("outputs", "llama-target.assisted.dynamic.short-0.greedy", "scores_as_engine"),
          (edit(GEN, "GenerationMixin._assisted_decoding",
                ("scores += tuple(new_logits[:, i, :] for i in range(newly_added_length))",
                 "scores += tuple(new_logits[:, max(i - 1, 0), :] for i in range(newly_added_length))")),),
          notes="the class of transformers #17868 / #23750 (scores and tokens of generate() out of step: n tokens, "
                "n - 1 scores) in the assisted path's own bookkeeping, and of what 5.25.0 shows on Qwen3.5's linear "
                "attention (the same tokens, later scores 0.08-0.18 off): first_logits and the tokens see nothing, "
                "scores_as_engine (every emitted token against the engine) does, on an empty store too"),
)
