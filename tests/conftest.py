"""The harness's own tests run the plugin and the CLI inside pytester / subprocesses: they decide
for themselves whether a run is strict, so the CI variable of the machine running them must not
leak into those inner runs (a test that wants CI semantics sets it)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_ci_in_inner_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
