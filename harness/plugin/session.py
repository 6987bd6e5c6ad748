"""One pytest run of the harness (or one xdist worker's share of it): its settings, store and env,
the outcomes its tests produced, the records it wrote, and the hooks that tie them to pytest.

- `pytest_configure` makes the run's `RunSettings` once (harness/settings/run.py), validates them,
  pins torch's threads, applies ``--inject-fault`` and registers the `HarnessSession`;
- at collection: the case tables are parametrized (`selection.parametrize_cases`), the model and
  case filters applied, m (golden tests, for alpha / m) counted, and every fixture checkpoint the
  run will load is checked against its manifest sha256 (a missing or corrupt one is a usage
  error, never a skip);
- each test's `Golden` is finished after its body (`pytest_runtest_call`): decided, written, a
  regression failing the test;
- at the end the controller adds the baseline fields nobody observed (`missing`) and writes
  results.json (schema.Results). Under pytest-xdist each worker sends its outcomes to the
  controller (``config.workeroutput`` -> ``pytest_testnodedown``); only the controller writes.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import pytest

from harness import cases, faults
from harness.checking import stats
from harness.checking.causes import crashed_cases
from harness.checking.core import Rules, missing_fields
from harness.checking.humane import relative_to
from harness.plugin.golden import Golden
from harness.plugin.options import TERMINAL_SUMMARY, check_front, check_paths, no_test_run
from harness.plugin.selection import (
    case_id,
    is_golden,
    parametrize_cases,
    select,
    split_phase,
    suite_name,
    tier_left_out,
)
from harness.report.writes import writes_lines
from harness.schema import (
    Category,
    MissingExtra,
    NotSupported,
    Outcome,
    RecordError,
    Results,
    Status,
    count_statuses,
)
from harness.settings import real
from harness.settings.config import ConfigError, load_config
from harness.settings.run import FRONT_INI, RunSettings, SettingsError
from harness.store.baseline import Chosen, nearest_recorded
from harness.store.env import env_key, fingerprint, isa_cap_problem
from harness.store.records import GoldenStore, UnknownEnvError, atomic_write_json, safe_name

PLUGIN_NAME = "harness-session"
WORKER_KEY = "harness"
SETTINGS = pytest.StashKey[RunSettings]()
GOLDEN_KEY = pytest.StashKey[Golden]()
AUTO_BASELINE = "harness_upgrade_baseline"  # the controller's `HarnessSession.chosen`, handed to each xdist worker


UNSUPPORTED_FIELD = "<supported>"  # the field a NotSupported case's skip is reported under


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

    def __init__(self, config: pytest.Config, settings: RunSettings):
        self.config, self.settings = config, settings
        self.start = time.time()
        self.store = GoldenStore(settings.golden_dir)
        self.is_worker = hasattr(config, "workerinput")
        self.golden_tests = 0  # m: golden tests of the run (before --harness-case narrowed it)
        self.suites: set[str] = set()  # suites with a collected golden test
        self.deselected: set[tuple[str, str]] = set()  # (suite, case) not run on purpose: not `missing`
        self.not_observable: set[str] = set()  # "suite/case" skipped for an optional extra (MissingExtra): regen keeps it
        self.not_run: set[str] = set()  # "suite/case" of a test skipped or xfailed before it finished: regen keeps it
        self.timing_left = 0  # the timing tests the parallel phase left to the timing phase (PhaseFilter)
        self.tier_line = ""  # what the quick tier of the zoo did not run (harness/cases/tier.py)
        self.streamed: dict[str, dict[str, Any]] = {}  # nodeid -> a finished worker test's outcomes and writes
        self.interrupted = ""  # the run was stopped (SIGINT): its results are partial
        self.keyboard_interrupt = False
        self._since = (0, 0)  # (outcomes, writes) when the running test started
        self.outcomes: list[Outcome] = []
        self.writes: list[dict[str, Any]] = []
        self.broken: list[str] = []  # tests that failed other than by their golden verdict
        self.regressed: set[str] = set()  # tests failed by their golden verdict (a finding, not a break)
        self.collection_errors: list[str] = []  # modules that did not import: their suites checked nothing
        self.write_errors: list[str] = []  # records that could not be written
        self._run_env: RunEnv | None = None
        self._worker_envs: list[dict[str, Any]] = []
        self.chosen: Chosen | None = self.upgrade_baseline()  # no --baseline and no records of its own
        if settings.baseline and not self.is_worker:
            try:
                self.store.require_env(settings.baseline, "--baseline", current=self.run_env.key)
            except UnknownEnvError as exc:
                raise pytest.UsageError(str(exc)) from exc

    @property
    def run_env(self) -> RunEnv:
        if self._run_env is None:
            s = self.settings
            try:
                fp = fingerprint(dtype=s.dtype, attn_implementation=s.attn, device=s.device, threads=s.threads)
            except ValueError as exc:
                raise pytest.UsageError(f"harness environment: {exc}") from exc
            if isa_cap_problem(fp):
                raise pytest.UsageError(f"harness environment: {isa_cap_problem(fp)}")
            self._run_env = RunEnv(fp, env_key(fp), s.dtype, s.device, s.attn)
        return self._run_env

    @property
    def real_model_off(self) -> bool:
        """The harness's real model is not part of this run (harness/settings/real.py): its records are
        neither this run's to miss nor regen's to remove."""
        return not any(m.shipped for m in self.settings.user_models)

    def store_problem(self) -> str:
        """Why the store cannot be used ('' when it can): a golden_dir that does not exist is a typo
        or a wrong checkout, never an empty store to start writing."""
        if self.store.root.is_dir():
            return ""
        return (f"golden_dir {self.store.root} does not exist (--golden-dir, else [tool.harness] golden_dir in "
                f"{self.settings.config.rootdir / 'pyproject.toml'}); fix the path, or create the directory to "
                "start a new store")

    def upgrade_baseline(self) -> Chosen | None:
        """The env this run compares with when no baseline is named and this env has no records of
        its own: the nearest recorded env of the same device and dtype (harness/store/baseline.py) -
        the rerun after an upgrade compares with what you had, never with itself. An xdist worker
        takes the controller's choice (`pytest_configure_node`), so no worker decides after another
        one wrote."""
        s = self.settings
        if s.baseline or s.regen:
            return None
        if self.is_worker:
            given = self.config.workerinput.get(AUTO_BASELINE)  # type: ignore[attr-defined]
            if given is not None:
                return Chosen(*given) if given else None
        if not self.store.root.is_dir() or self.store.record_paths(self.run_env.key):
            return None
        return nearest_recorded(self.run_env.key, self.store.env_keys())

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[AUTO_BASELINE] = [self.chosen.key, self.chosen.why] if self.chosen else []

    @property
    def baseline_key(self) -> str:
        return self.settings.baseline or (self.chosen.key if self.chosen else "") or self.run_env.key

    @property
    def force_regen(self) -> bool:
        return self.settings.regen

    @property
    def strict(self) -> bool:
        return self.settings.strict

    @property
    def read_only(self) -> bool:
        """No record is written: a strict or deep run (`RunSettings.read_only`), or a run against
        another environment's baseline unless asked (--record, or a regen)."""
        return self.settings.read_only or bool(self.write_rule()[1])

    def write_rule(self) -> tuple[str, str]:
        """(what this run does to this env's records, why nothing - "" when it may write)."""
        s = self.settings
        if s.regen:
            return "regen: this env's records are rewritten", ""
        if s.fault:
            return "not written", f"a run with a fault injected ({s.fault}) never writes records"
        if s.strict:
            return "not written", "a strict run only reads; CI runs are strict"
        if s.deep:
            return "not written", "a deep run never writes records"
        if self.chosen is not None and not s.record:
            return "not written", (f"this env has no records of its own and was compared with {self.chosen.key} "
                                   f"({self.chosen.why}); `harness check` records it when that comparison holds "
                                   "nothing to decide, `harness regen` once you have reviewed the findings "
                                   "(pytest: --record)")
        if self.baseline_key != self.run_env.key and not s.record:
            return "not written", (f"the baseline is another environment's ({self.baseline_key}); "
                                   "pass --record to also record this one")
        return "fields without a record are written; existing fields are never rewritten (use regen)", ""

    def rules(self) -> Rules:
        return Rules(alpha=stats.per_test_alpha(self.settings.config.alpha, self.golden_tests),
                     thresholds=self.settings.config.thresholds, env=self.run_env.fingerprint, strict=self.strict,
                     regen=self.force_regen and self.baseline_key == self.run_env.key, baseline_key=self.baseline_key,
                     latency_strict=self.settings.latency_strict)

    # collection ----------------------------------------------------------------------------
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        parametrize_cases(metafunc, self.settings)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        problem = self.store_problem()
        if problem and not self.is_worker and any(is_golden(item) for item in items):
            raise pytest.UsageError(problem)  # (an xdist worker's golden tests fail with it: harness/plugin/fixtures.py)
        if any("zoo" in getattr(item, "fixturenames", ()) for item in items):
            from harness.zoo.load import FixtureError, check_models

            try:  # fail closed: a missing or corrupt checkpoint stops the run, it never skips a case
                check_models(self.settings.config.models_dir, self.settings.config.models)
            except FixtureError as exc:
                raise pytest.UsageError(f"missing or corrupt fixture: {exc}") from exc
        explicit = bool(config.option.keyword or any("::" in str(a) for a in config.args))  # pytest -k, a node id
        self.tier_line = tier_left_out(items, self.settings, explicit)
        keep, drop, self.golden_tests = select(items, self.settings, explicit)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        golden = [item for item in session.items if is_golden(item)]
        self.golden_tests = max(self.golden_tests, len(golden))  # -k / -m narrow m too; ours do not
        self.suites |= {suite_name(item) for item in golden}

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """A deselected case (-k, the model filter, --harness-case) was not dropped: its record is not missing."""
        self.deselected |= {(suite_name(i), safe_name(case_id(i))) for i in items if is_golden(i)}

    # running -------------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        golden: Golden | None = item.stash.get(GOLDEN_KEY, None)
        try:
            result = yield
        except pytest.skip.Exception as exc:
            # checks made before a skip (e.g. a capability) are kept; one of them regressed (a case
            # stopped after a regression): the test fails, never SKIPPED
            message = golden.finish() if golden is not None else ""
            if message:
                if not golden.write_failed:
                    self.regressed.add(item.nodeid)
                pytest.fail(f"{message}\n  (the case then stopped: {exc.msg})", pytrace=False)
            raise
        except NotSupported as exc:  # this version has no such family: a per-version fact, not a break
            if golden is not None:
                if isinstance(exc, MissingExtra):
                    golden.not_observable()
                golden.outcome(UNSUPPORTED_FIELD, Status.SKIPPED, detail=str(exc), category=Category.UNSUPPORTED,
                               against="baseline")
                # a case this env cannot observe writes nothing (a model of yours had its checkpoint field
                # observed first: a record of that alone, made anew by every run without the extra)
                golden.finish(write=not isinstance(exc, MissingExtra))
                if isinstance(exc, MissingExtra):  # its records were made with the extra: not observable here
                    self.deselected.add((golden.suite, safe_name(golden.case)))
                    self.not_observable.add(f"{golden.suite}/{safe_name(golden.case)}")
            raise pytest.skip.Exception(str(exc), _use_item_location=True) from None
        except BaseException:
            if golden is not None:
                golden.finish(write=False)  # a test that broke leaves its record untouched
            raise
        if golden is not None:
            message = golden.finish()
            if message and not golden.write_failed:
                self.regressed.add(item.nodeid)  # failed by its golden verdict: a finding
            if message:
                pytest.fail(message, pytrace=False)
        return result

    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        # Ctrl-C / SIGINT: the run reports only what finished (not pytest's own Session.Interrupted, a
        # KeyboardInterrupt it raises to stop on collection errors or -x)
        self.keyboard_interrupt = not isinstance(excinfo.value, pytest.Session.Interrupted)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self._since = (len(self.outcomes), len(self.writes))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        """A golden test, once torn down, is finished: what it decided is kept by test (a worker sends
        it with its last report, an attribute pytest-xdist carries to the controller), so a run
        stopped before the workers' end-of-session payloads - or in the middle of a serial run's
        test - reports exactly the finished tests (`pytest_sessionfinish`)."""
        report = yield
        if is_golden(item) and report.skipped and (call.when == "setup" or hasattr(report, "wasxfail")):
            # skip / skipif / xfail(run=False) at setup, an xfail test that raised: its record was not
            # (re)written - it stays as recorded, never removed by regen (a NotSupported skip finished: not here)
            self.not_run.add(f"{suite_name(item)}/{safe_name(case_id(item))}")
        if call.when == "teardown" and is_golden(item):
            first, writes = self._since
            got = {"outcomes": [o.to_json() for o in self.outcomes[first:]], "writes": self.writes[writes:]}
            if self.is_worker:
                report.harness_stream = json.dumps(got)
            else:  # a serial run: the same record of what finished (a test stopped mid-way never tears down)
                self.streamed[item.nodeid] = got
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A test that failed other than by its golden verdict - its body raised, a fixture broke,
        an assert of a plain test - is broken: its observations are incomplete (xfail is not a failure)."""
        if getattr(report, "node", None) is not None:
            stream = getattr(report, "harness_stream", None)
            if stream:  # a finished test's outcomes, as its worker streamed them (used if the run is stopped)
                self.streamed[report.nodeid] = json.loads(stream)
            return  # under pytest-xdist the worker that ran the test knows why it failed (its payload)
        if report.failed and (report.when != "call" or report.nodeid not in self.regressed):
            self.broken.append(report.nodeid)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A module that did not import (kept going with --continue-on-collection-errors): the run
        checked less than it claims, and that suite's records are `missing`."""
        if report.failed:
            text = str(report.longrepr).strip().splitlines()
            self.collection_errors.append(f"{report.nodeid}: {text[-1] if text else 'collection error'}"[:300])

    # the end -------------------------------------------------------------------------------
    def suites_in_scope(self, recorded: set[str]) -> set[str]:
        """The suites this run was asked to check: those it collected, and every recorded suite whose
        module lies under a directory the run collects (unless --ignore'd) or is a file it names -
        a suite whose module was deleted, or did not import, is in scope and was not observed."""
        scope = set(self.suites)
        base = self.config.invocation_params.dir
        ignored = [(base / p).resolve() for p in (self.config.getoption("ignore", None) or [])]
        globs = list(self.config.getoption("ignore_glob", None) or [])
        roots = [(base / str(arg).split("::")[0]).resolve() for arg in self.config.args]

        def excluded(module: str) -> bool:
            return any(p.name == module or (p.is_dir() and any(p.rglob(module))) for p in ignored) or any(
                fnmatch.fnmatch(module, g) or fnmatch.fnmatch(str(q), g)
                for root in roots if root.is_dir() for q in root.rglob(module) for g in globs)

        for suite in recorded - scope:
            module = f"test_{suite}.py"
            if any(root.name == module or root.is_dir() for root in roots) and not excluded(module):
                scope.add(suite)
        return scope

    def missing(self) -> list[Outcome]:
        """Every field of the baseline env's records, in the suites this run was asked to check
        (`suites_in_scope`), that no test observed - a field a suite stopped checking, a whole case
        dropped from a table, a suite module deleted or failing to import."""
        observed: dict[tuple[str, str], set[str]] = {}
        for o in self.outcomes:
            if o.against == "baseline":
                observed.setdefault((o.suite, safe_name(o.case)), set()).add(o.field)
        rules, out = self.rules(), []
        crashed = crashed_cases(self.outcomes)
        paths = self.store.record_paths(self.baseline_key)
        scope = self.suites_in_scope({path.parent.name for path in paths})
        for path in paths:
            key = (path.parent.name, path.stem)
            if path.parent.name not in scope or key in self.deselected or (self.real_model_off and real.owns(path.stem)):
                continue  # (the real model's records, where it is not part of the run: not this run's to miss)
            try:
                record = self.store.read_file(path)
            except RecordError:
                continue  # an unreadable record is reported where it is read (preflight / its test)
            out += missing_fields(record, observed.get(key, set()), rules, crashed.get((record.suite, record.case), ""),
                                  not_run=f"{key[0]}/{key[1]}" in self.not_run)
        return out

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:
            payload = {"outcomes": [o.to_json() for o in self.outcomes], "writes": self.writes, "broken": self.broken,
                       "collection_errors": self.collection_errors, "write_errors": self.write_errors,
                       "golden_tests": self.golden_tests, "suites": sorted(self.suites),
                       "deselected": sorted(self.deselected), "not_observable": sorted(self.not_observable),
                       "not_run": sorted(self.not_run),
                       "tier_line": self.tier_line, "timing_left": self.timing_left,
                       "env": self._run_env.fingerprint if self._run_env else None}
            self.config.workeroutput[WORKER_KEY] = json.dumps(payload)  # type: ignore[attr-defined]
            return
        interrupted = self.keyboard_interrupt  # (exit status 2 also means a collection error: not this)
        if interrupted:  # stopped: only the finished tests' outcomes, as they were kept by test
            self.outcomes = [Outcome.from_json(o) for got in self.streamed.values() for o in got["outcomes"]]
            self.writes = [w for got in self.streamed.values() for w in got["writes"]]
        if not self.outcomes and not self.golden_tests and not self.collection_errors:
            return  # no golden checks in this run: leave any previous results.json alone
        if no_test_run(self.config):
            return  # nothing ran on purpose (--collect-only, --setup-only ...): nothing to report
        if interrupted:
            if not self.outcomes:
                return  # stopped before any test finished: nothing to report
            done = len(self.streamed)
            self.interrupted = (f"stopped by an interrupt after {done} finished test{'s' if done != 1 else ''}: "
                                "the results are partial (what did not run is neither checked nor missing)")
        else:
            self.outcomes += self.missing()
        if self.strict and any(o.status is Status.REGRESSION for o in self.outcomes) and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # e.g. a missing record under --strict
        try:
            atomic_write_json(self.settings.results, self.results().to_json())
        except OSError as exc:  # a run whose results are lost did not check anything anyone can see
            sys.stderr.write(f"harness: error: cannot write {self.settings.results}: {exc.strerror or exc}\n")
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        raw = getattr(node, "workeroutput", {}).get(WORKER_KEY)
        if not raw:
            return
        payload = json.loads(raw)
        self.outcomes.extend(Outcome.from_json(o) for o in payload["outcomes"])
        self.writes.extend(payload["writes"])
        self.broken.extend(payload.get("broken", []))
        self.collection_errors.extend(payload.get("collection_errors", []))
        self.write_errors.extend(payload.get("write_errors", []))
        self.golden_tests = max(self.golden_tests, int(payload["golden_tests"]))
        self.suites |= set(payload["suites"])
        self.deselected |= {(suite, case) for suite, case in payload["deselected"]}
        self.not_observable |= set(payload.get("not_observable", []))
        self.not_run |= set(payload.get("not_run", []))
        self.tier_line = self.tier_line or payload.get("tier_line", "")
        self.timing_left = max(self.timing_left, int(payload.get("timing_left", 0)))
        if payload.get("env"):
            self._worker_envs.append(payload["env"])

    def _env(self) -> dict[str, Any]:
        return self._worker_envs[0] if self._worker_envs else self.run_env.fingerprint

    def results(self) -> Results:
        env = self._env()
        key = env_key(env)
        baseline_key = self.settings.baseline or (self.chosen.key if self.chosen else "") or key
        baseline_env = env if baseline_key == key else self.store.env_of(baseline_key)
        root = self.settings.config.rootdir
        meta = {
            "alpha": self.settings.config.alpha,
            "alpha_per_test": stats.per_test_alpha(self.settings.config.alpha, self.golden_tests),
            "golden_tests": self.golden_tests,
            "multiple_testing": "Bonferroni across tests (alpha/m, m rounded up to a power of two), Holm within a test",
            "argv": [relative_to(root, arg) for arg in self.config.invocation_params.args],
            "duration_s": round(time.time() - self.start, 3),
            "env_key": key,
            "baseline_key": baseline_key,
            "interpreter": sys.executable,  # the env's python: `harness matrix --pair-seconds` pairs cells by it
            "force_regen": self.force_regen,
            "strict": self.strict,
            "golden_dir": relative_to(root, self.store.root),
            "writes": merged_writes(self.writes),
            "write_rule": " - ".join(part for part in self.write_rule() if part),
            "broken_tests": sorted(set(self.broken)),  # failed other than by a golden verdict: incomplete
        }
        if self.chosen is not None:  # no baseline named, no records of its own: the env recorded before
            meta["upgrade_baseline"] = {"key": self.chosen.key, "why": self.chosen.why}
        if self.interrupted:
            meta["interrupted"] = self.interrupted
        if self.collection_errors:
            meta["collection_errors"] = sorted(set(self.collection_errors))
        if self.write_errors:
            meta["write_errors"] = sorted(set(self.write_errors))
        if self.not_observable:  # skipped for an optional extra not installed: neither missing nor removed by regen
            meta["not_observable"] = sorted(self.not_observable)
        if self.settings.phase == "parallel":  # `harness check` starts the timing phase only if some are left
            meta["timing_left"] = self.timing_left
        if self.not_run:  # skipped / xfailed before finishing: regen keeps their records
            meta["not_run"] = sorted(self.not_run)
        left = [self.tier_line] if self.tier_line else []  # what the quick tier did not run (harness/cases/tier.py)
        if self.real_model_off:  # regen keeps the real model's records
            meta["real_model_off"] = True
        if self.settings.user_models:
            meta["user_models"] = [m.name for m in self.settings.user_models]  # the report groups by model
            meta["shipped_models"] = [m.name for m in self.settings.user_models if m.shipped]  # the harness's own
            left += cases.left_out(self.settings)  # what the budget plan did not run, and why (harness/settings/budget.py)
        if left:
            meta["left_out"] = left
        injected = faults.injected(self.config)
        if injected is not None:
            meta["injected_fault"] = faults.describe(injected)
        ordered = sorted(self.outcomes, key=lambda o: (o.suite, o.case, o.field, o.against))
        return Results(env=env, baseline_env=baseline_env, outcomes=ordered, meta=meta)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker or (not self.outcomes and not self.golden_tests) or no_test_run(self.config):
            return
        if not self.config.getini(TERMINAL_SUMMARY):
            return  # `harness check` prints the summary itself
        categories: dict[str, int] = {}
        for outcome in self.outcomes:
            if outcome.category:
                categories[outcome.category.value] = categories.get(outcome.category.value, 0) + 1
        tr = terminalreporter
        tr.write_sep("-", "harness golden records")
        line = "fields: " + ", ".join(f"{n} {s}" for s, n in count_statuses(self.outcomes).items())
        if categories:
            line += " (" + ", ".join(f"{c}: {n}" for c, n in sorted(categories.items())) + ")"
        tr.write_line(line)
        meta = {"writes": merged_writes(self.writes), "write_rule": " - ".join(p for p in self.write_rule() if p),
                "golden_dir": str(self.store.root), "force_regen": self.force_regen}
        for text in writes_lines(meta, limit=50):
            tr.write_line(text)
        baseline = (self.settings.baseline or (f"{self.chosen.key} ({self.chosen.why})" if self.chosen else "")
                    or "own records")
        tr.write_line(f"env {env_key(self._env())}, baseline {baseline}, results: {self.settings.results}")


