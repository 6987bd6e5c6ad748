"""The setup a case really ran with, stated beside its finding (harness/subjects/hf.py `emitted`,
`ran_with`; harness/checking/findings.py `Finding.sentence`)."""

from __future__ import annotations

import logging
import warnings
from dataclasses import replace

from harness.checking.compare import compare_field
from harness.checking.findings import group_findings
from harness.schema import Field
from harness.subjects.hf import emitted


def test_warnings_and_transformers_log_records_are_collected_once_each():
    said: list[str] = []
    with emitted(said):
        warnings.warn("static cache not supported, using DynamicCache\nsecond line", UserWarning, stacklevel=1)
        logging.getLogger("transformers.generation.utils").warning("static cache not supported, using DynamicCache")
        logging.getLogger("transformers.generation.utils").warning("another")
    assert said == ["static cache not supported, using DynamicCache", "another"]


def test_log_records_are_collected_whatever_the_verbosity():
    """transformers' verbosity set to ERROR (by another test in the worker, or the user) still leaves
    the run's own warnings visible to the harness, and the level is put back."""
    logger = logging.getLogger("transformers")
    before = logger.level
    logger.setLevel(logging.ERROR)
    try:
        said: list[str] = []
        with emitted(said):
            logging.getLogger("transformers.generation.utils").warning("swapped for a DynamicCache")
        assert said == ["swapped for a DynamicCache"] and logger.level == logging.ERROR
    finally:
        logger.setLevel(before)


def test_a_finding_says_what_its_case_ran_with():
    said: list[str] = []
    with emitted(said):
        warnings.warn("swapped for a DynamicCache", UserWarning, stacklevel=1)
    ran = {"cache": "DynamicCache", "attn_implementation": "sdpa", "warnings": said}
    out = compare_field("first_logits", Field("tensor", [1.0, 3.0]), Field("tensor", [1.0, 2.0]))
    out = replace(out, suite="outputs", case="m.plain.static.short-0.greedy", diff={"ran_with": ran, **out.diff})
    (finding,) = group_findings([out])
    assert finding.sentence().endswith("; ran with DynamicCache, attention sdpa, warned: 'swapped for a DynamicCache'")


def test_log_records_are_collected_after_a_dict_config_disabled_the_loggers():
    """logging.config.dictConfig (the user's app, or import-linter run in the same worker, as the CI
    run's test_layout did) disables every existing logger: the harness still hears transformers, and
    the loggers are left as it found them."""
    child, library = logging.getLogger("transformers.generation.utils"), logging.getLogger("transformers")
    # what dictConfig's disable_existing_loggers=True does (a real dictConfig here would also clear
    # the worker's root handlers, pytest's capture included)
    child.disabled = library.disabled = True
    try:
        assert child.disabled
        said: list[str] = []
        with emitted(said):
            child.warning("swapped for a DynamicCache")
        assert said == ["swapped for a DynamicCache"] and child.disabled
    finally:
        child.disabled = library.disabled = False
