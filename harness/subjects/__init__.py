"""Subjects: what the harness observes. A subject turns a `schema.Case` into observations.

- `hf.py`: the installed transformers - loading a checkpoint, `generate()` on every path, what
  this version supports (`capabilities`), the drafts and forward passes of a run;
- `hf_cache.py`: its KV caches and attention calls (layer classes, lengths, crop, SDPA masks);
- `hf_contracts.py`: its API contracts (return types, validation, feature acceptance);
- `engine.py`: the reference engine (harness/engine/) as the expected side of a case.

The subject boundary lives here, in one place: `observe(fn)` runs a call into the subject and
returns an exception *raised by the subject* as data (`error_of`: type and first line, with
machine-specific paths scrubbed), because a version that raises is a finding. An exception raised
by harness code (a probe, the engine, a comparer) is a bug: it propagates and fails the test with
its traceback. Which side raised is read from the traceback (`is_subject_error`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")

# Packages whose exceptions are observations: the subject and the libraries it runs on.
SUBJECT_PACKAGES = ("transformers", "torch", "tokenizers", "safetensors", "huggingface_hub")
# A TypeError at a call into the subject whose signature changed (the call itself fails in our frame).
_SIGNATURE_ERROR = re.compile(r"(unexpected keyword argument|missing \d+ required|takes \d+ positional|"
                              r"got multiple values for argument|positional argument)")
_REPO_ROOT = str(Path(__file__).resolve().parents[2])


def _package_roots() -> list[str]:
    roots = []
    for name in SUBJECT_PACKAGES:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if file:
            roots.append(str(Path(file).resolve().parent))
    return roots


def _innermost(tb: TracebackType | None) -> TracebackType | None:
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def is_subject_error(exc: BaseException) -> bool:
    """True when the exception was raised inside the subject's packages (or is a TypeError from
    calling one of its functions with a signature it no longer has); False for harness code."""
    tb = _innermost(exc.__traceback__)
    if tb is None:
        return False
    filename = str(Path(tb.tb_frame.f_code.co_filename).resolve())
    if any(filename.startswith(root) for root in _package_roots()):
        return True
    return isinstance(exc, TypeError) and bool(_SIGNATURE_ERROR.search(str(exc)))


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
