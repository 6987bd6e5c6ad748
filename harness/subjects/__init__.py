"""Subjects: what the harness observes. A subject turns a `schema.Case` into observations.

- `hf.py`: the installed transformers - loading a checkpoint, `generate()` on every path, what
  this version supports (`capabilities`), the drafts and forward passes of a run;
- `hf_cache.py`: its KV caches and attention calls (layer classes, lengths, crop, SDPA masks);
- `hf_contracts.py`: its API contracts (return types, validation, feature acceptance);
- `hf_stopping.py`: its stopping criteria and streamers;
- `hf_batching.py`: generate() on a padded batch, with the mask and position ids that reached forward;
- `engine.py`: the reference engine (harness/engine/) as the expected side of a case.

The subject boundary lives here, in one place: `observe(fn)` runs a call into the subject and
returns an exception *raised by the library under test* as data (`error_of`: type and first line,
with machine-specific paths scrubbed), because a version that raises is a finding. Every other
exception - raised by harness code (a probe, a hook, the engine, a comparer), or raised by torch on
arguments the harness built - is a bug: it propagates and fails the test with its traceback, and
`harness regen` never writes it.

Which side raised is decided by the stack, never by the message (`is_subject_error`): each frame
of the traceback is the library's (`LIBRARY_PACKAGES`, and a fault's edited library source), the
harness's (the harness package, the suites, tests, anything outside the installed packages), or
neutral (the standard library, torch and other installed packages: they run on behalf of
whoever called them). The exception is the library's iff the frames below the last harness frame
- the library call a subject made - include a library frame: the library was running when it
raised, and no harness code was called back in between. A call that fails before its callee
starts has no frame of its own; the callee is read from the failing call expression
(`_failed_callee`): a C function (a tokenizers binding raising on its arguments) counts as the frame
below, but a TypeError binding a Python callee's arguments (``DynamicCache(no_such_keyword=1)``,
``model(bad=1)`` through torch's ``Module.__call__``) never entered it - the arguments were built
by whoever made the call, and the frames above decide: the harness's call is the harness's bug
(the run fails loudly; a record of it would pass in every version), the library calling its own
code with a wrong argument stays the library's.
"""

from __future__ import annotations

import ast
import contextlib
import dis
import functools
import inspect
import linecache
import os
import re
import site
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")

# The library under test and the libraries it ships with: a frame in one of them is the library's.
LIBRARY_PACKAGES = ("transformers", "tokenizers", "safetensors", "huggingface_hub")
FAULT_SOURCE = "<fault "  # harness/faults/patches.py compiles an edited library function under this name
_REPO_ROOT = str(Path(__file__).resolve().parents[2])
_HARNESS_ROOT = str(Path(__file__).resolve().parents[1])
_CALLS = frozenset({"CALL", "CALL_KW", "CALL_FUNCTION", "CALL_FUNCTION_KW", "CALL_FUNCTION_EX", "CALL_METHOD",
                    "PRECALL"})
# the expressions `_failed_callee` evaluates to find a callee: names, attributes, constant subscripts
_SAFE_NODES = (ast.Expression, ast.Name, ast.Attribute, ast.Subscript, ast.Constant, ast.Load)

LIBRARY, NEUTRAL, HARNESS = "library", "neutral", "harness"


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@functools.lru_cache(maxsize=1)
def _installed_roots() -> tuple[str, ...]:
    """Where the standard library and installed packages live (their frames are neutral)."""
    roots = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    with contextlib.suppress(AttributeError):
        roots |= set(site.getsitepackages()) | {site.getusersitepackages()}
    return tuple(sorted(str(Path(r).resolve()) for r in roots if r))


def _library_roots() -> tuple[str, ...]:
    roots = []
    for name in LIBRARY_PACKAGES:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            roots.append(str(Path(file).resolve().parent))
    return tuple(roots)


