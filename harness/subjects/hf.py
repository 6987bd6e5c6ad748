"""The installed transformers as a subject: load a checkpoint, run generate() on a case, probe
what this version supports.

- `Zoo`: the models of a run loaded through the real `from_pretrained(local_dir)` path (safetensors,
  ``trust_remote_code=False``) once per process - their checkpoints are `Zoo.checkpoints`
  (harness/subjects/checkpoints.py), the reference engine over them `Zoo.oracle`
  (harness/subjects/oracle.py);
- `Zoo.generate(case)` / `generate(...)`: one `generate()` call on any path (plain, assisted,
  prompt lookup, MTP, ensemble), returning tokens, per-step top-2 margins, the drafts proposed and
  the number of target forward passes - or the exception transformers raised, as data;
- `capabilities()`: which generation keywords the installed version accepts (by introspection,
  never by class name or version number); `requires` / `path_runs`: whether a decoding path really
  runs, decided by the case's call (a candidate generator consulted);
- `speculative_sampling()`: transformers' own one-step verifier, behind a stable signature.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from harness.engine.decode import top2_scale
from harness.engine.drafters import early_exit_layer
from harness.schema import Case, NotSupported, Observation
from harness.settings.models import UserModel
from harness.store.cache import AnswerCache
from harness.subjects import error_of, is_subject_error, pass_through
from harness.subjects.checkpoints import Checkpoints
from harness.subjects.hf_state import ModelState
from harness.subjects.oracle import EngineOracle
from harness.zoo import load as zoo_load

LOAD_SEED = 0  # weights a version fails to find are initialised from this seed: reproducible


def version() -> str:
    import transformers

    return transformers.__version__


@functools.cache
def capabilities() -> dict[str, bool]:
    """Feature -> the installed transformers accepts its keyword (generate()'s signature or a
    GenerationConfig field; the cache kinds it lists) - never a class name, never a version number.
    Whether a decoding path really runs is decided by its behaviour (`path_runs`). Computed once per
    process; callers must not mutate the returned dict."""
    from transformers import GenerationConfig, GenerationMixin
    from transformers.generation import configuration_utils

    fields = set(inspect.signature(GenerationConfig.__init__).parameters) | set(vars(GenerationConfig()))
    cache_kinds = set(getattr(configuration_utils, "ALL_CACHE_IMPLEMENTATIONS", ()))
    return {
        "assistant_model": "assistant_model" in inspect.signature(GenerationMixin.generate).parameters,
        "prompt_lookup": "prompt_lookup_num_tokens" in fields,
        "use_mtp": "use_mtp" in fields,
        "assistant_ensemble_weight": "assistant_ensemble_weight" in fields,
        "assistant_early_exit": "assistant_early_exit" in fields,
        "static_cache": "static" in cache_kinds,
    }


# the generate() feature each decoding path needs (keys of `capabilities()`); plain needs none
PATH_FEATURE = {"assisted": "assistant_model", "prompt_lookup": "prompt_lookup", "mtp": "use_mtp",
                "ensemble": "assistant_ensemble_weight", "early_exit": "assistant_early_exit"}
PROBE_TOKENS = 4  # new tokens of a path's behaviour probe (`Zoo.path_probe`)


def path_runs(got: Generated) -> str:
    """Why a speculative path's call did not run as that path ("" when it did): its signature is that a
    candidate generator was consulted - some `get_candidates` (of whatever class) was called
    (`record_drafts` counts the calls, drafted tokens or none). A call that raised is the case's
    `error` field's business, not a missing path."""
    if got.error is not None or got.drafts:
        return ""
    return (f"generate() ran without consulting any candidate generator ({len(got.tokens)} tokens, "
            "no get_candidates call): the path silently decoded without drafting")


