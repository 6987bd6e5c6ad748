"""What every suite shares: the run's subjects, the thread count, the model selection.

- `zoo` (session): the installed transformers' view of the checkpoints under
  `[tool.harness] models_dir` (harness/subjects/hf.py `Zoo`), loaded once per worker;
- one intra-op thread for the tiny forwards unless the run chose a count;
- before any case runs, every checkpoint the run loads is checked against its manifest sha256: a
  missing or corrupt one is a usage error naming the file and the fix, never a skip;
- `[tool.harness] models` (non-empty) keeps only those models' cases: every suite parametrizes
  over a `case` whose `.model` names a checkpoint, and other models' cases are deselected.
"""

from __future__ import annotations

import pytest
import torch

from harness.fixtures.load import FixtureError, check_models
from harness.plugin import settings_of
from harness.subjects.hf import Zoo


@pytest.fixture(scope="session")
def zoo(harness_config, harness_env) -> Zoo:
    """Checkpoints from [tool.harness] models_dir, loaded in the run's dtype on its device."""
    return Zoo(harness_config.models_dir, harness_env.dtype, harness_env.device)


@pytest.fixture(autouse=True, scope="session")
def one_intra_op_thread(harness_env, pytestconfig):
    """Run the suites' tiny forwards on one intra-op thread unless the run chose a thread count
    (``--harness-threads N``). With 2 threads per process on 2 shared cores (or two xdist
    workers) OpenMP's spin-waiting makes a 4-layer forward ~60x slower; on the zoo the logits are
    bit-identical at 1 and 2 threads. `harness_env` is requested first, so the run's fingerprint
    (threads included) is taken before this and does not depend on which test runs first."""
    if pytestconfig.getoption("harness_threads", 0):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def pytest_collection_modifyitems(config, items):
    settings = settings_of(config)
    if any("zoo" in getattr(item, "fixturenames", ()) for item in items):
        try:  # fail closed: a missing or corrupt checkpoint stops the run, it never skips a case
            check_models(settings.models_dir, settings.models)
        except FixtureError as exc:
            raise pytest.UsageError(f"missing or corrupt fixture: {exc}") from exc
    models = settings.models
    if not models:
        return
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        model = getattr(callspec.params.get("case"), "model", None) if callspec else None
        (drop if model is not None and model not in models else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
