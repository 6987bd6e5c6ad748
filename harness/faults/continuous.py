"""Catalogue faults of continuous batching: generate_batch's processors, slots and stops
(suites/test_continuous.py: each request against the engine's decode of it alone).

Each `Fault` row names what it breaks, the `Catch` that must report it and the upstream bug it
is modelled on; harness/faults/catalogue.py joins every family's `FAULTS`. The edits are of 5.24's
continuous-batching modules (generation/continuous_batching/); the versions before it that run on
this CPU run none of this path (4.57 / 5.0 fail sizing the cache, 5.13 / 5.14 without psutil), so
an edit that does not apply there is a FaultError, never a silent pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.faults.patches import Catch, Fault, Wrap, edit
from harness.faults.targets import CB_API, CB_PROC, CB_REQ, CB_RUNNER, CB_UTILS, PROC


def _one_request_at_a_time(generate_batch: Callable[..., Any]) -> Callable[..., Any]:
    """generate_batch serves its requests one after another, each a batch of its own (the same tokens)."""
    import functools

    @functools.wraps(generate_batch)
    def wrapped(self: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        out: dict[str, Any] = {}
        for i, row in enumerate(inputs):
            for key, value in (generate_batch(self, [row], *args, **kwargs) or {}).items():
                out[f"{i}-{key}"] = value
        return out
    return wrapped


def _first_request_alone(generate_batch: Callable[..., Any]) -> Callable[..., Any]:
    """generate_batch serves its first request alone, then the others together (the same tokens)."""
    import functools

    @functools.wraps(generate_batch)
    def wrapped(self: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        out: dict[str, Any] = {}
        for i, part in enumerate((list(inputs)[:1], list(inputs)[1:])):
            for key, value in (generate_batch(self, part, *args, **kwargs) or {}).items() if part else ():
                out[f"{i}-{key}"] = value
        return out
    return wrapped


FAULTS: tuple[Fault, ...] = (
    Fault("cb-processor-dropped-silently", "batching",
          "continuous batching drops a logits processor whose support is unknown (SuppressTokensLogitsProcessor) "
          "without the warning it gives for the processors it declares unsupported: the requests generate the "
          "suppressed token",
          Catch("continuous", "llama-target.cb.processors", "tokens_as_engine"),
          (edit(CB_PROC, "ContinuousBatchingLogitsProcessorList._validate_processors",
                ('logger.warning(f"Processor {class_name} might not be supported by CB.")\n'
                 '            filtered_processors.append(processor)', "pass")),),
          notes="the class of transformers #43457 (\"apply logits processors in packed batches\": in continuous "
                "batching \"processors are either broken or disabled in `transformers serve`\") and of #45026, whose "
                "`drop_unsupported_processors` drops a processor marked unsupported with a warning - here one is "
                "dropped with none, so only the tokens (against the engine applying it) show it"),
    Fault("cb-token-from-neighbour-slot", "batching",
          "the batch update hands each request the token sampled for the next request's slot (an index off by "
          "one in the packed batch): every request continues another request's stream",
          Catch("continuous", "llama-target.cb.greedy", "tokens_as_engine"),
          (edit(CB_API, "ContinuousBatchProcessor.update_batch",
                ("token = new_tokens[current_logits_index]",
                 "token = new_tokens[(current_logits_index + 1) % len(requests_in_batch)]")),),
          notes="the class of Blaizzy/mlx-vlm #1574 (\"structured output logits processors become misaligned when "
                "generation batches are extended\": concurrent requests affect one another) and #1441 (per-request "
                "state reindexed with another request's indices under continuous batching), in transformers' own "
                "batch update"),
    Fault("cb-eos-list-first-only", "batching",
          "a request keeps only the first id of an eos list: a request whose stream reaches another end token "
          "runs on to max_new_tokens",
          Catch("continuous", "llama-target.cb.greedy", "tokens_as_engine"),
          (edit(CB_REQ, "RequestState.__post_init__",
                ("for token_id in self.eos_token_id:", "for token_id in self.eos_token_id[:1]:")),),
          notes="the class of Blaizzy/mlx-vlm #309 (\"stop generation on every EOS id declared in model config\": "
                "generation stopped only on the tokenizer's single eos while the config listed two) and #2112 (the "
                "configured eos replacing the tokenizer's instead of their union, in the server's continuous-batching "
                "path too)"),
    Fault("cb-eos-stops-batch-mates", "batching",
          "when one request finishes, every request of its batch is cut to one more token: an early eos of one "
          "request stops the others",
          Catch("continuous", "llama-target.cb.greedy", "tokens_as_engine"),
          (edit(CB_API, "ContinuousBatchProcessor.update_batch",
                ("self.scheduler.finish_request(state.request_id)\n",
                 "self.scheduler.finish_request(state.request_id)\n"
                 "                [setattr(f.state, '_new_tokens_limit', min(f.state._new_tokens_limit, "
                 "f.state.generated_len() + 1)) for f in requests_in_batch]\n")),),
          notes="the class of vllm-project/tpu-inference #3401 (the fused continuous-batching decode window "
                "\"early-exits\" whenever any sequence reaches EOS; run past it, finished sequences were reseeded "
                "from padding) and of transformers #26959's stop-string criteria that \"stops a whole batch when a "
                "sentence inside a batch\" hits one, in the per-request stop of continuous batching"),
    Fault("cb-per-request-top-k-ignored", "batching",
          "the continuous-batching top-k reads the config's k for every request: a request that asked for its own "
          "top_k=1 (greedy) samples from the config's top-3 at temperature 1.5",
          Catch("continuous", "llama-target.cb.requests", "logprobs_as_engine"),
          (edit(CB_PROC, "ContinuousBatchingTopKLogitsWarper.prepare_tensor_args",
                ('top_k = request.state.logit_processor_kwargs.get("top_k", self.top_k)', "top_k = self.top_k")),),
          notes="the class of vllm-project/vllm #14301 (\"Fix for mixed top_k batch\": requests of one batch with "
                "and without their own top_k not handled) and paiml/aprender #2027 (the batched decode path never "
                "consulted each request's temperature / top_k), in transformers' per-request processors (#45026)"),
    Fault("cb-stream-only-when-finished", "batching",
          "a request added with streaming=True gets one update, when it finishes: the tokens are right, nothing "
          "is streamed while it decodes",
          Catch("continuous", "llama-target.cb.requests", "stream_as_result"),
          (edit(CB_API, "ContinuousBatchProcessor.update_batch",
                ("if state.streaming or state.status == RequestStatus.FINISHED:",
                 "if state.status == RequestStatus.FINISHED:")),),
          notes="the class of transformers #40479 (streamed tokens of a request lost while get_result iterated the "
                "shared output queue: `transformers serve` re-queued them) and #39149 (`transformers serve` with "
                "continuous batching streaming its chunks wrongly): the final result is right, so only the updates "
                "counted against the tokens show it"),
    Fault("cb-sampler-takes-argmax", "batching",
          "continuous batching's sampler takes the most probable token where it should draw one, and reports that "
          "token's true log-probability: every draw is the mode, every reported number right",
          Catch("continuous", "llama-target.cb.sample", "draws_as_engine"),
          (edit(CB_RUNNER, "ModelRunner._sample",
                ("next_tokens = torch.multinomial(probs, num_samples=1)",
                 "next_tokens = torch.argmax(probs, dim=-1, keepdim=True)")),),
          notes="transformers PR #40692 (\"fix do_sample=True in continuous batching\": generate_batch's sampling "
                "was not sampling as asked until its _sample and the processors' shapes were fixed) and the greedy "
                "strategy hard-wired in zai-org/GLM-130B PR #13's batch generation; the drawn tokens stay in the "
                "top-k and their log-probabilities are the model's, so in_support and logprobs_as_engine pass - "
                "only the draws, tested as draws, fail"),
    Fault("cb-top-k-one-more", "batching",
          "the top-k that continuous batching applies keeps k + 1 tokens: a request sampled at top_k=3 draws the "
          "fourth token too",
          Catch("continuous", "llama-target.cb.sample", "in_support"),
          (edit(PROC, "TopKLogitsWarper.__call__",
                ("top_k = min(self.top_k, scores.size(-1))", "top_k = min(self.top_k + 1, scores.size(-1))")),),
          notes="the off-by-one of kingoflolz/mesh-transformer-jax #164 (\"top-k sampling off by 1 bug\": the mask "
                "kept k + 1 tokens), in the processors generate_batch applies (the sampling suite's top-k-one-more, "
                "served); in bf16 a fourth token drawn within the step's rounding of the third is a boundary tie, so "
                "the case samples at temperature 3, where the fourth token carries mass beyond that too (issue 58 "
                "item 9: at 1.5 and the fixed 0.75 slack the fault passed a bf16 first run)"),
    Fault("cb-one-request-at-a-time", "batching",
          "generate_batch serves its requests one after another, each in a batch of its own: the same tokens, "
          "none of continuous batching's sharing (three times the forwards)",
          Catch("continuous", "llama-target.cb.greedy", "served_together"),
          (Wrap(CB_API, "ContinuousMixin.generate_batch", _one_request_at_a_time),),
          notes="modelled on continuous batching's throughput regressions (transformers #48381: the decode fast path "
                "off for sliding-window models; the performance items of the tracker #46516): right tokens, a slower "
                "server - the tokens and the engine see nothing, the forwards counted do"),
    Fault("cb-first-request-served-alone", "batching",
          "generate_batch serves its first request alone and the others together afterwards: the same tokens, "
          "twice the forwards - fewer than one request at a time takes, more than the shared schedule",
          Catch("continuous", "llama-target.cb.greedy", "served_together"),
          (Wrap(CB_API, "ContinuousMixin.generate_batch", _first_request_alone),),
          notes="the class of EricLBuehler/candle-vllm #156 (the scheduler \"does not permit new requests to enter "
                "the pipeline while other requests are still being processed\") and torch-spyre/sendnn-inference #66 "
                "(a hard-coded max_prompt_batch_size = 1: \"we will not be able schedule more than one request in a "
                "step\"): \"fewer forwards than one at a time\" passes it (24 < 31); the shared-schedule bound (15) "
                "does not"),
    Fault("cb-cache-sized-from-no-memory", "batching",
          "the paged cache's sizing reads the CPU's total memory as None (the GPU branch's value): the generation "
          "loop dies before its first step and no request is served - generate_batch returns nothing, the manager "
          "finishes no request",
          Catch("continuous", "llama-target.cb.greedy", "served_as_engine"),
          (edit(CB_UTILS, "get_device_and_memory_breakdown",
                ('device = torch.device("cpu")', 'device = torch.device("cpu")\n        return device, None, 0, 0')),),
          notes="transformers PR #42869 (\"enable cpu paged cache\": 'Error in generation loop: unsupported operand "
                "type(s) for -: NoneType and int' on CPU, 4.57 / 5.0) brought back into 5.24, where no declared known "
                "failure covers it: before served_as_engine every reference was `not checked` with the error and a "
                "first run exited 0 (issue 58 item 10)"),
)
