"""Fail closed, second pass (issue 30): one probe per way the harness failed open - a checkpoint's
code that could run, a harness bug recorded as a finding, a green report that did not check, a
hostile or broken input that crashed or hung, an interrupt that left things behind.

Each probe is a row of `PROBES` (id, what it tries, the probe); each was run against the code
before the fix (6dc1a29) and failed there. The probes drive the real front ends - `harness ...`
in a subprocess (a traceback, an exit code, a hang are what a user sees), plain `pytest`, or the
library call the front end makes - on throw-away projects: a pyproject.toml, a fake zoo model with
its manifest, and a toy suite whose golden checks read value.json.

The third pass (issue 41) adds the rows after "# issue 41" in `PROBES`: strict-mode bypasses
(PYTEST_ADDOPTS / ini addopts / modes that run no test), fault runs that wrote records, the engine
cache (poisoned entries, write errors, the key's code), writes over the read limits, merge's env
check, thresholds, hostile claims / pyproject, the config families' sizes, the chat-template date
and the weak items (matrix versions, --records, report's exit code and temporaries, script links in
summary.md, 1e999, init's name and half-writes, the headline, double Ctrl-C).
The cache probes use a temporary XDG_CACHE_HOME.

The fourth pass (issue 63) adds the rows after "# issue 63": code in a record's env reaching
`harness repro`'s script, a target that is a path, and the items below as they land.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import hashlib
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.schema import Field
from harness.store.env import env_key, fingerprint
from harness.store.records import GoldenStore

REPO = Path(__file__).resolve().parents[1]
KEY = env_key(fingerprint())
OTHER = "tf5.13.0-torch2.8.0-cpu-x86_64-fp32"

SUITE = textwrap.dedent("""
    import json
    import os
    import time
    from pathlib import Path

    import pytest

    ROOT = Path(__file__).parents[1]
    DATA = json.loads((ROOT / "value.json").read_text())


    @pytest.mark.parametrize("case", ["one", "two"])
    def test_toy(case, golden):
        golden.check("value", DATA["value"])
        if DATA.get("sleep") and DATA.get("sleep_case", case) == case:  # the interrupt probes: say who runs, then take long
            (ROOT / f"running.{os.getpid()}").write_text(str(os.getpgrp()))
            time.sleep(DATA["sleep"])
""")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_XDIST_WORKER", "PYTEST_CURRENT_TEST")}
    return {**env, "PYTHONPATH": str(REPO), **extra}


@dataclass
class Project:
    root: Path

    @property
    def store(self) -> GoldenStore:
        return GoldenStore(self.root / "records")

    def values(self, value=1, **more) -> None:
        (self.root / "value.json").write_text(json.dumps({"value": value, **more}))

    def record(self, case: str, value=1, key: str = KEY, suite: str = "toy") -> Path:
        return self.store.update(key, suite, case, fingerprint(), {"value": Field("exact", value)}).path

    def harness(self, *argv: str, extra: tuple[str, ...] = (), timeout: float = 180, **kwargs) -> subprocess.CompletedProcess:
        root = ["--root", str(self.root)] if argv[0] != "report" else []  # `harness report` reads one file
        command = [sys.executable, "-m", "harness", *argv, *root] + (["--", *extra] if extra else [])
        return subprocess.run(command, cwd=self.root, env=_env(**kwargs.pop("env", {})), capture_output=True, text=True,
                              timeout=timeout, stdin=kwargs.pop("stdin", subprocess.DEVNULL), **kwargs)

    def popen(self, *argv: str, **kwargs) -> subprocess.Popen:
        """The command as a terminal starts it: SIGINT / SIGTERM at their defaults and unblocked,
        whatever the xdist worker running this test inherited or was left with (a child inherits a
        signal mask and SIG_IGN across exec; the Ctrl-C probes failed only late in a full -n 2 run)."""
        command = [sys.executable, "-m", "harness", *argv, "--root", str(self.root)]
        return subprocess.Popen(command, cwd=self.root, env=_env(**kwargs.pop("env", {})), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=_as_a_terminal_starts_it, **kwargs)

    def reports(self) -> list[Path]:
        return sorted((self.root / "reports").rglob("index.html"))


def _as_a_terminal_starts_it() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def make_project(root: Path, model_config: dict | None = None) -> Project:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(textwrap.dedent("""
        [tool.harness]
        golden_dir = "records"
        models_dir = "models"
        reports_dir = "reports"
    """))
    tiny = root / "models" / "tiny"
    tiny.mkdir(parents=True)
    (tiny / "config.json").write_text(json.dumps(model_config or {}))
    (tiny / "model.safetensors").write_bytes(b"\x00" * 16)
    files = {n: hashlib.sha256((tiny / n).read_bytes()).hexdigest() for n in ("config.json", "model.safetensors")}
    (root / "models" / "manifest.json").write_text(json.dumps({"models": {"tiny": {"files": files}}}))
    (root / "suites").mkdir()
    (root / "suites" / "test_toy.py").write_text(SUITE)
    (root / "records").mkdir()
    project = Project(root)
    project.values()
    return project


def one_line_exit_2(proc: subprocess.CompletedProcess, *words: str) -> str:
    """The refusal a user must see: exit 2, no traceback, one error line naming what is wrong."""
    text = proc.stdout + proc.stderr
    assert proc.returncode == 2, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("harness: error:")]
    assert len(errors) == 1 and len(errors[0]) < 1000, proc.stderr[-3000:]
    for word in words:
        assert word in errors[0], errors[0]
    return errors[0]


def verdict_of(index: Path) -> str:
    html = index.read_text(encoding="utf-8")
    return html.split('data-verdict="', 1)[1].split('"', 1)[0]


def junit_counts(junit: Path) -> tuple[int, int]:
    import xml.etree.ElementTree as ET

    root = ET.parse(junit).getroot()
    return int(root.get("failures", 0)), int(root.get("errors", 0))


def assert_not_green(project: Project, proc: subprocess.CompletedProcess) -> dict:
    """The exit code, the report's verdict and JUnit agree: not a pass."""
    assert proc.returncode != 0, proc.stdout[-2000:]
    (index,) = project.reports()
    assert verdict_of(index) not in ("pass", "changed"), verdict_of(index)
    failures, errors = junit_counts(index.parent / "junit.xml")
    assert failures + errors > 0
    return json.loads((index.parent / "results.json").read_text())


# ----------------------------------------------------------------------------------------------
# security: no code of a checkpoint runs


def evil_checkpoint(root: Path, marker: Path) -> tuple[Path, Path]:
    """A copy of the zoo's llama pair whose config.json points AutoConfig at a .py file of the
    checkpoint (auto_map, an unknown model_type): loading it runs that file, which writes `marker`."""
    model, assistant = root / "evil", root / "assistant"
    shutil.copytree(REPO / "golden" / "models" / "llama-target", model)
    shutil.copytree(REPO / "golden" / "models" / "llama-assistant", assistant)
    config = json.loads((model / "config.json").read_text())
    config.update(model_type="harness_evil", auto_map={"AutoConfig": "evil_config.EvilConfig"})
    (model / "config.json").write_text(json.dumps(config))
    (model / "evil_config.py").write_text(textwrap.dedent(f"""
        import pathlib
        pathlib.Path({str(marker)!r}).write_text("the checkpoint's code ran")
        from transformers import LlamaConfig


        class EvilConfig(LlamaConfig):
            model_type = "harness_evil"
    """))
    return model, assistant