def merged_writes(writes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per record file (several tests may write fields of one record), sorted by path."""
    merged: dict[str, dict[str, Any]] = {}
    for write in writes:
        entry = merged.setdefault(write["path"], {"path": write["path"], "fields": {}, "replaced_unreadable": ""})
        entry["fields"].update(write["fields"])
        entry["replaced_unreadable"] = entry["replaced_unreadable"] or write.get("replaced_unreadable", "")
    return [merged[path] for path in sorted(merged)]


def run_settings(config: pytest.Config) -> RunSettings:
    """The run's settings as the plugin made them at configure (hooks and fixtures read this)."""
    return config.stash[SETTINGS]


def _front(config: pytest.Config) -> str:
    try:
        return str(config.getini(FRONT_INI) or "")
    except (ValueError, KeyError):
        return ""


def session_of(config: pytest.Config) -> HarnessSession:
    session = config.pluginmanager.get_plugin(PLUGIN_NAME)
    if session is None:  # pragma: no cover - pytest_configure always registers it
        raise RuntimeError("harness plugin is not configured")
    return session


class PhaseFilter:
    """The phase filter, applied after every other selection - pytest's -k and -m too, whose hook
    runs between the session's and this one: the parallel phase counts the timing tests it leaves
    to the timing phase (`HarnessSession.timing_left`, in results.json's meta), so `harness check`
    starts no timing session when none is left (a pytest start, ~3-6 s)."""

    def __init__(self, session: HarnessSession) -> None:
        self.session = session

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        keep, drop = split_phase(items, self.session.settings.phase)
        if self.session.settings.phase == "parallel":
            self.session.timing_left = len(drop)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cases(table): parametrize `case` over table(run settings) "
                                       "(harness/cases/; harness/plugin/selection.py)")
    config.addinivalue_line("markers", "timing: the test measures time; `harness check` runs it in a phase of its "
                                       "own, after the parallel one (harness/plugin/selection.py)")
    try:
        settings = RunSettings.from_pytest_config(config, load_config(config.rootpath)).validate(
            fetch=not hasattr(config, "workerinput"))  # a worker never fetches: its controller did, or could not
    except (ConfigError, SettingsError) as exc:
        raise pytest.UsageError(str(exc)) from exc
    check_front(config, settings.regen, ci=bool(os.environ.get("CI")))
    check_paths(config, settings)  # no --basetemp / cache_dir / report file on the store, the models, the reports
    config.stash[SETTINGS] = settings
    import torch

    torch.set_num_threads(settings.threads)
    session = HarnessSession(config, settings)
    config.pluginmanager.register(session, PLUGIN_NAME)
    config.pluginmanager.register(PhaseFilter(session), PLUGIN_NAME + "-phase")
    if not hasattr(config, "workerinput") and (_front(config) == "cli" or settings.user_models):
        # the controller (or a serial run) of `harness check` / `regen`, or of a run on your models, says how far it is
        from harness.plugin.progress import Progress

        config.pluginmanager.register(Progress(config, long_work=bool(settings.user_models)), "harness-progress")
    faults.configure(config, settings.fault)  # applies --inject-fault for the session (undone at unconfigure)
