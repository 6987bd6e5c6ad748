"""The installed transformers' continuous batching as a subject: `model.generate_batch(...)` (what
`transformers serve` runs through its `ContinuousBatchingManager`: paged attention, requests packed
into one token stream, each finishing on its own) on several requests at once.

- `run_batch(model, prompts, ...)` -> `Served`: per request (in the order given), the new tokens, the
  library's own error for that request, the log-probabilities it returned (where the version has
  `return_logprobs`), the continuous-batching logger's warnings (a processor it drops says so there),
  which sizing / option keywords the version took where (`setup`) and how many forward calls of the
  model the call made (`forwards`: requests served together share them); or the exception the call
  raised, as data. A setting the path does not have (num_beams) is passed like any other: what the
  version does with it - raise, warn, ignore - is the observation.

The version's API moved: 4.57 / 5.0 read the cache's sizing (`num_blocks`, `block_size`,
`max_batch_tokens`) from attributes of the GenerationConfig, 5.13+ from a `ContinuousBatchingConfig`
(`page_size` from 5.17); `continuous_batching_options` reads which the installed version has, by
introspection, and the call passes each option where it is read - never by version number. The sizes
are fixed and small (`SIZING`): left to itself the manager sizes its cache from the free memory (tens
of seconds on this CPU).

The manager's `stop()` runs `gc.collect()` (twice); over a harness process's heap that is ~0.4 s a
call, none of it the library's generation. `frozen_heap` moves the objects alive before the call into
the collector's permanent generation for the call (`gc.freeze`), so those collections only scan what
the call allocated; nothing the library does changes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import inspect
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.subjects import observe
from harness.subjects.hf import count_forwards

CB_LOGGER = "ContinuousBatchingLogger"
# the paged cache's sizes: 32 pages of 16 tokens, 128 tokens a batch - every case's requests fit at once
SIZING = {"num_blocks": 32, "page_size": 16, "max_batch_tokens": 128}
PAGE_SIZE_NAMES = ("page_size", "block_size")  # 5.17 renamed block_size to page_size


@dataclass
class Served:
    rows: list[list[int]] = field(default_factory=list)  # new tokens per request, in the order given
    request_errors: list[str | None] = field(default_factory=list)  # the library's error per request
    logprobs: list[list[float]] = field(default_factory=list)  # per request; [] when not returned
    warnings: list[str] = field(default_factory=list)  # the continuous-batching logger's warnings
    setup: dict[str, Any] = field(default_factory=dict)  # where each option went (`continuous_batching_options`)
    error: dict[str, str] | None = None  # the call's exception
    forwards: int = 0  # the model's forward calls during the call (requests served together share them)


def _config_class() -> Any:
    from transformers.generation import configuration_utils

    return getattr(configuration_utils, "ContinuousBatchingConfig", None)


def continuous_batching_options() -> dict[str, Any]:
    """What the installed version's continuous batching takes, read from its signatures and config
    fields: `generate_batch` exists; `config_kwarg` (generate_batch takes a continuous_batching_config);
    `fields`, the ContinuousBatchingConfig's fields (empty before 5.13); `page_size` the name of the
    page-size option; `logprobs` / `seed` / `drop_unsupported_processors` / `per_request_processors`
    whether the config has them."""
    from transformers import GenerationMixin

    generate_batch = getattr(GenerationMixin, "generate_batch", None)
    params = set(inspect.signature(generate_batch).parameters) if generate_batch is not None else set()
    cls = _config_class()
    fields = {f.name for f in dataclasses.fields(cls)} if cls is not None and dataclasses.is_dataclass(cls) else set()
    page = next((n for n in PAGE_SIZE_NAMES if n in fields), "block_size")
    return {"generate_batch": generate_batch is not None, "config_kwarg": "continuous_batching_config" in params,
            "fields": sorted(fields), "page_size": page, "logprobs": "return_logprobs" in fields,
            "seed": "seed" in fields, "drop_unsupported_processors": "drop_unsupported_processors" in fields,
            "per_request_processors": "per_request_processors" in fields}


class _Keep(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(record.getMessage())


DROPPED = re.compile(r"^Background thread is stopping\. Request with ids .* will be dropped\.$")


@contextlib.contextmanager
def cb_warnings(sink: list[str]) -> Iterator[None]:
    """The continuous-batching logger's warnings (and errors) of the block, in order. Messages about
    the host (psutil missing, memory breakdown) are the machine's, not the library's behaviour, and a
    stopping thread's "Request with ids [...] will be dropped" lines (as many as requests it still
    held when the stop came: a race, the failure itself is the loop's error before them): left out."""
    handler = _Keep(sink)
    logger = logging.getLogger(CB_LOGGER)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        sink[:] = [m for m in sink if "psutil" not in m and not DROPPED.search(m)]


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """The objects alive now out of the collector's way for the block (`gc.freeze`; see the module
    docstring), back in it afterwards (`gc.unfreeze`)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _configs(model: Any, options: dict[str, Any], gen: dict[str, Any], cb: dict[str, Any]) -> tuple[Any, Any, dict]:
    """(GenerationConfig, ContinuousBatchingConfig or None, where each option went): every option in
    `cb` (the sizing, return_logprobs, seed, ...) goes into the ContinuousBatchingConfig where the
    version has that field, else onto the GenerationConfig as an attribute (what 4.57 / 5.0 read)."""
    from transformers import GenerationConfig

    cb = {options["page_size"] if k == "page_size" else k: v for k, v in cb.items()}
    in_config = {k: v for k, v in cb.items() if options["config_kwarg"] and k in options["fields"]}
    on_generation = {k: v for k, v in cb.items() if k not in in_config}
    config = GenerationConfig(**gen, **on_generation)
    cls = _config_class()
    cb_config = cls(**in_config) if options["config_kwarg"] and cls is not None else None
    return config, cb_config, {"continuous_batching_config": sorted(in_config), "generation_config": sorted(on_generation)}


def _by_prompt(results: Any, prompts: Sequence[Sequence[int]]) -> list[Any]:
    """The results in the order of the prompts: matched by their `prompt_ids` (a version returns them
    in finishing order), else in the order returned. A prompt with no result maps to None."""
    values = list(results.values()) if isinstance(results, dict) else list(results or [])
    out: list[Any] = []
    for i, p in enumerate(prompts):
        match = next((v for v in values if list(getattr(v, "prompt_ids", None) or []) == list(p)), None)
        if match is None and i < len(values) and getattr(values[i], "prompt_ids", None) is None:
            match = values[i]
        out.append(match)
    return out


def run_batch(model: Any, prompts: Sequence[Sequence[int]], max_new_tokens: int, *, eos_token_id: Any,
              pad_token_id: int, sampling: dict[str, Any] | None = None, logprobs: bool = False,
              seed: int | None = None, extra: dict[str, Any] | None = None) -> Served:
    """One `generate_batch` of the prompts (distinct token lists), greedy unless `sampling` (the
    GenerationConfig's sampling settings, shared by the requests), the cache sized by `SIZING`;
    `logprobs` asks for the chosen tokens' log-probabilities where the version can return them;
    `extra` goes into the GenerationConfig (a logits processor's setting)."""
    options = continuous_batching_options()
    out = Served(setup={"options": {k: v for k, v in options.items() if k != "fields"}})
    if not options["generate_batch"]:
        out.error = {"type": "AttributeError", "message": "this transformers has no generate_batch"}
        return out
    gen = dict(max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, pad_token_id=pad_token_id,
               do_sample=bool(sampling), **(sampling or {}), **(extra or {}))
    cb: dict[str, Any] = dict(SIZING)
    if logprobs and options["logprobs"]:
        cb["return_logprobs"] = True
    if seed is not None and options["seed"]:
        cb["seed"] = seed
    config, cb_config, out.setup["placed"] = _configs(model, options, gen, cb)
    kwargs: dict[str, Any] = {"generation_config": config, "progress_bar": False}
    if cb_config is not None:
        kwargs["continuous_batching_config"] = cb_config
    if seed is not None:
        torch.manual_seed(seed)  # the generator the sampler draws from where the config has no seed

    def run() -> Any:
        with cb_warnings(out.warnings), frozen_heap(), torch.no_grad(), count_forwards(model) as forwards:
            try:
                return model.generate_batch([list(p) for p in prompts], **kwargs)
            finally:
                out.forwards = forwards["n"]

    before = getattr(model.config, "_attn_implementation", None)
    results, out.error = observe(run)
    after = getattr(model.config, "_attn_implementation", None)
    if after != before:  # the manager switches the model to paged attention and puts it back only when its
        # loop ends well (5.13 / 5.14: a MemoryError left 'paged|sdpa' behind, and every later case in
        # the worker sampled through paged attention - their draws changed with the test order)
        out.setup["left_attention"] = f"{before} -> {after} (put back by the harness)"
        with contextlib.suppress(Exception):
            model.set_attn_implementation(before)
    if out.error is not None:
        return out
    for r in _by_prompt(results, prompts):
        out.rows.append([int(t) for t in getattr(r, "generated_tokens", None) or []])
        err = getattr(r, "error", None) if r is not None else "no result returned for this request"
        out.request_errors.append(None if err is None else str(err).splitlines()[0] if str(err) else type(err).__name__)
        out.logprobs.append([float(x) for x in (getattr(r, "logprobs", None) or [])])
    return out



# ----------------------------------------------------------------------------------------------
# the manager: requests with their own settings, streamed (what `transformers serve` runs)

REQUEST_SETTINGS = ("max_new_tokens", "eos_token_id", "streaming", "logit_processor_kwargs")


def add_request_takes() -> dict[str, bool]:
    """Which per-request settings the installed manager's `add_request` takes (by its signature):
    its own max_new_tokens, eos_token_id, streaming, and logits-processor settings (**kwargs, read
    where the config's `per_request_processors` converts the processors; transformers #45026)."""
    from transformers.generation.continuous_batching import ContinuousBatchingManager

    params = inspect.signature(ContinuousBatchingManager.add_request).parameters
    return {"max_new_tokens": "max_new_tokens" in params, "eos_token_id": "eos_token_id" in params,
            "streaming": "streaming" in params,
            "logit_processor_kwargs": any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())}


@dataclass
class Request:
    """One request to the manager: its prompt and the settings it asks for (None: the config's)."""

    prompt: list[int]
    max_new_tokens: int
    eos_token_id: list[int] | None = None
    processor_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Streamed(Served):
    updates: list[list[list[int]]] = field(default_factory=list)  # per request: the tokens of each update, in order
    took: dict[str, bool] = field(default_factory=dict)  # `add_request_takes`


def run_requests(model: Any, requests: Sequence[Request], *, sampling: dict[str, Any], eos_token_id: Any,
                 pad_token_id: int, seed: int, logprobs: bool = True, timeout: float = 60.0) -> Streamed:
    """The requests through one `ContinuousBatchingManager` (init_continuous_batching, start, one
    add_request each, streaming, then stop): the GenerationConfig samples with `sampling` (so the
    processors exist; transformers' per-request processors need a non-default value there), the
    ContinuousBatchingConfig asks for per-request processors where the version has that field; each
    request passes the settings the version's add_request takes (`took`; a setting it does not take is
    not passed: the request then runs on the config's). Per request: every streamed update's tokens
    (`updates`), the final tokens, the log-probabilities, the library's error; the call's exception as
    data. The manager is stopped and destroyed whatever happens."""
    options = continuous_batching_options()
    out = Streamed(setup={"options": {k: v for k, v in options.items() if k != "fields"}})
    if not options["generate_batch"]:
        out.error = {"type": "AttributeError", "message": "this transformers has no continuous batching"}
        return out
    out.took = add_request_takes()
    gen = dict(max_new_tokens=max(r.max_new_tokens for r in requests), eos_token_id=eos_token_id,
               pad_token_id=pad_token_id, do_sample=True, **sampling)
    cb: dict[str, Any] = dict(SIZING)
    for name, option, value in (("return_logprobs", "logprobs", logprobs), ("seed", "seed", seed),
                                ("per_request_processors", "per_request_processors", True)):
        if options[option]:  # the version's config has the field
            cb[name] = value
    config, cb_config, out.setup["placed"] = _configs(model, options, gen, cb)
    init = inspect.signature(model.init_continuous_batching).parameters
    kwargs: dict[str, Any] = {"generation_config": config}
    if cb_config is not None and "continuous_batching_config" in init:
        kwargs["continuous_batching_config"] = cb_config
    torch.manual_seed(seed)
    before = getattr(model.config, "_attn_implementation", None)

    def serve() -> list[list[Any]]:
        got: dict[str, list[Any]] = {}
        with cb_warnings(out.warnings), frozen_heap(), torch.no_grad():
            manager = model.init_continuous_batching(**kwargs)
            manager.start()
            try:
                ids = []
                for r in requests:
                    per = {"max_new_tokens": r.max_new_tokens}
                    if out.took["eos_token_id"] and r.eos_token_id is not None:
                        per["eos_token_id"] = r.eos_token_id
                    if out.took["streaming"]:
                        per["streaming"] = True
                    if out.took["logit_processor_kwargs"]:
                        per.update(r.processor_kwargs)
                    ids.append(manager.add_request(list(r.prompt), **per))
                finished: set[str] = set()
                waited = 0.0
                while len(finished) < len(ids) and waited < timeout:
                    result = manager.get_result(timeout=0.5)
                    if result is None:
                        waited += 0.5
                        if not manager.is_running():
                            break
                        continue
                    got.setdefault(result.request_id, []).append(result)
                    if result.is_finished():
                        finished.add(result.request_id)
                return [got.get(rid, []) for rid in ids]  # per request, in order (a stopped manager may
                # hand two requests the same id: each still has its own row)
            finally:
                manager.stop(block=True, timeout=5)
                if hasattr(manager, "destroy"):
                    manager.destroy()

    results, out.error = observe(serve)
    if getattr(model.config, "_attn_implementation", None) != before:
        out.setup["left_attention"] = f"{before} -> {model.config._attn_implementation} (put back by the harness)"
        with contextlib.suppress(Exception):
            model.set_attn_implementation(before)
    if out.error is not None:
        return out
    for updates in results:
        final = updates[-1] if updates and updates[-1].is_finished() else None
        out.updates.append([[int(t) for t in (getattr(u, "generated_tokens", None) or [])] for u in updates])
        out.rows.append([int(t) for t in (getattr(final, "generated_tokens", None) or [])] if final else
                        (out.updates[-1][-1] if out.updates[-1] else []))
        err = getattr(final, "error", None) if final is not None else "no finished result for this request"
        out.request_errors.append(None if err is None else str(err).splitlines()[0] if str(err) else type(err).__name__)
        out.logprobs.append([float(x) for x in (getattr(final, "logprobs", None) or [])])
    return out
