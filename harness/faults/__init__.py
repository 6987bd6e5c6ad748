"""The fault catalogue: named, injectable defects of the installed transformers that the suites
must catch - the harness's proof of sensitivity.

A `Fault` is a small monkeypatch of the subject (its generation internals, caches, attention
integration, model classes, loading or outputs) and the place it must show up: a `Catch` names the
suite, a glob over that suite's case ids and a glob over the field names, one of which must be
reported as a regression.
`inject(name)` applies one fault and returns its undo; the pytest option ``--inject-fault NAME``
(and ``harness check --inject-fault NAME``) applies it for a whole session, in every xdist worker,
and undoes it at the end (`FaultInjection`, registered by harness/plugin/).

How a fault patches (`Patch` kinds, each undone by restoring the original object):
  `SourceEdit`  one line of a function's or method's source replaced by another, recompiled in its
                own module's namespace (so the fault is the one-token bug it describes); the edit
                must match the installed source exactly once, else `FaultError` names the fault,
                the target and the text (the fault does not apply to this version)
  `Wrap`        the target replaced by a wrapper around the original (arguments or results changed)
  `SetItems`    class attributes set to other values (a flipped flag)
  `SlowForward` every call of a generating model (a `GenerationMixin`) busy-waits `fraction`
                of its own CPU time after it returns (the latency suite's HARNESS_LATENCY_SLOWDOWN,
                applied to every model of the subject)

A module-level function is rebound in every loaded transformers module that imported it by name,
so a patched `resolve_trust_remote_code` is the one `AutoConfig` calls.

`harness faults` (harness/cli/faults.py) runs the catching cases under every fault and writes the
sensitivity table (docs/faults.md); tests/test_faults.py asserts each fault is caught where the
catalogue says. Adding a fault is adding one `Fault(...)` row to `FAULTS`.
"""

from __future__ import annotations

import fnmatch
import importlib
import inspect
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

Undo = Callable[[], None]
PLUGIN_NAME = "harness-faults"


class FaultError(Exception):
    """A fault that does not exist, or does not apply to the installed transformers."""


@dataclass(frozen=True)
class Catch:
    """Where a fault must show: a regression of a field matching `field` (a glob) in a case of
    `suite` matching `case` (a glob over the suite's case ids)."""

    suite: str
    case: str
    field: str

    def matches(self, suite: str, case: str, field_name: str) -> bool:
        return (suite == self.suite and fnmatch.fnmatchcase(field_name, self.field)
                and fnmatch.fnmatchcase(case, self.case))


class Patch(Protocol):
    def apply(self, fault: str) -> Undo: ...


def _resolve(module: str, qualname: str) -> tuple[Any, Any, str]:
    """(the module, the object that owns the last name, the last name)."""
    mod = importlib.import_module(module)
    owner: Any = mod
    *path, name = qualname.split(".")
    for part in path:
        owner = getattr(owner, part)
    return mod, owner, name


def _rebind(module: Any, owner: Any, name: str, original: Any, replacement: Any) -> Undo:
    """Set owner.name = replacement; for a module-level function, also every transformers module
    that imported the same object by that name. Returns the undo."""
    holders = [owner]
    if owner is module:
        holders += [m for key, m in list(sys.modules.items())
                    if key.startswith("transformers") and m is not module and getattr(m, name, None) is original]
    for holder in holders:
        setattr(holder, name, replacement)

    def undo() -> None:
        for holder in holders:
            setattr(holder, name, original)
    return undo


