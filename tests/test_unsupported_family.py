"""A model family the installed transformers does not have (4.57 has no mellum, no qwen3_5_text) is a
per-version fact: `family_gap` names it from the library's registry, and a case whose subject raises
`NotSupported` is reported skipped (unsupported) with that reason - never a harness error, and strict
mode does not fail on it."""

from __future__ import annotations

import json

import pytest

from harness.subjects.hf import family_gap, version
from tests.test_plugin_workflow import QUIET, results, write_pyproject

pytest_plugins = ["pytester"]

GAPS = [  # (config.json, the gap names ...) - '' when the installed version has the family
    ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, ""),
    ({"model_type": "harness_no_such_family", "architectures": ["LlamaForCausalLM"]}, "'harness_no_such_family'"),
    ({"model_type": "llama", "architectures": ["HarnessNoSuchForCausalLM"]}, "HarnessNoSuchForCausalLM"),
    ({"architectures": ["LlamaForCausalLM"]}, "'?'"),
]


@pytest.mark.parametrize(("config", "named"), GAPS, ids=["known", "no-family", "no-class", "no-model-type"])
def test_family_gap_names_what_the_installed_version_lacks(config, named):
    gap = family_gap(config)
    assert (gap == "") == (named == "")
    if named:
        assert named in gap and f"transformers {version()}" in gap


SUITE = '''
import pytest
from harness.schema import NotSupported


class Case:
    def __init__(self, id):
        self.id = id


@pytest.mark.parametrize("case", [Case("new-family"), Case("old-family")], ids=lambda c: c.id)
def test_family(case, golden):
    if case.id == "new-family":
        raise NotSupported("new-family: transformers 4.57.6 has no model family 'newfam'")
    golden.check("layers", ["full"])
'''


def test_a_case_whose_family_is_missing_is_skipped_as_unsupported(pytester: pytest.Pytester):
    write_pyproject(pytester)
    (pytester.path / "test_fam.py").write_text(SUITE)
    for args in ((), ("--strict",)):  # the second run is strict, against the first's records
        run = pytester.runpytest(*QUIET, *args)
        run.assert_outcomes(passed=1, skipped=1)
        skipped = [o for o in results(pytester)["outcomes"] if o["status"] == "skipped"]
        assert [(o["case"], o["category"]) for o in skipped] == [("new-family", "unsupported")]
        assert "has no model family 'newfam'" in skipped[0]["detail"]
    records = sorted(p.name for p in (pytester.path / "golden" / "records").rglob("*.json"))
    assert records == ["old-family.json"], json.dumps(records)
