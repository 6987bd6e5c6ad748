"""Catalogue faults of sampling: the logits processors and the samplers (suites/test_sampling.py's white-box fields).

Each `Fault` row names what it breaks, the `Catch` that must report it and the upstream bug it
is modelled on; harness/faults/catalogue.py joins every family's `FAULTS`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.faults.patches import Catch, Fault, Wrap, edit
from harness.faults.targets import CAND, GEN, PROC

_ONE_BACK: dict[str, Any] = {}  # the MTP layer's last hidden states, for `mtp-draft-sampled-one-back`


def _mtp_layer_keeps_hidden(forward_layer: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    @functools.wraps(forward_layer)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        _ONE_BACK["hidden"], _ONE_BACK["mtp"] = forward_layer(self, *args, **kwargs), self
        return _ONE_BACK["hidden"]
    return wrapped


def _mtp_samples_one_back(get_candidates: Callable[..., Any]) -> Callable[..., Any]:
    """The draft is re-drawn from the MTP layer's prediction one position back (its second-to-last
    hidden state, processed), while the candidate logits - the verifier's q - stay the right position's."""
    import functools

    import torch

    @functools.wraps(get_candidates)
    def wrapped(self: Any, input_ids: Any, *args: Any, **kwargs: Any) -> Any:
        ids, logits = get_candidates(self, input_ids, *args, **kwargs)
        hidden = _ONE_BACK.pop("hidden", None)
        if hidden is not None and hidden.shape[1] >= 2 and ids.shape[1] > input_ids.shape[1]:
            wrong = _ONE_BACK["mtp"]._project_to_logits(hidden[:, -2:-1])[:, -1].float()
            if self.logits_processor is not None:
                wrong = self.logits_processor(input_ids, wrong)
            ids = ids.clone()
            ids[:, input_ids.shape[1]] = torch.multinomial(torch.softmax(wrong, dim=-1), 1)[:, 0]
        return ids, logits
    return wrapped


FAULTS: tuple[Fault, ...] = (
    # sampling (caught by the sampling suite's white-box fields, suites/test_sampling.py) ------------
    Fault("temperature-applied-twice", "sampling",
          "the temperature warper divides the scores by T twice (T^2)",
          Catch("sampling", "*plain.temperature*", "exact_emitted"),
          (edit(PROC, "TemperatureLogitsWarper.__call__",
                ("scores_processed = scores / self.temperature",
                 "scores_processed = scores / self.temperature / self.temperature")),)),
    Fault("top-p-one-fewer", "sampling",
          "top-p keeps one token fewer than the smallest set whose mass reaches p",
          Catch("sampling", "*plain.top_p*", "exact_emitted"),
          (edit(PROC, "TopPLogitsWarper.__call__",
                ("sorted_indices_to_remove = cumulative_probs <= (1 - self.top_p)",
                 "sorted_indices_to_remove = cumulative_probs <= (1 - self.top_p)\n"
                 "    sorted_indices_to_remove[..., 1:] |= sorted_indices_to_remove[..., :-1].clone()")),)),
    Fault("mtp-draft-sampled-one-back", "sampling",
          "the MTP draft is sampled from the MTP layer's prediction one position back, while the verifier gets "
          "the right position's logits as q",
          Catch("sampling", "mellum-mtp.mtp.default.*", "exact_emitted"),
          (Wrap("transformers.modeling_layers", "MtpModel.forward_layer", _mtp_layer_keeps_hidden),
           Wrap(CAND, "MTPCandidateGenerator.get_candidates", _mtp_samples_one_back))),
    Fault("mtp-logits-before-processors", "sampling",
          "the MTP head hands the verifier its raw logits as q while the draft is sampled from the processed "
          "ones (the acceptance test and the residual use another q than the draft's)",
          Catch("sampling", "mellum-mtp.mtp.default.*", "exact_emitted"),
          (edit("transformers.modeling_layers", "MtpModel.forward",
                ("drafted_logits.append(next_token_logits[:, None, :])", "pass  # appended before the processors"),
                ("next_token_logits = logits[:, -1, :].to(device=input_ids.device)",
                 "next_token_logits = logits[:, -1, :].to(device=input_ids.device); "
                 "drafted_logits.append(next_token_logits[:, None, :])")),),
          notes="re-creates a real upstream bug: transformers 5.14.0's MtpModel.forward appends the drafted logits "
                "before the logits processors (modeling_layers.py, 5.14.0 L533 vs the processors at L537), fixed in "
                "5.24.0 (\"Append the drafted logits AFTER logits processors\"); the committed 5.14.0 records carry it "
                "as a known deviation on glm4moe-mtp. A small bias under the default top-k alone"),
    Fault("top-k-one-more", "sampling",
          "top-k keeps k + 1 tokens (the (k + 1)-th most likely token survives the cut)",
          Catch("sampling", "llama-target.plain.top_k.*", "exact_emitted"),
          (edit(PROC, "TopKLogitsWarper.__call__",
                ("top_k = min(self.top_k, scores.size(-1))", "top_k = min(self.top_k + 1, scores.size(-1))")),),
          notes="imitates kingoflolz/mesh-transformer-jax#164 (\"top-k sampling off by 1 bug\": the mask "
                "`indices_range > top_k` kept k + 1 tokens, fixed to `>=`); caught at top_k = 8, where the 9th "
                "token carries mass, against the harness-built list (the version's list still says top_k 8); under "
                "5.x's default top-k of 50 it moves only the 51st token's mass (TV ~1e-7, below float tolerance)"),
    Fault("repetition-penalty-not-built", "sampling",
          "generate() never adds the RepetitionPenaltyLogitsProcessor to the list it builds: repetition_penalty "
          "is accepted and silently has no effect",
          Catch("sampling", "llama-target.plain.repetition.*", "exact_emitted"),
          (edit(GEN, "GenerationMixin._get_logits_processor",
                ("if generation_config.repetition_penalty is not None and generation_config.repetition_penalty != 1.0:",
                 "if False:  # the penalty is never built")),),
          notes="modelled on transformers #29080 (\"repetition_penalty not being applied\": the same text with "
                "repetition_penalty 1 and 2); the harness builds the list from the generation config itself "
                "(harness/engine/pipeline.py), so `processors_built` and `exact_emitted` see it on a first run, and "
                "the loading suite's `processors_built` on every route that sets the penalty"),
    Fault("no-repeat-ngram-one-back", "sampling",
          "NoRepeatNGramLogitsProcessor matches the n-grams against the n - 1 tokens ending one position back "
          "(not the last n - 1): it bans the wrong tokens and lets the repeated n-gram through",
          Catch("sampling", "llama-target.plain.constraints.*", "exact_emitted"),
          (edit(PROC, "NoRepeatNGramLogitsProcessor.__call__",
                ("prefix = input_ids[:, cur_len + 1 - self.ngram_size :]",
                 "prefix = input_ids[:, cur_len - self.ngram_size : cur_len - 1]")),),
          notes="modelled on facebookresearch/fairseq#5206 (\"Repetitions are generated although no_repeat_ngram_size "
                "is activated\": ngram_repeat_block.py sliced the tokens to check at the wrong offset, "
                "`cpu_tokens[bbsz_idx][-(no_repeat_ngram_size - 1):]` instead of `[check_start_pos:step + 1]`)"),
    Fault("begin-suppress-one-late", "sampling",
          "begin_suppress_tokens are suppressed one position late: at the second generated token instead of the "
          "first (begin_index = prompt length + 1 whether or not a BOS is forced)",
          Catch("sampling", "llama-target.plain.constraints.*", "exact_emitted"),
          (edit(GEN, "GenerationMixin._get_logits_processor",
                ("begin_index = input_ids_seq_length\n", "begin_index = input_ids_seq_length + 1\n")),),
          notes="modelled on the begin-index arithmetic of `_get_logits_processor` (transformers PR #21455, \"Fix "
                "Whisper Positional Embeddings when using decoder context\", which re-indexed the forced tokens by "
                "the decoder prompt's length there): an off-by-one in that offset moves the suppression to the "
                "wrong step; the list built says begin_index P + 1 against the harness's P, and the first "
                "position's emitted distribution keeps the suppressed token"),
)