@dataclass(frozen=True)
class SourceEdit:
    """Replace each `old` by its `new` (each `old` exactly once) in the source of `module.qualname`."""

    module: str
    qualname: str
    edits: tuple[tuple[str, str], ...]

    def apply(self, fault: str) -> Undo:
        mod, owner, name = _resolve(self.module, self.qualname)
        original = inspect.getattr_static(owner, name)
        function = original.__func__ if isinstance(original, (staticmethod, classmethod)) else original
        source = textwrap.dedent(inspect.getsource(function))
        where = f"fault {fault!r}: {self.module}.{self.qualname}"
        for old, new in self.edits:
            if source.count(old) != 1:
                raise FaultError(f"{where}: the text to edit occurs {source.count(old)} times in the installed "
                                 f"source (expected once): {old.strip()!r}; the fault does not apply to this version")
            source = source.replace(old, new)
        if "super()" in source and owner is not mod:
            raise FaultError(f"{where}: a method using zero-argument super() cannot be recompiled")
        namespace: dict[str, Any] = {}
        exec(compile(source, f"<fault {fault}: {self.module}.{self.qualname}>", "exec"), vars(mod), namespace)
        replacement = namespace[function.__name__]
        if isinstance(original, (staticmethod, classmethod)):
            replacement = type(original)(replacement)
        return _rebind(mod, owner, name, original, replacement)


def edit(module: str, qualname: str, *pairs: tuple[str, str]) -> SourceEdit:
    return SourceEdit(module, qualname, tuple(pairs))


@dataclass(frozen=True)
class Wrap:
    """Replace `module.qualname` by `wrapper(original)`."""

    module: str
    qualname: str
    wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]

    def apply(self, fault: str) -> Undo:
        mod, owner, name = _resolve(self.module, self.qualname)
        original = inspect.getattr_static(owner, name)
        return _rebind(mod, owner, name, original, self.wrapper(getattr(owner, name)))


@dataclass(frozen=True)
class SetItems:
    """Set class attributes of `module.qualname` to `values` (undone: restored, or deleted when the
    class only inherited them)."""

    module: str
    qualname: str
    values: tuple[tuple[str, Any], ...]

    def apply(self, fault: str) -> Undo:
        _, owner, name = _resolve(self.module, self.qualname)
        target = getattr(owner, name)
        saved = {key: vars(target).get(key, _ABSENT) for key, _ in self.values}
        for key, value in self.values:
            setattr(target, key, value)

        def undo() -> None:
            for key, value in saved.items():
                if value is _ABSENT:
                    delattr(target, key)
                else:
                    setattr(target, key, value)
        return undo


_ABSENT = object()


@dataclass(frozen=True)
class SlowForward:
    """Every call of a generating model (a `PreTrainedModel` that is a `GenerationMixin`) costs
    (1 + fraction) times its own CPU time: `PreTrainedModel.__call__` busy-waits after it. Other
    modules (the inner base model, the reference engine's calibration) run as they are."""

    fraction: float

    def apply(self, fault: str) -> Undo:
        import torch
        from transformers import GenerationMixin, PreTrainedModel

        from harness.subjects.hf_latency import busy_wait, timer

        call = torch.nn.Module.__call__
        fraction = self.fraction
        before = vars(PreTrainedModel).get("__call__", _ABSENT)

        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not isinstance(self, GenerationMixin):
                return call(self, *args, **kwargs)
            start = timer()
            out = call(self, *args, **kwargs)
            busy_wait(fraction * (timer() - start))
            return out

        PreTrainedModel.__call__ = __call__  # type: ignore[method-assign]

        def undo() -> None:
            if before is _ABSENT:
                del PreTrainedModel.__call__
            else:
                PreTrainedModel.__call__ = before  # type: ignore[method-assign]
        return undo


@dataclass(frozen=True)
class Fault:
    """One injectable defect: its name, what it breaks, where it must be caught, how it is made."""

    name: str
    area: str  # verifier, drafting, caches, attention, backends, checkpoints, contracts, sampling, latency
    breaks: str
    catch: Catch
    patches: tuple[Patch, ...]
    fast: bool = False  # one of tests/test_faults.py's default (fast) pair
    notes: str = ""

    def apply(self) -> Undo:
        undos: list[Undo] = []
        try:
            for patch in self.patches:
                undos.append(patch.apply(self.name))
        except BaseException:
            for undo in reversed(undos):
                undo()
            raise

        def undo_all() -> None:
            for undo in reversed(undos):
                undo()
        return undo_all


# ----------------------------------------------------------------------------------------------
# wrappers (the faults that change arguments or results rather than one line)