@functools.lru_cache(maxsize=4096)
def _side_of_file(filename: str, library_roots: tuple[str, ...]) -> str:
    if filename.startswith(FAULT_SOURCE):
        return LIBRARY  # a fault of the catalogue is a library bug, modelled
    if filename.startswith("<"):
        return NEUTRAL  # generated code (<string>, <frozen importlib._bootstrap>)
    path = str(Path(filename).resolve())
    if _under(path, _HARNESS_ROOT):
        return HARNESS  # first: an installed harness lives among the installed packages
    if any(_under(path, root) for root in library_roots):
        return LIBRARY
    if any(_under(path, root) for root in _installed_roots()) or "site-packages" in path or "dist-packages" in path:
        return NEUTRAL
    return HARNESS  # suites, tests, a conftest, a script: code of the harness's side


def side_of_file(filename: str) -> str:
    """'library', 'neutral' or 'harness': whose code a frame of `filename` runs."""
    return _side_of_file(filename, _library_roots())


def _side_of_callee(callee: Any) -> tuple[str, bool]:
    """The side of the code a call to `callee` runs first: a function's own, a class's __init__,
    an instance's __call__; a C function's module - and whether that code is Python (its frame
    would be in the traceback had it started)."""
    func = getattr(callee, "__func__", callee)  # a bound method: its function
    if isinstance(func, type):
        init = func.__init__  # a class binds its arguments in __init__
        func = init if hasattr(init, "__code__") else func
    elif not hasattr(func, "__code__") and not inspect.isbuiltin(func) \
            and hasattr(inspect.getattr_static(type(func), "__call__", None), "__code__"):
        func = inspect.getattr_static(type(func), "__call__")  # an instance of a class with a __call__
    code = getattr(func, "__code__", None)
    if code is not None:
        return side_of_file(code.co_filename), True
    module = getattr(func, "__module__", None)
    if not isinstance(module, str):
        module = type(func).__module__
    file = getattr(sys.modules.get(module), "__file__", None)
    return (side_of_file(file) if file else NEUTRAL), False


def _failed_callee(tb: TracebackType) -> tuple[str, bool] | None:
    """The side of the callable the innermost frame was calling when the exception was raised
    (the call failed before its callee ran a frame: a binding error, or a C function raising), and
    whether it is Python code (`_side_of_callee`), or None when the frame was not at a call or the
    callee cannot be read back safely."""
    code, frame = tb.tb_frame.f_code, tb.tb_frame
    instruction = next((i for i in dis.get_instructions(code) if i.offset == tb.tb_lasti), None)
    if instruction is None or instruction.opname not in _CALLS:
        return None
    pos = getattr(instruction, "positions", None)
    if pos is None or None in (pos.lineno, pos.end_lineno, pos.col_offset, pos.end_col_offset):
        return None
    lines = [line.encode("utf-8") for line in linecache.getlines(code.co_filename, frame.f_globals)]
    if len(lines) < pos.end_lineno:
        return None
    if pos.lineno == pos.end_lineno:
        segment = lines[pos.lineno - 1][pos.col_offset:pos.end_col_offset]
    else:
        segment = b"".join([lines[pos.lineno - 1][pos.col_offset:], *lines[pos.lineno:pos.end_lineno - 1],
                            lines[pos.end_lineno - 1][:pos.end_col_offset]])
    try:
        call = ast.parse(segment.decode("utf-8"), mode="eval").body
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(call, ast.Call):
        return None
    func, attribute = call.func, None
    if isinstance(func, ast.Call) and isinstance(func.func, ast.Name) and func.func.id == "getattr" \
            and len(func.args) == 2 and not func.keywords:
        func, attribute = func.args  # getattr(obj, name)(...): the attribute of obj named by name
    parts = (func,) if attribute is None else (func, attribute)
    if not all(isinstance(node, _SAFE_NODES) for part in parts for node in ast.walk(ast.Expression(part))):
        return None
    scope = {**frame.f_globals, **frame.f_locals}
    try:
        values = [eval(compile(ast.Expression(part), "<callee>", "eval"), {"__builtins__": {}}, scope)
                  for part in parts]
        callee = values[0] if attribute is None else getattr(values[0], values[1])
    except Exception:
        return None
    return _side_of_callee(callee)


_PASS_THROUGH: set[Any] = set()  # code objects of `pass_through` wrappers


