"""Helpers shared by the caches, backends and contracts suites (plain functions, no tests).

- `MODEL_CASES`: one frozen `ModelCase` per zoo model (harness/fixtures/zoo.py SPECS); its `id`
  names the golden record.
- `loaded(name, attn)`: a zoo checkpoint through the real `from_pretrained(local_dir)` path
  (safetensors, ``trust_remote_code=False``), with its loading info; cached per worker.
  A checkpoint that is not built skips the test with the fixture's own message.
- `observe(fn)`: run a probe; an exception becomes data (`error_of`), never a crash.
- `forward(model, ids, cache)`: one forward pass through an explicit cache, whatever the
  installed version calls the keyword (``cache=`` in 5.24, ``past_key_values=`` before).
- `reference_spec(name)`: the reference dispatcher's decision (harness/engine/cache.py) read
  from the checkpoint's config.json.

Everything version-specific is probed with inspect / hasattr, never with version numbers.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from harness.engine.cache import build_caches, cache_spec_of
from harness.fixtures import load as fixtures_load
from harness.fixtures.prompts import BY_ID
from harness.fixtures.zoo import REPO_ROOT, SPECS, spec

LOAD_SEED = 0  # weights a version fails to find are initialised from this seed: reproducible


@pytest.fixture(autouse=True, scope="module")
def one_intra_op_thread(harness_env, pytestconfig):
    """Run these suites' tiny forwards on one intra-op thread unless the run chose a thread
    count (``--harness-threads N``). With 2 threads per process on 2 shared cores (or two xdist
    workers) OpenMP's spin-waiting makes a 4-layer forward ~60x slower; on the zoo the logits are
    bit-identical at 1 and 2 threads. `harness_env` is requested first, so the run's fingerprint
    (threads included) is taken before this and does not depend on which test runs first."""
    if pytestconfig.getoption("harness_threads", 0):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class ModelCase:
    """One zoo checkpoint; its id is the record name."""

    model: str
    architecture: str

    @property
    def id(self) -> str:
        return self.model

    @property
    def model_type(self) -> str:
        return config_json(self.model).get("model_type", "?")


MODEL_CASES: tuple[ModelCase, ...] = tuple(ModelCase(s.name, s.architecture) for s in SPECS)


def model_params(cases: tuple[Any, ...] = MODEL_CASES) -> list[Any]:
    return [pytest.param(c, id=c.id) for c in cases]


# ----------------------------------------------------------------------------------------------
# observations


def first_line(text: str, limit: int = 300) -> str:
    lines = str(text).strip().splitlines()
    return lines[0][:limit] if lines else ""


def error_of(exc: BaseException, scrub: dict[str, str] | None = None) -> dict[str, str]:
    """An exception as an exact field value: its type name and the first line of its message
    (paths in `scrub`, and the checkout's root, replaced by stable placeholders, so records do not
    depend on where the run happened)."""
    message = first_line(str(exc))
    for path, placeholder in {**(scrub or {}), str(REPO_ROOT): "<repo>"}.items():
        message = message.replace(path, placeholder)
    message = re.sub(r"0x[0-9a-f]{6,}", "0x...", message)
    return {"type": type(exc).__name__, "message": message}


def observe(fn: Callable[[], Any], scrub: dict[str, str] | None = None) -> tuple[Any, dict[str, str] | None]:
    """(result, None) or (None, error) - an exception raised by transformers is an observation."""
    try:
        return fn(), None
    except Exception as exc:  # noqa: BLE001 - recorded as data
        return None, error_of(exc, scrub)


def type_name(obj: Any) -> str:
    """'torch.Tensor', 'list[int]', 'BatchEncoding', 'GenerateDecoderOnlyOutput', ..."""
    if isinstance(obj, torch.Tensor):
        return "torch.Tensor"
    if isinstance(obj, (list, tuple)):
        inner = sorted({type_name(x) for x in obj})
        return f"{type(obj).__name__}[{' | '.join(inner) if inner else ''}]"
    return type(obj).__name__


# ----------------------------------------------------------------------------------------------
# models


def config_json(name: str) -> dict[str, Any]:
    return json.loads((spec(name).path / "config.json").read_text())


def checkpoint_dir(name: str):
    """The checked checkpoint directory, or skip the test with the fixture's message."""
    try:
        return fixtures_load.check_files(name)
    except fixtures_load.FixtureError as exc:
        pytest.skip(f"zoo checkpoint {name!r} not available: {exc}")


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    info: dict[str, list[str]]  # missing / unexpected / mismatched keys, error messages


