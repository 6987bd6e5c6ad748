"""`[tool.harness] models` narrows the suites to the named models' cases (the plugin's model filter,
harness/plugin/selection.py)."""

from __future__ import annotations

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


@pytest.mark.parametrize("models, ran", [("[]", {"a", "b", "c"}), ('["a", "c"]', {"a", "c"}), ('["b"]', {"b"})])
def test_models_key_deselects_other_models(pytester: pytest.Pytester, models, ran):
    pytester.makefile(".toml", pyproject=f"[tool.harness]\nmodels = {models}\n")
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=len(ran) + 1)
    passed = {line.split("[")[1].split("]")[0] for line in result.outlines if "test_case[" in line and "PASSED" in line}
    assert passed == ran
    result.stdout.fnmatch_lines(["*test_without_case PASSED*"])
