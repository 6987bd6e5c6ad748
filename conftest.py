"""Repository defaults for pytest runs in this checkout (nothing else belongs here).

The harness plugin lives in the package (`harness/plugin/`, loaded through the pytest11 entry
point `harness`) and reads its paths - golden_dir, models_dir, reports_dir - and its alpha and
thresholds from `[tool.harness]` in pyproject.toml, so they are repository defaults already.
This file only:

- loads the plugin when entry-point autoloading is switched off (PYTEST_DISABLE_PLUGIN_AUTOLOAD),
  so `pytest` in this repository always has the `golden` fixture and the harness options;
- registers hypothesis profiles: "dev" (default: no deadline, the CI boxes are shared and slow)
  and "ci" (derandomized, so a CI failure reproduces); pick one with HYPOTHESIS_PROFILE;
- keeps pytest-benchmark (the dev extra) off unless asked: benchmarks/ runs measured only with
  `--benchmark-enable`, and no run here measures (or warns about xdist) by accident.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
    pytest_plugins = ["harness.plugin"]

settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """--benchmark-disable unless --benchmark-enable (before pytest-benchmark reads it)."""
    if hasattr(config.option, "benchmark_disable") and not getattr(config.option, "benchmark_enable", False):
        config.option.benchmark_disable = True
