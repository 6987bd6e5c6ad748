"""The installed transformers' logits processors read as the engine's (harness/engine/processors.py
`Processor`): each processor object's class and attributes -> a resolved engine entry, so the list a
version built can be compared with the one the harness builds from the generation config
(harness/engine/pipeline.py), and `config_values` - the generation config a list was built from, as
plain data. Reading only: nothing here decides what a list should hold.

A class this module does not know reads as `unknown:<class name>` (the engine cannot apply it: the
exact side then says so), never silently dropped.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from harness.engine.pipeline import CONFIG_KEYS
from harness.engine.processors import Processor

P = Processor.of


def _ids(v: Any) -> tuple[int, ...]:
    if v is None:
        return ()
    if isinstance(v, torch.Tensor):
        return tuple(int(x) for x in v.reshape(-1).tolist())
    if isinstance(v, int):
        return (v,)
    return tuple(int(x) for x in v)


def _num(v: Any) -> float:
    return float(v.item()) if isinstance(v, torch.Tensor) else float(v)


def _ignore(v: Any) -> int:
    """RepetitionPenaltyLogitsProcessor's prompt_ignore_length: an int, or one per row (batch 1: row 0)."""
    if v is None:
        return 0
    return int(v.reshape(-1)[0]) if isinstance(v, torch.Tensor) else int(v)


def _biases(p: Any) -> tuple[tuple[tuple[int, ...], float], ...]:
    return tuple(sorted((tuple(int(t) for t in s), float(b)) for s, b in dict(p.sequence_bias).items()))


def _ngrams(p: Any) -> tuple[tuple[int, ...], ...]:
    """EncoderNoRepeatNGramLogitsProcessor's n-grams of row 0 ({prefix: [next, ...]} -> n-grams)."""
    table = p.generated_ngrams[0] if p.generated_ngrams else {}
    return tuple(sorted({(*prefix, int(x)) for prefix, nexts in table.items() for x in nexts}))


def _keep(p: Any) -> int:
    return int(getattr(p, "min_tokens_to_keep", 1))


READERS: dict[str, Any] = {
    "SequenceBiasLogitsProcessor": lambda p: P("sequence_bias", biases=_biases(p)),
    "NoBadWordsLogitsProcessor": lambda p: P("bad_words", words=tuple(s for s, b in _biases(p) if math.isinf(b))),
    "EncoderRepetitionPenaltyLogitsProcessor": lambda p: P("encoder_repetition_penalty", penalty=1.0 / _num(p.penalty),
                                                           prompt=_ids(p.encoder_input_ids[0])),
    "RepetitionPenaltyLogitsProcessor": lambda p: P("repetition_penalty", penalty=_num(p.penalty),
                                                    ignore=_ignore(getattr(p, "prompt_ignore_length", None))),
    "NoRepeatNGramLogitsProcessor": lambda p: P("no_repeat_ngram", n=int(p.ngram_size)),
    "EncoderNoRepeatNGramLogitsProcessor": lambda p: P("encoder_no_repeat_ngram", ngrams=_ngrams(p)),
    "MinLengthLogitsProcessor": lambda p: P("min_length", length=int(p.min_length), eos=_ids(p.eos_token_id)),
    "MinNewTokensLengthLogitsProcessor": lambda p: P("min_new_tokens", start=int(p.prompt_length_to_skip),
                                                     n=int(p.min_new_tokens), eos=_ids(p.eos_token_id)),
    "ForcedBOSTokenLogitsProcessor": lambda p: P("forced_bos", token=int(p.bos_token_id)),
    "ForcedEOSTokenLogitsProcessor": lambda p: P("forced_eos", max_length=p.max_length, eos=_ids(p.eos_token_id)),
    "InfNanRemoveLogitsProcessor": lambda p: P("remove_invalid_values"),
    "ExponentialDecayLengthPenalty": lambda p: P("exponential_decay_length_penalty", start=int(p.regulation_start),
                                                 factor=_num(p.regulation_factor), eos=_ids(p.eos_token_id)),
    "SuppressTokensLogitsProcessor": lambda p: P("suppress_tokens", tokens=_ids(p.suppress_tokens)),
    "SuppressTokensAtBeginLogitsProcessor": lambda p: P("begin_suppress_tokens", tokens=_ids(p.begin_suppress_tokens),
                                                        begin=int(p.begin_index)),
    "TemperatureLogitsWarper": lambda p: P("temperature", temperature=_num(p.temperature)),
    "TopHLogitsWarper": lambda p: P("top_h", top_h=_num(p.top_h), top_n=int(p.top_n)),
    "TopKLogitsWarper": lambda p: P("top_k", top_k=int(p.top_k), keep=_keep(p)),
    "TopPLogitsWarper": lambda p: P("top_p", top_p=_num(p.top_p), keep=_keep(p)),
    "MinPLogitsWarper": lambda p: P("min_p", min_p=_num(p.min_p), keep=_keep(p)),
    "TypicalLogitsWarper": lambda p: P("typical_p", typical_p=_num(p.mass), keep=_keep(p)),
    "EpsilonLogitsWarper": lambda p: P("epsilon_cutoff", epsilon=_num(p.epsilon), keep=_keep(p)),
    "EtaLogitsWarper": lambda p: P("eta_cutoff", epsilon=_num(p.epsilon), keep=_keep(p)),
    "LogitNormalization": lambda p: P("renormalize_logits"),
    "UnbatchedClassifierFreeGuidanceLogitsProcessor": lambda p: P("classifier_free_guidance",
                                                                  scale=_num(p.guidance_scale)),
}


