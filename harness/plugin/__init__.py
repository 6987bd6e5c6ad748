"""pytest plugin (pytest11 entry point ``harness``): options, fixtures, hooks. No decisions here:
each test's fields are judged by the checking core (harness/checking/core.py `CaseCheck`).

Options (group "harness"):
  --force-regen          rewrite the current env's records; the summary lists what changed
  --strict / --harness-strict
                         a missing record fails its test instead of being written as `new`
                         (pytest's own ``--strict`` turns this on too: CI's choice); the store
                         is then read-only
  --baseline KEY         env key whose records to compare against (default: [tool.harness]
                         baseline, else the current env's own); an unknown key lists the known ones
  --golden-dir PATH      the store (default: [tool.harness] golden_dir)
  --harness-results PATH where results.json goes (default: <reports_dir>/results.json)
  --harness-dtype / --harness-device / --harness-attn / --harness-threads
                         the run's numerics, recorded in the fingerprint; suites read them from
                         the `harness_env` fixture (``--harness-threads N`` also calls
                         ``torch.set_num_threads(N)``)
  --harness-model PATH [--harness-assistant PATH]
                         a one-off run on your own checkpoint (harness/settings/models.py; the suites'
                         conftest turns it into cases and runs only that model's)
  --inject-fault NAME    apply a fault of harness/faults/ for the session (every worker; undone at
                         its end); results.json's meta.injected_fault names it
  --harness-case [SUITE:]GLOB
                         run only the golden tests whose case id matches (repeatable); the per-test
                         alpha stays that of the whole collection

Fixtures: `golden` (the checks of one test), `harness_env` (the run's fingerprint and key),
`harness_config` (the project's `[tool.harness]`, loaded once per process). A suite reads::

    def test_greedy(case, golden):
        ids, margins = run(case)
        golden.check("tokens", ids, kind="tokens", margins=margins)

The case id is ``case.id`` when the test has a parameter ``case`` with an ``id``, else the
parametrize id (the function name when not parametrized); the suite is the module name without
``test_``. Checks are soft: every field of the test is compared; at the end of the test body the
record is written (normal run: only fields the record lacks; --force-regen: every changed field)
and a `regression` fails the test with field, old vs new.

False alarms: each of the m collected tests that use `golden` is one case whose statistical checks
are decided with Holm's procedure at ``alpha / m`` ([tool.harness] alpha), so P(any statistical
regression in a run without a real change) <= alpha.

results.json (schema.Results): env, baseline_env, every outcome, meta. Under pytest-xdist each
worker sends its outcomes to the controller (``config.workeroutput`` -> ``pytest_testnodedown``);
only the controller writes.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness import faults
from harness.checking import stats
from harness.checking.core import Rules, missing_fields
from harness.plugin.golden import Golden
from harness.report.terminal import relative_to
from harness.schema import (
    Outcome,
    RecordError,
    Results,
    Status,
    count_statuses,
)
from harness.settings.config import DEEP_ENV, ConfigError, HarnessConfig, deep_mode, load_config
from harness.store.env import canonical_dtype, env_key, fingerprint
from harness.store.records import GoldenStore, UnknownEnvError, atomic_write_json, safe_name

PLUGIN_NAME = "harness-session"
WORKER_KEY = "harness"


def _add(group: Any, *names: str, **kwargs: Any) -> None:
    """addoption that tolerates another plugin owning the same flag (e.g. pytest-regressions'
    --force-regen): the existing option is then read instead."""
    try:
        group.addoption(*names, **kwargs)
    except ValueError:
        pass


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harness", "golden records of the upgrade validation harness")
    _add(group, "--force-regen", action="store_true", dest="force_regen", default=False,
         help="rewrite the current env's golden records and list what changed")
    _add(group, "--harness-strict", action="store_true", dest="harness_strict", default=False,
         help="a missing golden record fails its test (pytest's --strict implies this)")
    _add(group, "--baseline", dest="harness_baseline", default=None, metavar="KEY",
         help="env key whose records to compare against (default: the current env's own)")
    _add(group, "--golden-dir", dest="harness_golden_dir", default=None, metavar="PATH",
         help="golden record store (default: [tool.harness] golden_dir)")
    _add(group, "--harness-results", dest="harness_results", default=None, metavar="PATH",
         help="where to write results.json (default: <reports_dir>/results.json)")
    _add(group, "--harness-dtype", dest="harness_dtype", default="fp32", help="dtype of the run (fp32, bf16, fp16)")
    _add(group, "--harness-device", dest="harness_device", default="cpu", help="device of the run (cpu, cuda[:N])")
    _add(group, "--harness-attn", dest="harness_attn", default="sdpa", help="attention implementation of the run")
    _add(group, "--harness-threads", dest="harness_threads", type=int, default=0,
         help="torch.set_num_threads(N) for the run (0: leave torch's default)")
    _add(group, "--harness-model", dest="harness_model", default=None, metavar="PATH",
         help="run the suites on this checkpoint (a save_pretrained directory) instead of the configured models")
    _add(group, "--harness-assistant", dest="harness_assistant", default=None, metavar="PATH",
         help="the --harness-model's assistant (assisted / ensemble cases)")
    _add(group, "--harness-deep", action="store_true", dest="harness_deep", default=False,
         help="the deeper modes (sets HARNESS_DEEP=1): every sampling path x setting at a smaller detectable TV, "
              "3x the latency samples")
    faults.add_options(group, _add)  # --inject-fault NAME, --harness-case GLOB (harness/faults/)


@dataclass(frozen=True)
class RunEnv:
    """What the suites need to know about the run's numerics (the `harness_env` fixture)."""

    fingerprint: dict[str, Any]
    key: str
    dtype: str
    device: str
    attn_implementation: str


