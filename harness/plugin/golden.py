"""The `golden` fixture's object: one test's checks (a `checking.CaseCheck` against the baseline
record of its case) and the write of its record when the test ends. The plugin
(harness/plugin/) creates one per test and calls `finish()` after the test body.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import pytest

from harness.checking.core import CaseCheck, Rules
from harness.schema import (
    STATISTICAL_KINDS,
    Category,
    Field,
    Observation,
    Outcome,
    Record,
    RecordError,
    Status,
)
from harness.store.records import RecordLimitError

CHECKPOINT_FIELD = "checkpoint"  # your model's fingerprint, in every record of its cases


class Store(Protocol):
    root: Path

    def read(self, env_key: str, suite: str, case: str) -> Record | None: ...
    def update(self, env_key: str, suite: str, case: str, env: dict[str, Any], fields: dict[str, Field], *,
               overwrite: bool = False, replace_unreadable: bool = False) -> Any: ...


class Session(Protocol):
    """What a `Golden` needs of the run (harness/plugin/session.py `HarnessSession`)."""

    store: Store
    strict: bool
    read_only: bool
    force_regen: bool
    baseline_key: str
    run_env: Any
    writes: list[dict[str, Any]]
    write_errors: list[str]
    outcomes: list[Outcome]

    def rules(self) -> Rules: ...


class Golden:
    """The `golden` fixture: one test's checks (a `CaseCheck`), and the write of its record."""

    def __init__(self, session: Session, suite: str, case: str, nodeid: str):
        self.session, self.suite, self.case, self.nodeid = session, suite, case, nodeid
        self._check: CaseCheck | None = None
        self._finished = False
        self._dtype: str | None = None
        self._checkpoint: dict[str, str] | None = None
        self._witness: float | None = None
        self.write_failed = False  # its record could not be written (the run's verdict is then 'error')

    def numerics(self, dtype: str) -> None:
        """This case runs in another dtype than the run's (a user model's own `dtype`): its record's
        env and its comparisons (tolerances, tie epsilon) say so. Before the first check only."""
        if self._check is not None:
            raise RuntimeError(f"golden.numerics() after the first check of test {self.nodeid}")
        self._dtype = dtype

    def rounding(self, witness: float | None) -> None:
        """This case's model rounds in the run's low-precision dtype by `witness` (harness/engine/
        witness.py, measured on the engine): its low-precision allowances scale with it
        (`Thresholds.for_witness`). Before the first check only."""
        if self._check is not None:
            raise RuntimeError(f"golden.rounding() after the first check of test {self.nodeid}")
        self._witness = witness

    def checkpoint(self, fingerprint: dict[str, str]) -> None:
        """This case runs a checkpoint of yours: its fingerprint (harness/zoo/checkpoint.py) is
        observed as the field `checkpoint` before anything else, so a changed checkpoint is the
        first thing its record comparison says. Before the first check only."""
        if self._check is not None:
            raise RuntimeError(f"golden.checkpoint() after the first check of test {self.nodeid}")
        self._checkpoint = dict(fingerprint)

    @property
    def env(self) -> dict[str, Any]:
        fingerprint = self.session.run_env.fingerprint
        return {**fingerprint, "dtype": self._dtype} if self._dtype else fingerprint

    @property
    def alpha(self) -> float:
        """This test's share of the run's family-wise false-alarm rate (for descriptive intervals)."""
        return self.session.rules().alpha

    @property
    def core(self) -> CaseCheck:
        """The case's checks against its baseline record (read on first use)."""
        if self._finished:
            raise RuntimeError(f"golden check after the end of test {self.nodeid}")
        if self._check is None:
            record: Record | None = None
            unreadable: RecordError | None = None
            try:
                record = self.session.store.read(self.session.baseline_key, self.suite, self.case)
            except RecordError as exc:
                unreadable = exc
            rules = replace(self.session.rules(), witness=self._witness)
            self._check = CaseCheck(self.suite, self.case, replace(rules, env=self.env) if self._dtype else rules,
                                    record, unreadable)
            if self._checkpoint is not None:
                self._check.observe(CHECKPOINT_FIELD, Field("checkpoint", self._checkpoint))
        return self._check

    def check(self, name: str, value: Any, kind: str = "exact", *, show: dict[str, Any] | None = None,
              **extras: Any) -> Outcome:
        """Observe `value` as field `name` of this case and compare it with the baseline record.
        Returns the outcome as decided now (Holm may still relax a statistical one at the end of
        the test; results.json holds the final word). A regression fails the test when it ends.
        ``follows="tokens"`` (an extra): this field is derived from the case's tokens field and
        inherits its tie-flip (see `checking.CaseCheck.observe`)."""
        return self.core.observe(name, Field(kind, value, extras), show)

    def check_all(self, observation: Observation) -> list[Outcome]:
        """Every field of a subject's observation (`CaseCheck.check_all`). An observation that
        `stopped` early reports the test skipped with its reason, after its checks so far are in -
        unless one of them regressed: the plugin then fails the test (harness/plugin/session.py)."""
        out = self.core.check_all(observation)
        if self._checkpoint is not None:  # a model of yours: a library crash is listed first (report/library_errors.py)
            out += self._library_errors(observation)
        if observation.stopped:
            pytest.skip(observation.stopped)
        return out

    def _library_errors(self, observation: Observation) -> list[Outcome]:
        """One `info` outcome `<field>_raised` per exception transformers raised in a field."""
        from harness.report.library_errors import SUFFIX, errors_in, sentence

        out = []
        for name, f in observation.fields.items():
            for i, err in enumerate(errors_in(f.value)):
                field = f"{name}{SUFFIX}" + (f"_{i}" if i else "")
                out.append(self.core.add(Outcome(self.suite, self.case, field, "exact", Status.INFO,
                                                 sentence(name, err), diff=dict(err), against="reference")))
        return out

    def reference(self, name: str, observed: Any, expected: Any, kind: str = "exact", *,
                  observed_extras: dict[str, Any] | None = None, expected_extras: dict[str, Any] | None = None,
                  implementations_differ: bool = True) -> Outcome:
        """Compare an observation with a value computed in this run (the reference engine's, or
        the same library's by another route: pass implementations_differ=False then); no golden
        record is read or written."""
        return self.core.reference(name, Field(kind, observed, observed_extras or {}),
                                   Field(kind, expected, expected_extras or {}),
                                   implementations_differ=implementations_differ)

    def not_observable(self) -> None:
        """The case cannot be observed in this env (an optional extra is missing): the checkpoint field a
        model of yours observes first is not observed either, so nothing of the case is compared or written."""
        if self._check is None:
            self._checkpoint = None

    def outcome(self, name: str, status: Status | str, kind: str = "exact", detail: str = "",
                category: Category | str = Category.NONE, diff: dict[str, Any] | None = None,
                against: str = "reference") -> Outcome:
        """An outcome decided by an exact rule in the suite (e.g. masks vs the reference visibility
        rule) or a skip with its reason. Statistical kinds are decided by the comparers only."""
        if kind in STATISTICAL_KINDS and Status(status) is not Status.SKIPPED:
            raise ValueError(f"{self.nodeid}: field {name!r} of kind {kind!r} must be compared "
                             "(golden.check / golden.reference), not decided by the suite")
        return self.core.add(Outcome(self.suite, self.case, name, kind, Status(status), detail, category,
                                     dict(diff or {}), against))

    def _write(self) -> dict[str, Any] | None:
        session, check = self.session, self._check
        if check is None or not (check.observed or check.references) or session.strict or session.read_only:
            return None
        if check.unreadable is not None and session.baseline_key == session.run_env.key and not session.force_regen:
            return None  # never overwrite a record we could not read, unless regenerating it
        report = session.store.update(session.run_env.key, self.suite, self.case, self.env, check.observed,
                                      overwrite=session.force_regen, replace_unreadable=session.force_regen,
                                      references=check.references)
        if not (report.written or report.replaced_unreadable):
            return None
        try:
            path = str(report.path.relative_to(session.store.root))
        except ValueError:
            path = str(report.path)
        return {"path": path, "fields": {c.field: c.change for c in report.changes if c.change != "unchanged"},
                "replaced_unreadable": report.replaced_unreadable}

    def finish(self, write: bool = True) -> str:
        """Decide, write the record (unless the test broke), hand the outcomes to the session;
        return the failure message ("" when nothing regressed)."""
        if self._finished:
            return ""
        self._finished = True
        if self._check is None:
            return ""
        problems: list[str] = []
        outcomes = self._check.outcomes()
        # A faulty case is never written as golden: a case with a regression (against its record or an
        # in-run reference - on a first run the references are all there is) adds nothing to the store
        # in a normal run; `harness regen` (--force-regen) records it on purpose, after review.
        regressed = any(o.status is Status.REGRESSION for o in outcomes)
        withheld = regressed and write and not self.session.force_regen
        try:
            written = self._write() if write and not withheld else None
        except RecordError as exc:
            written = None
            outcomes.append(Outcome(self.suite, self.case, "<record>", "exact", Status.REGRESSION, str(exc),
                                    Category.UNREADABLE_RECORD, {"file": str(exc.path)}, "baseline"))
        except RecordLimitError as exc:  # over the store's read limits: never written, so its new fields are unchecked
            written = None
            reason = f"not checked: {exc}"
            outcomes = [replace(o, status=Status.SKIPPED, detail=reason[:500]) if o.status is Status.NEW else o
                        for o in outcomes]
            outcomes.append(Outcome(self.suite, self.case, "<record>", "exact", Status.SKIPPED, reason[:500],
                                    Category.NONE, {}, "baseline"))
        except OSError as exc:
            written = None
            self.write_failed = True
            problem = f"cannot write golden record for {self.suite}/{self.case}: {exc}"
            self.session.write_errors.append(problem[:500])
            problems.append(problem)
        if written is not None:
            self.session.writes.append(written)
        self.session.outcomes.extend(outcomes)
        failed = [o for o in outcomes if o.status is Status.REGRESSION]
        if failed:
            problems.append(f"golden regression in {self.suite}/{self.case} (baseline {self.session.baseline_key}):")
            problems.extend(f"  {o.field} [{o.kind}, {o.against}]: {o.detail}" for o in failed)
            if withheld:
                problems.append("  its record was not written (a case that regresses is never recorded as golden; "
                                "`harness regen` records it on purpose)")
        return "\n".join(problems)
