"""Faults: named, injectable defects of the installed transformers that the suites must catch.

    patches.py     how a fault patches (SourceEdit, Wrap, SetItems, SlowForward) and `Fault`, `Catch`
    catalogue.py   FAULTS: every fault, what it breaks and where it must be caught
    injection.py   pytest glue: --inject-fault NAME for a whole session, undone at its end

`harness faults` (harness/cli/faults.py) runs each fault's catching cases and writes docs/faults.md.
"""

from __future__ import annotations

from harness.faults.catalogue import BY_NAME, FAULTS, describe, get, inject
from harness.faults.injection import configure, injected
from harness.faults.patches import Catch, Fault, FaultError

__all__ = ["BY_NAME", "FAULTS", "Catch", "Fault", "FaultError", "configure", "describe", "get", "inject", "injected"]
