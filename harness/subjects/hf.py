"""The installed transformers as a subject: run generate() paths, probe what this version supports.

Everything version-specific lives here, behind small functions that return plain data:
`capabilities()` says which generation features the installed version accepts;
`generate()` runs one path and returns tokens, per-step margins, drafts and the number of
target forward passes (counted by wrapping the model's forward); an exception raised by
transformers is returned as data (`error`), never raised into the suite.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass, field
from typing import Any

import torch


def version() -> str:
    import transformers

    return transformers.__version__


@functools.cache
def capabilities() -> dict[str, bool]:
    """Feature -> accepted by the installed transformers (by introspection, not version numbers);
    computed once per process. Callers must not mutate the returned dict."""
    from transformers import GenerationConfig
    from transformers.generation import candidate_generator as cg

    fields = set(inspect.signature(GenerationConfig.__init__).parameters) | set(vars(GenerationConfig()))
    return {
        "assistant_model": True,
        "prompt_lookup": hasattr(cg, "PromptLookupCandidateGenerator"),
        "use_mtp": hasattr(cg, "MTPCandidateGenerator") and "use_mtp" in fields,
        "assistant_ensemble_weight": "assistant_ensemble_weight" in fields,
        "static_cache": True,
    }


@dataclass
class Generated:
    tokens: list[int] = field(default_factory=list)  # new tokens only
    margins: list[float] = field(default_factory=list)  # top-1 minus top-2 of the scores of each new token
    first_logits: list[list[float]] = field(default_factory=list)  # processed scores of the first steps
    drafts: list[list[int]] = field(default_factory=list)  # candidate tokens proposed at each step
    target_forwards: int = 0
    error: dict[str, str] | None = None  # {"type": ..., "message": ...} when generate() raised


@contextlib.contextmanager
def record_drafts(sink: list[list[int]]):
    """Record the new candidate tokens of every candidate generator's get_candidates call."""
    from transformers.generation import candidate_generator as cg

    classes = [c for c in vars(cg).values() if inspect.isclass(c) and "get_candidates" in vars(c)]
    originals = {c: c.get_candidates for c in classes}

    def wrap(original):
        def get_candidates(self, input_ids, *args, **kwargs):
            out = original(self, input_ids, *args, **kwargs)
            ids = out[0] if isinstance(out, tuple) else out
            sink.append(ids[0, input_ids.shape[1]:].tolist())
            return out
        return get_candidates

    for c, original in originals.items():
        c.get_candidates = wrap(original)
    try:
        yield sink
    finally:
        for c, original in originals.items():
            c.get_candidates = original


@contextlib.contextmanager
def count_forwards(model):
    counter = {"n": 0}
    original = model.forward

    @functools.wraps(original)  # generate() inspects forward's signature
    def forward(*args, **kwargs):
        counter["n"] += 1
        return original(*args, **kwargs)

    model.forward = forward
    try:
        yield counter
    finally:
        del model.forward


def _margin(scores: torch.Tensor) -> float:
    top = torch.topk(scores.float(), 2).values
    return float(top[0] - top[1])


def generate(model, input_ids: torch.Tensor, max_new_tokens: int, *, assistant=None, prompt_lookup: int | None = None,
             use_mtp: bool = False, ensemble_weight: float | None = None, draft_tokens: int | None = None,
             do_sample: bool = False, seed: int | None = None, cache: str = "dynamic",
             first_logit_steps: int = 0) -> Generated:
    kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=do_sample, return_dict_in_generate=True,
                                  output_scores=True, pad_token_id=model.config.pad_token_id)
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    if assistant is not None:
        kwargs["assistant_model"] = assistant
    if prompt_lookup is not None:
        kwargs["prompt_lookup_num_tokens"] = prompt_lookup
    if use_mtp:
        kwargs["use_mtp"] = True
    if ensemble_weight is not None:
        kwargs["assistant_ensemble_weight"] = ensemble_weight
    if draft_tokens is not None and assistant is not None:
        # pin the draft schedule: a constant draft length, no confidence-threshold early stop
        assistant.generation_config.num_assistant_tokens = draft_tokens
        assistant.generation_config.num_assistant_tokens_schedule = "constant"
        assistant.generation_config.assistant_confidence_threshold = 0.0
    out = Generated()
    if seed is not None:
        torch.manual_seed(seed)
    try:
        with record_drafts(out.drafts), count_forwards(model) as counter, torch.no_grad():
            # with an explicit attention mask, as a tokenizer's output would pass it (5.24's use_mtp
            # path raises KeyError('position_ids') without one)
            result = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
    except Exception as exc:  # noqa: BLE001 - an error is an observation, recorded as data
        out.error = {"type": type(exc).__name__, "message": str(exc).splitlines()[0][:300] if str(exc) else ""}
        return out
    out.tokens = result.sequences[0, input_ids.shape[1]:].tolist()
    out.margins = [_margin(s[0]) for s in result.scores]
    out.first_logits = [s[0].float().tolist() for s in result.scores[:first_logit_steps]]
    out.target_forwards = counter["n"]
    return out
