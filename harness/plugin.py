"""pytest plugin (pytest11 entry point ``harness``): options, the `golden` fixture, results.json.

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

A suite uses the fixture like::

    def test_greedy(case, golden):
        ids, margins = run(case)
        golden.check("tokens", ids, kind="tokens", margins=margins)

The case id is ``case.id`` when the test has a parameter ``case`` with an ``id``, else the
parametrize id (the function name when not parametrized); the suite is the module name without
``test_``. Checks are soft: every field of the test is compared; at the end of the test body the
record is written (normal run: only fields the record lacks; --force-regen: every changed field)
and a `regression` fails the test with field, old vs new.

False alarms. The run's family-wise false-alarm rate is ``alpha`` ([tool.harness] alpha): each of
the m collected tests that use `golden` decides its statistical checks (rate, distribution,
latency) with Holm's procedure at level ``alpha / m`` (union bound over tests, Holm within one), so
P(any statistical regression in a run without a real change) <= alpha.

results.json (schema.Results): env, baseline_env, every outcome, meta (alpha, per-test alpha, m,
argv, duration, keys, records written). Under pytest-xdist each worker sends its outcomes to the
controller (``config.workeroutput`` -> ``pytest_testnodedown``); only the controller writes.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from harness import stats
from harness.compare import Comparison, Policy, compare_field, decide_with_holm
from harness.config import ConfigError, HarnessConfig, load_config
from harness.env import canonical_dtype, env_key, fingerprint, is_safe_key
from harness.golden import GoldenStore, Record, RecordError, WriteReport, atomic_write_json, normalize_field
from harness.schema import Field, Outcome, Results, Status

PLUGIN_NAME = "harness-session"
WORKER_KEY = "harness"


# ----------------------------------------------------------------------------------------------
# options


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


# ----------------------------------------------------------------------------------------------
# run-level state


@dataclass(frozen=True)
class RunEnv:
    """What the suites need to know about the run's numerics (the `harness_env` fixture)."""

    fingerprint: dict[str, Any]
    key: str
    dtype: str
    device: str
    attn_implementation: str

    @property
    def torch_dtype(self) -> Any:
        import torch

        return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp64": torch.float64}[self.dtype]


