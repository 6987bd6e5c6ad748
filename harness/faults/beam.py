"""Catalogue faults of beam search (suites/test_beam.py).

Each `Fault` row names what it breaks, the `Catch` that must report it and the upstream bug it
is modelled on; harness/faults/catalogue.py joins every family's `FAULTS`."""

from __future__ import annotations

from harness.faults.patches import Catch, Fault, edit
from harness.faults.targets import GEN

FAULTS: tuple[Fault, ...] = (
    # beam search (suites/test_beam.py: against the harness's reference beam search) -------------------
    Fault("beam-length-penalty-counts-prompt", "beam",
          "a finished hypothesis' score is divided by (prompt + generated length) ** length_penalty instead of its "
          "generated length: sequences_scores shrink, and a decoder-only model's beam search prefers short rows",
          Catch("beam", "llama-target.beam.n3", "scores_vs_reference"),
          (edit(GEN, "GenerationMixin._update_finished_beams",
                ("topk_log_probs / ((cur_len + 1 - decoder_prompt_len) ** length_penalty)",
                 "topk_log_probs / ((cur_len + 1) ** length_penalty)")),),
          notes="re-creates transformers #26624 (\"Beam search calculates mean logprobs wrong?\": the sum of the "
                "generated log-probs divided by the whole sequence length, prompt included), fixed by #27351 "
                "(\"Fix beam score calculation issue for decoder-only models\": decoder_prompt_len) - the fix "
                "reverted"),
    Fault("beam-indices-no-batch-offset", "beam",
          "the beam index stored for each new token is the beam's slot in its own batch row, without the row's "
          "offset (row * num_beams): beam_indices of every row but the first point into the first row, and the "
          "cache is reordered from the first row's beams",
          Catch("beam", "llama-target.beam.n3.batch", "beam_indices_vs_reference"),
          (edit(GEN, "GenerationMixin._get_top_k_continuations",
                ("batch_modified_indices = topk_current_beam_indices + batch_offset",
                 "batch_modified_indices = topk_current_beam_indices")),),
          notes="re-creates transformers #18839 (\"BUG for beam_indices from model.generate()\": with a batch of 2 "
                "the beam indices of the second row were wrong, so compute_transition_beam_scores disagreed with "
                "sequences_scores), fixed by #18851 (\"Generate: get the correct beam index on eos token\": the "
                "index was right only for the first batch member)"),
    Fault("beam-early-stopping-never-as-false", "beam",
          "early_stopping=\"never\" judges the best running beam at the current length, as early_stopping=False "
          "does, instead of the longest possible one: with a positive length penalty the search stops while a "
          "longer hypothesis could still win",
          Catch("beam", "llama-target.beam.n3.early-never", "tokens_vs_reference"),
          (edit(GEN, "GenerationMixin._check_early_stop_heuristic",
                ("best_hypothetical_length = max_length - decoder_prompt_len",
                 "best_hypothetical_length = cur_len - decoder_prompt_len")),),
          notes="re-creates the PyTorch side of transformers #20901 (\"Generate: correct beam search best possible "
                "score computation and handling\": the best possible score taken at the current length although a "
                "positive length penalty rewards longer rows), settled by #21368 (\"Generate: standardize beam "
                "search behavior across frameworks\": early_stopping=\"never\" uses the maximum length)"),
    Fault("beam-heuristic-across-batch", "beam",
          "a batch row whose early-stopping heuristic is satisfied (no running beam can beat its finished ones) "
          "still takes new finished hypotheses while another row runs on: a row's result depends on the batch",
          Catch("beam", "llama-target.beam.n3.batch*", "tokens_vs_reference"),
          (edit(GEN, "GenerationMixin._update_finished_beams",
                ("topk_log_probs += (~is_early_stop_heuristic_unsatisfied).to(torch.float32) * -1.0e9",
                 "topk_log_probs += (~is_early_stop_heuristic_unsatisfied.any()).to(torch.float32) * -1.0e9")),),
          notes="re-creates transformers #38778 (\"fix(generation): stop beam search per-instance when heuristic "
                "satisfied\": since the vectorised rewrite #35802 (4.50) the heuristic was judged across the whole "
                "batch, so a finished row kept taking hypotheses - batch-dependent output, parity with < 4.50 "
                "restored by the fix); the class of #38116 (\"4.51.2 vs 4.51 Beam search is sometimes different\": "
                "batched beam search differing from 4.46 on ~10 % of inputs). Caught on an empty store by "
                "rule_on_own_scores too. Which row finishes while the other runs on depends on the numbers: on n3.batch "
                "(short-1, short-0) the fault changes nothing in bf16 (every field equals a clean bf16 run's) - "
                "measured, hence the zoo's second batch n3.batch2 (short-3, short-0; harness/cases/ "
                "BEAM_SECOND_BATCH), where it shows in fp32 and bf16 and rule_on_own_scores catches it in both"),
)
