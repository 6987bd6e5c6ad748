"""Suite-wide selection: `[tool.harness] models` (non-empty) keeps only those models' cases.

Every suite parametrizes over a `case` whose `.model` names a checkpoint; cases of other models
are deselected (reported by pytest as deselected), so one list in pyproject.toml narrows a run.
"""

from __future__ import annotations

from harness.config import load_config


def pytest_collection_modifyitems(config, items):
    models = load_config(config.rootpath).models
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