def requires(obs: Observation, feature: str | None, probe: Callable[[], Generated] | None = None) -> bool:
    """Record whether the installed transformers has the generate() feature (`supports_<feature>`,
    a capability) and, without it, stop the observation with the reason. True when the case can go on.

    Decided by behaviour where a `probe` (the case's own call on its path) is given: the keyword is
    accepted and the call runs as the path (`path_runs`). A keyword accepted whose call silently
    decodes without drafting is `supports_<feature>` False with extras ignored (a regression in any
    run: the caller gets neither an error nor the path); a path that does not run, either way, carries
    extras path = the feature, so a baseline where it ran makes it a regression (path-lost)."""
    if feature is None:
        return True
    accepted = capabilities().get(feature, False)
    why = "" if accepted else f"transformers {version()} does not accept {feature}"
    ignored = ""
    if accepted and probe is not None:
        ignored = path_runs(probe())
    if not why and not ignored:
        obs.add(f"supports_{feature}", True, kind="capability")
        return True
    extras: dict[str, Any] = {"path": feature, "why": ignored or why}
    if ignored:
        extras["ignored"] = True
    obs.add(f"supports_{feature}", False, kind="capability", **extras)
    obs.stop(f"{feature}: {ignored or why}")
    return False


# ----------------------------------------------------------------------------------------------
# loading


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    info: dict[str, list[str]]  # missing / unexpected / mismatched keys, error messages


TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp64": torch.float64}


def from_pretrained(directory: Path | str, attn: str | None = None, dtype: str = "fp32",
                    device: str = "cpu") -> tuple[Any, dict[str, list[str]]]:
    """AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=False) in the run's dtype on its
    device, eval, with the loading info as sorted lists of strings. Missing weights get a seeded
    init."""
    from transformers import AutoModelForCausalLM

    kwargs: dict[str, Any] = {"attn_implementation": attn} if attn else {}
    zoo_load.refuse_remote_code(Path(directory))  # checked up front; a harness error here, never data
    torch.manual_seed(LOAD_SEED)
    model, info = AutoModelForCausalLM.from_pretrained(
        str(directory), dtype=TORCH_DTYPES[dtype], trust_remote_code=False, use_safetensors=True,
        output_loading_info=True, **kwargs)
    plain = {key: sorted(str(x) if not isinstance(x, (tuple, list)) else str(x[0]) for x in value)
             for key, value in sorted(info.items())}
    return model.to(device).eval(), plain


def family_gap(config: dict[str, Any]) -> str:
    """Why the installed transformers cannot load a checkpoint of this family ('' when it can): its
    `model_type` is not registered (4.57 has no mellum, no qwen3_5_text), or a class its
    `architectures` names is missing. Read from the library's registry, never its version number."""
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    model_type = config.get("model_type", "?")
    if model_type not in CONFIG_MAPPING_NAMES:
        return f"transformers {version()} has no model family {model_type!r} (its config.json model_type)"
    missing = [a for a in config.get("architectures") or () if not hasattr(transformers, a)]
    if missing:
        return f"transformers {version()} has no class {missing[0]} (model_type {model_type!r})"
    return ""


def linear_attention_kernels() -> dict[str, bool]:
    """Whether the installed transformers finds the fused linear-attention kernels its gated
    delta-rule layers prefer (else it runs the torch fallback: same math, slower)."""
    from transformers.utils import import_utils

    probes = {"flash_linear_attention": "is_flash_linear_attention_available",
              "causal_conv1d": "is_causal_conv1d_available"}
    return {name: bool(getattr(import_utils, fn, lambda: False)()) for name, fn in probes.items()}


def loaded_as(model) -> dict[str, str]:
    """The dtype and device the model's parameters really are in (the run must not claim others)."""
    from harness.store.env import canonical_dtype

    param = next(model.parameters())
    return {"dtype": canonical_dtype(param.dtype), "device": param.device.type}