class HarnessSession:
    """One pytest run (or one xdist worker's share of it): settings, store, env, outcomes."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.start = time.time()
        try:
            self.settings: HarnessConfig = load_config(config.rootpath)
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from exc
        golden_dir = config.getoption("harness_golden_dir")
        self.store = GoldenStore(Path(golden_dir).resolve() if golden_dir else self.settings.golden_dir)
        results = config.getoption("harness_results")
        self.results_path = Path(results).resolve() if results else self.settings.reports_dir / "results.json"
        self.force_regen = bool(config.getoption("force_regen"))
        # a deep run (more cases, larger N) is an investigation: it never writes records, so the
        # committed default set stays the baseline (unless regenerating on purpose)
        self.read_only = deep_mode() and not self.force_regen
        # CI (the CI environment variable, as CI systems set it) is strict: a field without a baseline fails
        self.strict = bool(config.getoption("harness_strict")) or _pytest_strict(config) or (
            bool(os.environ.get("CI")) and not self.force_regen)
        try:
            self.dtype = canonical_dtype(config.getoption("harness_dtype"))
        except ValueError as exc:
            raise pytest.UsageError(f"--harness-dtype: {exc}") from exc
        self.device = str(config.getoption("harness_device"))
        self.attn = str(config.getoption("harness_attn"))
        threads = int(config.getoption("harness_threads") or 0)
        if threads < 0:
            raise pytest.UsageError(f"--harness-threads must be >= 0, got {threads}")
        if threads:
            import torch

            torch.set_num_threads(threads)
        self.requested_baseline = config.getoption("harness_baseline") or self.settings.baseline or None
        self.is_worker = hasattr(config, "workerinput")
        self.golden_tests = 0  # m: collected tests using `golden`
        self.suites: set[str] = set()  # suites with a collected golden test
        self.deselected: set[tuple[str, str]] = set()  # (suite, case) deselected by -k / [tool.harness] models
        self.outcomes: list[Outcome] = []
        self.writes: list[dict[str, Any]] = []
        self._run_env: RunEnv | None = None
        self._worker_envs: list[dict[str, Any]] = []
        if self.requested_baseline and not self.is_worker:
            try:
                self.store.require_env(self.requested_baseline, "--baseline", current=self.run_env.key)
            except UnknownEnvError as exc:
                raise pytest.UsageError(str(exc)) from exc

    @property
    def run_env(self) -> RunEnv:
        if self._run_env is None:
            try:
                fp = fingerprint(dtype=self.dtype, attn_implementation=self.attn, device=self.device)
            except ValueError as exc:
                raise pytest.UsageError(f"harness environment: {exc}") from exc
            self._run_env = RunEnv(fp, env_key(fp), self.dtype, self.device, self.attn)
        return self._run_env

    @property
    def baseline_key(self) -> str:
        return self.requested_baseline or self.run_env.key

    def rules(self) -> Rules:
        return Rules(alpha=stats.per_test_alpha(self.settings.alpha, self.golden_tests),
                     thresholds=self.settings.thresholds, env=self.run_env.fingerprint, strict=self.strict,
                     regen=self.force_regen and self.baseline_key == self.run_env.key, baseline_key=self.baseline_key)

    # hooks ---------------------------------------------------------------------------------
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        golden = [item for item in session.items if "golden" in getattr(item, "fixturenames", ())]
        # --harness-case narrows what runs, not the run's alpha (m counts the tests it deselected)
        self.golden_tests = max(len(golden), faults.collected_golden_tests(self.config))
        self.suites |= {suite_name(item) for item in golden}

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """A deselected case (-k, [tool.harness] models) was not dropped: its record is not missing."""
        self.deselected |= {(suite_name(i), safe_name(case_id(i))) for i in items
                            if "golden" in getattr(i, "fixturenames", ())}

    def missing(self) -> list[Outcome]:
        """Every field of the baseline env's records, in the suites this run collected, that no test
        observed - a field a suite stopped checking, or a whole case dropped from a table."""
        observed: dict[tuple[str, str], set[str]] = {}
        for o in self.outcomes:
            if o.against == "baseline":
                observed.setdefault((o.suite, safe_name(o.case)), set()).add(o.field)
        rules, out = self.rules(), []
        for path in self.store.record_paths(self.baseline_key):
            key = (path.parent.name, path.stem)
            if path.parent.name not in self.suites or key in self.deselected:
                continue
            try:
                record = self.store.read_file(path)
            except RecordError:
                continue  # an unreadable record is reported where it is read (preflight / its test)
            out += missing_fields(record, observed.get(key, set()), rules)
        return out

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        golden: Golden | None = item.stash.get(GOLDEN_KEY, None)
        try:
            result = yield
        except pytest.skip.Exception:
            if golden is not None:
                golden.finish()  # checks made before a skip (e.g. a capability) are kept
            raise
        except BaseException:
            if golden is not None:
                golden.finish(write=False)  # a test that broke leaves its record untouched
            raise
        if golden is not None:
            message = golden.finish()
            if message:
                pytest.fail(message, pytrace=False)
        return result

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:
            payload = {"outcomes": [o.to_json() for o in self.outcomes], "writes": self.writes,
                       "golden_tests": self.golden_tests, "suites": sorted(self.suites),
                       "deselected": sorted(self.deselected),
                       "env": self._run_env.fingerprint if self._run_env else None}
            self.config.workeroutput[WORKER_KEY] = json.dumps(payload)  # type: ignore[attr-defined]
            return
        if not self.outcomes and not self.golden_tests:
            return  # no golden checks in this run: leave any previous results.json alone
        self.outcomes += self.missing()
        if self.strict and any(o.status is Status.REGRESSION for o in self.outcomes) and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # e.g. a missing record under --strict
        try:
            atomic_write_json(self.results_path, self.results().to_json())
        except OSError as exc:
            sys.stderr.write(f"harness: cannot write {self.results_path}: {exc}\n")

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        raw = getattr(node, "workeroutput", {}).get(WORKER_KEY)
        if not raw:
            return
        payload = json.loads(raw)
        self.outcomes.extend(Outcome.from_json(o) for o in payload["outcomes"])
        self.writes.extend(payload["writes"])
        self.golden_tests = max(self.golden_tests, int(payload["golden_tests"]))
        self.suites |= set(payload["suites"])
        self.deselected |= {(suite, case) for suite, case in payload["deselected"]}
        if payload.get("env"):
            self._worker_envs.append(payload["env"])

    def _env(self) -> dict[str, Any]:
        return self._worker_envs[0] if self._worker_envs else self.run_env.fingerprint

    def results(self) -> Results:
        env = self._env()
        key = env_key(env)
        baseline_key = self.requested_baseline or key
        baseline_env = env if baseline_key == key else self.store.env_of(baseline_key)
        meta = {
            "alpha": self.settings.alpha,
            "alpha_per_test": stats.per_test_alpha(self.settings.alpha, self.golden_tests),
            "golden_tests": self.golden_tests,
            "multiple_testing": "Bonferroni across tests (alpha/m), Holm within a test",
            "argv": [relative_to(self.settings.rootdir, arg) for arg in self.config.invocation_params.args],
            "duration_s": round(time.time() - self.start, 3),
            "env_key": key,
            "baseline_key": baseline_key,
            "force_regen": self.force_regen,
            "strict": self.strict,
            "golden_dir": relative_to(self.settings.rootdir, self.store.root),
            "writes": merged_writes(self.writes),
        }
        users = self.user_model_names()
        if users:
            meta["user_models"] = users  # the report groups outcomes by model

        injected = self.config.pluginmanager.get_plugin(faults.PLUGIN_NAME)
        if injected is not None and injected.fault is not None:
            meta["injected_fault"] = faults.describe(injected.fault)
        ordered = sorted(self.outcomes, key=lambda o: (o.suite, o.case, o.field, o.against))
        return Results(env=env, baseline_env=baseline_env, outcomes=ordered, meta=meta)

    def user_model_names(self) -> list[str]:
        """Names of the run's own checkpoints (--harness-model, else [tool.harness.models.NAME])."""
        from harness.settings.models import from_flags

        flag = self.config.getoption("harness_model", None)
        return [from_flags(flag).name] if flag else [m.name for m in self.settings.user_models]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker or (not self.outcomes and not self.golden_tests):
            return
        categories: dict[str, int] = {}
        for outcome in self.outcomes:
            if outcome.category:
                categories[outcome.category.value] = categories.get(outcome.category.value, 0) + 1
        tr = terminalreporter
        tr.write_sep("-", "harness golden records")
        line = ", ".join(f"{n} {s}" for s, n in count_statuses(self.outcomes).items())
        if categories:
            line += " (" + ", ".join(f"{c}: {n}" for c, n in sorted(categories.items())) + ")"
        tr.write_line(line)
        written = [w for w in merged_writes(self.writes) if w["fields"] or w["replaced_unreadable"]]
        if written:
            verb = "force-regen rewrote" if self.force_regen else "wrote"
            tr.write_line(f"{verb} {sum(len(w['fields']) for w in written)} field(s) in {len(written)} record(s):")
            for w in written[:50]:
                fields = ", ".join(f"{name} ({change})" for name, change in sorted(w["fields"].items()))
                extra = " [replaced unreadable record]" if w.get("replaced_unreadable") else ""
                tr.write_line(f"  {w['path']}: {fields}{extra}")
            if len(written) > 50:
                tr.write_line(f"  ... and {len(written) - 50} more (see results.json meta.writes)")
        tr.write_line(f"env {env_key(self._env())}, baseline {self.requested_baseline or 'own records'}, "
                      f"results: {self.results_path}")


