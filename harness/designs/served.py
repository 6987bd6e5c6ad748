"""Whether a serving path served what it was asked - a raise is a failure on a first run too (issue 58
item 10), unless it is upstream's and declared known here.

The serving designs (continuous.py, continuous_requests.py, quantized.py) ask the library for what its
API documents: requests whose prompts and new tokens fit the model's positions, decoded by the
reference engine in the same run; a checkpoint whose linear weights the scheme promises to quantize
(harness/engine/quantize.py `promised`). The reference `served_as_engine` / `loaded_as_promised`
expects each request served / the load done: its oracle is the engine serving the same requests
(the scheme's promise read from the checkpoint), never the library. A version that raises - the
call, the generation loop, the load - fails it, on an empty store as against a record; the fields
the raise left unproduced stay `not checked` with its reason (their consequences, never a verdict).

Some such raises are upstream's and known. Each is declared in `KNOWN` with the releases it is
observed in, the precondition of its mechanism read from this environment (the device transformers
picks, a package absent) and the error it raises. A raise that matches one exactly is listed as
information (`known_upstream_failure`, category known-failure) and the reference expects it, so a
first run that fails only on known library findings exits 0 and says so; any other raise - another
message, another release, the precondition not met - fails. The release that fixes one shows its
fields moving toward the oracle (`fixed`).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from packaging.version import Version

from harness.schema import Observation

SERVED, LOADED = "served", "loaded"


@dataclass(frozen=True)
class KnownFailure:
    """One upstream failure of a serving path, bounded to its releases and its mechanism."""

    path: str          # the serving path: "continuous" (generate_batch / the manager) or "quantized" (the load)
    first: str         # the first transformers release it is observed in
    until: str | None  # the first release observed without it (None: every release after `first`)
    error: str         # a regex one of the errors must match: "Type: message" of a raise, a request's
                       # error or a logged generation-loop error
    device: str        # the device type transformers picks here ("cuda" when available, else "cpu")
    absent: str        # a package whose absence is the mechanism's precondition ("" for none)
    what: str
    issue: str


KNOWN: tuple[KnownFailure, ...] = (
    KnownFailure(
        "continuous", "4.54.0", "5.1.0", r"unsupported operand type\(s\) for -: 'NoneType' and 'int'", "cpu", "",
        "the paged cache's sizing reads the device's total memory, None on the CPU "
        "(continuous_batching/requests.py `get_device_and_memory_breakdown`): the generation loop dies before "
        "its first step and no request is served",
        "transformers PR #42869 (\"enable cpu paged cache\": the same 'Error in generation loop: unsupported operand "
        "type(s) for -: NoneType and int' on CPU)"),
    KnownFailure(
        "continuous", "5.13.0", None, r"Memory footprint \d+ is more than available memory 0\b", "cpu", "psutil",
        "without psutil the CPU's memory breakdown is all 0 (continuous_batching `get_device_and_memory_breakdown`: "
        "\"Cannot get memory breakdown on CPU without psutil\"), so the paged cache fits in no memory and "
        "generate_batch / the manager raise MemoryError - psutil is not among transformers' dependencies",
        "read from transformers 5.13 / 5.14's continuous_batching/requests.py (5.24 falls back to the NUMA nodes' "
        "memory); the class of PR #42869 (the CPU's memory read for a GPU's)"),
    KnownFailure(
        "quantized", "4.56.0", "5.0.0", r"NameError: name 'find_tied_parameters' is not defined", "cpu", "accelerate",
        "a quantized load without accelerate: modeling_utils calls `find_tied_parameters`, which "
        "integrations/accelerate.py defines only when accelerate is installed, while accelerate is not among "
        "transformers' dependencies",
        "read from transformers 4.57's modeling_utils.py (`get_keys_to_not_convert`); the class of transformers "
        "#22360 (find_tied_parameters' contract with accelerate)"),
)


def device() -> str:
    """The device type transformers' serving paths pick by themselves: cuda when available, else cpu."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def known_failure(path: str, errors: Sequence[str], version: str, on: str) -> KnownFailure | None:
    """The declared failure of `path` that explains `errors` on transformers `version` and device `on`,
    its precondition holding in this environment - or None."""
    v = Version(version)
    for known in KNOWN:
        if known.path != path or known.device != on or v < Version(known.first):
            continue
        if known.until is not None and v >= Version(known.until):
            continue
        if known.absent and importlib.util.find_spec(known.absent) is not None:
            continue
        if any(re.search(known.error, e) for e in errors):
            return known
    return None


def as_text(error: dict[str, Any] | None) -> str:
    """A raised error as "Type: message" ("" for None)."""
    return f"{error['type']}: {error['message']}" if error else ""


def served_as_asked(obs: Observation, name: str, path: str, outcomes: Sequence[str], errors: Sequence[str],
                    version: str, applies: bool = True, ok: str = SERVED) -> None:
    """Reference `name`: `outcomes` (one per request, or the load's: `ok` or what failed) against
    `ok` for each - or, where every failure is explained by one declared `KNOWN` failure, against
    the outcomes themselves with that failure listed as information. `errors`: every error the call
    left (its raise, the requests' errors, the generation loop's logged errors). `applies` False: the
    oracle promises nothing here (a checkpoint without a weight the scheme quantizes) - not checked."""
    if not applies:
        obs.skipped(name, "exact", "the oracle promises nothing of this subject (no weight the scheme quantizes)",
                    category="not-checked")
        return
    expected = [ok] * len(outcomes)
    failed = [o for o in outcomes if o != ok]
    known = known_failure(path, [*errors, *failed], version, device()) if failed else None
    if known is not None:
        expected = list(outcomes)
        obs.info("known_upstream_failure",
                 f"{len(failed)} of {len(outcomes)} failed as a known upstream failure does: {known.what}; {known.issue}",
                 diff={"error": known.error, "releases": f"{known.first} - {known.until or 'now'}",
                       "precondition": f"{known.absent} not installed" if known.absent else "", "device": known.device},
                 category="known-failure")
    obs.reference(name, list(outcomes), expected, implementations_differ=False)


def served_as_engine(obs: Observation, served: Any, requests: int) -> None:
    """Reference `served_as_engine` of a continuous-batching call (harness/subjects/hf_continuous.py
    `Served` / `Streamed`): each of its `requests` served - else the call's raise, or the request's own
    error -, the generation loop's logged errors among the evidence for a known failure."""
    from harness.subjects import hf

    call = as_text(served.error)
    errors = list(served.request_errors or [None] * requests)
    outcomes = [f"failed: {call}" if call else SERVED if e is None else f"failed: {e}" for e in errors]
    served_as_asked(obs, "served_as_engine", "continuous", outcomes, [call, *served.warnings], hf.version())