def pass_through(fn: Callable[..., T]) -> Callable[..., T]:
    """Mark a harness wrapper installed inside the library (a recorder around a library method, called
    with the library's own arguments) as transparent: its frames count for no side, so a library call
    that fails through it - 5.0's early-exit generator calling its parent's get_candidates without an
    argument the parent requires - is the library's error, not the harness's."""
    _PASS_THROUGH.add(fn.__code__)
    return fn


def sides(exc: BaseException) -> list[str]:
    """The side of every frame of the exception's traceback, outermost first, plus the failed
    call's callee when the innermost frame was calling one (`_failed_callee`) - unless it is a
    TypeError binding a Python callee's arguments: that callee never ran, the caller's frames decide.
    A `pass_through` wrapper's frames are skipped (the frame before it decides)."""
    out, tb, last = [], exc.__traceback__, None
    while tb is not None:
        if tb.tb_frame.f_code not in _PASS_THROUGH:
            out.append(side_of_file(tb.tb_frame.f_code.co_filename))
        tb, last = tb.tb_next, tb
    if last is not None and last.tb_frame.f_code in _PASS_THROUGH:
        return out  # the wrapper was calling the library's method with the library's arguments
    if last is not None:
        callee = _failed_callee(last)
        if callee is not None and not (callee[1] and isinstance(exc, TypeError)):
            out.append(callee[0])
    return out


def is_subject_error(exc: BaseException) -> bool:
    """True when the library under test raised the exception inside a call a subject made into it:
    below the last harness frame of the traceback, the library was running (see the module
    docstring). False for harness code, for torch called on harness-built arguments, and for
    harness code the library called back (a hook, a processor)."""
    frames = sides(exc)
    last_harness = max((i for i, side in enumerate(frames) if side == HARNESS), default=-1)
    return LIBRARY in frames[last_harness + 1:]


def first_line(text: str, limit: int = 300) -> str:
    lines = str(text).strip().splitlines()
    return lines[0][:limit] if lines else ""


def error_of(exc: BaseException, scrub: dict[str, str] | None = None) -> dict[str, str]:
    """An exception as an exact field value: its type name and the first line of its message
    (paths in `scrub`, and the checkout's root, replaced by stable placeholders, so records do not
    depend on where the run happened)."""
    message = first_line(str(exc), limit=10_000)  # scrubbed before it is cut: a cut path would not match
    for path, placeholder in {**(scrub or {}), _REPO_ROOT: "<repo>"}.items():
        message = message.replace(path, placeholder)
    message = re.sub(r"0x[0-9a-f]{6,}", "0x...", message)
    return {"type": type(exc).__name__, "message": message[:300]}


def observe(fn: Callable[[], T], scrub: dict[str, str] | None = None) -> tuple[T | None, dict[str, str] | None]:
    """(result, None), or (None, error) when the subject raised. A harness error propagates."""
    try:
        return fn(), None
    except Exception as exc:
        if not is_subject_error(exc):
            raise
        return None, error_of(exc, scrub)


def type_name(obj: Any) -> str:
    """'torch.Tensor', 'list[int]', 'BatchEncoding', 'GenerateDecoderOnlyOutput', ..."""
    import torch

    if isinstance(obj, torch.Tensor):
        return "torch.Tensor"
    if isinstance(obj, (list, tuple)):
        inner = sorted({type_name(x) for x in obj})
        return f"{type(obj).__name__}[{' | '.join(inner) if inner else ''}]"
    return type(obj).__name__


_INDEX = re.compile(r"\.(\d+)\.")


def _ranges(indices: list[int]) -> str:
    out, start, prev = [], None, None
    for i in sorted(set(indices)):
        if start is None:
            start = prev = i
        elif i == prev + 1:
            prev = i
        else:
            out.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = prev = i
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(out)


def fold_keys(keys) -> dict[str, str]:
    """Tensor names with the first numeric index folded: {"model.layers.*.mlp.up_proj.weight":
    "0-45", "lm_head.weight": ""}; a renamed, added or dropped tensor changes a key or a range."""
    groups: dict[str, list[int]] = {}
    for key in keys:
        m = _INDEX.search(key)
        if m is None:
            groups.setdefault(key, [])
        else:
            groups.setdefault(key[: m.start()] + ".*." + key[m.end():], []).append(int(m.group(1)))
    return {k: _ranges(v) for k, v in sorted(groups.items())}
