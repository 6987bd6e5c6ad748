"""Fail closed, fourth pass (issue 63): the WEAK items, one probe each (the FAIL items are in
tests/test_fail_closed.py, after "# issue 63"). Each probe failed on the code before its fix.

- cache/forged-entry: an engine-cache entry written by someone else with a recomputed checksum;
- report/disk-full: a reports dir out of space mid-report left a run folder holding only results.json;
- faults/out-not-writable: `harness faults --out DIR` failed only after every fault had run;
- boundary/harness-binding-error: a TypeError binding the harness's own arguments to a library call
  was recorded as the library's error (it would pass in every version);
- tensor/one-extreme-element: one 1e30 element (fp32 -> bf16, a routed tensor) or > 1 % of masked
  logits at float32's minimum (fp32) widened every other element's tolerance until any change passed;
- regen/not-run-keeps-records: `harness regen` removed the records of skip / skipif / xfail tests;
- ci/pinned-and-fork-safe: the workflow `harness init --ci github` writes pinned actions by tag, installed
  the harness without hashes or a word on why, and a fork's read-only token failed the comment step.
"""

from __future__ import annotations

import io
import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from test_fail_closed import KEY, REPO, Probe, make_project, one_line_exit_2, run_probe

# ----------------------------------------------------------------------------------------------
# a. the engine cache trusts only entries this user's key signed


def forge(path: Path, value: object) -> None:
    """Rewrite an entry as an attacker with write access to the cache dir could: the same key, a
    wrong value, the checksum recomputed over both (the old rule's whole check)."""
    import torch

    from harness.store.cache import checksum

    header = json.loads(path.read_bytes().split(b"\n", 1)[0])
    buffer = io.BytesIO()
    torch.save(value, buffer)
    payload = buffer.getvalue()
    path.write_bytes(json.dumps({"key": header["key"], "sha256": checksum(header["key"], payload)}).encode() + b"\n"
                     + payload)


def probe_forged_cache_entry_is_recomputed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forged entry (right key, wrong value, recomputed checksum) and a cache directory copied
    from another user (its own key) are recomputed with a warning naming the entry; the key lives
    outside the cache directory, a 0600 file of this user; one readable by others turns the cache off."""
    from harness.store import cache

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    root = tmp_path / "cache"
    assert cache.AnswerCache(root).get({"q": 1}, lambda: [1, 2]) == [1, 2]
    (entry,) = root.rglob("*.pt")
    assert cache.AnswerCache(root).get({"q": 1}, lambda: "recomputed") == [1, 2]  # its own entry is trusted
    forge(entry, ["planted"])
    with pytest.warns(UserWarning, match=str(entry)):
        assert cache.AnswerCache(root).get({"q": 1}, lambda: [1, 2]) == [1, 2]
    assert cache.AnswerCache(root).get({"q": 1}, lambda: "recomputed") == [1, 2]  # rewritten under this user's key

    AnswerCache, key_file = cache.AnswerCache, cache.default_secret_file()
    assert key_file.is_file() and not key_file.is_relative_to(root)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600

    other = AnswerCache(root, secret_file=tmp_path / "other-user" / "engine-cache.key")  # a copied cache dir
    with pytest.warns(UserWarning, match=str(entry)):
        assert other.get({"q": 1}, lambda: "theirs") == "theirs"
    with pytest.warns(UserWarning, match=str(entry)):
        assert AnswerCache(root).get({"q": 1}, lambda: "mine") == "mine"

    older = tmp_path / "older"  # a cache an older harness wrote (no HMAC): recomputed, the first entry named only
    assert [AnswerCache(older).get({"q": i}, lambda i=i: i) for i in range(3)] == [0, 1, 2]
    for path in older.rglob("*.pt"):
        head, payload = path.read_bytes().split(b"\n", 1)
        path.write_bytes(json.dumps({k: v for k, v in json.loads(head).items() if k != "hmac"}).encode() + b"\n" + payload)
    with pytest.warns(UserWarning, match="no HMAC") as caught:
        session = AnswerCache(older)  # one run's cache
        assert [session.get({"q": i}, lambda i=i: -i) for i in range(3)] == [0, -1, -2]
    assert len([w for w in caught if "engine cache" in str(w.message)]) == 1

    key_file.chmod(0o644)
    with pytest.warns(UserWarning, match="engine cache off.*engine-cache.key"):
        assert AnswerCache(root).get({"q": 1}, lambda: "computed") == "computed"
    assert not os.environ.get("XDG_CONFIG_HOME", "").startswith(str(Path.home()))


# ----------------------------------------------------------------------------------------------
# b. a report that cannot be written leaves no folder behind

DISK_FULL = textwrap.dedent("""
    import errno, os

    _replace = os.replace


    def replace(src, dst, *args, **kwargs):  # the report's page: the disk is full by then
        if str(dst).endswith(os.environ["HARNESS_PROBE_FULL_AT"]):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return _replace(src, dst, *args, **kwargs)


    os.replace = replace