def run_on_a_tty(command: list[str], cwd: Path, answer: str = "y\n", timeout: float = 180) -> tuple[int, str]:
    """Run `command` with a pseudo-terminal as stdin/stdout/stderr, answering every prompt `answer`."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(command, cwd=cwd, env=_env(), stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    out, deadline = b"", time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                with contextlib.suppress(OSError):
                    chunk = os.read(master, 65536)
                    out += chunk
                    if b"[y/N]" in chunk:
                        os.write(master, answer.encode())
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(OSError):
            while select.select([master], [], [], 0.2)[0]:
                chunk = os.read(master, 65536)
                if not chunk:
                    break
                out += chunk
    finally:
        os.close(master)
    return proc.wait(), out.decode("utf-8", "replace")


def probe_remote_code_check_on_a_tty(tmp_path: Path) -> None:
    project, marker = make_project(tmp_path / "p"), tmp_path / "marker"
    model, assistant = evil_checkpoint(tmp_path, marker)
    rc, out = run_on_a_tty([sys.executable, "-m", "harness", "check", "--model", str(model), "--assistant",
                            str(assistant), "--root", str(project.root)], project.root)
    assert not marker.exists(), "the checkpoint's code ran"
    assert rc == 2 and "auto_map" in out and "Traceback" not in out, out[-2000:]


def probe_remote_code_check_without_a_tty(tmp_path: Path) -> None:
    project, marker = make_project(tmp_path / "p"), tmp_path / "marker"
    model, assistant = evil_checkpoint(tmp_path, marker)
    proc = project.harness("check", "--model", str(model), "--assistant", str(assistant))
    assert not marker.exists(), "the checkpoint's code ran"
    one_line_exit_2(proc, "auto_map", "never runs code")


def probe_remote_code_plain_pytest(tmp_path: Path) -> None:
    """The other front end: a [tool.harness.models] table, plain pytest (its stdin a TTY, answering y)."""
    project, marker = make_project(tmp_path / "p"), tmp_path / "marker"
    model, assistant = evil_checkpoint(tmp_path, marker)
    with (project.root / "pyproject.toml").open("a") as handle:
        handle.write(f'\n[tool.harness.models.evil]\npath = "{model}"\nassistant = "{assistant}"\n')
    rc, out = run_on_a_tty([sys.executable, "-m", "pytest", "suites", "-p", "no:cacheprovider", "-q"], project.root)
    assert not marker.exists(), "the checkpoint's code ran"
    assert rc == 4 and "auto_map" in out, out[-2000:]


def probe_every_from_pretrained_refuses_remote_code(tmp_path: Path) -> None:
    """Every from_pretrained(...) of the harness's code passes trust_remote_code=False; the one
    exception is the contracts probe of transformers' own default, which loads a checkpoint the
    probe itself wrote (its payload writes a marker in the test's tmp dir, the observation)."""
    allowed = {("harness/subjects/hf_contracts.py", "probe_trust_remote_code"),  # the default is what it observes
               ("harness/subjects/hf_api.py", "probe_mtp_checkpoint")}  # MtpModel.from_pretrained(a loaded model)
    missing = []
    for path in sorted((REPO / "harness").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            for call in [n for n in ast.walk(func) if isinstance(n, ast.Call)]:
                if not (isinstance(call.func, ast.Attribute) and call.func.attr == "from_pretrained"):
                    continue  # (harness.subjects.hf.from_pretrained, a plain name, passes it itself)
                ok = any(k.arg == "trust_remote_code" and isinstance(k.value, ast.Constant) and k.value.value is False
                         for k in call.keywords)
                where = (str(path.relative_to(REPO)), func.name)
                if not ok and where not in allowed:
                    missing.append(f"{where[0]}:{call.lineno} ({func.name})")
    assert not missing, missing


def probe_zoo_model_with_code_is_refused(tmp_path: Path) -> None:
    project = make_project(tmp_path, {"model_type": "x", "auto_map": {"AutoConfig": "x.XConfig"}})
    one_line_exit_2(project.harness("check"), "auto_map")


def probe_summary_md_escapes_html(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    project.record("one", "<script>alert(1)</script>", key=OTHER)
    project.record("one", "<img src=x onerror=alert(1)>")
    proc = project.harness("compare", OTHER, KEY, "--out", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert "<script" not in summary and "<img" not in summary and "&lt;script&gt;" in summary


# ----------------------------------------------------------------------------------------------
# the subject boundary: no harness bug becomes a record

DEPTHS = textwrap.dedent('''
    """Five depths at which an exception can be raised below a subject's observe call."""
    import torch
    import torch.nn.functional as F
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM


    def _margin(x):
        return x


    def own_code():
        return {}["a harness bug"]


    def torch_hook():
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=1, vocab_size=32))

        def helper(tensor):  # harness code a torch hook calls, failing inside torch's Python code
            return F.layer_norm(tensor, (7,))

        model.model.layers[0].mlp.register_forward_hook(lambda module, args, out: helper(out))
        return model(torch.tensor([[1, 2]]))


    def wrong_kwarg():
        return _margin(torch.zeros(2), dim=1)  # "_margin() got an unexpected keyword argument"


    def torch_args():
        return F.softmax(torch.zeros(2), dim=7)  # raised inside torch, from the harness's arguments


    def library():
        return GenerationConfig(max_new_tokens=-1).validate(strict=True)


    DEPTHS = {"own_code": own_code, "torch_hook": torch_hook, "wrong_kwarg": wrong_kwarg, "torch_args": torch_args,
              "library": library}
    HARNESS = ("own_code", "torch_hook", "wrong_kwarg", "torch_args")
''')


def probe_boundary_decides_by_the_stack(tmp_path: Path) -> None:
    namespace: dict = {}
    (tmp_path / "depths.py").write_text(DEPTHS)
    exec(compile(DEPTHS, str(tmp_path / "depths.py"), "exec"), namespace)
    from harness.subjects import observe

    verdicts = {}
    for name, fn in namespace["DEPTHS"].items():
        try:
            _, err = observe(fn)
            verdicts[name] = "library" if err is not None else "returned"
        except Exception:
            verdicts[name] = "harness"
    assert verdicts == {"own_code": "harness", "torch_hook": "harness", "wrong_kwarg": "harness",
                        "torch_args": "harness", "library": "library"}, verdicts


def probe_regen_writes_no_harness_bug(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    (project.root / "suites" / "depths.py").write_text(DEPTHS)
    (project.root / "suites" / "test_depths.py").write_text(textwrap.dedent("""
        import pytest

        from depths import DEPTHS
        from harness.subjects import observe


        @pytest.mark.parametrize("case", list(DEPTHS))
        def test_depth(case, golden):
            _, err = observe(DEPTHS[case])
            golden.check("error", err)
    """))
    proc = project.harness("regen", "--yes")
    written = sorted(p.stem for p in (project.store.root / KEY / "depths").glob("*.json"))
    assert written == ["library"], (written, proc.stdout[-2000:])
    assert project.store.read(KEY, "depths", "library").fields["error"].value["type"] == "ValueError"


# ----------------------------------------------------------------------------------------------
# the verdict: derived from the same facts as the exit code


def probe_unwritable_store_is_not_a_pass(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    (project.store.root / KEY).write_text("a file where the env's directory goes")  # writes fail: ENOTDIR
    assert_not_green(project, project.harness("check"))


def probe_untakeable_lock_is_not_a_pass(tmp_path: Path) -> None:
    """A lock that cannot be opened (here a directory in its place; as another user: EACCES)."""
    project = make_project(tmp_path)
    lock = project.store.lock_path(KEY)
    lock.mkdir(parents=True)
    (lock / "x").write_text("")
    assert_not_green(project, project.harness("check"))


def probe_full_reports_dir_is_an_error(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    (project.root / "suites" / "conftest.py").write_text(textwrap.dedent("""
        import errno

        import harness.plugin.session as session


        def disk_full(path, data):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))


        session.atomic_write_json = disk_full  # results.json cannot be written
    """))
    proc = project.harness("check")
    assert proc.returncode == 2 and "no test used the `golden` fixture" not in proc.stdout + proc.stderr, proc.stdout
    assert "No space left" in proc.stderr and "Traceback" not in proc.stderr


def probe_unwritable_report_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """index.html cannot be written (a full disk): exit 2 and one line, in-process (no traceback)."""
    import harness.report.output as output
    from harness.cli import main

    project = make_project(tmp_path)
    project.record("one", 1, key=OTHER)
    project.record("one", 1)

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "index.html"))

    monkeypatch.setattr(output, "write_file", disk_full)
    assert main(["compare", OTHER, KEY, "--out", str(tmp_path / "out"), "--root", str(project.root)]) == 2


def probe_collection_error_is_not_a_pass(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    project.record("one")
    project.record("two")
    project.record("a", suite="broken")
    (project.root / "suites" / "test_broken.py").write_text("import no_such_module\n")
    results = assert_not_green(project, project.harness("check", extra=("--continue-on-collection-errors",)))
    missing = {(o["suite"], o["case"]) for o in results["outcomes"] if o["status"] == "missing"}
    assert ("broken", "a") in missing, results["outcomes"]


def probe_deleted_suite_is_missing_under_strict(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    project.record("one")
    project.record("two")
    project.record("a", suite="gone")  # its module was deleted
    proc = project.harness("check", "--strict", "-n", "2")  # both phases: each sees the suite gone, one outcome
    assert proc.returncode == 1, proc.stdout[-2000:]
    results = json.loads(project.reports()[0].parent.joinpath("results.json").read_text())
    assert [(o["suite"], o["status"]) for o in results["outcomes"] if o["suite"] == "gone"] == [("gone", "regression")]


def probe_failing_plain_test_is_not_a_pass(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    project.record("one")
    project.record("two")
    (project.root / "suites" / "test_plain.py").write_text("def test_plain():\n    assert 1 == 2\n")
    assert_not_green(project, project.harness("check"))


def probe_golden_dir_typo_in_plain_pytest(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    text = (project.root / "pyproject.toml").read_text().replace('golden_dir = "records"', 'golden_dir = "recrods"')
    (project.root / "pyproject.toml").write_text(text)
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites", "-p", "no:cacheprovider", "-q"], cwd=project.root,
                          env=_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 4 and "recrods" in proc.stderr, proc.stdout[-1500:] + proc.stderr[-1500:]
    assert not (project.root / "recrods").exists()


def probe_regen_golden_dir_that_does_not_exist(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    one_line_exit_2(project.harness("regen", "--yes", "--golden-dir", str(tmp_path / "nowhere")), "does not exist")
    assert not (tmp_path / "nowhere").exists()


def probe_crop_that_raises_is_a_regression(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caches suite's rollback case of llama-target when crop raises (a library error) in a
    version where it ran: some field of the case regresses (not only `changed`, then a skip)."""
    from transformers import DynamicCache, GenerationConfig

    from harness.checking.core import CaseCheck, Rules
    from harness.designs import caches
    from harness.schema import Case, Status
    from harness.settings.config import Thresholds, load_config
    from harness.subjects.hf import Zoo

    config = load_config(REPO)
    record = GoldenStore(config.golden_dir).read(KEY, "caches", "llama-target")
    assert record is not None and record.fields["rollback_supported"].value is True
    monkeypatch.setattr(DynamicCache, "crop", lambda self, n: GenerationConfig(max_new_tokens=-1).validate(strict=True))
    observation = caches.rollback(Zoo(config.models_dir), Case("llama-target", name="llama-target"))
    check = CaseCheck("caches", "llama-target", Rules(alpha=1e-4, thresholds=Thresholds(), env=fingerprint()), record)
    outcomes = check.check_all(observation)
    assert any(o.status is Status.REGRESSION for o in outcomes), [(o.field, o.status.value) for o in outcomes]


# ----------------------------------------------------------------------------------------------
# hostile or broken inputs: one line, exit 2 - never a crash or a hang


def env_of(key: str) -> dict:
    """A fingerprint naming `key` (merge checks each record's env against its directory); {} for a
    name that is no key."""
    if len(key.split("-")) != 5:
        return {}
    tf, torch, device, arch, dtype = key.split("-")
    return {"transformers": tf[2:], "torch": torch[5:], "device": {"type": device, "arch": arch}, "dtype": dtype}


def lone_surrogate_record(path: Path, suite: str = "toy", case: str = "one") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    head = json.dumps({"schema": 1, "suite": suite, "case": case, "env": env_of(path.parents[1].name)})[:-1]
    path.write_text(head + ', "fields": {"value": {"kind": "exact", "value": "lone \\ud800 surrogate"}}}')
    return path


def probe_lone_surrogate_check(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    lone_surrogate_record(project.store.root / KEY / "toy" / "one.json")
    project.record("two")
    proc = project.harness("check")
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    (index,) = project.reports()
    index.parent.joinpath("results.json").read_text(encoding="utf-8")


def probe_lone_surrogate_compare(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    lone_surrogate_record(project.store.root / OTHER / "toy" / "one.json")
    project.record("one", "plain")
    proc = project.harness("compare", OTHER, KEY, "--out", str(tmp_path / "out"))
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")


def probe_lone_surrogate_merge(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    lone_surrogate_record(tmp_path / "in" / OTHER / "toy" / "one.json")
    proc = project.harness("merge", str(tmp_path / "in"))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    merged = (project.store.root / OTHER / "toy" / "one.json").read_text(encoding="utf-8")
    assert "\ufffd" in merged


def nested(depth: int) -> str:
    return '{"schema": 1, "suite": "toy", "case": "one", "env": {}, "fields": {"value": {"kind": "exact", ' \
           '"value": ' + "[" * depth + "]" * depth + "}}}"


def probe_deep_record_in_the_store(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    path = project.store.root / KEY / "toy" / "one.json"
    path.parent.mkdir(parents=True)
    path.write_text(nested(600))
    one_line_exit_2(project.harness("check"), "603 deep", "limit of 64")


def merge_input(tmp_path: Path, name: str = "one") -> Path:
    path = tmp_path / "in" / OTHER / "toy" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def probe_merge_input_100k_deep(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    merge_input(tmp_path).write_text(nested(100_000))
    one_line_exit_2(project.harness("merge", str(tmp_path / "in")), "deep")


def probe_merge_input_dev_zero(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    merge_input(tmp_path).symlink_to("/dev/zero")
    one_line_exit_2(project.harness("merge", str(tmp_path / "in"), timeout=60))
    assert not (project.store.root / OTHER).exists()


def probe_merge_input_fifo(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    os.mkfifo(merge_input(tmp_path))
    one_line_exit_2(project.harness("merge", str(tmp_path / "in"), timeout=60), "FIFO")


def probe_merge_input_over_the_size_limit(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    merge_input(tmp_path).write_text('{"schema": 1, "suite": "toy", "case": "one", "env": {}, "fields": {"value": '
                                     '{"kind": "exact", "value": "' + "x" * (20 * 1024 * 1024) + '"}}}')
    one_line_exit_2(project.harness("merge", str(tmp_path / "in")), "limit")
    assert not (project.store.root / OTHER).exists()


def probe_merge_input_symlink_out_of_it(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    outside = tmp_path / "outside.json"
    outside.write_text('{"schema": 1, "suite": "toy", "case": "one", "env": {}, "fields": {}}')
    merge_input(tmp_path).symlink_to(outside)
    one_line_exit_2(project.harness("merge", str(tmp_path / "in")), "outside")


def probe_merge_input_nan(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    merge_input(tmp_path).write_text('{"schema": 1, "suite": "toy", "case": "one", "env": {}, "fields": {"value": '
                                     '{"kind": "tensor", "value": [NaN, Infinity]}}}')
    one_line_exit_2(project.harness("merge", str(tmp_path / "in")), "NaN")


def probe_merge_input_duplicate_keys(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    merge_input(tmp_path).write_text('{"schema": 1, "suite": "toy", "case": "one", "env": {}, "fields": {"value": '
                                     '{"kind": "exact", "value": 1}, "value": {"kind": "exact", "value": 2}}}')
    one_line_exit_2(project.harness("merge", str(tmp_path / "in")), "duplicate key")


def hostile_results(change: Callable[[dict], None]) -> dict:
    data = {"results_version": 1, "env": {}, "baseline_env": None, "meta": {"env_key": KEY},
            "outcomes": [{"suite": "s", "case": "c", "field": "f", "kind": "exact", "status": "regression",
                          "detail": "x", "category": "", "diff": {}, "against": "baseline"}]}
    change(data)
    return data


REPORT_VARIANTS = {
    "meta-as-a-list": lambda d: d.update(meta=[1, 2]),
    "int-detail": lambda d: d["outcomes"][0].update(detail=7),
    "string-injected-fault": lambda d: d["meta"].update(injected_fault="boom"),
    "user-models-as-dicts": lambda d: d["meta"].update(user_models=[{"name": "m"}]),
}


def report_probe(variant: str) -> Callable[[Path], None]:
    def probe(tmp_path: Path) -> None:
        project = make_project(tmp_path)
        path = tmp_path / "results.json"
        if variant == "dev-zero":
            path.symlink_to("/dev/zero")
        else:
            path.write_text(json.dumps(hostile_results(REPORT_VARIANTS[variant])))
        one_line_exit_2(project.harness("report", str(path), "--out", str(tmp_path / "out"), timeout=60))
    return probe


def user_model(tmp_path: Path, **config) -> Path:
    model = tmp_path / "big"
    shutil.copytree(REPO / "golden" / "models" / "llama-target", model)
    data = json.loads((model / "config.json").read_text())
    data.update(config)
    (model / "config.json").write_text(json.dumps(data))
    return model


def probe_config_that_cannot_fit_memory(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p")
    proc = project.harness("check", "--model", str(user_model(tmp_path, hidden_size=10**9)))
    one_line_exit_2(proc, "hidden_size")
    assert "harness: running" not in proc.stdout  # refused before any model loads


def probe_gpt_bigcode_sizes_in_the_preflight(tmp_path: Path) -> None:
    """A gpt_bigcode-style config (n_embd, n_layer, n_head): 1e9 / 1e7 floats, and integers whose
    weights cannot fit, are refused before anything loads - the same rule as hidden_size."""
    from harness.settings.models import SIZE_ALIASES, size_problem

    base = {"model_type": "gpt_bigcode", "vocab_size": 512, "n_embd": 64, "n_layer": 2, "n_head": 2, "n_inner": None}
    assert size_problem(base, memory=1 << 34) == ""
    for change, says in (({"n_embd": 1e9}, "n_embd"), ({"n_layer": 1e7}, "n_layer"), ({"n_head": 0}, "n_head"),
                         ({"n_layer": 10**7}, "num_hidden_layers"), ({"n_embd": 10**9}, "hidden_size")):
        assert says in size_problem({**base, **change}, memory=1 << 34), change
    assert all(size_problem({alias: -1}, memory=1 << 34) for alias in SIZE_ALIASES)
    project = make_project(tmp_path / "p")
    proc = project.harness("check", "--model", str(user_model(tmp_path, n_layer=1e7)))
    one_line_exit_2(proc, "n_layer")


def probe_non_finite_tolerance(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    with (project.root / "pyproject.toml").open("a") as handle:
        handle.write("\n[tool.harness.thresholds]\ntie_eps_bf16 = inf\n")
    one_line_exit_2(project.harness("envs"), "tie_eps_bf16")


def probe_tie_eps_without_meaning(tmp_path: Path) -> None:
    """tie_eps_fp32 = 1e9 would call every greedy step a near-tie: refused, naming the key."""
    from harness.settings.config import MAX_THRESHOLDS, Thresholds

    project = make_project(tmp_path)
    with (project.root / "pyproject.toml").open("a") as handle:
        handle.write("\n[tool.harness.thresholds]\ntie_eps_fp32 = 1e9\n")
    one_line_exit_2(project.harness("envs"), "tie_eps_fp32", "<=")
    from dataclasses import fields

    names = {f.name for f in fields(Thresholds)}
    assert set(MAX_THRESHOLDS) == names  # every threshold is bounded
    assert all(getattr(Thresholds(), n) <= MAX_THRESHOLDS[n] for n in names)  # the defaults within


def probe_out_is_a_file(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    project.record("one", key=OTHER)
    project.record("one")
    (tmp_path / "file").write_text("")
    one_line_exit_2(project.harness("compare", OTHER, KEY, "--out", str(tmp_path / "file")), "--out")


def probe_long_message_is_one_readable_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd) -> None:
    """A full store while regen writes: shutil's error lists every file (19,894 characters seen)."""
    import harness.cli.regen as regen
    from harness.cli import main

    project = make_project(tmp_path)
    project.record("one")
    project.values(2)
    failures = [(f"/src/{i}.json", f"/dst/{i}.json", "[Errno 28] No space left on device") for i in range(300)]

    def full(*args, **kwargs):
        raise shutil.Error(failures)

    monkeypatch.setattr(regen, "apply_regen", full)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    assert main(["regen", "--yes", "--root", str(project.root)]) == 2
    (line,) = [x for x in capfd.readouterr().err.splitlines() if x.startswith("harness: error:")]
    assert len(line) < 1000 and "full text: " in line, len(line)
    assert "/dst/299.json" in Path(line.rsplit("full text: ", 1)[1].rstrip(")")).read_text()


# ----------------------------------------------------------------------------------------------
# interrupts and waiting


def _running(project: Project, timeout: float = 120) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [int(p.name.split(".")[1]) for p in project.root.glob("running.*")]
        if pids:
            return pids
        time.sleep(0.1)
    raise AssertionError("the suite never started")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie is dead
        if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
            return False
    return True


def probe_sigkill_of_the_harness_kills_its_pytest(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p")
    project.values(1, sleep=120)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proc = project.popen("regen", "--yes", env={"TMPDIR": str(scratch)}, start_new_session=True)
    try:
        pids = _running(project)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 15
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        alive = [p for p in pids if _alive(p)]
        while list(scratch.glob("harness-regen-*")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive, f"pytest {alive} outlived the harness"
        assert not list(scratch.glob("harness-regen-*")), "the scratch store was left behind"
    finally:
        _kill_leftovers(project)


def _kill_leftovers(project: Project) -> None:
    """Whatever a probe's run left running (the code before the fix left its pytest behind)."""
    for path in project.root.glob("running.*"):
        pid, group = int(path.name.split(".")[1]), int(path.read_text())
        with contextlib.suppress(OSError):
            if group != os.getpgrp():
                os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def probe_sigint_is_130_and_leaves_nothing(tmp_path: Path) -> None:
    project = make_project(tmp_path / "p")
    project.record("one")
    before = project.store.root.joinpath(KEY, "toy", "one.json").read_bytes()
    project.values(1, sleep=120)
    proc = project.popen("check", start_new_session=True)
    try:
        _running(project)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: the foreground process group
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 130, out[-2000:]
        reports = project.root / "reports"
        assert not reports.exists() or not [p for p in reports.rglob("*")], list(reports.rglob("*"))
        assert project.store.root.joinpath(KEY, "toy", "one.json").read_bytes() == before
        assert not [p for p in project.store.root.rglob("*") if p.name.endswith(".tmp")]
    finally:
        proc.kill()
        _kill_leftovers(project)


def probe_sigint_after_a_finished_test_reports_it_as_partial(tmp_path: Path) -> None:
    """Ctrl-C once a test has finished (issue 42): exit 130, and the report of what finished - that
    test alone, verdict ERROR ("stopped ... partial"), never a pass, nothing counted missing; the
    stopped test's record is untouched."""
    project = make_project(tmp_path / "p")
    project.record("one")
    project.record("two")
    before = project.store.root.joinpath(KEY, "toy", "two.json").read_bytes()
    project.values(1, sleep=120, sleep_case="two")
    proc = project.popen("check", start_new_session=True)
    try:
        _running(project)
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 130, out[-2000:]
        (results,) = (project.root / "reports").rglob("results.json")
        data = json.loads(results.read_text())
        assert "partial" in data["meta"]["interrupted"] and {o["case"] for o in data["outcomes"]} == {"one"}
        assert not [o for o in data["outcomes"] if o["status"] == "missing"]
        assert "verdict: ERROR" in out and "stopped by an interrupt after 1 finished test" in out, out[-2000:]
        assert project.reports() and project.store.root.joinpath(KEY, "toy", "two.json").read_bytes() == before
    finally:
        proc.kill()
        _kill_leftovers(project)


HOLDER = """
import sys, time
from harness.store.records import GoldenStore
with GoldenStore(sys.argv[1]).lock(sys.argv[2]):
    print("held", flush=True)
    time.sleep(float(sys.argv[3]))
"""


def probe_lock_wait_says_who_and_how_long(tmp_path: Path, capfd) -> None:
    store = GoldenStore(tmp_path / "records")
    store.root.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(store.root), KEY, "30"], env=_env(),
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(TimeoutError), store.lock(KEY, timeout=1.5):
            pass
    finally:
        holder.kill()
        holder.wait()
    err = capfd.readouterr().err
    assert f"pid {holder.pid}" in err and "1.5 s" in err, err


def probe_locks_live_outside_the_records_tree(tmp_path: Path) -> None:
    store = GoldenStore(tmp_path / "golden" / "records")
    store.update(KEY, "toy", "one", fingerprint(), {"value": Field("exact", 1)})
    assert not [p for p in store.root.rglob("*") if "lock" in p.name], list(store.root.rglob("*"))


# ----------------------------------------------------------------------------------------------
# issue 41: no spelling of a pytest option bypasses what the harness owns


def changed_project(tmp_path: Path) -> Project:
    """Records of 1, values now 2: a run that rewrites them, or exits 0, failed open."""
    project = make_project(tmp_path)
    project.record("one")
    project.record("two")
    project.values(2)
    return project


def assert_records_kept(project: Project) -> None:
    for case in ("one", "two"):
        assert project.store.read(KEY, "toy", case).fields["value"].value == 1


def probe_force_regen_in_pytest_addopts(tmp_path: Path) -> None:
    project = changed_project(tmp_path)
    for ci in ({}, {"CI": "true"}):
        one_line_exit_2(project.harness("check", env={"PYTEST_ADDOPTS": "--force-regen", **ci}), "--force-regen",
                        "PYTEST_ADDOPTS")
    assert_records_kept(project)


def probe_force_regen_in_ini_addopts(tmp_path: Path) -> None:
    """ini addopts reach only pytest: the plugin refuses them in the run `harness check` started."""
    project = changed_project(tmp_path)
    with (project.root / "pyproject.toml").open("a") as handle:
        handle.write('\n[tool.pytest.ini_options]\naddopts = "--force-regen"\n')
    proc = project.harness("check", "-n", "0")
    assert proc.returncode == 2 and "--force-regen" in proc.stdout + proc.stderr, proc.stdout[-2000:]
    assert_records_kept(project)


def probe_plugin_off_in_pytest_addopts(tmp_path: Path) -> None:
    project = changed_project(tmp_path)
    one_line_exit_2(project.harness("check", env={"PYTEST_ADDOPTS": "-p no:harness"}), "no:harness")


def probe_no_test_modes_under_ci(tmp_path: Path) -> None:
    """Modes that run no test compare nothing: `not checked`, exit 2 under CI - after --, and in
    PYTEST_ADDOPTS (the plugin sees the parsed option, whichever spelling set it)."""
    project = changed_project(tmp_path)
    for mode in ("--collect-only", "--markers"):
        proc = project.harness("check", "-n", "0", extra=(mode,), env={"CI": "true"})
        assert proc.returncode == 2 and "not checked" in proc.stdout + proc.stderr, (mode, proc.stdout[-2000:])
    proc = project.harness("check", "-n", "0", env={"CI": "true", "PYTEST_ADDOPTS": "--setup-plan"})
    assert proc.returncode == 2 and "not checked" in proc.stdout + proc.stderr, proc.stdout[-2000:]
    assert not project.reports()


def probe_no_test_modes_are_one_list(tmp_path: Path) -> None:
    """Every pytest option dest the plugin reads as 'runs no test' is a real option of pytest, and
    every spelling of NO_TEST_MODES is one pytest knows (a renamed option would fail open)."""
    from _pytest.config import get_config

    from harness.plugin.options import NO_TEST_DESTS
    from harness.settings.run import NO_TEST_MODES, no_test_mode

    config = get_config()
    config.pluginmanager.import_plugin("harness.plugin")
    spellings = {s for option in config._parser._anonymous.options + [o for g in config._parser._groups
                                                                        for o in g.options] for s in option.names()}
    dests = {option.dest for g in config._parser._groups for option in g.options}
    assert set(NO_TEST_MODES) <= spellings, set(NO_TEST_MODES) - spellings
    assert set(NO_TEST_DESTS) <= dests, set(NO_TEST_DESTS) - dests
    assert all(no_test_mode(["-q", mode]) == mode for mode in NO_TEST_MODES)


def probe_fault_run_writes_no_records(tmp_path: Path) -> None:
    """A first run with a fault injected (and plain pytest --force-regen --inject-fault) writes nothing."""
    from harness.faults.catalogue import FAULTS

    project = make_project(tmp_path)
    fault = FAULTS[0].name
    proc = project.harness("check", "-n", "0", "--inject-fault", fault)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not list(project.store.root.rglob("*.json")), "a fault run wrote golden records"
    proc = subprocess.run([sys.executable, "-m", "pytest", "suites", "-p", "no:cacheprovider", "-q", "--force-regen",
                           "--inject-fault", fault], cwd=project.root, env=_env(), capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 4 and "--inject-fault" in proc.stdout + proc.stderr, proc.stdout[-2000:]
    assert not list(project.store.root.rglob("*.json"))


def probe_fault_settings_are_read_only(tmp_path: Path) -> None:
    from harness.settings.config import parse_config
    from harness.settings.run import RunSettings

    config = parse_config(tmp_path, {})
    for given in ({"fault": "x"}, {"fault": "x", "record": True}, {"fault": "x", "deep": True}):
        assert RunSettings.make(config, given, ci=False).read_only, given


# ----------------------------------------------------------------------------------------------
# issue 41: the engine cache is verified (a temporary XDG_CACHE_HOME, never ~/.cache/genharness)


def poison(path: Path) -> None:
    """Change the value's bytes of an entry and leave its header (key, checksum) as it was."""
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF
    path.write_bytes(bytes(data))


def probe_poisoned_cache_entry_is_recomputed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference answer (the engine's greedy decode of llama-target) served from a poisoned entry,
    a `{}` entry, and an entry of the right key holding a wrong value: each time the answer is the
    fresh one - the verdict a cold run would give - and the file is named once."""
    import torch

    from harness.cases import Case
    from harness.store.cache import AnswerCache, checksum
    from harness.subjects import engine
    from harness.subjects.hf import Zoo
    from harness.zoo.prompts import PROMPTS

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    zoo = Zoo(REPO / "golden" / "models", "fp32", "cpu", (), AnswerCache(tmp_path / "xdg" / "genharness"))
    case = Case("llama-target", name="llama-target", prompt=PROMPTS[0].id)
    prompt = zoo.prompt_ids(case.model, case.prompt)[0].tolist()
    fresh = engine.decode_cached(zoo, case, prompt).tokens
    (entry,) = (tmp_path / "xdg").rglob("*.pt")
    header = json.loads(entry.read_bytes().split(b"\n", 1)[0])
    wrong = {"tokens": [0] * len(fresh), "target_forwards": 0, "margins": [], "steps": []}
    buffer = __import__("io").BytesIO()
    torch.save(wrong, buffer)
    for spoil in (poison, lambda p: p.write_bytes(b"{}"),
                  lambda p: p.write_bytes(json.dumps({"key": header["key"], "sha256": "0" * 64}).encode() + b"\n"
                                          + buffer.getvalue())):
        spoil(entry)
        zoo.oracle.answers.rejected.clear()
        with pytest.warns(UserWarning, match=str(entry)):
            assert engine.decode_cached(zoo, case, prompt).tokens == fresh
    assert checksum(header["key"], entry.read_bytes().split(b"\n", 1)[1]) == header["sha256"]  # rewritten intact
    assert not (Path.home() / ".cache" / "genharness" / "engine").is_relative_to(tmp_path)


def probe_cache_write_errors_cost_time_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk: torch.save raising RuntimeError (as it does on ENOSPC) or OSError - the answer is
    still returned, nothing half-written stays."""
    import torch

    from harness.store.cache import AnswerCache

    cache = AnswerCache(tmp_path / "c")
    for exc in (RuntimeError("[enforce fail at inline_container.cc] PytorchStreamWriter failed writing file"),
                OSError(errno.ENOSPC, "No space left on device")):
        def full(*args, exc=exc, **kwargs):
            raise exc

        monkeypatch.setattr(torch, "save", full)
        assert cache.get({"q": str(exc)}, lambda: [1, 2]) == [1, 2]
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def probe_cache_key_covers_the_reference_code(tmp_path: Path) -> None:
    """Every module whose code computes a cached answer (each `oracle.answer` caller's module, e.g.
    designs/caches.py's rollback `rewound`) is in the import graph its key hashes, with the engine."""
    from harness.store.cache import PACKAGE, source_files

    callers = sorted({p for p in (REPO / "harness").rglob("*.py") if "oracle.answer(" in p.read_text(encoding="utf-8")})
    assert REPO / "harness" / "designs" / "caches.py" in callers
    for path in callers:
        module = ".".join(("harness", *path.relative_to(PACKAGE).with_suffix("").parts))
        files = source_files("harness.subjects.engine", module)
        assert path in files and PACKAGE / "engine" / "decode.py" in files, (module, files)


def probe_fault_run_writes_no_cache_entry(tmp_path: Path) -> None:
    from harness.store.cache import AnswerCache

    cache = AnswerCache(tmp_path / "c", writable=False)
    assert cache.get({"q": 1}, lambda: "faulty") == "faulty" and not (tmp_path / "c").exists()


# ----------------------------------------------------------------------------------------------
# issue 41: the store writes only what it reads back; merge trusts no directory name


def probe_write_over_the_read_limits(tmp_path: Path) -> None:
    """A 17 MB value and a 70-deep value are never written (the next read would refuse them)."""
    from harness.store.reading import MAX_DEPTH, MAX_RECORD_BYTES
    from harness.store.records import RecordLimitError

    store = GoldenStore(tmp_path)
    deep: object = 1
    for _ in range(MAX_DEPTH + 6):
        deep = [deep]
    for value, says in (("x" * (MAX_RECORD_BYTES + 1), "over the store's limit"), (deep, "deep")):
        with pytest.raises(RecordLimitError, match=says):
            store.update(KEY, "toy", "one", fingerprint(), {"value": Field("exact", value)})
    assert not list(tmp_path.rglob("*.json"))


def probe_deep_value_on_a_first_run_is_not_checked(tmp_path: Path) -> None:
    """A first run observing a value nested 70 deep (a generation_config.json could hold one):
    `not checked` with the reason, nothing written, and the next check does not exit 2."""
    project = make_project(tmp_path)
    deep: object = 1
    for _ in range(70):
        deep = [deep]
    project.values(deep)
    proc = project.harness("check", "-n", "0")
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not list(project.store.root.rglob("*.json")), "a record the store cannot read back was written"
    (index,) = project.reports()
    outcomes = json.loads((index.parent / "results.json").read_text())["outcomes"]
    assert outcomes and all(o["status"] == "skipped" and "not checked" in o["detail"] for o in outcomes), outcomes


def probe_merge_reindented_over_the_limit(tmp_path: Path) -> None:
    """A merge input under 16 MiB as read that the store's canonical (indented) text puts over it."""
    project = make_project(tmp_path)
    path = merge_input(tmp_path)
    record = {"schema": 1, "suite": "toy", "case": "one", "env": env_of(OTHER),
              "fields": {"value": {"kind": "exact", "value": [1] * 1_600_000}}}
    path.write_text(json.dumps(record, separators=(",", ":")))
    one_line_exit_2(project.harness("merge", str(tmp_path / "in")), "over the store's limit")
    assert not (project.store.root / OTHER).exists()


def probe_merge_checks_env_against_its_key(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    lie = merge_input(tmp_path)
    lie.write_text(json.dumps({"schema": 1, "suite": "toy", "case": "one", "env": env_of("tf4.0.0-torch2.8.0-cpu-x86_64-fp32"),
                               "fields": {"value": {"kind": "exact", "value": 1}}}))
    one_line_exit_2(project.harness("merge", str(tmp_path / "in")), "tf4.0.0", OTHER)
    for name in ("not-a-key", "a b"):
        shutil.rmtree(tmp_path / "in")
        lone_surrogate_record(tmp_path / "in" / name / "toy" / "one.json")
        one_line_exit_2(project.harness("merge", str(tmp_path / "in")))
    assert project.store.env_keys() == []


# ----------------------------------------------------------------------------------------------
# issue 41: a chat template's output never depends on the day


def probe_strftime_now_template_is_pinned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A template printing strftime_now (as Llama 3.x's do) renders the same text and ids on two
    different days (the clock moved a year), and names the pinned date."""
    import datetime as dt

    from harness.subjects import hf_text

    template = "{{ 'Today Date: ' + strftime_now('%d %b %Y') }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tok, error = hf_text.chat_tokenizer(REPO / "golden" / "models" / "llama-target", template)
    assert error is None, error
    messages = [{"role": "user", "content": "hello"}]
    days = []
    for shift in (0, 366):
        class Later(dt.datetime):
            @classmethod
            def now(cls, tz=None, shift=shift):
                return dt.datetime(2030, 6, 1) + dt.timedelta(days=shift)

        import transformers.utils.chat_template_utils as utils

        monkeypatch.setattr(utils, "datetime", Later, raising=True)  # the day the run happens on
        days.append(hf_text.render_chat(tok, messages, None))
    assert days[0].rendered == days[1].rendered and days[0].ids == days[1].ids
    assert hf_text.TEMPLATE_DATE.strftime("%d %b %Y") in days[0].rendered["generation_prompt"]


# ----------------------------------------------------------------------------------------------
# issue 41: one reading layer for claims and pyproject.toml


CLAIM = {"id": "c", "text": "t", "evidence": [{"suite": "toy", "case": "one", "field": "value"}]}


def hostile_claims(tmp_path: Path, variant: str) -> Path:
    path = tmp_path / "claims.json"
    if variant == "fifo":
        os.mkfifo(path)
        return path
    expect = {"regex": {"new": "(unclosed"}, "category-5": {"category": 5}}.get(variant)
    if variant == "deep":
        path.write_text('{"claims": ' + "[" * 100_000 + "]" * 100_000 + "}")
    else:
        path.write_text(json.dumps({"claims": [{**CLAIM, "evidence": [{**CLAIM["evidence"][0], "expect": expect}]}]}))
    return path


def probe_hostile_claims(tmp_path: Path) -> None:
    """--claims that is 100k deep, has an unclosed regex, a category that is a number, is a FIFO:
    compare and report each end in one line naming the file (no traceback, no hang)."""
    project = make_project(tmp_path / "p")
    project.record("one", 1, key=OTHER)
    project.record("one", 2)
    for variant, says in (("deep", "deep"), ("regex", "regular expression"), ("category-5", "category"),
                          ("fifo", "FIFO")):
        (tmp_path / variant).mkdir()
        claims = hostile_claims(tmp_path / variant, variant)
        proc = project.harness("compare", OTHER, KEY, "--out", str(tmp_path / "out"), "--claims", str(claims), timeout=60)
        one_line_exit_2(proc, says)
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"claims": [CLAIM]}))
    proc = project.harness("compare", OTHER, KEY, "--out", str(tmp_path / "ok"), "--claims", str(good), timeout=60)
    assert proc.returncode == 1, proc.stderr[-2000:]
    results = json.loads(next((tmp_path / "ok").rglob("results.json")).read_text())
    results["meta"]["claims"] = {"claims": [{**CLAIM, "evidence": [{**CLAIM["evidence"][0], "expect": {"new": "(x"}}]}]}
    (tmp_path / "r.json").write_text(json.dumps(results))
    one_line_exit_2(project.harness("report", str(tmp_path / "r.json"), "--out", str(tmp_path / "r"), timeout=60),
                    "regular expression")


def probe_hostile_pyproject(tmp_path: Path) -> None:
    """A pyproject.toml that is not UTF-8 (check, envs, init) or a FIFO (init): one line, exit 2."""
    project = make_project(tmp_path / "p")
    pyproject = project.root / "pyproject.toml"
    pyproject.write_bytes(pyproject.read_bytes() + b'\n# caf\xe9\n')
    for command in (("check",), ("envs",)):
        one_line_exit_2(project.harness(*command, timeout=60), "UTF-8")
    proc = subprocess.run([sys.executable, "-m", "harness", "init"], cwd=project.root, env=_env(), capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    one_line_exit_2(proc, "UTF-8")
    pyproject.unlink()
    os.mkfifo(pyproject)
    proc = subprocess.run([sys.executable, "-m", "harness", "init"], cwd=project.root, env=_env(), capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    one_line_exit_2(proc, "FIFO")


# ----------------------------------------------------------------------------------------------
# issue 41: the weak items


def probe_matrix_refuses_what_is_no_version(tmp_path: Path) -> None:
    """0.0.0, a word and a path are refused before any venv is built or nox.log written."""
    project = make_project(tmp_path / "p")
    for version in ("0.0.0", "not-a-version", str(tmp_path / "elsewhere"), "../../x"):
        one_line_exit_2(project.harness("matrix", "--transformers", "5.24.0", version, "--out", str(tmp_path / "out"),
                                        timeout=60), "--transformers")
    assert not (tmp_path / "out").exists() and not (tmp_path / "elsewhere").exists()
    from harness.cli.matrix import check_versions

    check_versions(["4.57.6", "5.0.0", "5.0.0rc1", "5.24.0"], "2.13.0")  # real versions pass


def probe_records_missing_names_the_flag_given(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    one_line_exit_2(project.harness("check", "--records", str(tmp_path / "missing")), "--records", "does not exist")


def probe_report_exits_1_on_a_regression(tmp_path: Path) -> None:
    """`harness report` on a results.json holding a regression exits 1, as `check` did; a pass exits 0."""
    project = make_project(tmp_path / "p")
    path = tmp_path / "results.json"
    path.write_text(json.dumps(hostile_results(lambda d: None)))
    proc = project.harness("report", str(path), "--out", str(tmp_path / "out"), timeout=60)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    path.write_text(json.dumps(hostile_results(lambda d: d["outcomes"][0].update(status="pass"))))
    proc = project.harness("report", str(path), "--out", str(tmp_path / "out"), timeout=60)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def probe_summary_md_neutralises_script_links(tmp_path: Path) -> None:
    """`[x](javascript:...)`, an image with a data: target and a `[x]: javascript:` definition from
    a record reach summary.md as text, not as links; http(s) and relative links stay links."""
    from harness.report.terminal import escape_markdown

    for hostile in ("[click](javascript:alert(1))", "![i](data:text/html;base64,PHNjcmlwdD4=)", "[x]: javascript:alert(1)",
                    "[c](JaVaScRiPt:alert(1))", "[c]( vbscript:x)"):
        out = escape_markdown(hostile)
        assert "](" not in out.replace("]\\(", "") and "]:" not in out.replace("]\\:", ""), out
    for fine in ("[docs](https://example.org/a)", "[up](../README.md)", "[a](#anchor)", "field[0]: 3"):
        assert escape_markdown(fine) == fine
    project = make_project(tmp_path)
    project.record("one", "a", key=OTHER)
    project.record("one", "[click](javascript:alert(document.domain))")
    proc = project.harness("compare", OTHER, KEY, "--out", str(tmp_path / "out"))
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = (tmp_path / "out" / "summary.md").read_text(encoding="utf-8")
    assert "](javascript:" not in summary and "]\\(javascript:" in summary


def probe_one_huge_element_excuses_no_other(tmp_path: Path) -> None:
    """Across numerics (fp32, one thread vs two), [1e308, 1, 2] vs [1e308, 500, -7] is a regression in
    the two small elements (the old `k * u * max|old|` allowance was 1e308 * k * u for each); a
    drift of a few ulps of the element's magnitude still passes."""
    from harness.checking.compare import compare_field
    from harness.checking.policy import Policy

    one = fingerprint(dtype="fp32", threads=2)
    policy = Policy(alpha=0.01, observed_env={**one, "threads": 1}, baseline_env=one)
    assert policy.numerics_differences()
    result = compare_field("t", Field("tensor", [1e308, 500.0, -7.0]), Field("tensor", [1e308, 1.0, 2.0]), policy)
    assert result.status.value == "regression" and "2/3 elements" in result.detail, result.detail
    drift = compare_field("t", Field("tensor", [1e308, 1.0 + 1e-6, 2.0]), Field("tensor", [1e308, 1.0, 2.0]), policy)
    assert drift.status.value == "pass", drift.detail
    json.dumps(result.diff, allow_nan=False)  # the diff stays strict JSON


def probe_overflowing_number_is_refused_at_read(tmp_path: Path) -> None:
    """`1e999` (and -1e999) in a merge input, or in a record in the store, was read as Infinity:
    refused at read time in one line naming the file."""
    project = make_project(tmp_path)
    merge_input(tmp_path).write_text('{"schema": 1, "suite": "toy", "case": "one", "env": {}, "fields": {"value": '
                                     '{"kind": "tensor", "value": [1.0, -1e999]}}}')
    one_line_exit_2(project.harness("merge", str(tmp_path / "in")), "overflows", "one.json")
    from harness.store.reading import InputError, parse_json

    with pytest.raises(InputError, match="overflows"):
        parse_json('{"v": 1e999}', tmp_path / "r.json")
    assert parse_json('{"v": 1.5e308, "w": 1e-999}', tmp_path / "r.json") == {"v": 1.5e308, "w": 0.0}


def harness_init(root: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "init", *argv], cwd=root, env=_env(), capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def probe_init_refuses_a_zoo_name(tmp_path: Path) -> None:
    """`init --name llama-target` was accepted, then every command refused the table: refused at init."""
    one_line_exit_2(harness_init(tmp_path, "--name", "llama-target"), "--name", "zoo model")
    assert not (tmp_path / "pyproject.toml").exists() and not (tmp_path / "golden").exists()
    assert harness_init(tmp_path, "--name", "mine").returncode == 0


def probe_init_writes_all_or_nothing(tmp_path: Path) -> None:
    """A .gitignore that cannot be written (here a directory) left pyproject.toml and golden/ written:
    init now refuses in one line and leaves the project as it was."""
    original = '[project]\nname = "x"\n'
    (tmp_path / "pyproject.toml").write_text(original)
    (tmp_path / ".gitignore").mkdir()
    one_line_exit_2(harness_init(tmp_path), ".gitignore", "nothing was written")
    assert (tmp_path / "pyproject.toml").read_text() == original and not (tmp_path / "golden").exists()
    (tmp_path / ".gitignore").rmdir()
    assert harness_init(tmp_path).returncode == 0
    assert "[tool.harness]" in (tmp_path / "pyproject.toml").read_text() and (tmp_path / "golden" / "records").is_dir()
    assert "reports/" in (tmp_path / ".gitignore").read_text()


def probe_failed_report_writes_leave_no_temporaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`report --junit DIR` left `.DIR.tmp`; a reports dir out of space left results.json and
    `.index.html.tmp`: a failed write now leaves neither (and report says so in one line)."""
    project = make_project(tmp_path / "p")
    path = tmp_path / "results.json"
    path.write_text(json.dumps(hostile_results(lambda d: None)))
    (tmp_path / "outfile").mkdir()
    proc = project.harness("report", str(path), "--out", str(tmp_path / "out"), "--junit", str(tmp_path / "outfile"),
                           timeout=60)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".outfile")]  # no temporary file
    import harness.store.files as files
    from harness.report.output import write_report
    from harness.schema import Results

    def disk_full(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(files.os, "replace", disk_full)
    out = tmp_path / "reports"
    with pytest.raises(OSError):
        write_report(Results.from_json(hostile_results(lambda d: None)), out)
    assert sorted(p.name for p in out.iterdir()) == [], sorted(p.name for p in out.iterdir())


def probe_headline_never_says_passed_beside_a_regression(tmp_path: Path) -> None:
    """A run that regressed, failed or broke ('8 injected regressions' said 'no findings: every field
    passed'): the headline of the terminal, summary.md and index.html never says every field passed."""
    from harness.checking.findings import group_findings, headline
    from harness.report.terminal import markdown_summary
    from harness.schema import Results

    passed = lambda d: d["outcomes"][0].update(status="pass")  # noqa: E731
    for change in (lambda d: None, lambda d: (passed(d), d["meta"].update(failed="pytest reported failing tests")),
                   lambda d: (passed(d), d["meta"].update(error="cannot write the report"))):
        results = Results.from_json(hostile_results(change))
        assert results.verdict in ("regression", "failed", "error"), results.verdict
        line = headline(group_findings(results.outcomes), results.verdict)
        assert "every field passed" not in line, (results.verdict, line)
        assert "every field passed" not in markdown_summary(results)
    clean = Results.from_json(hostile_results(passed))
    assert clean.verdict == "pass" and headline(group_findings(clean.outcomes), clean.verdict) == "no findings: every field passed"


def probe_second_ctrl_c_kills_the_workers_at_once(tmp_path: Path) -> None:
    """A second Ctrl-C while `stop` waits out the child's grace (double Ctrl-C) escaped and left the
    group - xdist workers that ignore the first SIGINT - running ~10 s: now the group dies at once."""
    from harness.cli.child import stop

    script = ("import signal, subprocess, sys, time\n"
              "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
              "w = subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGINT, "
              "signal.SIG_IGN); time.sleep(60)'])\n"
              "print(w.pid, flush=True)\n"
              "time.sleep(60)\n")
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
    worker = int(process.stdout.readline())

    def second_ctrl_c(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, second_ctrl_c)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            stop(process)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    deadline = time.monotonic() + 3
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(worker) and process.poll() is not None and time.monotonic() - started < 5


# ----------------------------------------------------------------------------------------------
# issue 63: fail closed, fourth pass


HOSTILE_VERSION = '2.8.0+cpu"""\nimport pathlib; pathlib.Path(__file__).with_name("pwned").write_text("ran")\n"""'
REPRO_CASE = "llama-target.plain.dynamic.short-0.greedy"


def hostile_env_record(path: Path, suite: str = "toy", case: str = "one") -> Path:
    """A record whose env's torch version closes a docstring and runs code (its key is still OTHER:
    the key drops what follows `+`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": 1, "suite": suite, "case": case,
                                "env": {**env_of(OTHER), "torch": HOSTILE_VERSION},
                                "fields": {"error": {"kind": "exact", "value": None}}}))
    return path


def probe_merge_refuses_code_in_an_env_version(tmp_path: Path) -> None:
    """`harness merge` accepted torch = '2.8.0+cpu\"\"\"<code>\"\"\"' (its key matched): refused at read,
    naming the file and the key; a record planted in the store the same way is refused by repro."""
    project = make_project(tmp_path)
    hostile_env_record(merge_input(tmp_path))
    one_line_exit_2(project.harness("merge", str(tmp_path / "in")), "one.json", "'torch' is not a version")
    assert not (project.store.root / OTHER).exists()
    hostile_env_record(project.store.root / OTHER / "outputs" / f"{REPRO_CASE}.json", "outputs", REPRO_CASE)
    one_line_exit_2(project.harness("repro", f"outputs/{REPRO_CASE}", "--baseline", OTHER, "--out", str(tmp_path / "r")),
                    f"{REPRO_CASE}.json", "'torch' is not a version")
    assert not (tmp_path / "r").exists()


def probe_repro_script_holds_data_as_data(tmp_path: Path) -> None:
    """Whatever a plan's data holds (a version closing the docstring, quotes, backslashes, newlines),
    the script is the fixed code plus one `SPEC = json.loads(<string literal>)`: statement for
    statement the same as a plain plan's, and the hostile text reaches SPEC as the same string.
    A script text with a statement smuggled in is refused (`check_script`)."""
    import ast

    from harness.report import repro
    from harness.schema import Case

    def plan(version: str, field: str) -> repro.Plan:
        spec = {"target": f"outputs/{REPRO_CASE}", "baseline_key": OTHER,
                "baseline_versions": {"transformers": "5.13.0", "torch": version}, "dtype": "fp32", "threads": 1,
                "models": {"llama-target": "models/llama-target"}, "model": "llama-target",
                "fields": [field], "kinds": {field: "exact"}, "baseline": {field: version}}
        return repro.Plan("outputs", Case("llama-target"), "generate", (field,), OTHER, spec)

    def shape(text: str) -> list[str]:
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                node.value = ""
        return [ast.dump(n) for n in tree.body]

    hostile = plan(HOSTILE_VERSION, "error'''\"\\\n")
    text = repro.script(hostile)
    assert shape(text) == shape(repro.script(plan("2.8.0", "error")))
    spec_line = next(n for n in ast.parse(text).body if isinstance(n, ast.Assign) and n.targets[0].id == "SPEC")
    assert json.loads(spec_line.value.args[0].value) == hostile.spec  # the data, parsed when the script runs
    smuggled = text.replace("\nDTYPES = ", "\nimport os\nDTYPES = ", 1)
    with pytest.raises(repro.ReproError, match="did not stay data"):
        repro.check_script(smuggled, text.split("SPEC = json.loads(", 1)[1].split("\n)\n", 1)[1])


def probe_repro_writes_and_does_not_run_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """`harness repro TARGET --baseline KEY` ran the script it wrote: now it writes it and says how
    to run it; --run (or --python) runs it."""
    import harness.cli.repro as cli_repro
    from harness.cli import main

    if GoldenStore(REPO / "golden" / "records").read(KEY, "outputs", REPRO_CASE) is None:
        pytest.skip(f"no record of outputs/{REPRO_CASE} for this env ({KEY})")
    ran: list[str] = []
    monkeypatch.setattr(cli_repro, "run_script", lambda script, exe: ran.append(exe) or (exe, "", 0))
    monkeypatch.chdir(REPO)
    assert main(["repro", f"outputs/{REPRO_CASE}:tokens", "--baseline", KEY, "--out", str(tmp_path / "a")]) == 0
    assert ran == [] and (tmp_path / "a" / "repro.py").is_file()
    assert "not run" in capsys.readouterr().out
    assert main(["repro", f"outputs/{REPRO_CASE}:tokens", "--baseline", KEY, "--out", str(tmp_path / "b"), "--run"]) == 0
    assert ran == [sys.executable]


def probe_repro_and_bisect_refuse_a_path_as_target(tmp_path: Path) -> None:
    """`../../x/y` as the target printed a traceback (ValueError from the store's file names)."""
    project = make_project(tmp_path)
    project.record("one")
    for target in ("../../x/y", "outputs/../../x", "outputs/a/b"):
        one_line_exit_2(project.harness("repro", target, "--baseline", KEY, timeout=60), "not a name")
        one_line_exit_2(project.harness("bisect", "--transformers", "5.23.0", "5.24.0", target, "--out",
                                        str(tmp_path / "b"), timeout=60), "not a name")


def probe_tie_eps_that_hides_a_fault(tmp_path: Path) -> None:
    """tie_eps_fp32 = 8.0 was accepted (the bound was 8 for every dtype) and hid a catalogue fault,
    which shows above ~0.01: each tie epsilon is bounded per dtype; the refusal names the key, the
    bound and the file; the bound itself is accepted."""
    from harness.settings.config import TIE_EPS_BOUNDS

    project = make_project(tmp_path)
    original = (project.root / "pyproject.toml").read_text()
    assert TIE_EPS_BOUNDS["fp32"] <= 0.01 and TIE_EPS_BOUNDS["fp64"] <= TIE_EPS_BOUNDS["fp32"]
    for key, value in (("tie_eps_fp32", 8.0), ("tie_eps_fp32", 0.02), ("tie_eps_fp64", 1.0), ("tie_eps_bf16", 8.0)):
        (project.root / "pyproject.toml").write_text(original + f"\n[tool.harness.thresholds]\n{key} = {value}\n")
        one_line_exit_2(project.harness("envs", timeout=60), key, "<=", "pyproject.toml")
    (project.root / "pyproject.toml").write_text(original + "\n[tool.harness.thresholds]\ntie_eps_fp32 = 0.01\n")
    assert project.harness("envs", timeout=60).returncode == 0


def probe_faults_json_through_the_reading_layer(tmp_path: Path) -> None:
    """docs/faults.json 100k deep, not JSON, of another shape, a FIFO: `harness faults --merge` printed
    a RecursionError / JSONDecodeError traceback (or a TypeError after hours of runs); now one line
    naming the file, before any fault runs. A merge the committed table cannot take (another dtype's
    column without the fp32 entries) is refused before the runs too."""
    from harness.faults import FAULTS

    project = make_project(tmp_path)
    committed = project.root / "docs" / "faults.json"
    committed.parent.mkdir()
    fault = FAULTS[0].name
    for text, says in (("[" * 100_000 + "]" * 100_000, "deep"), ('{"runs": [', "not valid JSON"),
                       ('{"runs": {"a": 1}}', "'runs' must be a list"),
                       ('{"runs": [{"fault": "x", "status": "caught", "seconds": "slow"}]}', "runs[0].seconds"),
                       ('{"runs": [], "clean": {"status": "clean", "bogus": 1}}', "bogus"), (None, "FIFO")):
        committed.unlink(missing_ok=True)
        if text is None:
            os.mkfifo(committed)
        else:
            committed.write_text(text)
        for flags in (("--merge",), ("--empty-caught",))[:1 if says != "deep" else 2]:
            proc = project.harness("faults", "--only", fault, *flags, timeout=60)
            one_line_exit_2(proc, "faults.json", says)
            assert "harness: 1 faults" not in proc.stdout  # nothing ran
    committed.unlink()
    committed.write_text('{"env_key": "k", "runs": [], "clean": null}')
    proc = project.harness("faults", "--only", fault, "--merge", "--empty-only", "--dtype", "bf16", timeout=60)
    one_line_exit_2(proc, "no committed fp32 results")
    assert "harness: 1 faults" not in proc.stdout


def probe_records_never_written_through_a_symlink_out_of_the_store(tmp_path: Path) -> None:
    """The env directory (then a suite directory) a symlink to a directory outside the store: `check`
    wrote the first run's records there; now nothing is written outside, the run is not a pass, and
    regen refuses in one line."""
    project = make_project(tmp_path / "p")
    outside = tmp_path / "outside"
    outside.mkdir()
    (project.store.root / KEY).symlink_to(outside, target_is_directory=True)
    proc = project.harness("check", "-n", "0")
    assert not list(outside.rglob("*.json")), "records were written outside the store"
    assert_not_green(project, proc)
    one_line_exit_2(project.harness("regen", "--yes"), "outside the store")
    assert not list(outside.rglob("*.json"))
    (project.store.root / KEY).unlink()
    (project.store.root / KEY).mkdir()
    (project.store.root / KEY / "toy").symlink_to(outside, target_is_directory=True)
    with pytest.raises(OSError, match="outside the store"):
        project.record("one")
    assert not list(outside.rglob("*.json"))


def probe_pytest_paths_never_point_at_the_store(tmp_path: Path) -> None:
    """`harness check -- --basetemp=golden/records` deleted the store (pytest empties its basetemp):
    an option pointing pytest's temp, cache or output at the store, the models or the reports -
    after --, in PYTEST_ADDOPTS, for check and regen - is one line, exit 2, naming the option and
    the path; nothing is deleted. Harmless paths (a junit.xml inside the reports) stay allowed."""
    from harness.settings.config import parse_config
    from harness.settings.run import clobbering_option, kept_paths

    project = changed_project(tmp_path / "p")
    (project.root / "suites" / "test_tmp.py").write_text("def test_tmp(tmp_path):\n    pass\n")
    store = project.store.root
    for extra in (("--basetemp=records",), ("--basetemp", "."), ("--basetemp", str(tmp_path)), ("-o", "cache_dir=records/c"),
                  ("-ocache_dir=models",), (f"--junitxml=records/{KEY}/toy/one.json",), ("--junit-xml", "reports"),
                  ("--override-ini=cache_dir=records",)):
        one_line_exit_2(project.harness("check", extra=extra, timeout=60), extra[0].split("=")[0].split(" ")[0][:10],
                        "pytest would empty or overwrite it")
    one_line_exit_2(project.harness("check", env={"PYTEST_ADDOPTS": "--basetemp=records"}, timeout=60),
                    "--basetemp", "PYTEST_ADDOPTS")
    one_line_exit_2(project.harness("regen", "--yes", extra=("--basetemp", "records"), timeout=60), "--basetemp", str(store))
    assert_records_kept(project)
    config = parse_config(project.root, {"golden_dir": "records", "models_dir": "models", "reports_dir": "reports"})
    kept = kept_paths(config)
    for fine in (["--junitxml=reports/junit.xml"], ["--basetemp", "tmp"], ["-o", "cache_dir=.cache"], ["--debug"],
                 ["-k", "records"]):
        assert clobbering_option(fine, kept, project.root, project.root) == "", fine


def probe_plugin_refuses_pytest_paths_on_the_store(tmp_path: Path) -> None:
    """Plain pytest, the other front end: --basetemp on the command line or in ini addopts pointing at
    the store is a usage error (exit 4) before any test makes its tmp_path; the store is kept."""
    project = changed_project(tmp_path / "p")  # (on the code before, the store was emptied, then re-recorded: a pass)
    (project.root / "suites" / "test_tmp.py").write_text("def test_tmp(tmp_path):\n    pass\n")  # runs first
    pytest_cmd = [sys.executable, "-m", "pytest", "suites", "-p", "no:cacheprovider", "-q"]
    proc = subprocess.run([*pytest_cmd, "--basetemp=records"], cwd=project.root, env=_env(), capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 4 and "--basetemp" in proc.stderr, proc.stdout[-1500:] + proc.stderr[-1500:]
    with (project.root / "pyproject.toml").open("a") as handle:
        handle.write('\n[tool.pytest.ini_options]\naddopts = "--basetemp=."\n')
    proc = subprocess.run(pytest_cmd, cwd=project.root, env=_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 4 and "--basetemp" in proc.stderr, proc.stdout[-1500:] + proc.stderr[-1500:]
    assert_records_kept(project)


def probe_regen_reads_the_projects_pytest_config(tmp_path: Path) -> None:
    """regen's scratch store lies outside the project, so pytest's search for its configuration
    (the common ancestor of every path on its command line) found none: a project whose tests are
    `check_*` functions (ini python_functions) recorded nothing. Now regen (and check) name the
    project's configuration file to pytest."""
    project = make_project(tmp_path / "p")
    suite = project.root / "suites" / "test_toy.py"
    suite.write_text(suite.read_text().replace("def test_toy(", "def check_toy("))
    with (project.root / "pyproject.toml").open("a") as handle:
        handle.write('\n[tool.pytest.ini_options]\npython_functions = ["check_*"]\n')
    proc = project.harness("regen", "--yes", "-n", "0")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert sorted(p.name for p in project.store.root.rglob("*.json")) == ["one.json", "two.json"]


def probe_checkpoint_files_are_checked_before_reading(tmp_path: Path) -> None:
    """`check --model M` where M's model.safetensors is a FIFO hung (the preflight opened it); a
    garbage header length, a truncated / empty file, a symlink to /dev/zero, a header that is not
    JSON, a malformed tokenizer.json were tracebacks (exit 1). Each is one line naming the file, exit 2."""
    import struct

    from harness.settings.models import files_problem

    def weights(model: Path) -> Path:
        return model / "model.safetensors"

    def header_length(model: Path) -> int:
        return struct.unpack("<Q", weights(model).read_bytes()[:8])[0]

    spoils = {
        "fifo": (lambda m: (weights(m).unlink(), os.mkfifo(weights(m))), "is a FIFO"),
        "garbage-length": (lambda m: weights(m).write_bytes(struct.pack("<Q", 10**6) + b"{}"), "header length 1000000"),
        "truncated": (lambda m: weights(m).write_bytes(weights(m).read_bytes()[:-1000]), "data_offsets"),
        "empty": (lambda m: weights(m).write_bytes(b""), "shorter than its 8-byte header length"),
        "dev-zero": (lambda m: (weights(m).unlink(), weights(m).symlink_to("/dev/zero")), "is a device"),
        "header-not-json": (lambda m: weights(m).write_bytes(weights(m).read_bytes()[:8] + b"x" * header_length(m)
                                                             + weights(m).read_bytes()[8 + header_length(m):]),
                            "not valid JSON"),
        "tokenizer-json": (lambda m: (m / "tokenizer.json").write_text("{not json"), "not valid JSON"),
    }
    project = make_project(tmp_path / "p")
    clean = user_model(tmp_path / "clean")
    assert files_problem(clean) == ""
    for name, (spoil, says) in spoils.items():
        model = tmp_path / name / "m"
        shutil.copytree(clean, model)
        spoil(model)
        assert says in files_problem(model), (name, files_problem(model))
        if name in ("fifo", "tokenizer-json", "dev-zero"):
            proc = project.harness("check", "--model", str(model), timeout=60)
            one_line_exit_2(proc, "tokenizer.json" if name == "tokenizer-json" else "model.safetensors", says)


def probe_chat_template_output_and_time_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 95-byte template of nested loops (17 MB in ~280 s seen; killed after 30 s on the code
    before): the rendering stops at MAX_RENDERED_CHARS and the value is the refusal with its reason,
    at once; a loop that prints nothing stops at MAX_RENDER_SECONDS (here 0.5 s), on every rendering
    path (render_chat, chat_ids, render_family); a template refused once is refused at once after."""
    from harness.subjects import hf_text

    def refusal(value: object, says: str) -> None:
        assert hf_text.is_error(value) and value["error"]["type"] == "TemplateLimit", value
        assert says in value["error"]["message"], value

    messages = [{"role": "user", "content": "hello"}]
    loud = "{% for i in range(99999) %}{% for j in range(99999) %}xxxxxxxxxxxxxxxxx{% endfor %}{% endfor %}"
    monkeypatch.setattr(hf_text, "MAX_RENDER_SECONDS", 0.5)
    quiet = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}" + str(time.time_ns())
    for template, says in ((loud, "over 1000000 characters"), (quiet, "for over 0.5 s")):
        tok, error = hf_text.chat_tokenizer(REPO / "golden" / "models" / "llama-target", template)
        assert error is None, error
        started = time.monotonic()
        got = hf_text.render_chat(tok, messages, None)
        for value in (*got.rendered.values(), got.ids, *got.ids_by_return_dict.values()):
            refusal(value, says)
        refusal(hf_text.chat_ids(tok, messages), says)
        refusal(hf_text.render_family(tok, messages, None, messages)["rendered"]["generation_prompt"], says)
        assert time.monotonic() - started < 10, time.monotonic() - started
    fine, _ = hf_text.chat_tokenizer(REPO / "golden" / "models" / "llama-target",
                                     "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert hf_text.render_chat(fine, messages, None).rendered["generation_prompt"] == "hello"


# ----------------------------------------------------------------------------------------------
# the table


@dataclass(frozen=True)
class Probe:
    id: str
    tries: str
    run: Callable[..., None]


PROBES = [
    Probe("remote-code/check-tty", "check --model M --assistant A on a TTY, answering y", probe_remote_code_check_on_a_tty),
    Probe("remote-code/check-no-tty", "the same without a TTY", probe_remote_code_check_without_a_tty),
    Probe("remote-code/plain-pytest", "a [tool.harness.models] table, plain pytest on a TTY", probe_remote_code_plain_pytest),
    Probe("remote-code/every-from-pretrained", "trust_remote_code=False on every load", probe_every_from_pretrained_refuses_remote_code),
    Probe("remote-code/zoo", "a models_dir checkpoint with an auto_map", probe_zoo_model_with_code_is_refused),
    Probe("summary-md/html", "<script> and <img onerror> in record strings", probe_summary_md_escapes_html),
    Probe("boundary/five-depths", "a bug in own code, a torch hook, a wrong kwarg, torch args; a library error",
          probe_boundary_decides_by_the_stack),
    Probe("boundary/regen", "regen --yes over the five depths", probe_regen_writes_no_harness_bug),
    Probe("verdict/unwritable-store", "a store whose records cannot be written", probe_unwritable_store_is_not_a_pass),
    Probe("verdict/untakeable-lock", "a lock that cannot be taken", probe_untakeable_lock_is_not_a_pass),
    Probe("verdict/full-reports-dir", "results.json cannot be written", probe_full_reports_dir_is_an_error),
    Probe("verdict/unwritable-report", "index.html cannot be written", probe_unwritable_report_is_an_error),
    Probe("verdict/collection-error", "a suite that does not import, --continue-on-collection-errors",
          probe_collection_error_is_not_a_pass),
    Probe("verdict/deleted-suite", "a recorded suite whose module was deleted, --strict",
          probe_deleted_suite_is_missing_under_strict),
    Probe("verdict/failing-plain-test", "a failing test that is not a golden check", probe_failing_plain_test_is_not_a_pass),
    Probe("golden-dir/pytest-typo", "plain pytest with a golden_dir typo", probe_golden_dir_typo_in_plain_pytest),
    Probe("golden-dir/regen", "regen --golden-dir to a directory that does not exist",
          probe_regen_golden_dir_that_does_not_exist),
    Probe("caches/crop-raises", "crop raising where it ran", probe_crop_that_raises_is_a_regression),
    Probe("surrogate/check", "a lone surrogate in a record, check", probe_lone_surrogate_check),
    Probe("surrogate/compare", "a lone surrogate in a record, compare", probe_lone_surrogate_compare),
    Probe("surrogate/merge", "a lone surrogate in a record, merge", probe_lone_surrogate_merge),
    Probe("input/deep-record", "a record nested 600 deep in the store", probe_deep_record_in_the_store),
    Probe("input/merge-100k-deep", "a merge input nested 100k deep", probe_merge_input_100k_deep),
    Probe("input/merge-dev-zero", "a merge input that is /dev/zero", probe_merge_input_dev_zero),
    Probe("input/merge-fifo", "a merge input that is a FIFO", probe_merge_input_fifo),
    Probe("input/merge-20mb", "a 20 MB record", probe_merge_input_over_the_size_limit),
    Probe("input/merge-symlink-out", "a symlink out of the merge input", probe_merge_input_symlink_out_of_it),
    Probe("input/merge-nan", "NaN / Infinity in a merge input", probe_merge_input_nan),
    Probe("input/merge-duplicate-keys", "duplicate keys in a merge input", probe_merge_input_duplicate_keys),
    *(Probe(f"report/{variant}", f"harness report on a results.json with {variant}", report_probe(variant))
      for variant in (*REPORT_VARIANTS, "dev-zero")),
    Probe("preflight/hidden-size-1e9", "--model with hidden_size 1e9", probe_config_that_cannot_fit_memory),
    Probe("preflight/gpt-bigcode-sizes", "n_embd = 1e9 / n_layer = 1e7 in a gpt_bigcode config",
          probe_gpt_bigcode_sizes_in_the_preflight),
    Probe("preflight/tie-eps-inf", "tie_eps_bf16 = inf", probe_non_finite_tolerance),
    Probe("chat/strftime-now-pinned", "a template using strftime_now rendered on two days", probe_strftime_now_template_is_pinned),
    Probe("input/hostile-claims", "--claims 100k deep, '(unclosed', category 5, a FIFO; report's meta.claims",
          probe_hostile_claims),
    Probe("input/hostile-pyproject", "a pyproject.toml not UTF-8 (check, envs, init), a FIFO (init)",
          probe_hostile_pyproject),
    Probe("weak/matrix-versions", "matrix --transformers 0.0.0 / not-a-version / a path", probe_matrix_refuses_what_is_no_version),
    Probe("weak/records-missing", "check --records MISSING", probe_records_missing_names_the_flag_given),
    Probe("weak/summary-md-script-links", "[link](javascript:...) from a record value into summary.md",
          probe_summary_md_neutralises_script_links),
    Probe("weak/overflow-1e999", "1e999 in a merged record (read as Infinity)", probe_overflowing_number_is_refused_at_read),
    Probe("weak/init-zoo-name", "init --name llama-target", probe_init_refuses_a_zoo_name),
    Probe("weak/init-all-or-nothing", "init where .gitignore cannot be written", probe_init_writes_all_or_nothing),
    Probe("weak/report-temporaries", "report --junit DIR; a reports dir out of space (results.json, .index.html.tmp)",
          probe_failed_report_writes_leave_no_temporaries),
    Probe("weak/headline-vs-verdict", "a run that regressed / failed / broke: 'no findings: every field passed'",
          probe_headline_never_says_passed_beside_a_regression),
    Probe("weak/double-ctrl-c", "a second Ctrl-C while the child's group is being stopped",
          probe_second_ctrl_c_kills_the_workers_at_once),
    Probe("weak/tensor-huge-element", "[1e308, 1, 2] vs [1e308, 500, -7] across numerics (fp32)",
          probe_one_huge_element_excuses_no_other),
    Probe("weak/report-exit-code", "harness report on a results.json with a regression", probe_report_exits_1_on_a_regression),
    Probe("preflight/tie-eps-1e9", "tie_eps_fp32 = 1e9 (8 injected regressions said 'no findings')",
          probe_tie_eps_without_meaning),
    Probe("preflight/out-is-a-file", "compare --out FILE", probe_out_is_a_file),
    Probe("preflight/long-message", "a 20,000-character error", probe_long_message_is_one_readable_line),
    Probe("interrupt/sigkill", "SIGKILL of the harness during regen", probe_sigkill_of_the_harness_kills_its_pytest),
    Probe("interrupt/sigint", "Ctrl-C during check", probe_sigint_is_130_and_leaves_nothing),
    Probe("interrupt/sigint-partial", "Ctrl-C after a test finished: its partial report",
          probe_sigint_after_a_finished_test_reports_it_as_partial),
    Probe("lock/wait-says-who", "waiting on a lock held by a live process", probe_lock_wait_says_who_and_how_long),
    Probe("lock/outside-records", "where a writer's lock lives", probe_locks_live_outside_the_records_tree),
    # issue 41
    Probe("strict/force-regen-addopts-env", "PYTEST_ADDOPTS=--force-regen harness check (CI and not)",
          probe_force_regen_in_pytest_addopts),
    Probe("strict/force-regen-ini-addopts", "[tool.pytest.ini_options] addopts = --force-regen",
          probe_force_regen_in_ini_addopts),
    Probe("strict/plugin-off-addopts", "PYTEST_ADDOPTS='-p no:harness'", probe_plugin_off_in_pytest_addopts),
    Probe("strict/no-test-modes-ci", "CI=true check -- --collect-only / --markers; PYTEST_ADDOPTS=--setup-plan",
          probe_no_test_modes_under_ci),
    Probe("strict/no-test-modes-list", "--setup-only, --fixtures, ... are pytest's options", probe_no_test_modes_are_one_list),
    Probe("fault/first-run-writes-nothing", "check --inject-fault F on an empty store; pytest --force-regen --inject-fault",
          probe_fault_run_writes_no_records),
    Probe("fault/settings-read-only", "a fault with --record / --deep", probe_fault_settings_are_read_only),
    Probe("cache/poisoned-entry", "an altered entry, `{}`, a right key with a wrong value",
          probe_poisoned_cache_entry_is_recomputed),
    Probe("cache/write-errors", "torch.save raising RuntimeError / OSError (a full disk)",
          probe_cache_write_errors_cost_time_only),
    Probe("cache/key-covers-designs", "a change to rewound() in designs/caches.py", probe_cache_key_covers_the_reference_code),
    Probe("cache/fault-run-writes-none", "a fault run's own answers", probe_fault_run_writes_no_cache_entry),
    Probe("write/over-read-limits", "a 17 MB and a 70-deep value written to the store", probe_write_over_the_read_limits),
    Probe("write/deep-first-run", "a first check observing a 70-deep value", probe_deep_value_on_a_first_run_is_not_checked),
    Probe("merge/reindented-16mib", "a merge input the store's indented text puts over 16 MiB",
          probe_merge_reindented_over_the_limit),
    Probe("merge/env-vs-key", "env tf4.0.0 under another key's dir; dirs 'not-a-key' and 'a b'",
          probe_merge_checks_env_against_its_key),
    # issue 63
    Probe("repro/env-version-code", "torch = '2.8.0+cpu\"\"\"<code>\"\"\"' in a merge input; the same record in the store, repro",
          probe_merge_refuses_code_in_an_env_version),
    Probe("repro/script-data-is-data", "a plan whose version and field close the docstring", probe_repro_script_holds_data_as_data),
    Probe("repro/no-run-by-default", "harness repro TARGET --baseline KEY (ran the script)",
          probe_repro_writes_and_does_not_run_by_default),
    Probe("target/path", "repro / bisect ../../x/y, outputs/../../x, outputs/a/b", probe_repro_and_bisect_refuse_a_path_as_target),
    Probe("faults-json/reading-layer", "docs/faults.json 100k deep, not JSON, another shape, a FIFO; a bf16 merge without fp32",
          probe_faults_json_through_the_reading_layer),
    Probe("store/symlink-out", "the env dir / a suite dir a symlink out of the store: check, regen, update",
          probe_records_never_written_through_a_symlink_out_of_the_store),
    Probe("pytest-paths/cli", "check / regen -- --basetemp=golden/records, -o cache_dir=, --junitxml=a record; PYTEST_ADDOPTS",
          probe_pytest_paths_never_point_at_the_store),
    Probe("pytest-paths/plugin", "plain pytest --basetemp=records; ini addopts --basetemp=.",
          probe_plugin_refuses_pytest_paths_on_the_store),
    Probe("regen/project-pytest-config", "regen of a project whose ini sets python_functions = check_*",
          probe_regen_reads_the_projects_pytest_config),
    Probe("preflight/checkpoint-files", "--model with model.safetensors a FIFO, /dev/zero, empty, truncated, a "
          "garbage header; a malformed tokenizer.json", probe_checkpoint_files_are_checked_before_reading),
    Probe("chat/render-bounds", "a 95-byte template rendering 1e11 characters; a loop that prints nothing",
          probe_chat_template_output_and_time_are_bounded),
    Probe("preflight/tie-eps-8", "tie_eps_fp32 = 8.0 / 0.02, tie_eps_fp64 = 1, tie_eps_bf16 = 8", probe_tie_eps_that_hides_a_fault),
]


def run_probe(probe: Probe, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Run one probe with the fixtures its function names besides tmp_path."""
    import inspect

    wanted = inspect.signature(probe.run).parameters
    fixtures = {name: request.getfixturevalue(name) for name in wanted if name != "tmp_path"}
    probe.run(tmp_path, **fixtures)


@pytest.mark.parametrize("probe", PROBES, ids=[p.id for p in PROBES])
def test_probe(probe: Probe, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Run one probe; it asserts the fail-closed behaviour (each failed on the code before issue 30)."""
    run_probe(probe, request, tmp_path)


def test_probe_ids_are_unique() -> None:
    assert len({p.id for p in PROBES}) == len(PROBES)