class HarnessSession:
    """One pytest run (or one xdist worker's share of it)."""

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
        self.strict = bool(config.getoption("harness_strict")) or _pytest_strict(config)
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
        self.outcomes: list[Outcome] = []
        self.writes: list[dict[str, Any]] = []
        self._run_env: RunEnv | None = None
        self._worker_envs: list[dict[str, Any]] = []
        if self.requested_baseline and not self.is_worker:
            self._check_baseline(self.requested_baseline)

    # environment ---------------------------------------------------------------------------
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

    @property
    def regen_in_place(self) -> bool:
        """--force-regen against the current env's own records: differences are the regen."""
        return self.force_regen and self.baseline_key == self.run_env.key

    def _check_baseline(self, key: str) -> None:
        if not is_safe_key(key):
            raise pytest.UsageError(f"--baseline {key!r} is not an env key (letters, digits, '.', '_', '-')")
        known = self.store.env_keys()
        if key in known or key == self.run_env.key:
            return
        listing = ", ".join(known) if known else "none"
        raise pytest.UsageError(
            f"--baseline {key!r}: no golden records for this env key under {self.store.root}; available env keys: {listing}"
        )

    @property
    def test_alpha(self) -> float:
        """Each golden test's share of the run's family-wise alpha: alpha / m."""
        return stats.per_test_alpha(self.settings.alpha, self.golden_tests)

    # hooks ---------------------------------------------------------------------------------
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.golden_tests = sum(1 for item in session.items if "golden" in getattr(item, "fixturenames", ()))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        case: GoldenCase | None = item.stash.get(GOLDEN_KEY, None)
        try:
            result = yield
        except BaseException:
            if case is not None:
                case.finish()
            raise
        if case is not None:
            message = case.finish()
            if message:
                pytest.fail(message, pytrace=False)
        return result

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.is_worker:
            payload = {
                "outcomes": [o.to_json() for o in self.outcomes],
                "writes": self.writes,
                "golden_tests": self.golden_tests,
                "env": self._run_env.fingerprint if self._run_env else None,
            }
            self.config.workeroutput[WORKER_KEY] = json.dumps(payload)  # type: ignore[attr-defined]
            return
        if not self.outcomes and not self.golden_tests:
            return  # no golden checks in this run: leave any previous results.json alone
        results = self.results()
        try:
            atomic_write_json(self.results_path, results.to_json())
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
        if payload.get("env"):
            self._worker_envs.append(payload["env"])

    def results(self) -> Results:
        env = self._worker_envs[0] if self._worker_envs else self.run_env.fingerprint
        key = env_key(env)
        baseline_key = self.requested_baseline or key
        baseline_env = env if baseline_key == key else self.store.env_of(baseline_key)
        ordered = sorted(self.outcomes, key=lambda o: (o.suite, o.case, o.field, o.against))
        meta = {
            "alpha": self.settings.alpha,
            "alpha_per_test": self.test_alpha,
            "golden_tests": self.golden_tests,
            "multiple_testing": "Bonferroni across tests (alpha/m), Holm within a test",
            "argv": list(self.config.invocation_params.args),
            "duration_s": round(time.time() - self.start, 3),
            "env_key": key,
            "baseline_key": baseline_key,
            "force_regen": self.force_regen,
            "strict": self.strict,
            "golden_dir": str(self.store.root),
            "writes": merged_writes(self.writes),
        }
        return Results(env=env, baseline_env=baseline_env, outcomes=ordered, meta=meta)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker or (not self.outcomes and not self.golden_tests):
            return
        counts = {s.value: 0 for s in Status}
        categories: dict[str, int] = {}
        for outcome in self.outcomes:
            counts[outcome.status.value] += 1
            if outcome.category:
                categories[outcome.category] = categories.get(outcome.category, 0) + 1
        tr = terminalreporter
        tr.write_sep("-", "harness golden records")
        line = ", ".join(f"{n} {s}" for s, n in counts.items())
        if categories:
            line += " (" + ", ".join(f"{c}: {n}" for c, n in sorted(categories.items())) + ")"
        tr.write_line(line)
        written = [w for w in merged_writes(self.writes) if w["fields"] or w["replaced_unreadable"]]
        if written:
            verb = "force-regen rewrote" if self.force_regen else "wrote"
            n_fields = sum(len(w["fields"]) for w in written)
            tr.write_line(f"{verb} {n_fields} field(s) in {len(written)} record(s):")
            for w in written[:50]:
                fields = ", ".join(f"{name} ({change})" for name, change in sorted(w["fields"].items()))
                extra = " [replaced unreadable record]" if w.get("replaced_unreadable") else ""
                tr.write_line(f"  {w['path']}: {fields}{extra}")
            if len(written) > 50:
                tr.write_line(f"  ... and {len(written) - 50} more (see results.json meta.writes)")
        tr.write_line(f"env {self.run_env.key if not self._worker_envs else env_key(self._worker_envs[0])}, "
                      f"baseline {self.requested_baseline or 'own records'}, results: {self.results_path}")


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
# one test's checks

GOLDEN_KEY = pytest.StashKey["GoldenCase"]()


@dataclass
class _Check:
    comparison: Comparison
    policy: Policy
    observed: Field
    baseline: Field | None
    against: str