def from_pretrained(directory, attn: str | None = None) -> tuple[Any, dict[str, list[str]]]:
    """AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=False), fp32, eval, with the
    loading info as sorted lists of strings. Missing weights get a seeded init."""
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"attn_implementation": attn} if attn else {}
    torch.manual_seed(LOAD_SEED)
    model, info = AutoModelForCausalLM.from_pretrained(
        str(directory), dtype=torch.float32, trust_remote_code=False, use_safetensors=True,
        output_loading_info=True, **kwargs)
    plain = {key: sorted(str(x) if not isinstance(x, (tuple, list)) else str(x[0]) for x in value)
             for key, value in sorted(info.items())}
    return model.eval(), plain


@functools.cache
def loaded(name: str, attn: str | None = None) -> Loaded:
    """A zoo model as the installed transformers loads it (attn None: its default backend)."""
    from transformers import AutoTokenizer

    directory = checkpoint_dir(name)
    model, info = from_pretrained(directory, attn)
    return Loaded(model, AutoTokenizer.from_pretrained(str(directory)), info)


@functools.cache
def reference_model(name: str):
    """The reference engine's model, or None when the engine does not implement the family."""
    from harness.engine.model import SUPPORTED

    if config_json(name).get("model_type") not in SUPPORTED:
        return None
    return fixtures_load.load_reference(name)


def prompt_ids(name: str, prompt: str) -> torch.Tensor:
    return loaded(name).tokenizer(BY_ID[prompt].text, return_tensors="pt").input_ids


# ----------------------------------------------------------------------------------------------
# caches


def cache_keyword(model) -> str:
    """The keyword the installed forward() takes the cache by."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def forward(model, ids: torch.Tensor, cache) -> torch.Tensor:
    """Logits [T, V] of one forward pass that appends `ids` to `cache`."""
    with torch.no_grad():
        out = model(ids, use_cache=True, **{cache_keyword(model): cache})
    return out.logits[0].float()


def layer_classes(cache) -> list[str]:
    return [type(layer).__name__ for layer in cache.layers]


def held(layer) -> int:
    """Key slots the layer physically holds (a static layer: its whole buffer)."""
    keys = getattr(layer, "keys", None)
    return int(keys.shape[-2]) if isinstance(keys, torch.Tensor) and keys.dim() >= 2 else 0


def seq_length(layer) -> int:
    return int(layer.get_seq_length())


def layer_bytes(layer) -> int:
    total = 0
    for name in ("keys", "values"):
        t = getattr(layer, name, None)
        if isinstance(t, torch.Tensor):
            total += t.nbytes
    return total


def bytes_by_class(cache) -> dict[str, int]:
    out: dict[str, int] = {}
    for layer in cache.layers:
        out[type(layer).__name__] = out.get(type(layer).__name__, 0) + layer_bytes(layer)
    return dict(sorted(out.items()))


# ----------------------------------------------------------------------------------------------
# the reference dispatcher


REFERENCE_CLASSES = {  # kind -> (dynamic, static) layer class transformers 5.24 builds for it
    "full_attention": ("DynamicLayer", "StaticLayer"),
    "sliding_attention": ("DynamicSlidingWindowLayer", "StaticSlidingWindowLayer"),
    "chunked_attention": ("DynamicSlidingWindowLayer", "StaticSlidingWindowLayer"),
}


def reference_spec(name: str) -> dict[str, Any]:
    """`cache_spec_of(config.json)`; GPT-BigCode's config.json names the layer count `n_layer`
    (its config class maps num_hidden_layers onto it), so that alias is resolved here."""
    cfg = config_json(name)
    if "num_hidden_layers" not in cfg and "n_layer" in cfg:
        cfg = {**cfg, "num_hidden_layers": cfg["n_layer"]}
    return cache_spec_of(cfg)


def reference_windows(ref: dict[str, Any]) -> list[int | None]:
    """Per layer: the window transformers' layer should use (chunk size for chunked layers)."""
    return [ref["sliding_window"] if t == "sliding_attention" else ref["attention_chunk_size"]
            if t == "chunked_attention" else None for t in ref["layer_types"]]


def reference_lengths(ref: dict[str, Any], updates: list[int]) -> list[tuple[list[int], list[int]]]:
    """Run the reference caches (no slack) through `updates` (tokens per forward) with dummy
    keys; after each update: (seq_len per layer, entries a next query still needs per layer)."""
    caches = build_caches(ref["layer_types"], ref["sliding_window"], ref["attention_chunk_size"])
    out = []
    for n in updates:
        for c in caches:
            s = c.seq_len
            k = torch.zeros(1, n, 1)
            c.update(k, k, torch.arange(s, s + n))
        out.append(([c.seq_len for c in caches], [c.held for c in caches]))
    return out