""")


def probe_full_reports_dir_leaves_no_half_report(tmp_path: Path) -> None:
    """`harness check` whose reports dir fills up while the report is written (results.json written,
    index.html not): exit 2, one line naming the run folder, and no folder holding results.json alone;
    likewise `harness compare` into its own folder, and `--out DIR` keeps nothing of the half report."""
    project = make_project(tmp_path / "p")
    project.record("one")
    project.record("two")
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(DISK_FULL)  # os.replace refusing the report's page, in every process
    env = {"PYTHONPATH": f"{shim}{os.pathsep}{REPO}", "HARNESS_PROBE_FULL_AT": "index.html"}
    proc = project.harness("check", env=env)
    line = one_line_exit_2(proc, "cannot write the report", str(project.root / "reports"), "No space left")
    left = [p.relative_to(project.root) for p in (project.root / "reports").rglob("*")] \
        if (project.root / "reports").exists() else []
    assert left == [], (left, line)
    from harness.store.env import env_key, fingerprint

    key = env_key(fingerprint())
    for out in ((), ("--out", str(tmp_path / "mine"))):
        proc = project.harness("compare", key, key, *out, env=env)
        one_line_exit_2(proc, "cannot write the report", "No space left")
        assert not [p for p in (project.root / "reports").rglob("*") if p.is_file()]
        assert not (tmp_path / "mine").exists() or not list((tmp_path / "mine").iterdir())
    proc = project.harness("check")  # the disk has room again: the report is whole
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert {p.name for p in (project.root / "reports").rglob("*") if p.is_file()} >= {"results.json", "index.html"}


# ----------------------------------------------------------------------------------------------
# c. faults --out is checked before any fault runs


def probe_faults_out_is_checked_before_the_runs(tmp_path: Path) -> None:
    """`--out` a directory, its .json a directory, a path under a file: one line naming --out and
    the path, exit 2, and no fault ran (the runs took their hours first, then the write failed)."""
    from harness.faults import FAULTS

    project = make_project(tmp_path / "p")
    (tmp_path / "dir").mkdir()
    (tmp_path / "json" / "t.json").mkdir(parents=True)
    (tmp_path / "file").write_text("")
    for out, says in ((tmp_path / "dir", "a directory"), (tmp_path / "json" / "t.md", "a directory"),
                      (tmp_path / "file" / "t.md", "cannot write")):
        proc = project.harness("faults", "--only", FAULTS[0].name, "--empty-only", "--out", str(out), timeout=120)
        assert "harness: 1 faults" not in proc.stdout, proc.stdout[-2000:]  # nothing ran
        one_line_exit_2(proc, "--out", says)
    assert not list((tmp_path / "dir").iterdir())


# ----------------------------------------------------------------------------------------------
# d. the harness's own bad arguments are the harness's bug, not a record


def probe_a_binding_error_of_the_harness_is_no_record(tmp_path: Path) -> None:
    """At the subject boundary (`observe`): arguments the harness built that do not bind to the
    library's callee - called directly, or through torch's Module.__call__ - propagate (the test
    fails), where they were recorded as the library's TypeError; a TypeError the library raises
    inside its own code, or its own call binding wrong arguments, stays a record."""
    import torch
    from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    from harness.subjects import FAULT_SOURCE, observe

    norm = LlamaRMSNorm(8)
    for call in (lambda: DynamicCache(no_such_keyword=1), lambda: norm(torch.zeros(8), no_such_keyword=1),
                 lambda: norm()):
        with pytest.raises(TypeError):
            observe(call)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, vocab_size=32))
    _, err = observe(lambda: model.generate(torch.tensor([[1, 2]]), max_new_tokens="3", do_sample=False))
    assert err is not None and err["type"] == "TypeError", err  # raised inside generate(): the library's
    namespace: dict = {}  # library code (a fault's edited source counts as the library) calling with a bad keyword
    exec(compile("def edited(make):\n    return make(no_such_keyword=1)\n", f"{FAULT_SOURCE}x: m.f>", "exec"), namespace)
    _, err = observe(lambda: namespace["edited"](DynamicCache))
    assert err is not None and err["type"] == "TypeError" and "no_such_keyword" in err["message"], err


# ----------------------------------------------------------------------------------------------
# e. no extreme value widens another element's tolerance


def probe_no_extreme_element_widens_the_others(tmp_path: Path) -> None:
    """Across numerics, a change of 1 -> 500 or 2 -> -7 beside one 1e30 element (fp32 -> bf16's
    per-element rule, whose s was rms(b); a mixture-of-experts tensor's k u max|old|), and a change
    of one logit by 50 beside 2 % masked logits at float32's minimum (fp32: the typical magnitude
    set aside only the top 1 %), passed: each is a regression now; a drift the dtype's rounding
    explains still passes, and the masked logits themselves match."""
    import numpy as np

    from harness.checking.compare import compare_field
    from harness.checking.policy import Policy
    from harness.schema import Field
    from harness.store.env import fingerprint

    fp32, bf16 = fingerprint(dtype="fp32", threads=2), fingerprint(dtype="bf16", threads=2)
    across = {"fp32 -> bf16": Policy(alpha=0.01, observed_env=bf16, baseline_env=fp32),
              "fp32 threads": Policy(alpha=0.01, observed_env={**fp32, "threads": 1}, baseline_env=fp32)}
    assert all(p.numerics_differences() for p in across.values())

    def status(new, old, policy, **extras) -> str:
        result = compare_field("t", Field("tensor", list(new), extras), Field("tensor", list(old), extras), policy)
        json.dumps(result.diff, allow_nan=False)
        return result.status.value

    huge = [1e30, 1.0, 2.0]
    for name, policy in across.items():
        for extras in ({}, {"routing": True}):
            assert status([1e30, 500.0, -7.0], huge, policy, **extras) == "regression", (name, extras)
            assert status([1e30, 1.0 + 1e-6, 2.0], huge, policy, **extras) == "pass", (name, extras)
    logits = np.random.default_rng(0).normal(0.0, 3.0, 400)
    logits[:8] = float(np.finfo(np.float32).min)  # 2 % masked
    moved = logits.copy()
    moved[100] += 50.0
    assert status(moved, logits, across["fp32 threads"]) == "regression"
    drift = logits.copy()
    drift[8:] *= 1 + 1e-6
    assert status(drift, logits, across["fp32 threads"]) == "pass"


# ----------------------------------------------------------------------------------------------
# f. a test that did not run keeps its records

NOT_RUN_SUITE = textwrap.dedent("""
    import json
    from pathlib import Path

    import pytest

    DATA = json.loads((Path(__file__).parents[1] / "value.json").read_text())


    @pytest.mark.parametrize("case", [
        "one",
        pytest.param("skipif", marks=pytest.mark.skipif(True, reason="not on this machine")),
        pytest.param("skip", marks=pytest.mark.skip(reason="later")),
        pytest.param("xfail", marks=pytest.mark.xfail(raises=RuntimeError, reason="known")),
        pytest.param("xfail-norun", marks=pytest.mark.xfail(run=False, reason="hangs")),
    ])
    def test_toy(case, golden):
        golden.check("value", DATA["value"])
        if case == "xfail":
            raise RuntimeError("fails before it finishes")
