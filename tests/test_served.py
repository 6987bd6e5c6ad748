"""A serving path that raised is a failure on a first run, unless upstream's and declared known
(harness/designs/served.py): the declared failures are bounded to their releases, their device, their
precondition and their message - anything else fails the reference."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

from harness.designs import served
from harness.designs.served import KNOWN, LOADED, SERVED, known_failure, served_as_asked
from harness.schema import Observation

LOOP = "Error in generation loop: unsupported operand type(s) for -: 'NoneType' and 'int'"
MEMORY = "MemoryError: Memory footprint 1157120 is more than available memory 0"
TIED = "NameError: name 'find_tied_parameters' is not defined"


def _absent(monkeypatch, *names: str) -> None:
    """importlib.util.find_spec answers None for `names` (the packages are absent here)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in names else real(name, *a))


def test_each_declared_failure_is_bounded_to_its_releases_device_and_message(monkeypatch):
    _absent(monkeypatch, "psutil", "accelerate")
    assert known_failure("continuous", [LOOP], "4.57.6", "cpu").until == "5.1.0"
    assert known_failure("continuous", [LOOP], "5.24.0", "cpu") is None  # the same error on a release after the fix
    assert known_failure("continuous", [LOOP], "4.57.6", "cuda") is None  # the mechanism is the CPU's
    assert known_failure("continuous", [MEMORY], "5.14.0", "cpu").absent == "psutil"
    assert known_failure("continuous", [MEMORY.replace("memory 0", "memory 10")], "5.14.0", "cpu") is None
    assert known_failure("quantized", [TIED], "4.57.6", "cpu").absent == "accelerate"
    assert known_failure("quantized", [TIED], "5.24.0", "cpu") is None
    assert known_failure("continuous", [TIED], "4.57.6", "cpu") is None  # another path's failure


def test_a_declared_failure_whose_precondition_does_not_hold_here_is_not_known(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name in ("psutil", "accelerate")
                        else real(name, *a))
    assert known_failure("continuous", [MEMORY], "5.14.0", "cpu") is None
    assert known_failure("quantized", [TIED], "4.57.6", "cpu") is None


def test_an_unknown_raise_fails_the_reference_and_a_known_one_is_listed(monkeypatch):
    _absent(monkeypatch, "psutil")
    monkeypatch.setattr(served, "device", lambda: "cpu")
    obs = Observation()
    served_as_asked(obs, "served_as_engine", "continuous", ["failed: RuntimeError: boom"] * 3,
                    ["RuntimeError: boom"], "5.24.0")
    ref = obs.references["served_as_engine"]
    assert ref.observed.value != ref.expected.value == [SERVED] * 3
    assert "known_upstream_failure" not in obs.notes

    obs = Observation()
    served_as_asked(obs, "served_as_engine", "continuous", [f"failed: {MEMORY}"] * 3, [MEMORY], "5.14.0")
    ref = obs.references["served_as_engine"]
    assert ref.observed.value == ref.expected.value == [f"failed: {MEMORY}"] * 3
    note = obs.notes["known_upstream_failure"]
    assert note.category == "known-failure" and "psutil" in note.detail


def test_a_served_call_and_a_done_load_expect_themselves():
    obs = Observation()
    served_as_asked(obs, "served_as_engine", "continuous", [SERVED] * 2, [""], "5.24.0")
    served_as_asked(obs, "loaded_as_promised", "quantized", [LOADED], [""], "5.24.0", ok=LOADED)
    assert obs.references["served_as_engine"].expected.value == [SERVED] * 2
    assert obs.references["loaded_as_promised"].expected.value == [LOADED]
    assert not obs.notes


def test_requests_of_a_call_that_raised_all_fail_with_its_error(monkeypatch):
    monkeypatch.setattr(served, "device", lambda: "cpu")
    call = SimpleNamespace(error={"type": "RuntimeError", "message": "boom"}, request_errors=[], warnings=[])
    obs = Observation()
    served.served_as_engine(obs, call, 3)
    assert obs.references["served_as_engine"].observed.value == ["failed: RuntimeError: boom"] * 3
    loop = SimpleNamespace(error=None, request_errors=[None, "no result returned for this request", None],
                           warnings=[LOOP])
    obs = Observation()
    served.served_as_engine(obs, loop, 3)
    assert obs.references["served_as_engine"].observed.value == [SERVED, "failed: no result returned for this "
                                                                 "request", SERVED]


def test_every_declared_failure_names_its_source():
    for known in KNOWN:
        assert known.path in ("continuous", "quantized") and known.what and known.issue
        assert "#" in known.issue or "read from" in known.issue
