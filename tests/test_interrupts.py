"""Ctrl-C at several moments of `harness check` - the command still importing, the pytest child
starting (its fork, its process group, its xdist workers), the suite running: every one exits 130
with nothing left behind (no report folder, the record untouched, no process of the run alive).
harness/cli/startup.py holds the first moment, harness/cli/child.py `run` the child's start."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from test_fail_closed import KEY, _alive, _kill_leftovers, make_project

# seconds after the command starts: the harness importing, then the pytest child starting (earlier than
# ~0.1 s, Python itself is still starting: its own 'Fatal Python error', before any code of the harness)
MOMENTS_S = (0.3, 0.8, 1.5, 2.5, 4.0)
EXIT_WITHIN_S = 30  # one stop grace (10 s) after SIGINT, twice over for a busy machine


@pytest.mark.parametrize("moment", MOMENTS_S)
def test_ctrl_c_at_any_moment_of_a_start_is_130_and_leaves_nothing(tmp_path, moment):
    ctrl_c_probe(tmp_path, moment)


@pytest.fixture
def busy_neighbour():
    """One CPU-bound process per core beside the run (a shared CI runner's neighbours)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    yield spinners
    for proc in spinners:
        proc.kill()
        proc.wait()


def test_ctrl_c_under_a_busy_neighbour_at_every_moment_twice(tmp_path, busy_neighbour):
    """The same probe at each moment, twice over, with every core busy (issue 43: a window that
    loses the signal shows under load): 10 of 10 exit 130 and leave nothing."""
    assert all(proc.poll() is None for proc in busy_neighbour)
    for round_ in range(2):
        for moment in MOMENTS_S:
            ctrl_c_probe(tmp_path / f"r{round_}-{moment}", moment)


def ctrl_c_probe(tmp_path, moment: float) -> None:
    project = make_project(tmp_path / "p")
    record = project.record("one")
    before = record.read_bytes()
    project.values(1, sleep=120)
    proc = project.popen("check", start_new_session=True)
    try:
        time.sleep(moment)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal's foreground process group
        out, _ = proc.communicate(timeout=EXIT_WITHIN_S)
        assert proc.returncode == 130, out[-2000:]
        assert "harness: error: interrupted" in out, out[-2000:]  # the child's own traceback may precede it
        pids = [int(p.name.split(".")[1]) for p in project.root.glob("running.*")]
        assert not [p for p in pids if _alive(p)], "a test of the run outlived the harness"
        reports = project.root / "reports"
        assert not reports.exists() or not list(reports.rglob("*")), list(reports.rglob("*"))
        assert project.store.root.joinpath(KEY, "toy", "one.json").read_bytes() == before
    except subprocess.TimeoutExpired:
        pytest.fail(f"harness check did not exit within {EXIT_WITHIN_S} s of SIGINT {moment} s into the run")
    finally:
        proc.kill()
        _kill_leftovers(project)


def test_an_interrupt_inside_an_import_is_remembered_and_raised_at_the_next_checkpoint(tmp_path, monkeypatch):
    """SIGINT landing inside an import (the preflight's `import torch` under load) must not break the
    module half-made nor be swallowed: the handler only remembers it there, and the checkpoint
    where the command starts a child (child.run) raises it - no child is started."""
    from harness.cli import child, startup

    monkeypatch.setattr(startup, "_interrupted", False)
    (tmp_path / "slow_module.py").write_text(
        "import signal\nfrom harness.cli import startup\nstartup._remembered_interrupt(signal.SIGINT, __import__('sys')._getframe())\n"
        "DONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import slow_module  # the handler ran inside this import: nothing raised, the module whole

    assert slow_module.DONE and startup._interrupted
    with pytest.raises(KeyboardInterrupt):
        child.run([sys.executable, "-c", "raise SystemExit(3)"], tmp_path)
    with pytest.raises(KeyboardInterrupt):  # outside an import it raises at once
        startup._remembered_interrupt(signal.SIGINT, sys._getframe())