class Zoo:
    """The models of a run as the installed transformers loads them - each checkpoint of `checkpoints`
    (harness/subjects/checkpoints.py: the fixture zoo's and the user's, where each lives, its dtype)
    on the run's device, every load cached for the process, the generation state a call leaves undone
    before the next case (`fresh`). Beside it, `oracle` (harness/subjects/oracle.py): the reference
    engine over the same checkpoints, an fp32 CPU oracle whose comparisons use the tolerances of the
    run's dtype (harness/checking/policy.py)."""

    def __init__(self, models_dir: Path | str = zoo_load.MODELS_DIR, dtype: str = "fp32", device: str = "cpu",
                 user: Sequence[UserModel] = (), answers: AnswerCache | None = None):
        self.checkpoints = Checkpoints(models_dir, dtype, user)
        self.oracle = EngineOracle(self.checkpoints, answers)
        self.dtype, self.device = dtype, device
        self._loaded: dict[tuple[str, str | None], Loaded] = {}
        self._states: list[ModelState] = []  # each loaded model as loaded (hf_state.py)
        self._generated: dict[Case, Generated] = {}
        self._memo: dict[Any, Any] = {}

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        """`compute()` once per key for the process (e.g. a sampled case that two suites check)."""
        if key not in self._memo:
            self.fresh()  # the answer is the key's, whichever case asks first
            self._memo[key] = compute()
        return self._memo[key]

    def load(self, name: str, attn: str | None = None) -> Loaded:
        """The model as the installed transformers loads it (attn None: its default backend)."""
        key = (name, attn)
        if key not in self._loaded:
            from transformers import AutoTokenizer

            directory = self.checkpoints.directory(name)
            gap = family_gap(self.checkpoints.config_json(name))
            if gap:
                raise NotSupported(f"{name}: {gap}")
            if self.checkpoints.large(name):
                self.release(name)
            model, info = from_pretrained(directory, attn, self.checkpoints.dtype_of(name), self.device)
            tokenizer = AutoTokenizer.from_pretrained(str(directory), trust_remote_code=False)
            self._loaded[key] = Loaded(model, tokenizer, info)
            self._states.append(ModelState.of(model))
        return self._loaded[key]

    def release(self, name: str) -> int:
        """Drop every load of `name` this process holds (each attention backend's), so a user
        model of real size is resident once: its next load (another backend) reloads it. Returns
        how many loads were dropped (the memory goes when the last case holding one returns)."""
        import gc

        keys = [k for k in self._loaded if k[0] == name]
        models = {id(self._loaded[k].model) for k in keys}
        for k in keys:
            del self._loaded[k]
        self._states = [s for s in self._states if id(s.model) not in models]
        if keys:
            gc.collect()
        return len(keys)

    def fresh(self) -> list[str]:
        """Every loaded model back to its state at load (harness/subjects/hf_state.py): the
        generation state a call leaves - a longer static cache, a compiled forward, an assistant's
        draft schedule - must not reach another case. Returns what had drifted."""
        return [item for state in self._states for item in state.restore()]

    def prompt_ids(self, name: str, prompt: str) -> torch.Tensor:
        """[1, T] token ids of a prompt under the model's own tokenizer."""
        text = self.checkpoints.prompt_text(name, prompt)
        return self.load(name).tokenizer(text, return_tensors="pt").input_ids.to(self.device)

    def path_args(self, case: Case) -> dict[str, Any]:
        """The keyword arguments of `generate` / `hf_sampling.draw` that put a call on the case's path."""
        return dict(assistant=self.load(case.assistant).model if case.assistant else None,
                    prompt_lookup=case.draft_tokens if case.path == "prompt_lookup" else None,
                    use_mtp=case.path == "mtp", ensemble_weight=case.weight, draft_tokens=case.draft_tokens,
                    **({"early_exit": early_exit_of(self.load(case.model).model)} if case.path == "early_exit" else {}))

    def path_probe(self, case: Case) -> Generated:
        """A short greedy call on the case's model and path (PROBE_TOKENS new tokens), shared by the
        cases of one (model, path, assistant, draft schedule): the behaviour `requires` decides on."""
        prompt = case.prompt or (list(case.param("prompts") or ()) or [""])[0]
        probe = Case(case.model, case.path, case.cache, prompt, "greedy", None, case.weight, case.draft_tokens,
                     case.assistant, PROBE_TOKENS)
        return self.generate(probe)

    def generate(self, case: Case) -> Generated:
        """`generate()` on the case's path (cached: a lossless case and its plain twin share runs)."""
        if case not in self._generated:
            self.fresh()  # the run is the case's, whichever case asks first
            self._generated[case] = generate(
                self.load(case.model).model, self.prompt_ids(case.model, case.prompt), case.new_tokens,
                **self.path_args(case), do_sample=case.decoding == "sample", seed=case.seed, cache=case.cache,
                first_logit_steps=1, own_scores=case.path == "ensemble",
                all_scores=case.lossless and case.path != "plain")
            got = self._generated[case]
            left = [d for state in self._states for d in state.config_drift()]
            if got.error is not None and left:  # the failed call's own outcome: what it left behind (a finding)
                got.error = {**got.error, "left_changed": left}
        return self._generated[case]