def _rename_checkpoint_key(load: Callable[..., Any]) -> Callable[..., Any]:
    """model.norm.weight is read as model.final_norm.weight (a rename without a load-time remap)."""
    def convert_and_load_state_dict_in_model(*args: Any, **kwargs: Any) -> Any:
        state = kwargs.get("state_dict")
        if state is not None and "model.norm.weight" in state:
            state = dict(state)
            state["model.final_norm.weight"] = state.pop("model.norm.weight")
            kwargs["state_dict"] = state
        return load(*args, **kwargs)
    return convert_and_load_state_dict_in_model


def _generate_returns_dict(generate: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    @functools.wraps(generate)  # generate()'s signature is introspected (capabilities)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("return_dict_in_generate", True)
        return generate(self, *args, **kwargs)
    return wrapped


def _encode_returns_tensors(encode: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    @functools.wraps(encode)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("return_tensors", "pt")
        return encode(self, *args, **kwargs)
    return wrapped


def _trust_remote_code_by_default(resolve: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    @functools.wraps(resolve)
    def wrapped(trust_remote_code: Any, *args: Any, **kwargs: Any) -> Any:
        return resolve(True if trust_remote_code is None else trust_remote_code, *args, **kwargs)
    return wrapped


GEN = "transformers.generation.utils"
CAND = "transformers.generation.candidate_generator"
CACHE = "transformers.cache_utils"
MASK = "transformers.masking_utils"
QWEN3_5 = "transformers.models.qwen3_5.modeling_qwen3_5"
PROC = "transformers.generation.logits_process"


# ----------------------------------------------------------------------------------------------
# the catalogue

FAULTS: tuple[Fault, ...] = (
    # verifier ------------------------------------------------------------------------------------
    Fault("ensemble-weight-one-minus", "verifier",
          "the static-ensemble acceptance ratio uses 1 - w where it should use w (v = (1-w) p + w q)",
          Catch("bias", "w0.3.ctx0", "acceptance_vs_exact"),
          (edit(GEN, "_speculative_sampling",
                ("1.0 - assistant_ensemble_weight + assistant_ensemble_weight * (p_i / q_i)",
                 "assistant_ensemble_weight + (1.0 - assistant_ensemble_weight) * (p_i / q_i)")),)),
    Fault("residual-from-target", "verifier",
          "after a rejection the correction token is drawn from p instead of the renormalised residual "
          "norm([p - q]+) (the residual's mass is never taken out)",
          Catch("bias", "lossless.ctx0", "first_token_vs_exact"),
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
          Catch("bias", "lossless.ctx0", "acceptance_vs_exact"),
          (edit(GEN, "_speculative_sampling",
                ("q_i = q[:, torch.arange(candidate_length), new_candidate_input_ids]",
                 "q_i = q[:, torch.arange(candidate_length), candidate_input_ids[:, -candidate_length - 1:-1]]"),
                ("p_i = p[:, torch.arange(candidate_length), new_candidate_input_ids]",
                 "p_i = p[:, torch.arange(candidate_length), candidate_input_ids[:, -candidate_length - 1:-1]]")),)),
    Fault("greedy-ensemble-argmax-p", "verifier",
          "greedy static-ensemble verification compares the drafts with argmax p instead of argmax v",
          Catch("outputs", "llama-target.ensemble.w0.3.dynamic.short-0.greedy", "equals_reference_engine"),
          (edit(GEN, "GenerationMixin._assisted_decoding",
                ("selected_tokens = torch.cat([nu_probs.argmax(dim=-1), bonus_logits.argmax(dim=-1)], dim=-1)",
                 "selected_tokens = torch.cat([p_probs.argmax(dim=-1), bonus_logits.argmax(dim=-1)], dim=-1)")),)),
    # drafting ------------------------------------------------------------------------------------
    Fault("mtp-draft-shifted", "drafting",
          "the MTP head is fed the token one position before the one each hidden state predicts",
          Catch("outputs", "glm4moe-mtp.mtp.dynamic.short-0.greedy", "drafts"),
          (edit(CAND, "MTPCandidateGenerator.get_candidates",
                ("mtp_input_ids = input_ids[:, -num_last_main_model_tokens:]",
                 "mtp_input_ids = input_ids[:, -num_last_main_model_tokens - 1:-1]")),)),
    Fault("prompt-lookup-off-by-one", "drafting",
          "prompt lookup copies the continuation one token after the matched n-gram's end",
          Catch("outputs", "llama-target.prompt_lookup.dynamic.short-0.greedy", "drafts"),
          (edit(CAND, "PromptLookupCandidateGenerator.get_candidates",
                ("start_idx = idx + ngram_size", "start_idx = idx + ngram_size + 1")),)),
    Fault("assistant-ignores-num-tokens", "drafting",
          "assisted drafting ignores num_assistant_tokens and drafts up to 20 tokens a step",
          Catch("outputs", "llama-target.assisted.dynamic.short-0.greedy", "drafts"),
          (edit(CAND, "AssistedCandidateGenerator._calculate_new_tokens",
                ("min(int(self.num_assistant_tokens),", "min(20,")),)),
    # caches --------------------------------------------------------------------------------------
    Fault("crop-leaves-stale-entry", "caches",
          "DynamicCache.crop after a rejected draft keeps one of the rejected entries",
          Catch("caches", "llama-target", "rollback"),
          (edit(CACHE, "DynamicLayer.crop",
                ("self.keys = self.keys[..., : -abs(tokens_to_remove), :]",
                 "self.keys = self.keys[..., : self.keys.shape[-2] - abs(tokens_to_remove) + 1, :]"),
                ("self.values = self.values[..., : -abs(tokens_to_remove), :]",
                 "self.values = self.values[..., : self.values.shape[-2] - abs(tokens_to_remove) + 1, :]")),),
          fast=True),
    Fault("static-slot-reused", "caches",
          "a StaticCache decode step writes into the previous token's slot; its own slot is never "
          "overwritten (keeps the buffer's zeros)",
          Catch("caches", "llama-target", "static_vs_dynamic"),
          (edit(CACHE, "StaticLayer.update",
                ("cache_position = torch.arange(kv_length, device=self.device) + self.cumulative_length",
                 "cache_position = torch.arange(kv_length, device=self.device) + self.cumulative_length"
                 " - (1 if kv_length == 1 else 0)")),)),
    Fault("layer-dispatch-swap", "caches",
          "the cache's layer-type dispatch swaps full and sliding-window attention layers",
          Catch("caches", "qwen2-hybrid", "dynamic_layers_vs_reference"),
          (Wrap(CACHE, "get_layer_types_and_kwargs", lambda original: _swap_layer_types(original)),)),
    Fault("delta-rule-decode-no-decay", "caches",
          "the one-token decode step of the gated delta rule (linear attention) skips the recurrent state's "
          "decay; the prefill, which runs the chunked kernel, stays right",
          Catch("outputs", "qwen3_5-linear.plain.*.greedy", "equals_reference_engine"),
          (edit(QWEN3_5, "torch_recurrent_gated_delta_rule",
                ("last_recurrent_state = last_recurrent_state * decay_t", "last_recurrent_state = last_recurrent_state")),)),
    Fault("chunk-boundary-off-by-one", "attention",
          "the chunked-attention mask puts every chunk boundary one token early",
          Catch("backends", "llama4-chunked", "sdpa_mask_vs_reference"),
          (edit(MASK, "chunked_overlay",
                ("return (kv_idx - left_padding[batch_idx]) // chunk_size",
                 "return (kv_idx - left_padding[batch_idx] + 1) // chunk_size")),)),
    Fault("sliding-window-off-by-one", "attention",
          "the sliding-window mask lets each query see one key more than the window",
          Catch("backends", "mistral-sliding", "sdpa_mask_vs_reference"),
          (edit(MASK, "sliding_window_overlay",
                ("return kv_idx > q_idx - sliding_window", "return kv_idx >= q_idx - sliding_window")),)),
    # backends and checkpoints --------------------------------------------------------------------
    Fault("sdpa-flag-flipped", "backends",
          "MistralPreTrainedModel._supports_sdpa flipped to False: the model silently falls back to eager",
          Catch("backends", "mistral-sliding", "default_attn_implementation"),
          (SetItems("transformers.models.mistral.modeling_mistral", "MistralPreTrainedModel",
                    (("_supports_sdpa", False),)),)),
    Fault("eager-instead-of-sdpa", "backends",
          "from_pretrained without attn_implementation chooses eager attention instead of SDPA",
          Catch("backends", "llama-target", "default_attn_implementation"),
          (edit("transformers.modeling_utils", "PreTrainedModel.get_correct_attn_implementation",
                ('applicable_attention = "sdpa" if requested_attention is None',
                 'applicable_attention = "eager" if requested_attention is None')),)),
    Fault("checkpoint-key-renamed", "checkpoints",
          "the checkpoint key model.norm.weight is renamed (model.final_norm.weight) without a load-time "
          "remap: the final norm is re-initialised",
          Catch("backends", "llama-target", "loading_info"),
          (Wrap("transformers.modeling_utils", "convert_and_load_state_dict_in_model", _rename_checkpoint_key),)),
    # contracts -----------------------------------------------------------------------------------
    Fault("generate-returns-dict", "contracts",
          "generate() returns a GenerateDecoderOnlyOutput by default instead of a tensor",
          Catch("contracts", "generate-return-default", "result"),
          (Wrap(GEN, "GenerationMixin.generate", _generate_returns_dict),)),
    Fault("encode-returns-tensors", "contracts",
          "tokenizer.encode() returns a torch.Tensor instead of a list of ids",
          Catch("contracts", "tokenizer-encode", "result"),
          (Wrap("transformers.tokenization_utils_base", "PreTrainedTokenizerBase.encode", _encode_returns_tensors),),
          fast=True),
    Fault("trust-remote-code-default-on", "contracts",
          "trust_remote_code defaults to True: a checkpoint's custom code runs without consent",
          Catch("contracts", "trust-remote-code-default", "result"),
          (Wrap("transformers.dynamic_module_utils", "resolve_trust_remote_code", _trust_remote_code_by_default),)),
    Fault("ensemble-weight-ignored", "contracts",
          "GenerationConfig.assistant_ensemble_weight is stored but silently ignored by generate()",
          Catch("contracts", "accept-ensemble-weight", "acceptance"),
          (edit(GEN, "GenerationMixin._assisted_decoding",
                ("assistant_ensemble_weight = generation_config.assistant_ensemble_weight",
                 "assistant_ensemble_weight = None")),)),
    # sampling (caught by the generation-level sampling suite, suites/test_sampling.py) -------------
    Fault("temperature-applied-twice", "sampling",
          "the temperature warper divides the scores by T twice (T^2)",
          Catch("sampling", "*plain.temperature*", "joint_vs_exact"),
          (edit(PROC, "TemperatureLogitsWarper.__call__",
                ("scores_processed = scores / self.temperature",
                 "scores_processed = scores / self.temperature / self.temperature")),)),
    Fault("top-p-one-fewer", "sampling",
          "top-p keeps one token fewer than the smallest set whose mass reaches p",
          Catch("sampling", "*plain.top_p*", "joint_vs_exact"),
          (edit(PROC, "TopPLogitsWarper.__call__",
                ("sorted_indices_to_remove = cumulative_probs <= (1 - self.top_p)",
                 "sorted_indices_to_remove = cumulative_probs <= (1 - self.top_p)\n"
                 "    sorted_indices_to_remove[..., 1:] |= sorted_indices_to_remove[..., :-1].clone()")),)),
    # latency -------------------------------------------------------------------------------------
    Fault("slower-forward-15", "latency",
          "every forward of a generating model is 15 % slower (CPU busy wait after it returns)",
          Catch("latency", "llama-target.*", "*"),
          (SlowForward(0.15),),
          notes="caught by any of llama-target's timings (prefill, steady-state decode, generate() per path): "
                "a 15 % slowdown is the smallest the default latency mode catches reliably, and no single "
                "field catches it every time (prefill alone: 1 of 4 runs). Measured 10/10 runs caught, 4-10 "
                "fields each, decode_dynamic / decode_static / generate_assisted / generate_ensemble every time; "
                "their clean controls 0/10 regressions"),
)


def _swap_layer_types(original: Callable[..., Any]) -> Callable[..., Any]:
    import functools

    swap = {"full_attention": "sliding_attention", "sliding_attention": "full_attention"}

    @functools.wraps(original)
    def get_layer_types_and_kwargs(config: Any) -> Any:
        types, kwargs = original(config)
        if not {"full_attention", "sliding_attention"} <= set(types):
            return types, kwargs
        window = next(k["sliding_window"] for t, k in zip(types, kwargs, strict=True) if t == "sliding_attention")
        swapped = [swap.get(t, t) for t in types]
        return swapped, [{"sliding_window": window} if t == "sliding_attention" else
                         {k: v for k, v in kw.items() if k != "sliding_window"}
                         for t, kw in zip(swapped, kwargs, strict=True)]
    return get_layer_types_and_kwargs


BY_NAME: dict[str, Fault] = {f.name: f for f in FAULTS}


def get(name: str) -> Fault:
    """The fault called `name`; an unknown name lists the known ones."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise FaultError(f"--inject-fault {name}: no such fault; known: {', '.join(BY_NAME)}") from None


def inject(name: str) -> Undo:
    """Apply the fault `name` to the installed transformers; returns the undo."""
    return get(name).apply()


def describe(fault: Fault) -> dict[str, Any]:
    """The fault as results.json's meta.injected_fault (and the report's banner)."""
    return {"name": fault.name, "area": fault.area, "breaks": fault.breaks,
            "catch": {"suite": fault.catch.suite, "case": fault.catch.case, "field": fault.catch.field}}


# ----------------------------------------------------------------------------------------------
# pytest: --inject-fault NAME, --harness-case GLOB


def add_options(group: Any, add: Callable[..., None]) -> None:
    add(group, "--inject-fault", dest="harness_inject_fault", default=None, metavar="NAME",
        help="apply a fault of harness/faults/ to the installed transformers for this session "
             "(the report names it); `harness faults` lists them")
    add(group, "--harness-case", dest="harness_cases", action="append", default=None, metavar="GLOB",
        help="run only the golden tests whose case id matches GLOB (repeatable; 'suite:GLOB' for one suite)")


@dataclass
class FaultInjection:
    """The session's injected fault (applied at configure, undone at unconfigure) and its case filter."""

    fault: Fault | None
    cases: list[str] = field(default_factory=list)
    undo: Undo | None = None
    golden_before_filter: int = 0  # golden tests collected before --harness-case deselected some

    def pytest_unconfigure(self, config: Any) -> None:
        if self.undo is not None:
            self.undo()
            self.undo = None

    def pytest_collection_modifyitems(self, config: Any, items: list[Any]) -> None:
        if not self.cases:
            return
        from harness.plugin import case_id, suite_name

        self.golden_before_filter = sum("golden" in getattr(item, "fixturenames", ()) for item in items)

        keep, drop = [], []
        for item in items:
            if "golden" not in getattr(item, "fixturenames", ()):
                keep.append(item)
                continue
            suite, case = suite_name(item), case_id(item)
            wanted = any(fnmatch.fnmatchcase(case, glob.split(":", 1)[1]) and glob.split(":", 1)[0] == suite
                         if ":" in glob else fnmatch.fnmatchcase(case, glob) for glob in self.cases)
            (keep if wanted else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep


def collected_golden_tests(config: Any) -> int:
    """Golden tests collected before --harness-case narrowed the run (0 without it): the run's
    per-test alpha is that of the whole collection, so a narrowed run decides as the whole would."""
    session = config.pluginmanager.get_plugin(PLUGIN_NAME)
    return session.golden_before_filter if session is not None else 0


def configure(config: Any) -> FaultInjection:
    """Apply --inject-fault (a usage error when unknown or not applicable) and keep --harness-case."""
    import pytest

    name = config.getoption("harness_inject_fault", None)
    session = FaultInjection(None, list(config.getoption("harness_cases", None) or []))
    if name:
        try:
            session.fault = get(name)
            session.undo = session.fault.apply()
        except FaultError as exc:
            raise pytest.UsageError(str(exc)) from exc
    config.pluginmanager.register(session, PLUGIN_NAME)
    return session
