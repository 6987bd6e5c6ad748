"""`[tool.harness] models` narrows the suites to the named models' cases."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

SUITE = '''
from dataclasses import dataclass
import pytest

@dataclass(frozen=True)
class Case:
    model: str

@pytest.mark.parametrize("case", [Case("a"), Case("b"), Case("c")], ids=lambda c: c.model)
def test_case(case):
    assert case.model

def test_without_case():
    pass
'''


@pytest.mark.parametrize("models, expected", [("[]", 4), ('["a", "c"]', 3), ('["b"]', 2)])
def test_models_key_deselects_other_models(pytester: pytest.Pytester, models, expected):
    pytester.makefile(".toml", pyproject=f"[tool.harness]\nmodels = {models}\n")
    pytester.makeconftest((Path(__file__).parents[1] / "suites" / "conftest.py").read_text())
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:harness")
    result.assert_outcomes(passed=expected)