# ----------------------------------------------------------------------------------------------
# generate()


@dataclass
class Generated:
    tokens: list[int] = field(default_factory=list)  # new tokens only
    margins: list[float] = field(default_factory=list)  # top-1 minus top-2 of the scores of each new token
    scales: list[float] = field(default_factory=list)  # the same scores' `top2_scale` (the tie rule's magnitude)
    first_logits: list[list[float]] = field(default_factory=list)  # processed scores of the first steps
    # the generation config generate() handed its logits-processor builder (a sampled call; None: not seen)
    built_config: dict[str, Any] | None = None
    drafts: list[list[int]] = field(default_factory=list)  # candidate tokens proposed at each step
    draft_margins: list[list[float | None]] = field(default_factory=list)  # the drafter's top-2 margin per draft token
    # a greedy ensemble call: the numbers its verifier had - the drafter's scores per step ([k, V], the
    # candidate logits get_candidates returned; None: it returned none) and the target's processed
    # scores of every emitted token ([T, V], generate()'s output scores, also kept for a lossless
    # speculative path: `all_scores`), float32 on the CPU
    draft_scores: list[torch.Tensor | None] | None = None
    token_scores: torch.Tensor | None = None
    target_forwards: int = 0
    error: dict[str, str] | None = None  # {"type": ..., "message": ...} when generate() raised
    # what the call really ran with: the cache class it returned, the attention implementation, and
    # the warnings transformers emitted (warnings.warn and its logger) - a requested static cache
    # swapped for a DynamicCache says so here (`ran_with`)
    setup: dict[str, Any] = field(default_factory=dict)

    def acceptance_trace(self) -> tuple[list[int], list[int]]:
        """Accepted and drafted counts per step, from the drafts and the emitted tokens: each
        step emits its accepted drafts plus one target token."""
        accepted, drafted, pos = [], [], 0
        for draft in self.drafts:
            rest = self.tokens[pos:]
            ok = next((i for i, (a, b) in enumerate(zip(draft, rest, strict=False)) if a != b), min(len(draft), len(rest)))
            accepted.append(ok)
            drafted.append(len(draft))
            pos += ok + 1
        return accepted, drafted


@contextlib.contextmanager
def record_drafts(sink: list[list[int]], margins: list[list[float | None]] | None = None,
                  scores_sink: list[torch.Tensor | None] | None = None) -> Iterator[list[list[int]]]:
    """Record the new candidate tokens of every candidate generator's get_candidates call, and
    (into `margins`) the drafter's top-2 margin for each, where it returns its scores (an
    assistant or MTP head does; prompt lookup has none: None); into `scores_sink` those scores
    themselves ([k, V] float32 on the CPU, or None)."""
    from transformers.generation import candidate_generator as cg

    classes = [c for c in vars(cg).values() if inspect.isclass(c) and "get_candidates" in vars(c)]
    originals = {c: c.get_candidates for c in classes}

    depth = [0]  # a generator calling its parent's get_candidates (early exit's super()) is one draft

    def record(input_ids: torch.Tensor, out: Any) -> None:  # a frame of its own: a failure here is the harness's
        ids = out[0] if isinstance(out, tuple) else out
        new = ids[0, input_ids.shape[1]:].tolist()
        sink.append(new)
        if margins is not None:
            scores = out[1] if isinstance(out, tuple) and len(out) > 1 else None
            rows = scores[0, -len(new):] if scores is not None and len(new) and scores.dim() == 3 else None
            margins.append([top2_margin(r) for r in rows] if rows is not None and len(rows) == len(new)
                           else [None] * len(new))
        if scores_sink is not None:
            scores = out[1] if isinstance(out, tuple) and len(out) > 1 else None
            kept = scores is not None and scores.dim() == 3 and len(new) and scores.shape[1] >= len(new)
            scores_sink.append(scores[0, -len(new):].detach().float().cpu().clone() if kept else None)

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        @pass_through  # the library's arguments, passed on as they came: a call failing here is the library's
        def get_candidates(self, input_ids, *args, **kwargs):
            depth[0] += 1
            try:
                out = original(self, input_ids, *args, **kwargs)
            finally:
                depth[0] -= 1
            if not depth[0]:
                record(input_ids, out)
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
def count_forwards(model) -> Iterator[dict[str, int]]:
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