def merged_writes(writes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per record file (several tests may write fields of one record), sorted by path."""
    merged: dict[str, dict[str, Any]] = {}
    for write in writes:
        entry = merged.setdefault(write["path"], {"path": write["path"], "fields": {}, "replaced_unreadable": ""})
        entry["fields"].update(write["fields"])
        entry["replaced_unreadable"] = entry["replaced_unreadable"] or write.get("replaced_unreadable", "")
    return [merged[path] for path in sorted(merged)]


def _pytest_strict(config: pytest.Config) -> bool:
    try:
        return bool(config.getini("strict"))
    except (ValueError, KeyError):
        return False


# ----------------------------------------------------------------------------------------------
# fixtures

GOLDEN_KEY = pytest.StashKey[Golden]()

def case_id(item: pytest.Item) -> str:
    """``case.id`` of a ``case`` parameter, else the parametrize id, else the function name."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        case = callspec.params.get("case")
        if case is not None and getattr(case, "id", None) is not None:
            return str(case.id)
        return callspec.id
    return getattr(item, "originalname", None) or item.name


def suite_name(item: pytest.Item) -> str:
    """The test module's name without the ``test_`` prefix."""
    module = getattr(item, "module", None)
    name = module.__name__.rsplit(".", 1)[-1] if module is not None else Path(str(item.path)).stem
    return name.removeprefix("test_")


def _session(config: pytest.Config) -> HarnessSession:
    session = config.pluginmanager.get_plugin(PLUGIN_NAME)
    if session is None:  # pragma: no cover - pytest_configure always registers it
        raise RuntimeError("harness plugin is not configured")
    return session


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    """Golden-record checks for the current test's (suite, case); see the module docstring."""
    item = request.node
    checks = Golden(_session(request.config), suite_name(item), case_id(item), item.nodeid)
    item.stash[GOLDEN_KEY] = checks
    return checks


@pytest.fixture(scope="session")
def harness_env(request: pytest.FixtureRequest) -> RunEnv:
    """The run's environment: fingerprint, env key, dtype / device / attention to run cases in."""
    return _session(request.config).run_env


@pytest.fixture(scope="session")
def harness_config(request: pytest.FixtureRequest) -> HarnessConfig:
    """The project's `[tool.harness]` settings, as loaded once for this run."""
    return _session(request.config).settings


def settings_of(config: pytest.Config) -> HarnessConfig:
    """The run's settings, for hooks (conftest files) that have no fixtures."""
    return _session(config).settings


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("harness_deep", False):
        # read by the case tables at collection (harness/designs/sampling.py, latency.py); restored at the end
        config.stash[_DEEP_BEFORE] = os.environ.get(DEEP_ENV)
        os.environ[DEEP_ENV] = "1"
    config.pluginmanager.register(HarnessSession(config), PLUGIN_NAME)
    faults.configure(config)  # applies --inject-fault for the session (undone at unconfigure)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _DEEP_BEFORE in config.stash:
        before = config.stash[_DEEP_BEFORE]
        if before is None:
            os.environ.pop(DEEP_ENV, None)
        else:
            os.environ[DEEP_ENV] = before


_DEEP_BEFORE = pytest.StashKey[str | None]()
