"""The fault catalogue: named, injectable defects of the installed transformers that the suites
must catch - the harness's proof of sensitivity. Each row names what it breaks and the `Catch`
(suite, case glob, field glob) that must report it as a regression; `harness faults`
(harness/cli/faults.py) runs the catching cases under every fault and writes the sensitivity
table (docs/faults.md). The rows live with their family (harness/faults/verifier.py, caches.py,
contracts.py, sampling.py, stopping.py, long_context.py, batching.py, continuous.py, compiled.py, quantized.py, text.py, beam.py,
latency.py, kernels.py - the one family injected into torch -, gguf.py): adding a fault is adding one `Fault(...)` row to its family's `FAULTS`, and a new
family is one more module joined here.
"""

from __future__ import annotations

from typing import Any

from harness.faults import (
    batching,
    beam,
    caches,
    compiled,
    continuous,
    contracts,
    gguf,
    kernels,
    latency,
    long_context,
    quantized,
    sampling,
    stopping,
    text,
    verifier,
)
from harness.faults.patches import Fault, FaultError, Undo

FAULTS: tuple[Fault, ...] = (*verifier.FAULTS, *caches.FAULTS, *contracts.FAULTS, *sampling.FAULTS, *stopping.FAULTS,
                             *long_context.FAULTS, *batching.FAULTS, *continuous.FAULTS, *compiled.FAULTS, *quantized.FAULTS, *text.FAULTS, *beam.FAULTS,
                             *latency.FAULTS, *kernels.FAULTS, *gguf.FAULTS)


BY_NAME: dict[str, Fault] = {f.name: f for f in FAULTS}


def get(name: str) -> Fault:
    """The fault called `name`; an unknown name lists every known one (and the nearest)."""
    try:
        return BY_NAME[name]
    except KeyError:
        import difflib

        near = difflib.get_close_matches(name, list(BY_NAME), n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise FaultError(f"--inject-fault {name}: no such fault{hint}. The catalogue's {len(BY_NAME)} faults "
                         f"(`harness faults --list` describes each): {', '.join(BY_NAME)}") from None


def inject(name: str) -> Undo:
    """Apply the fault `name` to the installed transformers; returns the undo."""
    return get(name).apply()


def describe(fault: Fault) -> dict[str, Any]:
    """The fault as results.json's meta.injected_fault (and the report's banner)."""
    return {"name": fault.name, "area": fault.area, "breaks": fault.breaks,
            "catch": {"suite": fault.catch.suite, "case": fault.catch.case, "field": fault.catch.field}}