@contextlib.contextmanager
def draft_schedule(assistant, tokens: int | None) -> Iterator[None]:
    """Pin the assistant's draft schedule for one call - a constant `tokens` per step, no
    confidence-threshold early stop - and restore its own generation config afterwards (the
    loaded assistant is shared by every case of the process)."""
    if assistant is None or tokens is None:
        yield
        return
    own = assistant.generation_config
    pinned = copy.deepcopy(own)
    pinned.num_assistant_tokens = tokens
    pinned.num_assistant_tokens_schedule = "constant"
    pinned.assistant_confidence_threshold = 0.0
    assistant.generation_config = pinned
    try:
        yield
    finally:
        assistant.generation_config = own


def top2_margin(scores: torch.Tensor) -> float:
    """The gap between a step's two largest scores (a near-tie flips across numerics)."""
    top = torch.topk(scores.float(), 2).values
    return float(top[0] - top[1])


def early_exit_of(model) -> int:
    """`assistant_early_exit` for an early-exit case: the engine's rule (harness/engine/drafters.py
    `early_exit_layer`) on the layer count of the model's own config."""
    return early_exit_layer(int(model.config.get_text_config().num_hidden_layers))


def path_kwargs(assistant=None, prompt_lookup: int | None = None, use_mtp: bool = False,
                ensemble_weight: float | None = None, early_exit: int | None = None) -> dict[str, Any]:
    """The generate() keyword arguments that select a path (none: plain decoding)."""
    kwargs: dict[str, Any] = {}
    if early_exit is not None:
        kwargs["assistant_early_exit"] = early_exit
    if assistant is not None:
        kwargs["assistant_model"] = assistant
    if prompt_lookup is not None:
        kwargs["prompt_lookup_num_tokens"] = prompt_lookup
    if use_mtp:
        kwargs["use_mtp"] = True
    if ensemble_weight is not None:
        kwargs["assistant_ensemble_weight"] = ensemble_weight
    return kwargs