def read(processor: Any) -> Processor:
    """One processor object as the engine's entry (`unknown:<class>` when not known here)."""
    name = type(processor).__name__
    if "Watermark" in name:
        return P("watermark")
    reader = READERS.get(name)
    if reader is None:
        return P(f"unknown:{name}")
    try:
        return reader(processor)
    except (AttributeError, TypeError, ValueError, IndexError) as exc:  # the class changed its attributes
        return P(f"unreadable:{name}", why=f"{type(exc).__name__}: {exc}")


def as_engine(processors: Iterable[Any]) -> list[Processor]:
    """A LogitsProcessorList as the engine's list, in order."""
    return [read(p) for p in processors]


def _plain(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.tolist()
    if isinstance(v, dict):
        return {tuple(k) if isinstance(k, (list, tuple)) else k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return repr(v)  # an object (a watermarking config): present, not read


def config_values(generation_config: Any) -> dict[str, Any]:
    """The settings of a GenerationConfig the pipeline is built from (CONFIG_KEYS; an attribute the
    version does not have reads as unset)."""
    return {k: _plain(getattr(generation_config, k, None)) for k in CONFIG_KEYS}


@contextmanager
def processor_lists(model: Any, sink: list[dict[str, Any]]) -> Iterator[None]:
    """Record the first logits-processor list generate() builds on `model` (read as engine entries),
    the generation config and the prompt length it was built from, by wrapping `_get_logits_processor`
    on the model's own class for the block; the class is left as it was."""
    cls = type(model)
    original = cls._get_logits_processor
    had_own = "_get_logits_processor" in vars(cls)
    signature = inspect.signature(original)

    def _get_logits_processor(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = original(self, *args, **kwargs)
        if not sink:
            bound = signature.bind_partial(self, *args, **kwargs).arguments
            sink.append({"built": [p.spec() for p in as_engine(out)],
                         "config": config_values(bound.get("generation_config")),
                         "prompt_length": bound.get("input_ids_seq_length")})
        return out

    cls._get_logits_processor = _get_logits_processor
    try:
        yield
    finally:
        if had_own:
            cls._get_logits_processor = original
        else:
            del cls._get_logits_processor
