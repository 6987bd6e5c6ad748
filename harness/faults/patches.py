"""How a fault patches the installed transformers: `Patch` kinds, each undone by restoring the
original object, and `Fault`, one catalogue row (harness/faults/catalogue.py).

  `SourceEdit`  one line of a function's or method's source replaced by another, recompiled in its
                own module's namespace (so the fault is the one-token bug it describes); the edit
                must match the installed source exactly once, else `FaultError` names the fault,
                the target and the text (the fault does not apply to this version)
  `Wrap`        the target replaced by a wrapper around the original (arguments or results changed)
  `SetItems`    class attributes set to other values (a flipped flag)
  `SlowForward` every call of a generating model (a `GenerationMixin`) busy-waits `fraction`
                of its own CPU time after it returns

A module-level function is rebound in every loaded transformers module that imported it by name,
so a patched `resolve_trust_remote_code` is the one `AutoConfig` calls, and in its own module's
registries (a module-level dict holding it as a value: `ROPE_INIT_FUNCTIONS["llama3"]`).
"""

from __future__ import annotations

import fnmatch
import importlib
import inspect
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

Undo = Callable[[], None]


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


def _own(module: Any, name: str) -> Any:
    """`module.name` if the module itself holds it: read from its namespace, never through a lazy
    module's __getattr__ (transformers 5.13 / 5.14 import a submodule - and its optional
    dependencies, e.g. torchvision - when an unknown name is asked of one)."""
    return getattr(module, "__dict__", {}).get(name)


def _rebind(module: Any, owner: Any, name: str, original: Any, replacement: Any) -> Undo:
    """Set owner.name = replacement; for a module-level function, also every transformers module
    that imported the same object by that name. Returns the undo."""
    holders = [owner]
    registries: list[tuple[dict, Any]] = []
    if owner is module:
        holders += [m for key, m in list(sys.modules.items())
                    if key.startswith("transformers") and m is not module and _own(m, name) is original]
        registries = [(table, key) for table in list(vars(module).values()) if isinstance(table, dict)
                      for key, value in list(table.items()) if value is original]
    for holder in holders:
        setattr(holder, name, replacement)
    for table, key in registries:
        table[key] = replacement

    def undo() -> None:
        for holder in holders:
            setattr(holder, name, original)
        for table, key in registries:
            table[key] = original
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


def _wrap_generating_models(around: Callable[[Callable[[], Any]], Any]) -> Undo:
    """Route every call of a generating model (a `PreTrainedModel` that is a `GenerationMixin`)
    through around(call); other modules (the inner base model, the reference engine) run as they are."""
    import torch
    from transformers import GenerationMixin, PreTrainedModel

    call = torch.nn.Module.__call__
    before = vars(PreTrainedModel).get("__call__", _ABSENT)

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(self, GenerationMixin):
            return call(self, *args, **kwargs)
        return around(lambda: call(self, *args, **kwargs))

    PreTrainedModel.__call__ = __call__  # type: ignore[method-assign]

    def undo() -> None:
        if before is _ABSENT:
            del PreTrainedModel.__call__
        else:
            PreTrainedModel.__call__ = before  # type: ignore[method-assign]
    return undo


@dataclass(frozen=True)
class SlowForward:
    """Every call of a generating model costs (1 + fraction) times its own time: after it returns,
    the process busy-waits `fraction` of the call's CPU time (`waits=False`: a slowdown that
    computes) or sleeps `fraction` of its wall time (`waits=True`: one that only waits - a
    synchronisation, a lock, I/O - invisible to a CPU clock; the sleep's own lateness, measured
    when the fault is applied, is subtracted, else a 15 % wait of a 1 ms forward lasts ~2x that)."""

    fraction: float
    waits: bool = False

    def apply(self, fault: str) -> Undo:
        from harness.subjects import timing

        fraction, waits = self.fraction, self.waits
        overshoot = timing.sleep_overshoot() if waits else 0.0  # a sleep wakes late: ask for that much less

        def around(call: Callable[[], Any]) -> Any:
            clock = time.perf_counter if waits else timing.timer
            start = clock()
            out = call()
            if waits:
                timing.sleep_for(fraction * (clock() - start), overshoot)
            else:
                timing.busy_wait(fraction * (clock() - start))
            return out
        return _wrap_generating_models(around)


@dataclass(frozen=True)
class ExtraAllocation:
    """Every call of a generating model keeps more memory: after each torch op inside it that
    allocates (not a view), a buffer of `fraction` of the op's output bytes, kept until the call
    returns (as a debugging copy or an upcast a release forgot to drop would). The buffers pile up
    over the call, so its peak grows far more than `fraction` (x7 on llama-target's decode step)."""

    fraction: float

    def apply(self, fault: str) -> Undo:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode

        fraction = self.fraction

        class Keep(TorchDispatchMode):
            def __init__(self) -> None:
                super().__init__()
                self.kept: list[torch.Tensor] = []

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for tensor in (out if isinstance(out, (tuple, list)) else (out,)):
                    if isinstance(tensor, torch.Tensor) and tensor.nbytes and not tensor._is_view():  # a view allocates nothing
                        self.kept.append(torch.empty(int(fraction * tensor.nbytes), dtype=torch.uint8))
                return out

        def around(call: Callable[[], Any]) -> Any:
            with Keep():
                return call()
        return _wrap_generating_models(around)


@dataclass(frozen=True)
class Fault:
    """One injectable defect: its name, what it breaks, where it must be caught, how it is made."""

    name: str
    area: str  # verifier, drafting, caches, attention, backends, checkpoints, contracts, sampling, stopping, batching,
    # long context, streaming, latency, tokenizers, chat, beam, kernels (torch itself)
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
