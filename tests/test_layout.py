"""The tree reads like the architecture: docs/design.md lists every module of harness/ (and no
other), the import graph has no cycle and keeps the layers (`.importlinter`, the same contracts
`lint-imports` checks in CI), and a suite module decides nothing (a case table, an observe call
and `check_all`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LISTED = re.compile(r"^- `(harness/[\w/]+\.py)` - ", re.M)


def test_design_md_lists_every_module_and_only_those():
    text = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    listed = set(LISTED.findall(text))
    present = {str(p.relative_to(REPO)) for p in (REPO / "harness").rglob("*.py")}
    assert sorted(present - listed) == [], "modules missing from docs/design.md"
    assert sorted(listed - present) == [], "docs/design.md lists modules that do not exist"


def test_the_wheel_carries_every_package_the_suites_and_the_zoo():
    """pyproject.toml lists every package of harness/ (setuptools does not find them: the list is
    explicit because the suites and the zoo are mapped into the package, not moved)."""
    tomllib = pytest.importorskip("tomllib")
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "harness").rglob("__init__.py")}
    assert set(setuptools["packages"]) == packages | {"harness.suites", "harness.zoo.models"}
    assert setuptools["package-dir"] == {"harness.suites": "suites", "harness.zoo.models": "golden/models"}
    assert setuptools["package-data"]["harness.zoo.models"] == ["manifest.json", "*/*"]


def _graph():
    grimp = pytest.importorskip("grimp", reason="import-linter (dev extra) brings grimp")
    return grimp.build_graph("harness")


def test_the_import_graph_has_no_cycle():
    graph = _graph()
    cycles = sorted({tuple(sorted((m, imported))) for m in graph.modules
                     for imported in graph.find_modules_directly_imported_by(m)
                     if graph.chain_exists(imported, m)})
    assert cycles == []


def test_the_layer_contracts_hold():
    importlinter = pytest.importorskip("importlinter", reason="import-linter is in the dev extra")
    from importlinter.cli import lint_imports

    del importlinter
    import logging

    # lint_imports configures logging (dictConfig), which disables every logger that exists - the
    # worker's transformers loggers too, for every test after this one: put back as it was
    before = {name: lg.disabled for name, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)}
    try:
        assert lint_imports(config_filename=str(REPO / ".importlinter")) == 0
    finally:
        for name, was in before.items():
            logging.getLogger(name).disabled = was


VERDICT_WORDS = re.compile(r"\"(pass|regression|changed|skipped)\"|\b(rtol|atol|tolerance)\b|pytest\.skip")


@pytest.mark.parametrize("suite", sorted(p.name for p in (REPO / "suites").glob("test_*.py")))
def test_a_suite_is_a_case_table_an_observe_call_and_check_all(suite):
    source = (REPO / "suites" / suite).read_text(encoding="utf-8")
    assert not VERDICT_WORDS.search(source), f"{suite} decides a verdict itself"
    tests = [n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]
    assert tests and all(n.name.startswith("test_") for n in tests), f"{suite}: helpers belong in harness/designs"
    for test in tests:
        marks = [d for d in test.decorator_list if "cases" in ast.unparse(d)]
        assert marks, f"{suite}::{test.name} has no case table (@pytest.mark.cases(table=...))"
        (statement,) = test.body
        assert ast.unparse(statement).startswith("golden.check_all("), f"{suite}::{test.name}"


def test_every_deep_entry_names_a_test_that_exists():
    """tests/conftest.py's DEEP tier names test functions of tests/: a renamed test would silently
    fall back into the default run (and over its 120 s), or out of CI's deep run."""
    from tests.conftest import DEEP

    for entry in DEEP:
        path, name = entry.split("::")
        functions = {n.name for n in ast.parse((REPO / "tests" / path).read_text(encoding="utf-8")).body
                     if isinstance(n, ast.FunctionDef)}
        assert name.split("[")[0] in functions, f"DEEP names {entry}, not a test of tests/{path}"
        if "[" in name:  # a parameter id (a probe's name, a zoo model, a fault): spelled in the file or its tables
            spelled = name.split("[")[1].rstrip("]")
            sources = "".join(f.read_text(encoding="utf-8") for f in [REPO / "tests" / path, REPO / "golden/models/manifest.json",
                                                                     *(REPO / "harness/faults").rglob("*.py")])
            assert spelled in sources, f"DEEP names {entry}: no such parameter"


def test_the_designs_reach_the_zoo_by_its_typed_parts_never_by_getattr():
    """A `getattr(zoo, "user", {})` survives a rename of what it reads and answers the default: when
    `Zoo.user` became `Zoo.checkpoints.user`, three designs read every user model as unbudgeted."""
    import re

    found = [f"{p.relative_to(REPO)}:{i}" for p in (REPO / "harness").rglob("*.py")
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\b(getattr|hasattr)\((self\.)?zoo\b", line)]
    assert found == []
