"""Catalogue faults of stopping and streaming (suites/test_stopping.py).

Each `Fault` row names what it breaks, the `Catch` that must report it and the upstream bug it
is modelled on; harness/faults/catalogue.py joins every family's `FAULTS`."""

from __future__ import annotations

from harness.faults.patches import Catch, Fault, edit
from harness.faults.targets import GEN, PROC, STOP, STREAM

FAULTS: tuple[Fault, ...] = (
    # stopping (suites/test_stopping.py: where each row stops, against the library's unstopped run) ---
    Fault("stop-string-single-char-raises", "stopping",
          "StopStringCriteria's preprocessing takes max() over the stop strings' internal positions without its "
          "fallback: a one-character stop string has none, so generate(stop_strings=...) raises ValueError",
          Catch("stopping", "llama-target.stop.stop-string-never", "error"),
          (edit(STOP, "StopStringCriteria._stop_string_create_embedding_vec",
                ("max_valid_positions = max(all_valid_positions) if all_valid_positions else 1",
                 "max_valid_positions = max(all_valid_positions)")),),
          notes="re-creates transformers #31435 (\"stop_strings Argument in model.generate() Results in Exception if "
                "Generation Completes Without stop_string Being Generated\", 4.41.2: stop_strings=\"a\"), fixed by "
                "#31448 (\"Fix single letter stop strings\": the max() gets a minimum of 1) - the fix reverted"),
    Fault("eos-list-first-id-only", "stopping",
          "EosTokenCriteria keeps only the first id of an eos list: generation runs past the other eos ids "
          "(a list like Llama 3's [<|end_of_text|>, <|eot_id|>] stops only on the first)",
          Catch("stopping", "llama-target.stop.eos-list", "stops_as_specified"),
          (edit(STOP, "EosTokenCriteria.__init__",
                ("self.eos_token_id = eos_token_id", "self.eos_token_id = eos_token_id[:1]")),),
          notes="modelled on transformers #26959 (\"Generation doesn't stop despite provide stop tokens\": an eos "
                "list that did not stop generation on each of its ids) - the eos mismatch that lets generation run "
                "unbounded"),
    Fault("min-new-tokens-released-late", "stopping",
          "min_new_tokens releases the eos ids one step late: min_new_tokens=N forces N + 1 tokens before an eos",
          Catch("stopping", "llama-target.stop.min-new-tokens-release", "stops_as_specified"),
          (edit(PROC, "MinNewTokensLengthLogitsProcessor.__call__",
                ("if new_tokens_length < self.min_new_tokens:", "if new_tokens_length <= self.min_new_tokens:")),),
          notes="imitates vllm-project/vllm #46243 (\"Fix min_tokens off-by-one in the V2 GPU sampler\": stop tokens "
                "were suppressed while pos < min_len with pos one behind the length, so min_tokens=N forced N + 1 "
                "non-EOS tokens) in transformers' own MinNewTokensLengthLogitsProcessor"),
    Fault("stopping-criteria-one-step-late", "stopping",
          "the decoding loop judges its stopping criteria on the ids without the token just appended: eos, "
          "max_length and stop strings all stop one step late, while every criterion's own verdict reads on time",
          Catch("stopping", "llama-target.stop.*", "stops_as_specified"),
          (edit(GEN, "GenerationMixin._sample",
                ("unfinished_sequences = unfinished_sequences & ~stopping_criteria(input_ids, scores)",
                 "unfinished_sequences = unfinished_sequences & ~stopping_criteria(input_ids[:, :-1], scores)")),),
          notes="modelled on transformers #27785 (\"max_new_tokens is set, but longer output is generated\": rows "
                "longer than the limit asked for) and on 5.24's DeferredStopCheck, which reports the stop one step "
                "late by design and must undo that step - here the late verdict without the undo"),
    # streaming (suites/test_stopping.py: the streamed text against the tokenizer's decode) -----------
    Fault("streamer-skip-prompt-streams-prompt", "streaming",
          "TextStreamer.put clears its skip_prompt flag on the prompt but does not return: the prompt is streamed "
          "although skip_prompt=True (TextIteratorStreamer inherits it)",
          Catch("stopping", "llama-target.stream.plain", "streamed_equals_decode"),
          (edit(STREAM, "TextStreamer.put",
                ("self.next_tokens_are_prompt = False\n        return", "self.next_tokens_are_prompt = False")),),
          notes="modelled on huggingface/trl #1866 (a chat CLI streaming the user's prompt back: TextIteratorStreamer "
                "without a working skip_prompt; fixed by trl #2193 passing skip_prompt=True)"),
    Fault("assisted-stream-drops-bonus-token", "streaming",
          "assisted decoding streams the accepted drafts of each step but not the target's own next token "
          "(the returned ids keep it)",
          Catch("stopping", "llama-target.stream.assisted", "streamed_equals_decode"),
          (edit(GEN, "GenerationMixin._assisted_decoding",
                ("streamer.put(valid_tokens.cpu())", "streamer.put(valid_tokens[:, :-1].cpu())")),),
          notes="modelled on neuralmagic/deepsparse #1292 (\"streaming skips generated token added from last prompt "
                "token\": the token the model adds after the last known token was returned but never streamed), in "
                "the one loop that streams several tokens a step"),
    Fault("streamer-one-put-late", "streaming",
          "TextStreamer.put hands out the text the previous put() formed, and end() the rest: the same text in the "
          "same pieces, each one token late (TextIteratorStreamer inherits it)",
          Catch("stopping", "llama-target.stream.plain", "pieces_in_time"),
          (edit(STREAM, "TextStreamer.put",
                ("self.on_finalized_text(printable_text)",
                 "printable_text, self._late = getattr(self, '_late', ''), printable_text\n"
                 "    self.on_finalized_text(printable_text)")),
           edit(STREAM, "TextStreamer.end",
                ("self.next_tokens_are_prompt = True",
                 "self.next_tokens_are_prompt = True\n"
                 "    printable_text, self._late = getattr(self, '_late', '') + printable_text, ''"))),
          notes="modelled on transformers PR #36708 (\"Fix long lagging when streaming text without spaces\": the "
                "streamer's text arrived later than it was formed) and openvinotoolkit/openvino.genai PR #4097 "
                "(\"Reduce streamer token delay for lower TTFT\": its TextStreamer held its output three tokens "
                "back): the joined text and the pieces are right, only when each arrived is wrong - seen while "
                "generate() runs"),
    Fault("streamer-holds-text-until-end", "streaming",
          "TextStreamer.put caches the new ids and returns: nothing is handed out until end(), which flushes the "
          "whole text at once (TextIteratorStreamer inherits it) - the text is right, it just is not streamed",
          Catch("stopping", "llama-target.stream.plain", "pieces_as_formed"),
          (edit(STREAM, "TextStreamer.put",
                ("self.token_cache.extend(value.tolist())", "self.token_cache.extend(value.tolist()); return")),),
          notes="modelled on transformers #28849 (\"TextStreamer: An option to print / put every single token\") and "
                "PR #36708 (\"Fix long lagging when streaming text without spaces\": TextStreamer refused to flush its "
                "buffer until a space came, so text without one arrived only at the end) - taken to every text"),
)
