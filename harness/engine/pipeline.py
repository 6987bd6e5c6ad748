"""The processor list a generation config asks for, built by the harness: `build(config, prompt)` ->
[Processor, ...] (harness/engine/processors.py), resolved for one batch-1 call after `prompt` (P its
length). This is the oracle the white-box and loading suites hold the version's own list to: which
setting builds which processor, with which parameters and in which order, from the settings'
documented meaning - never by running transformers' `_get_logits_processor`.

The rule, in list order (a setting at its "off" value builds nothing):

    guidance_scale != 1                 classifier_free_guidance (no engine counterpart: needs a second forward)
    sequence_bias                       sequence_bias, biases = {sequence: b}
    encoder_repetition_penalty != 1     encoder_repetition_penalty on the prompt's tokens
    repetition_penalty != 1             repetition_penalty (ignore = 0: the harness's calls are unpadded)
    no_repeat_ngram_size > 0            no_repeat_ngram
    encoder_no_repeat_ngram_size > 0    encoder_no_repeat_ngram, the prompt's n-grams
    bad_words_ids                       bad_words, a single end token removed from the list
    min_length > 0 (an end token)       min_length
    min_new_tokens > 0 (an end token)   min_new_tokens, start = P
    forced_bos_token_id                 forced_bos
    forced_eos_token_id                 forced_eos at max_length
    remove_invalid_values               remove_invalid_values
    exponential_decay_length_penalty    (s, f): start = P + s, factor f, the end tokens
    suppress_tokens                     suppress_tokens
    begin_suppress_tokens               begin_suppress_tokens at begin = P (P + 1 for a one-token
                                        prompt with a forced BOS)
  do_sample only, each keeping >= 1 token (num_beams > 1: the number of end tokens + 1):
    temperature != 1, top_h, top_k != 0, top_p < 1, min_p, typical_p < 1, 0 < epsilon_cutoff < 1,
    0 < eta_cutoff < 1
  then
    watermarking_config                 watermark (no engine counterpart)
    renormalize_logits                  renormalize_logits (last)

`config` is a plain mapping of generation-config attributes (a missing key = unset); its end tokens
are `eos_token_id` (an int or a list).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.engine.processors import Processor, prompt_ngrams

P = Processor.of


def end_tokens(config: Mapping[str, Any]) -> tuple[int, ...]:
    eos = config.get("eos_token_id")
    if eos is None:
        return ()
    return (int(eos),) if isinstance(eos, int) else tuple(int(e) for e in eos)


def _on(config: Mapping[str, Any], key: str, off: Any = None) -> bool:
    v = config.get(key)
    return v is not None and v != off


def _biases(value: Any) -> tuple[tuple[tuple[int, ...], float], ...]:
    pairs = value.items() if isinstance(value, Mapping) else ((s, b) for s, b in value)
    return tuple(sorted({tuple(int(t) for t in s): float(b) for s, b in pairs}.items()))


def logit_processors(config: Mapping[str, Any], prompt: Sequence[int]) -> list[Processor]:
    """The processors any decoding strategy gets (the first block of the module docstring)."""
    c, n, eos, out = config, len(prompt), end_tokens(config), []
    if _on(c, "guidance_scale", 1):
        out.append(P("classifier_free_guidance", scale=c["guidance_scale"]))
    if c.get("sequence_bias"):
        out.append(P("sequence_bias", biases=_biases(c["sequence_bias"])))
    if _on(c, "encoder_repetition_penalty", 1.0):
        out.append(P("encoder_repetition_penalty", penalty=c["encoder_repetition_penalty"], prompt=tuple(prompt)))
    if _on(c, "repetition_penalty", 1.0):
        out.append(P("repetition_penalty", penalty=c["repetition_penalty"], ignore=0))
    if (c.get("no_repeat_ngram_size") or 0) > 0:
        out.append(P("no_repeat_ngram", n=c["no_repeat_ngram_size"]))
    if (c.get("encoder_no_repeat_ngram_size") or 0) > 0:
        out.append(P("encoder_no_repeat_ngram", ngrams=prompt_ngrams(prompt, c["encoder_no_repeat_ngram_size"])))
    if c.get("bad_words_ids") is not None:
        words = tuple(sorted({tuple(w) for w in c["bad_words_ids"] if all(list(w) != [e] for e in eos)}))
        out.append(P("bad_words", words=words))
    if (c.get("min_length") or 0) > 0 and eos:
        out.append(P("min_length", length=c["min_length"], eos=eos))
    if (c.get("min_new_tokens") or 0) > 0 and eos:
        out.append(P("min_new_tokens", start=n, n=c["min_new_tokens"], eos=eos))
    if c.get("forced_bos_token_id") is not None:
        out.append(P("forced_bos", token=c["forced_bos_token_id"]))
    if c.get("forced_eos_token_id") is not None:
        forced = c["forced_eos_token_id"]
        out.append(P("forced_eos", max_length=c.get("max_length"),
                     eos=(forced,) if isinstance(forced, int) else tuple(forced)))
    if c.get("remove_invalid_values") is True:
        out.append(P("remove_invalid_values"))
    if c.get("exponential_decay_length_penalty") is not None:
        s, f = c["exponential_decay_length_penalty"]
        out.append(P("exponential_decay_length_penalty", start=n + int(s), factor=float(f), eos=eos))
    if c.get("suppress_tokens") is not None:
        out.append(P("suppress_tokens", tokens=tuple(c["suppress_tokens"])))
    if c.get("begin_suppress_tokens") is not None:
        begin = n if (n > 1 or c.get("forced_bos_token_id") is None) else n + 1
        out.append(P("begin_suppress_tokens", tokens=tuple(c["begin_suppress_tokens"]), begin=begin))
    return out


def sampling_processors(config: Mapping[str, Any]) -> list[Processor]:
    """The processors only sampling gets (do_sample), in order."""
    c = config
    beams = c.get("num_beams") or 1
    keep = 1 if beams <= 1 else len(end_tokens(c)) + 1
    out = []
    if _on(c, "temperature", 1.0):
        out.append(P("temperature", temperature=c["temperature"]))
    if c.get("top_h") is not None:
        out.append(P("top_h", top_h=c["top_h"], top_n=100))
    if _on(c, "top_k", 0):
        out.append(P("top_k", top_k=c["top_k"], keep=keep))
    if c.get("top_p") is not None and c["top_p"] < 1.0:
        out.append(P("top_p", top_p=c["top_p"], keep=keep))
    if c.get("min_p") is not None:
        out.append(P("min_p", min_p=c["min_p"], keep=keep))
    if c.get("typical_p") is not None and c["typical_p"] < 1.0:
        out.append(P("typical_p", typical_p=c["typical_p"], keep=keep))
    if c.get("epsilon_cutoff") is not None and 0.0 < c["epsilon_cutoff"] < 1.0:
        out.append(P("epsilon_cutoff", epsilon=c["epsilon_cutoff"], keep=keep))
    if c.get("eta_cutoff") is not None and 0.0 < c["eta_cutoff"] < 1.0:
        out.append(P("eta_cutoff", epsilon=c["eta_cutoff"], keep=keep))
    return out


def build(config: Mapping[str, Any], prompt: Sequence[int]) -> list[Processor]:
    """The whole list (module docstring) for one call after `prompt`."""
    out = logit_processors(config, prompt)
    if config.get("do_sample"):
        out += sampling_processors(config)
    if config.get("watermarking_config") is not None:
        out.append(P("watermark"))
    if config.get("renormalize_logits") is True:
        out.append(P("renormalize_logits"))
    return out


CONFIG_KEYS = ("guidance_scale", "sequence_bias", "encoder_repetition_penalty", "repetition_penalty",
               "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids", "min_length",
               "min_new_tokens", "forced_bos_token_id", "forced_eos_token_id", "max_length", "remove_invalid_values",
               "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens", "do_sample",
               "num_beams", "temperature", "top_h", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff",
               "eta_cutoff", "watermarking_config", "renormalize_logits", "eos_token_id")


def requested(received: Mapping[str, Any], asked: Mapping[str, Any], prompt_length: int) -> dict[str, Any]:
    """The config one call asks for: the config the version handed its processor builder (its defaults
    and the model's generation config in it), every CONFIG_KEYS setting the caller passed taking the
    caller's value - so a setting the version dropped on the way is still expected - and max_length
    = P + max_new_tokens when the caller gave max_new_tokens."""
    out = {**received, **{k: v for k, v in asked.items() if k in CONFIG_KEYS}}
    if asked.get("max_new_tokens") is not None:
        out["max_length"] = prompt_length + int(asked["max_new_tokens"])
    return out
