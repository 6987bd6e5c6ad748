"""Sampled generate() as a white box: every sampled decision observed inside the call.

While ``with Recorder() as rec:`` runs one ``generate(do_sample=True)`` (batch size 1), the tensors
transformers itself sampled from are recorded, per verification step (`Step`):

    p[i]       the processed target distribution at drafted position i and at the bonus k (the
               verifier's own ``new_logits.softmax``; without candidate logits the rows of the one
               ``torch.multinomial`` over k + 1 rows; plain sampling: ``_sample``'s multinomial input)
    q_draw[i]  what draft x_i was drawn from (the drafter's ``torch.multinomial`` input)
    q_ver[i]   the draft distribution the acceptance test used (the verifier's ``candidate_logits.softmax``)
    ratio[i]   what the uniforms were compared with (the input of ``torch.rand_like``)
    last       what the correction / bonus token was drawn from (the verifier's ``torch.multinomial`` input)
    raw_p[i]   the raw logits the target's processor list received for row i (in call order), with the
               processors that list held as the version built it (order and repeats; as plain data and
               read as the engine's entries, harness/subjects/hf_processors.py); raw_q[i] the same for
               the drafter's row i
    built      every list ``_get_logits_processor`` returned, with its role, the generation config it
               was built from (`hf_processors.config_values`) and its prompt length

Hooks (all restored on exit): a ``TorchFunctionMode`` over the sampling primitives (multinomial,
rand_like / rand, softmax inside the verifier), and
wrappers that only tag where the process is, found by name: ``generation.utils._speculative_sampling``
(the verifier; its call is kept so it can be probed), ``GenerationMixin._assisted_decoding`` /
``_sample``, ``get_candidates`` of every candidate generator class, ``GenerationMixin._get_logits_processor``
and ``LogitsProcessorList.__call__``. Fail closed: a hook that finds nothing to hook is listed in
`Recorder.missing` with the reason, and a step whose quantities were not seen carries a note.

`probe(step)` replays the recorded verifier with its randomness replaced - draft i set to each y in
the support of q_draw[i], ``rand_like`` returning -1 (accept) before i and +inf (reject) at i - and
reads A_i(y) = clip(ratio_i, 0, 1) and the distribution R_i(. | y) a rejection draws from: the
acceptance rule *of the code that ran*, faulty or not. The implied emitted distribution is pure math
(harness/engine/verify.py `implied_emission`); the exact side lives in harness/designs/whitebox.py.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from harness.subjects import hf_processors as hp

F64 = torch.float64
MULTINOMIAL = {torch.multinomial, torch.Tensor.multinomial}
UNIFORM = {torch.rand_like, torch.rand}
SOFTMAX = {torch.softmax, torch.Tensor.softmax, torch.nn.functional.softmax}
VERIFIER = "generation.utils._speculative_sampling"


def _rows(x: torch.Tensor) -> torch.Tensor:
    """A sampler's input as the distributions it really samples (rows normalised), float64, CPU."""
    x = x.detach().to("cpu", F64).reshape(-1, x.shape[-1])
    return x / x.sum(-1, keepdim=True)


def _plain(v: Any) -> Any:
    return v if isinstance(v, (bool, int, float, str)) else None


def chain_of(processors: Any) -> list[list[Any]]:
    """A logits-processor list as plain data: [[class name, {param: value}], ...] in order."""
    return [[type(p).__name__, {k: _plain(v) for k, v in sorted(vars(p).items())
                                if not k.startswith("_") and _plain(v) is not None}] for p in processors]


@dataclass(frozen=True)
class Built:
    """One list ``_get_logits_processor`` returned: for whom, its processors as the engine reads them,
    the generation config (CONFIG_KEYS) and prompt length it was given."""

    role: str  # "target" | "draft"
    processors: list[Any]
    config: dict[str, Any]
    prompt_length: int | None


@dataclass
class Event:
    kind: str
    phase: tuple[str, ...]
    data: dict[str, Any] = field(default_factory=dict)


class _Spy(TorchFunctionMode):
    def __init__(self, rec: Recorder):
        super().__init__()
        self.rec = rec

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        rec, phase = self.rec, self.rec.phase()
        if func in MULTINOMIAL:
            rec.log("multinomial", dist=_rows(args[0]), out=out.detach().cpu().reshape(-1).tolist())
        elif func in UNIFORM:
            like = args[0].detach().to("cpu", F64).reshape(-1).clone() if func is torch.rand_like else None
            rec.log("uniform", like=like, out=out.detach().to("cpu", F64).reshape(-1).clone())
        elif func in SOFTMAX and phase and phase[-1] == "verify":
            rec.log("softmax", input=id(args[0]), out=_rows(out) if out.dim() < 3 else out.detach().to("cpu", F64)[0])
        return out