class GoldenCase:
    """The `golden` fixture: checks of one test against the baseline record of (suite, case)."""

    def __init__(self, session: HarnessSession, suite: str, case: str, nodeid: str):
        self.session = session
        self.suite = suite
        self.case = case
        self.nodeid = nodeid
        self._checks: dict[str, _Check] = {}
        self._extra: list[Outcome] = []
        self._staged: dict[str, Field] = {}
        self._record: Record | None = None
        self._record_error: RecordError | None = None
        self._loaded = False
        self._finished = False

    # what a suite reads ----------------------------------------------------------------------
    @property
    def env(self) -> dict[str, Any]:
        return self.session.run_env.fingerprint

    @property
    def env_key(self) -> str:
        return self.session.run_env.key

    @property
    def dtype(self) -> str:
        return self.session.dtype

    # baseline ---------------------------------------------------------------------------------
    def _baseline_record(self) -> Record | None:
        if not self._loaded:
            self._loaded = True
            try:
                self._record = self.session.store.read(self.session.baseline_key, self.suite, self.case)
            except RecordError as exc:
                self._record_error = exc
        return self._record

    def _policy(self, baseline_env: dict[str, Any] | None, implementations_differ: bool = False) -> Policy:
        return Policy(
            alpha=self.session.test_alpha,
            thresholds=self.session.settings.thresholds,
            observed_env=self.env,
            baseline_env=baseline_env,
            implementations_differ=implementations_differ,
        )

    def _claim(self, name: str) -> None:
        if self._finished:
            raise RuntimeError(f"golden check {name!r} after the end of test {self.nodeid}")
        if name in self._checks or any(o.field == name for o in self._extra):
            raise ValueError(f"field {name!r} checked twice in {self.nodeid}; give each check its own name")

    # the API ----------------------------------------------------------------------------------
    def check(self, name: str, value: Any, kind: str = "exact", **extras: Any) -> Outcome:
        """Observe `value` as field `name` of this case and compare it with the baseline record.

        Returns the outcome as decided now; statistical kinds may still be relaxed by Holm's
        procedure at the end of the test (results.json holds the final word). Never raises on a
        difference: a regression fails the test when its body ends.
        """
        self._claim(name)
        observed = normalize_field(Field(kind=kind, value=value, extras=extras))
        record = self._baseline_record()
        baseline = record.fields.get(name) if record else None
        policy = self._policy(record.env if record else None)
        if self._record_error is not None:
            comparison = Comparison(name, kind, Status.REGRESSION, str(self._record_error), "unreadable-record",
                                    {"file": str(self._record_error.path), "reason": self._record_error.reason})
        else:
            comparison = compare_field(name, observed, baseline, policy)
        self._checks[name] = _Check(comparison, policy, observed, baseline, "baseline")
        self._staged[name] = observed
        return comparison.outcome(self.suite, self.case, "baseline")

    def reference(self, name: str, observed: Any, expected: Any, kind: str = "exact", *,
                  observed_extras: dict[str, Any] | None = None,
                  expected_extras: dict[str, Any] | None = None) -> Outcome:
        """Compare an observation with our reference engine's value (against="reference"); no
        golden record is read or written. The two sides are different implementations, so a
        near-tie may flip (tokens) and cross-numerics tolerances apply (tensor)."""
        self._claim(name)
        obs = normalize_field(Field(kind, observed, observed_extras or {}))
        exp = normalize_field(Field(kind, expected, expected_extras or {}))
        policy = self._policy(self.env, implementations_differ=True)
        comparison = compare_field(name, obs, exp, policy)
        self._checks[name] = _Check(comparison, policy, obs, exp, "reference")
        return comparison.outcome(self.suite, self.case, "reference")

    def outcome(self, name: str, status: Status | str, kind: str = "exact", detail: str = "", category: str = "",
                diff: dict[str, Any] | None = None, against: str = "reference") -> Outcome:
        """Record an outcome decided by the suite itself (e.g. an analytic check against the
        reference engine). A `regression` fails the test like any other."""
        self._claim(name)
        result = Outcome(self.suite, self.case, name, kind, Status(status), detail, category, dict(diff or {}), against)
        self._extra.append(result)
        return result

    # end of the test ----------------------------------------------------------------------------
    def _apply_holm(self) -> None:
        """Re-decide this test's statistical checks with Holm at the test's alpha."""
        checks = list(self._checks.values())
        decided = decide_with_holm([(c.comparison, c.observed, c.baseline, c.policy) for c in checks],
                                   self.session.test_alpha)
        for check, comparison in zip(checks, decided, strict=True):
            check.comparison = comparison

    def _write(self) -> WriteReport | None:
        session = self.session
        if not self._staged or session.strict:
            return None
        if self._record_error is not None and session.baseline_key == session.run_env.key and not session.force_regen:
            return None  # never overwrite a record we could not read, unless regenerating it
        return session.store.update(
            session.run_env.key, self.suite, self.case, self.env, self._staged,
            overwrite=session.force_regen, replace_unreadable=session.force_regen,
        )

    def _final_outcomes(self) -> list[Outcome]:
        session = self.session
        outcomes = []
        for check in self._checks.values():
            c = check.comparison
            outcome = c.outcome(self.suite, self.case, check.against)
            if check.against == "baseline":
                if session.regen_in_place and c.status in (Status.REGRESSION, Status.CHANGED):
                    outcome = replace(outcome, status=Status.CHANGED, category="regenerated",
                                      detail=f"record rewritten (--force-regen); was {c.status.value}: {c.detail}",
                                      diff={**c.diff, "was_status": c.status.value, "was_category": c.category})
                elif session.strict and c.status is Status.NEW:
                    outcome = replace(outcome, status=Status.REGRESSION, category="missing-record",
                                      detail=f"no golden record in {session.baseline_key} (--strict: missing records fail)")
            outcomes.append(outcome)
        return outcomes + self._extra

    def finish(self) -> str:
        """Holm, write the record, hand the outcomes to the session; return the failure message
        ("" when nothing regressed)."""
        if self._finished:
            return ""
        self._finished = True
        self._apply_holm()
        problems: list[str] = []
        try:
            report = self._write()
        except RecordError as exc:
            report = None
            self._extra.append(Outcome(self.suite, self.case, "<record>", "exact", Status.REGRESSION, str(exc),
                                       "unreadable-record", {"file": str(exc.path)}, "baseline"))
        except OSError as exc:
            report = None
            problems.append(f"cannot write golden record for {self.suite}/{self.case}: {exc}")
        if report is not None and (report.written or report.replaced_unreadable):
            try:
                path = str(report.path.relative_to(self.session.store.root))
            except ValueError:
                path = str(report.path)
            self.session.writes.append({
                "path": path,
                "fields": {c.field: c.change for c in report.changes if c.change != "unchanged"},
                "replaced_unreadable": report.replaced_unreadable,
            })
        outcomes = self._final_outcomes()
        self.session.outcomes.extend(outcomes)
        failed = [o for o in outcomes if o.status is Status.REGRESSION]
        if failed:
            problems.append(f"golden regression in {self.suite}/{self.case} (baseline {self.session.baseline_key}):")
            problems.extend(f"  {o.field} [{o.kind}, {o.against}]: {o.detail}" for o in failed)
        return "\n".join(problems)


# ----------------------------------------------------------------------------------------------
# fixtures and registration


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
def golden(request: pytest.FixtureRequest) -> GoldenCase:
    """Golden-record checks for the current test's (suite, case); see the module docstring."""
    item = request.node
    case = GoldenCase(_session(request.config), suite_name(item), case_id(item), item.nodeid)
    item.stash[GOLDEN_KEY] = case
    return case


@pytest.fixture(scope="session")
def harness_env(request: pytest.FixtureRequest) -> RunEnv:
    """The run's environment: fingerprint, env key, dtype / device / attention to run cases in."""
    return _session(request.config).run_env


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(HarnessSession(config), PLUGIN_NAME)
