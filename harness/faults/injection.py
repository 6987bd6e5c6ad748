"""pytest glue: ``--inject-fault NAME`` (a `RunSettings` field) applies one fault of the catalogue
for the whole session, in every xdist worker, and undoes it at the end; results.json's
meta.injected_fault names it (`injected`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.faults.catalogue import get
from harness.faults.patches import Fault, FaultError, Undo

PLUGIN_NAME = "harness-faults"


@dataclass
class FaultInjection:
    """The session's injected fault (applied at configure, undone at unconfigure)."""

    fault: Fault | None
    undo: Undo | None = None

    def pytest_unconfigure(self, config: Any) -> None:
        if self.undo is not None:
            self.undo()
            self.undo = None


def configure(config: Any, name: str | None) -> FaultInjection:
    """Apply the fault `name` for the session (a usage error when unknown or not applicable)."""
    import pytest

    session = FaultInjection(None)
    if name:
        try:
            session.fault = get(name)
            session.undo = session.fault.apply()
        except FaultError as exc:
            raise pytest.UsageError(str(exc)) from exc
    config.pluginmanager.register(session, PLUGIN_NAME)
    return session


def injected(config: Any) -> Fault | None:
    """The fault this session runs with, if any."""
    session = config.pluginmanager.get_plugin(PLUGIN_NAME)
    return session.fault if session is not None else None