class Recorder(contextlib.AbstractContextManager):
    """Record generate() calls (see the module docstring). `hooked` / `missing` say which hooks were
    found; `hook_verifier=False` pretends the verifier cannot be found (the fallback is tested)."""

    def __init__(self, hook_verifier: bool = True):
        self.hook_verifier = hook_verifier
        self.events: list[Event] = []
        self.hooked: list[str] = []
        self.missing: list[str] = []  # "<hook>: <why>"
        self.generated = 0  # new tokens the recorded generate() call returned
        self.lists: dict[int, tuple[Any, str, list[list[Any]]]] = {}  # id(list) -> (list, role, chain)
        self.built: dict[int, Built] = {}  # id(list) -> the list as the engine reads it, and its config
        self._stack: list[str] = []
        self._undo: list[Callable[[], None]] = []
        self._mode: _Spy | None = None

    def phase(self) -> tuple[str, ...]:
        return tuple(self._stack)

    def log(self, kind: str, **data: Any) -> None:
        self.events.append(Event(kind, self.phase(), data))

    @contextlib.contextmanager
    def inside(self, name: str) -> Iterator[None]:
        self._stack.append(name)
        try:
            yield
        finally:
            self._stack.pop()

    def built_lists(self, role: str) -> list[Built]:
        """Every list generate() built for `role`, in order, with the config it was built from."""
        return [b for b in self.built.values() if b.role == role]

    def chains(self, role: str) -> list[list[list[Any]]]:
        """The processor lists generate() built for `role` ("target": the outer call's; "draft": the
        assistant's inner calls), in order."""
        return [chain for _, r, chain in self.lists.values() if r == role]

    def _patch(self, owner: Any, name: str, label: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        original = inspect.getattr_static(owner, name, None) if owner is not None else None
        if original is None:
            self.missing.append(f"{label}: not found in the installed transformers")
            return
        setattr(owner, name, make(getattr(owner, name)))
        self.hooked.append(label)
        self._undo.append(lambda: setattr(owner, name, original))

    def __enter__(self) -> Recorder:
        from transformers.generation import candidate_generator as cg
        from transformers.generation import logits_process as lp
        from transformers.generation import utils as gu

        rec = self

        def verifier(original):
            @functools.wraps(original)
            def _speculative_sampling(*args, **kwargs):
                with rec.inside("verify"):
                    out = original(*args, **kwargs)
                rec.log("verify", fn=original, kwargs=dict(kwargs), n=int(out[1]),
                        args=tuple(a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args),
                        ids=(id(args[1]), id(args[3])), valid=out[0].detach().cpu().reshape(-1).tolist())
                return out
            return _speculative_sampling

        def phase(label: str):
            def make(original):
                @functools.wraps(original)
                def method(model, input_ids, *args, **kwargs):
                    outer = not rec._stack
                    with rec.inside(label):
                        rec.log(label + "_start", ids=input_ids[0].tolist(), outer=outer)
                        out = original(model, input_ids, *args, **kwargs)
                    seq = out if isinstance(out, torch.Tensor) else getattr(out, "sequences", None)
                    rec.log(label + "_end", ids=None if seq is None else seq[0].tolist(), outer=outer)
                    return out
                return method
            return make

        def candidates(original):
            @functools.wraps(original)
            def get_candidates(gen, input_ids, *args, **kwargs):
                with rec.inside("draft"):
                    rec.log("draft_start", ids=input_ids[0].tolist())
                    out = original(gen, input_ids, *args, **kwargs)
                ids, logits = out if isinstance(out, tuple) else (out, None)
                rec.log("draft_end", drafts=ids[0, input_ids.shape[1]:].tolist(), has_logits=logits is not None)
                return out
            return get_candidates

        def processors(original):
            signature = inspect.signature(original)

            @functools.wraps(original)
            def _get_logits_processor(*args, **kwargs):
                out = original(*args, **kwargs)
                role = "draft" if "draft" in rec._stack else "target"
                rec.lists[id(out)] = (out, role, chain_of(out))
                bound = signature.bind_partial(*args, **kwargs).arguments
                rec.built[id(out)] = Built(role, hp.as_engine(out), hp.config_values(bound.get("generation_config")),
                                           bound.get("input_ids_seq_length"))
                return out
            return _get_logits_processor

        def processor_call(original):
            @functools.wraps(original)
            def __call__(plist, input_ids, scores, *args, **kwargs):
                known, built = rec.lists.get(id(plist)), rec.built.get(id(plist))
                rec.log("logits", role="draft" if "draft" in rec._stack else "target",
                        raw=scores.detach().to("cpu", F64)[0].clone(), chain=known[2] if known else None,
                        procs=built.processors if built else None)
                return original(plist, input_ids, scores, *args, **kwargs)
            return __call__

        if self.hook_verifier:
            self._patch(gu, "_speculative_sampling", VERIFIER, verifier)
        else:
            self.missing.append(f"{VERIFIER}: disabled")
        gm = gu.GenerationMixin
        self._patch(gm, "_assisted_decoding", "GenerationMixin._assisted_decoding", phase("assisted"))
        self._patch(gm, "_sample", "GenerationMixin._sample", phase("sample"))
        classes = [c for c in vars(cg).values() if inspect.isclass(c) and "get_candidates" in vars(c)]
        for c in classes:
            self._patch(c, "get_candidates", f"{c.__name__}.get_candidates", candidates)
        if not classes:
            self.missing.append("*.get_candidates: no candidate generator class defines get_candidates")
        self._patch(gm, "_get_logits_processor", "GenerationMixin._get_logits_processor", processors)
        self._patch(getattr(lp, "LogitsProcessorList", None), "__call__", "LogitsProcessorList.__call__",
                    processor_call)
        self._mode = _Spy(self)
        self._mode.__enter__()
        self.hooked.append("TorchFunctionMode")
        return self

    def __exit__(self, *exc: Any) -> bool:
        if self._mode is not None:
            self._mode.__exit__(*exc)
            self._mode = None
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        return False


# ----------------------------------------------------------------------------------------------
# steps


@dataclass(frozen=True)
class Raw:
    """One call of a logits-processor list: its raw input row and the list's processors."""

    logits: torch.Tensor
    chain: list[list[Any]] | None  # None: a list generate() did not build (a caller's own)
    procs: list[Any] | None = None  # the same list read as engine entries (harness/engine/processors.py)


def _raw(e: Event) -> Raw:
    return Raw(e.data["raw"], e.data["chain"], e.data.get("procs"))


@dataclass
class Step:
    """One verification step (or one plain sampling step) as observed; tensors float64, row 0."""

    kind: str  # "plain" | "speculative" | "no_logits" (prompt lookup, MTP warm-up: y_i ~ p_i row by row)
    context: list[int]  # committed tokens before the step
    drafts: list[int] = field(default_factory=list)
    p: torch.Tensor | None = None  # [k+1, V]
    q_draw: torch.Tensor | None = None  # [k, V]; None: drafted without a multinomial (greedy, lookup)
    q_ver: torch.Tensor | None = None  # [k, V]
    ratio: torch.Tensor | None = None  # [k]
    last: torch.Tensor | None = None  # [V]
    n: int | None = None  # drafts accepted
    verify: dict[str, Any] | None = None  # the recorded verifier call (for probing)
    raw_p: list[Raw] = field(default_factory=list)  # the target's rows, in call order
    raw_q: list[Raw] = field(default_factory=list)  # the drafter's rows, in call order
    notes: list[str] = field(default_factory=list)
    call: int = 0  # which generate() call of a case

    @property
    def k(self) -> int:
        return len(self.drafts)

    @property
    def chain_missing(self) -> bool:
        """A row was processed by a list generate() did not build: its processors are unknown."""
        return any(r.chain is None for r in [*self.raw_p, *self.raw_q])

    def contexts(self) -> list[tuple[int, ...]]:
        """c_i = context + x_<i for i = 0..k."""
        return [tuple(self.context + self.drafts[:i]) for i in range(self.k + 1)]


def steps(rec: Recorder) -> list[Step]:
    """Cut the event log into steps: one per get_candidates call of the outer assisted loop, one per
    multinomial of the outer `_sample` (plain sampling)."""
    out: list[Step] = []
    cur: Step | None = None
    draws: list[Event] = []
    softmaxes: list[Event] = []
    plain: list[int] | None = None
    pending: list[Raw] = []  # the plain loop's processor call before its multinomial
    for e in rec.events:
        ph = e.phase
        if e.kind == "draft_start" and ph.count("draft") == 1:
            cur = Step("speculative", list(e.data["ids"]))
            out.append(cur)
            draws, softmaxes = [], []
        elif cur is not None and e.kind == "draft_end" and "draft" not in ph:
            cur.drafts = list(e.data["drafts"])
            _drafted(cur, [d for d in draws if d.kind == "multinomial"])
            cur.raw_q = [_raw(d) for d in draws if d.kind == "logits" and d.data["role"] == "draft"][:cur.k]
            if not cur.drafts or not e.data["has_logits"]:
                cur.kind = "no_logits"
        elif cur is not None and "draft" in ph:
            draws.append(e)
        elif cur is not None and "verify" in ph:
            if e.kind == "uniform":
                cur.ratio = e.data["like"]
            elif e.kind == "multinomial":
                cur.last = e.data["dist"][0]
            elif e.kind == "softmax":
                softmaxes.append(e)
        elif cur is not None and e.kind == "verify":
            _verified(cur, e, softmaxes)
        elif cur is not None and ph and ph[-1] == "assisted" and e.kind in ("uniform", "multinomial"):
            _unhooked(cur, e)
        elif cur is not None and ph and ph[-1] == "assisted" and e.kind == "logits":
            cur.raw_p.append(_raw(e))
        elif e.kind == "logits" and ph == ("sample",):
            pending = [_raw(e)]
        elif e.kind == "sample_start" and e.data["outer"]:
            plain = list(e.data["ids"])
        elif e.kind == "multinomial" and ph == ("sample",) and plain is not None:
            step = Step("plain", list(plain), p=e.data["dist"][:1], n=0, raw_p=pending)
            pending = []
            if e.data["dist"].shape[0] > 1:
                step.notes.append(f"{e.data['dist'].shape[0]} rows sampled at once: row 0 followed")
            plain.append(e.data["out"][0])
            out.append(step)
    return out


def _drafted(step: Step, draws: list[Event]) -> None:
    """q_draw: the last k drafter multinomials, if they drew exactly the k drafts one row each."""
    k = step.k
    last = draws[-k:] if k else []
    if k and len(last) == k and all(d.data["dist"].shape[0] == 1 and d.data["out"][0] == x
                                    for d, x in zip(last, step.drafts, strict=True)):
        step.q_draw = torch.cat([d.data["dist"] for d in last])
    elif k and draws:
        step.notes.append(f"{len(draws)} drafter multinomial(s) do not match the {k} drafts")


def _verified(step: Step, e: Event, softmaxes: list[Event]) -> None:
    step.kind, step.verify, step.n = "speculative", e.data, e.data["n"]
    cand, new = e.data["ids"]
    for sm in softmaxes:
        if sm.data["input"] == cand and step.q_ver is None:
            step.q_ver = sm.data["out"]
        elif sm.data["input"] == new and step.p is None:
            step.p = sm.data["out"]
    for name, value, arg in (("q_ver", step.q_ver, 1), ("p", step.p, 3)):
        if value is None:  # not seen as a softmax call: the argument the verifier got, softmaxed here
            step.notes.append(f"{name}: the verifier's softmax was not seen; softmax of its argument instead")
            setattr(step, name, torch.softmax(e.data["args"][arg].to(F64)[0], -1))


def _unhooked(step: Step, e: Event) -> None:
    """Primitives of the assisted loop itself: the branch without candidate logits (one multinomial over
    the k + 1 target rows), or a verifier the name hook did not catch."""
    if e.kind == "uniform":
        step.ratio = e.data["like"]
        if step.ratio is not None:
            accepted = (e.data["out"] <= step.ratio).tolist()
            step.n = next((i for i, a in enumerate(accepted) if not a), len(accepted))
        step.notes.append(f"uniforms drawn outside a hooked verifier ({VERIFIER} not hooked): ratio and "
                          "residual seen through the primitives only, not probed")
        step.verify = None
        step.kind = "unhooked"
    elif step.kind == "unhooked":
        step.last = e.data["dist"][0]
    else:
        step.kind, step.p = "no_logits", e.data["dist"]
        chosen = e.data["out"]
        n = next((i for i, x in enumerate(step.drafts) if chosen[i] != x), step.k)
        step.n = n


# ----------------------------------------------------------------------------------------------
# probing the verifier that ran


class _Probe(TorchFunctionMode):
    """rand_like returns `r`; multinomial records its (normalised) input and returns token 0."""

    def __init__(self, r: torch.Tensor):
        super().__init__()
        self.r, self.ratio, self.dists = r, None, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.rand_like:
            self.ratio = args[0].detach().to("cpu", F64).reshape(-1).clone()
            return self.r.to(dtype=args[0].dtype, device=args[0].device).reshape(args[0].shape)
        if func in MULTINOMIAL:
            self.dists.append(_rows(args[0])[0])
            return torch.zeros((*args[0].shape[:-1], 1), dtype=torch.long, device=args[0].device)
        return func(*args, **(kwargs or {}))


def _call(verify: dict[str, Any], drafts: list[int], r: torch.Tensor) -> _Probe:
    args = [a.clone() if isinstance(a, torch.Tensor) else a for a in verify["args"]]
    k = len(drafts)
    args[0][0, args[0].shape[1] - k:] = torch.tensor(drafts, dtype=args[0].dtype)
    probe = _Probe(r)
    with probe, torch.no_grad():
        verify["fn"](*args, **verify["kwargs"])
    return probe


def accept_probability(ratio: float) -> float:
    """P(U <= ratio) for U ~ U[0, 1): the test ``rand_like(ratio) <= ratio`` (NaN: never)."""
    return 0.0 if math.isnan(ratio) else min(1.0, max(0.0, ratio))


@dataclass
class Probes:
    """What the verifier that ran does with each possible draft, per position i of a step:
    accept[i][y] = A_i(y), residual[i][y] = R_i(. | y); `reach[i]` = P(positions < i accepted) for the
    observed drafts; `bonus` = what it draws when every draft is accepted (None: nothing drawn)."""

    accept: list[dict[int, float]]
    residual: list[dict[int, torch.Tensor | None]]
    reach: list[float]
    bonus: torch.Tensor | None
    notes: list[str] = field(default_factory=list)


def probe(step: Step, max_support: int = 1024) -> Probes | None:
    """Probe the recorded verifier call of a speculative step (see the module docstring); None when
    the step cannot be probed (no recorded call, no uniforms drawn, no q_draw)."""
    if step.verify is None or step.q_draw is None or step.kind != "speculative":
        return None
    k = step.k
    base = _call(step.verify, list(step.drafts), torch.full((k,), -1.0, dtype=F64))
    if base.ratio is None:
        step.notes.append("the verifier drew no uniforms: its acceptance rule cannot be probed")
        return None
    observed = [accept_probability(float(x)) for x in base.ratio]
    reach = [math.prod(observed[:i]) for i in range(k + 1)]
    accept: list[dict[int, float]] = []
    residual: list[dict[int, torch.Tensor | None]] = []
    for i in range(k):
        support = torch.nonzero(step.q_draw[i] > 0).flatten().tolist()
        if reach[i] == 0.0 or len(support) > max_support:
            accept.append({})
            residual.append({})
            continue
        a_i, r_i = {}, {}
        for y in support:
            drafts = list(step.drafts)
            drafts[i] = y
            r = torch.full((k,), -1.0, dtype=F64)
            r[i] = math.inf
            pr = _call(step.verify, drafts, r)
            a_i[y] = accept_probability(float(pr.ratio[i])) if pr.ratio is not None else 0.0
            r_i[y] = pr.dists[-1] if pr.dists else None
        accept.append(a_i)
        residual.append(r_i)
    return Probes(accept, residual, reach, base.dists[-1] if base.dists else None)


def generate(model, input_ids: torch.Tensor, kwargs: dict[str, Any], seed: int) -> tuple[Recorder, Any]:
    """One generate() call under a Recorder; (the recorder, the exception raised or None)."""
    from harness.subjects import error_of, is_subject_error

    rec = Recorder()
    torch.manual_seed(seed)
    try:
        with rec, torch.no_grad():
            out = model.generate(input_ids, **kwargs)
    except Exception as exc:
        if not is_subject_error(exc):
            raise
        return rec, error_of(exc)
    seq = out if isinstance(out, torch.Tensor) else getattr(out, "sequences", None)
    rec.generated = 0 if seq is None else int(seq.shape[-1] - input_ids.shape[-1])
    return rec, None