@contextlib.contextmanager
def emitted(sink: list[str]) -> Iterator[list[str]]:
    """The first line of every distinct warning raised inside (warnings.warn, and records of the
    `transformers` logger at WARNING or above), in order, into `sink`."""
    import logging
    import warnings

    class Sink(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            line = str(record.getMessage()).strip().splitlines()[0][:160] if record.getMessage() else ""
            if line and line not in sink:
                sink.append(line)

    handler, logger = Sink(logging.WARNING), logging.getLogger("transformers")
    level = logger.level  # a verbosity set to ERROR elsewhere (another test, the user) would hide them
    # a logging.config.dictConfig elsewhere (the user's app, a tool like import-linter run in-process)
    # disables every logger that exists then, transformers' included: enabled for the call, put back
    disabled = [lg for name, lg in logging.root.manager.loggerDict.items()
                if isinstance(lg, logging.Logger) and lg.disabled and (name + ".").startswith("transformers.")]
    for lg in disabled:
        lg.disabled = False
    logger.addHandler(handler)
    if not level or level > logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield sink
        for w in caught:
            line = (str(w.message).strip().splitlines() or [""])[0][:160]
            if line and line not in sink:
                sink.append(line)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        for lg in disabled:
            lg.disabled = True


def ran_with(model, cache: Any, said: list[str]) -> dict[str, Any]:
    """The setup a generate() call really ran with (`Generated.setup`)."""
    return {"cache": type(cache).__name__ if cache is not None else None,
            "attn_implementation": getattr(model.config, "_attn_implementation", None), "warnings": list(said)}


def generate(model, input_ids: torch.Tensor, max_new_tokens: int, *, assistant=None, prompt_lookup: int | None = None,
             use_mtp: bool = False, ensemble_weight: float | None = None, draft_tokens: int | None = None,
             do_sample: bool = False, seed: int | None = None, cache: str = "dynamic",
             first_logit_steps: int = 0, own_scores: bool = False, all_scores: bool = False,
             early_exit: int | None = None) -> Generated:
    """One generate() call on a path. `own_scores`: a greedy ensemble call keeps the numbers its
    verifier had (`Generated.draft_scores` / `token_scores`: outputs' ensemble_on_own_scores) - off
    where the call is timed or its memory measured (the copies are the harness's, not the library's)."""
    kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, do_sample=do_sample, return_dict_in_generate=True,
                                  output_scores=True, pad_token_id=model.config.pad_token_id)
    if cache == "static":
        kwargs["cache_implementation"] = "static"
    kwargs.update(path_kwargs(assistant, prompt_lookup, use_mtp, ensemble_weight, early_exit))
    out = Generated()
    if seed is not None:
        torch.manual_seed(seed)
    said: list[str] = []
    lists: list[dict[str, Any]] = []  # a plain sampled call: the config its processors were built from
    plain_sampled = do_sample and assistant is None and prompt_lookup is None and not use_mtp and early_exit is None
    if own_scores and ensemble_weight is not None and not do_sample:
        out.draft_scores = []
    from harness.subjects.hf_processors import processor_lists

    try:
        with (record_drafts(out.drafts, out.draft_margins, out.draft_scores), count_forwards(model) as counter,
              draft_schedule(model if early_exit is not None else assistant, draft_tokens), emitted(said),
              processor_lists(model, lists) if plain_sampled else contextlib.nullcontext(), torch.no_grad()):
            # with an explicit attention mask, as a tokenizer's output would pass it (5.24's use_mtp
            # path raises KeyError('position_ids') without one)
            result = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
    except Exception as exc:
        if not is_subject_error(exc):
            raise
        out.error = error_of(exc)
        out.setup = ran_with(model, None, said)
        return out
    out.setup = ran_with(model, getattr(result, "past_key_values", None), said)
    out.tokens = result.sequences[0, input_ids.shape[1]:].tolist()
    out.margins = [top2_margin(s[0]) for s in result.scores]
    out.scales = [top2_scale(s[0]) for s in result.scores]
    out.first_logits = [s[0].float().tolist() for s in result.scores[:first_logit_steps]]
    if (out.draft_scores is not None or all_scores) and result.scores:
        out.token_scores = torch.stack([s[0].detach().float().cpu() for s in result.scores])
    out.built_config = lists[0]["config"] if lists else None
    out.target_forwards = counter["n"]
    return out


# ----------------------------------------------------------------------------------------------
# the one-step verifier


def speculative_sampling() -> tuple[Callable[[int, torch.Tensor, torch.Tensor, float | None], tuple[int, int]], bool] | None:
    """transformers' one-step verifier (`generation.utils._speculative_sampling`) as
    f(draft_token, q_logits, p_logits, w) -> (first emitted token, accepted), and whether it takes
    an ensemble weight; None when the installed version has no such function."""
    from transformers.generation import utils

    fn = getattr(utils, "_speculative_sampling", None)
    if fn is None:
        return None
    params = inspect.signature(fn).parameters

    def run(draft: int, q_logits: torch.Tensor, p_logits: torch.Tensor, w: float | None) -> tuple[int, int]:
        kwargs: dict[str, Any] = {}
        if "is_done_candidate" in params:
            kwargs["is_done_candidate"] = False
        if w is not None:
            kwargs["assistant_ensemble_weight"] = w
        # one drafted position; the target scores it and the bonus position (same row: only the
        # first emitted token is counted)
        new_logits = torch.stack([p_logits, p_logits])[None]
        tokens, n_matches = fn(torch.tensor([[0, draft]]), q_logits[None, None], 1, new_logits, **kwargs)
        return int(tokens[0, 0]), int(n_matches)

    return run, "assistant_ensemble_weight" in params