""")


def probe_regen_keeps_the_records_of_tests_that_did_not_run(tmp_path: Path) -> None:
    """Records of a skip / skipif / xfail(run=False) test, and of an xfail test that raised (its
    record is never written): regen removed them (the run was complete, rc 0); now kept as they
    were and named, while the test that ran is regenerated."""
    project = make_project(tmp_path / "p")
    (project.root / "suites" / "test_toy.py").write_text(NOT_RUN_SUITE)
    not_run = ("skipif", "skip", "xfail", "xfail-norun")
    before = {case: project.record(case).read_bytes() for case in ("one", *not_run)}
    project.values(2)
    proc = project.harness("regen", "--yes")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for case in not_run:
        path = project.store.root / KEY / "toy" / f"{case}.json"
        assert path.is_file() and path.read_bytes() == before[case], (case, proc.stdout[-3000:])
        assert f"toy/{case}" in proc.stdout, proc.stdout[-3000:]
    assert "0 removed" in proc.stdout and "1 changed" in proc.stdout, proc.stdout[-3000:]
    # and check never advises accepting a removal of what regen keeps: the test did not run
    check = project.harness("check")
    summary = (project.root / "reports").rglob("summary.md")
    text = check.stdout + "".join(p.read_text() for p in summary)
    assert "its test did not run" in text and "accept its removal" not in text, text[-3000:]


# ----------------------------------------------------------------------------------------------
# g. the CI workflow: actions pinned by commit, hashes explained, a fork's token no red job


def probe_ci_workflow_pins_actions_and_survives_a_fork(tmp_path: Path) -> None:
    """Every `uses:` of the written workflow is a 40-hex commit with its tag in a comment; the install
    says why it is not hash-checked; on a fork's pull request (read-only token) the chain job of
    passing cells succeeds, the comment step does not run and a notice says so - and the comment's
    script turns a refused write (403) into a notice. A same-repository pull request still comments."""
    import re

    import yaml

    from harness.cli import ci
    from test_ci import TORCH
    from workflow_steps import harness_env, run_job

    path = ci.write_workflow(tmp_path / "project", "github", ["5.14.0"], [TORCH], ["fp32"], "genharness==0.1.0")
    text = path.read_text()
    data = yaml.safe_load(text)
    used = [s["uses"] for job in data["jobs"].values() for s in job["steps"] if "uses" in s]
    assert used and all(re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", u) for u in used), used
    for line in (line for line in text.splitlines() if line.strip().startswith(("- uses:", "uses:"))):
        assert re.search(r"@[0-9a-f]{40}  # v\d+\.\d+\.\d+$", line), line
    assert "--require-hashes" in text  # why the install is not hash-checked, said where it is
    assert "error.status !== 403" in text and "core.notice" in text

    key = "tf5.14.0-torch2.13.0-cpu-x86_64-fp32"
    for fork in (True, False):  # the chain job after one passing cell (its artifact as the cell job leaves it)
        artifacts = tmp_path / f"artifacts-{fork}"
        cell = artifacts / ci.cell_name("5.14.0", TORCH, "fp32")
        (cell / "reports" / key / "20260101-000000").mkdir(parents=True)
        (cell / "check-exit-code").write_text("0\n")
        (cell / "env-key").write_text(f"{key}\n")
        (cell / "reports" / key / "20260101-000000" / "summary.md").write_text("# no findings\n")
        (cell / "reports" / key / "20260101-000000" / "results.json").write_text(json.dumps({"meta": {"baseline_key": key}}))
        (tmp_path / f"runner-{fork}").mkdir()
        chain = run_job(path, "chain", cwd=tmp_path / f"runner-{fork}", env=harness_env(Path(sys.prefix)),
                        artifacts_dir=artifacts, event="pull_request", fork=fork)
        assert chain.conclusion == "success", chain.log()
        posted = chain.step("Post summary.md as one sticky comment")
        notice = chain.step("Skip the comment on a fork's pull request")
        assert posted.ran is (not fork) and notice.ran is fork, (fork, chain.log())
        if fork:
            assert notice.rc == 0 and "::notice" in notice.log and "read-only token" in notice.log, notice.log


PROBES = [
    Probe("cache/forged-entry", "an entry with a wrong value and a recomputed checksum; a cache dir from another user",
          probe_forged_cache_entry_is_recomputed),
    Probe("report/disk-full", "check / compare whose reports dir fills up between results.json and index.html",
          probe_full_reports_dir_leaves_no_half_report),
    Probe("boundary/harness-binding-error", "observe(DynamicCache(no_such_keyword=1)), a module called with a "
          "keyword its forward lacks; generate(max_new_tokens='3')", probe_a_binding_error_of_the_harness_is_no_record),
    Probe("tensor/one-extreme-element", "[1e30, 1, 2] vs [1e30, 500, -7] fp32 -> bf16 and routed; one logit +50 "
          "beside 2 % at float32's minimum", probe_no_extreme_element_widens_the_others),
    Probe("regen/not-run-keeps-records", "regen of a suite with skip / skipif / xfail / xfail(run=False) cases",
          probe_regen_keeps_the_records_of_tests_that_did_not_run),
    Probe("ci/pinned-and-fork-safe", "init --ci github: uses: by tag; the install's hashes; the chain job on a "
          "fork's pull request", probe_ci_workflow_pins_actions_and_survives_a_fork),
    Probe("faults/out-not-writable", "faults --out DIR / a .json that is a dir / a path under a file",
          probe_faults_out_is_checked_before_the_runs),
]


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_probe(probe: Probe, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Run one probe; it asserts the fail-closed behaviour (each failed on the code before its fix)."""
    run_probe(probe, request, tmp_path)


def test_probe_ids_are_unique() -> None:
    assert len({p.id for p in PROBES}) == len(PROBES)
