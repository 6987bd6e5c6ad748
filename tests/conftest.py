"""The harness's own tests run the plugin and the CLI inside pytester / subprocesses: they decide
for themselves whether a run is strict, so the CI variable of the machine running them must not
leak into those inner runs (a test that wants CI semantics sets it). The inner `harness check` /
`regen` runs are serial unless a test asks for workers (`-n 2`): the outer `pytest -n 2` already
uses every core, and nested xdist workers would only oversubscribe them. The inner runs also leave out hypothesis's
pytest plugin (a dev dependency of this repository, not of the harness: ~1 s of every inner pytest
start, and a user's project does not have it)."""

from __future__ import annotations

import pytest
import transformers.modeling_utils  # noqa: F401  (see below)

# pytester's in-process runs drop from sys.modules whatever the inner run imported; the modules that
# register torch operators (torch.distributed's, which transformers' modeling code imports) cannot
# run twice in one process ("Only a single TORCH_LIBRARY can be used to register the namespace
# c10d_functional"), so they are imported once here, before any inner run, and survive its clean-up.


@pytest.fixture(autouse=True)
def no_ci_in_inner_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)


@pytest.fixture(autouse=True)
def serial_inner_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_AUTO_NUM_WORKERS", "1")  # harness/cli/project.py default_workers


@pytest.fixture(autouse=True)
def no_hypothesis_plugin_in_inner_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setenv("PYTEST_ADDOPTS", " ".join(filter(None, [os.environ.get("PYTEST_ADDOPTS"),
                                                               "-p no:hypothesispytest"])))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked `long` first (stable otherwise): xdist hands the workers tests in collection
    order, and a long test collected last leaves one worker idle while the other finishes it."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)
