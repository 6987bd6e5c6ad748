"""The checking core: observed fields + a baseline record + rules -> Outcomes. No pytest, no I/O.

One case at a time (`CaseCheck`):

    check = CaseCheck("outputs", case_id, rules, baseline=record)      # record: Record | None
    check.observe("tokens", Field("tokens", ids, {"margins": m}))      # against the baseline record
    check.reference("equals_engine", Field(...), Field(...))           # against the reference engine
    outcomes = check.outcomes()                                        # Holm, then the run's rules

- Each field is judged by its kind (harness/checking/compare.py `compare_field`).
- Statistical kinds (rate, distribution, latency) are re-decided together with Holm's procedure
  at `rules.alpha`, the case's share of the run's family-wise false-alarm rate (harness/checking/stats.py
  `per_test_alpha`: alpha / m over the m cases of a run).
- The run's rules apply last: with `regen` (rewriting this env's own records) a difference from
  the old record is the regeneration (`changed`, category `regenerated`); with `strict` a field that
  has no baseline is a regression (`missing-record`); a baseline record that cannot be read makes
  every field a regression (`unreadable-record`).

The pytest plugin (harness/plugin/) drives one `CaseCheck` per test; `harness compare`
(harness/cli/) drives one per pair of recorded cases through `compare_records`, so a field is
judged the same way in a live run and in an offline comparison.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from harness.checking.causes import crashed_cases
from harness.checking.compare import compare_field, decide_with_holm
from harness.checking.humane import reference_words, text_around
from harness.checking.oracles import (
    COMPOSED,
    ORACLE,
    OUTCOME_ORACLES,
    arbitrate,
    composed_known,
    failed_before_too,
    known_failure,
    same_failure,
)
from harness.checking.policy import Policy, is_upgrade, verdict
from harness.schema import (
    STATISTICAL_KINDS,
    Category,
    Field,
    Observation,
    Outcome,
    Record,
    RecordedReference,
    RecordError,
    Status,
)
from harness.settings.config import Thresholds
from harness.store.records import normalize_field


@dataclass(frozen=True)
class Rules:
    """How one run judges its cases."""

    alpha: float  # one case's share of the run's family-wise alpha (Holm within the case)
    thresholds: Thresholds
    env: dict[str, Any] | None  # the environment the observations were taken in
    strict: bool = False  # a field without a baseline fails (CI)
    regen: bool = False  # rewriting this env's own records: a difference is the regeneration
    baseline_key: str = ""  # the env whose records are the baseline (for messages)
    latency_strict: bool = False  # a latency field not judged (the machine was busy) fails
    witness: float | None = None  # the case's model's rounding witness in a low-precision run (harness/engine/witness.py)


LOW_PRECISION = ("bf16", "fp16")
TEXT_FIELD = "text"
NOT_CHECKS = (Status.SKIPPED, Status.INFO)  # outcomes that record no verdict of a reference
# a reference skipped because it cannot run here (the version lacks a keyword, a class, a route; the
# model lacks what it needs) - not a statistical "cannot decide" (not-checkable / not-checked)
CANNOT_RUN = (Category.NOT_APPLICABLE, Category.UNSUPPORTED)


@dataclass
class _Check:
    outcome: Outcome
    policy: Policy
    observed: Field
    expected: Field | None
    follows: tuple[str, ...] = ()  # fields whose tie-flip this one inherits (e.g. text follows tokens)
    seeded_by: str = ""  # the distribution field that judges this seeded sampled stream (rng-stream rule)
    mechanism_of: tuple[str, ...] = ()  # fields this one's setting computes (the attention backend: the logits)


class CaseCheck:
    """The checks of one case against its baseline record (or none) and reference values."""

    def __init__(self, suite: str, case: str, rules: Rules, baseline: Record | None = None,
                 unreadable: RecordError | None = None):
        self.suite, self.case, self.rules = suite, case, rules
        self.baseline, self.unreadable = baseline, unreadable
        self._checks: dict[str, _Check] = {}
        self._decided: list[Outcome] = []
        self.observed: dict[str, Field] = {}  # the fields to write into this env's record
        self.references: dict[str, RecordedReference] = {}  # their verdicts, to write beside them (outcomes())
        self._recorded: dict[str, RecordedReference] = {}  # verdicts read from a record (offline compare)

    def _claim(self, name: str) -> None:
        if name in self._checks or any(o.field == name for o in self._decided):
            raise ValueError(f"field {name!r} of {self.suite}/{self.case} checked twice; give each check its own name")

    def _policy(self, baseline_env: dict[str, Any] | None, implementations_differ: bool) -> Policy:
        witness = self.rules.witness if self.rules.thresholds.witness_scale(self.rules.witness) > 1 else None
        return Policy(alpha=self.rules.alpha, thresholds=self.rules.thresholds.for_witness(witness),
                      observed_env=self.rules.env, baseline_env=baseline_env,
                      implementations_differ=implementations_differ, witness=witness)

    def _place(self, outcome: Outcome, against: str) -> Outcome:
        return replace(outcome, suite=self.suite, case=self.case, against=against)

    def observe(self, name: str, observed: Field, show: dict[str, Any] | None = None) -> Outcome:
        """Field `name` as observed now, against the baseline record's field of that name. `show`:
        data for the reader (e.g. a chart's series), added to the outcome's diff, never compared.
        A field whose extras name the field it ``follows`` is derived from it - the decoded text,
        the number of forward passes or the acceptance of a token stream follow its tokens: when
        that field is a tie-flip, a difference here is the same tie-flip, not a second finding
        (stored in the record, so `harness compare` judges it the same way). A field whose extras
        name the fields it is the ``mechanism_of`` describes how they are computed - the attention
        implementation a model loads with, the SDPA calls its prefill makes, for its logits: when
        such a field moved to its oracle's value (fixed), the change of mechanism is that fix; any
        other change of the mechanism keeps its own verdict (a silent fall-back to eager is a
        regression while the logits stay right)."""
        self._claim(name)
        observed = normalize_field(observed)
        baseline = self.baseline.fields.get(name) if self.baseline else None
        policy = self._policy(self.baseline.env if self.baseline else None, implementations_differ=False)
        if self.unreadable is not None:
            outcome = verdict(name, observed.kind, Status.REGRESSION, str(self.unreadable), Category.UNREADABLE_RECORD,
                              {"file": str(self.unreadable.path), "reason": self.unreadable.reason})
        else:
            outcome = compare_field(name, observed, baseline, policy)
        if show:
            outcome = replace(outcome, diff={**show, **outcome.diff})
        follows = observed.extras.get("follows") or ()
        follows = (follows,) if isinstance(follows, str) else tuple(follows)
        seeded_by = str(observed.extras.get("seeded_by") or "")
        mechanism = observed.extras.get("mechanism_of") or ()
        mechanism = (mechanism,) if isinstance(mechanism, str) else tuple(mechanism)
        self._checks[name] = _Check(self._place(outcome, "baseline"), policy, observed, baseline, follows, seeded_by,
                                    mechanism)
        self.observed[name] = observed
        return self._checks[name].outcome

    def reference(self, name: str, observed: Field, expected: Field, *, implementations_differ: bool = True) -> Outcome:
        """`observed` against an expected value computed now (nothing is read or written).
        `implementations_differ`: the two sides come from different code (transformers vs the
        reference engine), so a near-tie may flip and cross-numerics tolerances apply; False when
        both sides are the same library (e.g. static vs dynamic cache)."""
        self._claim(name)
        observed, expected = normalize_field(observed), normalize_field(expected)
        # same library, other code path (batched verification vs one-token decode, static vs dynamic
        # cache): bit-for-bit in fp32 up to ~1e-6, but in bf16/fp16 the kernels round differently
        low_precision = str((self.rules.env or {}).get("dtype")) in LOW_PRECISION
        policy = self._policy(self.rules.env, implementations_differ or low_precision)
        outcome = compare_field(name, observed, expected, policy)
        outcome = replace(outcome, detail=reference_words(outcome.detail))  # "expected" is this run's oracle
        # a reference derived from another reference's token streams (the scores of beam rows that
        # tie-flipped) inherits its tie-flip, as a field does (observe)
        follows = observed.extras.get("follows") or ()
        follows = (follows,) if isinstance(follows, str) else tuple(follows)
        self._checks[name] = _Check(self._place(outcome, "reference"), policy, observed, expected, follows)
        return self._checks[name].outcome

    def recorded(self, name: str, verdict: RecordedReference) -> None:
        """A reference verdict read from the record being judged (`harness compare`: the other env
        ran it): it is reported as that env's verdict and arbitrates its fields (`outcomes`)."""
        self._claim(name)
        self._recorded[name] = verdict

    def add(self, outcome: Outcome) -> Outcome:
        """An outcome decided by an exact rule outside the comparers (e.g. a mask checked against
        the reference visibility rule, or a skip with its reason); never a statistical decision."""
        self._claim(outcome.field)
        placed = replace(outcome, suite=self.suite, case=self.case)
        self._decided.append(placed)
        return placed

    def check_all(self, observation: Observation) -> list[Outcome]:
        """Every field of a subject's observation: its fields against the baseline record, its
        references against their expected values, its notes (skips, information) as they are."""
        out = [self.observe(name, f, observation.shows.get(name)) for name, f in observation.fields.items()]
        out += [self.reference(name, r.observed, r.expected, implementations_differ=r.implementations_differ)
                for name, r in observation.references.items()]
        for name, note in observation.notes.items():
            if note.kind in STATISTICAL_KINDS and note.status != Status.SKIPPED.value:
                raise ValueError(f"{self.suite}/{self.case}: field {name!r} of kind {note.kind!r} must be compared, "
                                 "not decided by a rule")
            out.append(self.add(Outcome(self.suite, self.case, name, note.kind, Status(note.status), note.detail,
                                        Category(note.category), dict(note.diff), "reference")))
        return out

    def outcomes(self) -> list[Outcome]:
        """Every outcome of the case: Holm within the case, then the run's rules. (Baseline fields
        nobody observed are judged once all of a case's checks are in: `missing_fields`.)"""
        checks = list(self._checks.values())
        decided = decide_with_holm([(c.outcome, c.observed, c.expected, c.policy) for c in checks], self.rules.alpha)
        placed = {name: self._place(o, c.outcome.against) for name, c, o in zip(self._checks, checks, decided, strict=True)}
        resolved: dict[str, Outcome] = {}
        # `harness compare`: the other env's recorded verdict of a reference judges its seeded streams too
        recorded = {name: Outcome(self.suite, self.case, name, r.kind, Status(r.status), r.detail, Category(r.category),
                                  {}, "reference") for name, r in self._recorded.items()}

        def resolve(name: str, seen: tuple[str, ...] = ()) -> Outcome:
            """The outcome after the rng-stream rule and inheriting the tie-flips / rng-streams of the
            fields it follows (resolved first)."""
            if name not in resolved:
                check = self._checks[name]
                follows = [f for f in check.follows if f in placed and f not in seen]
                outcome = placed[name]
                judge = placed.get(check.seeded_by) or recorded.get(check.seeded_by)
                if check.seeded_by and judge is not None:
                    outcome = _rng_stream(outcome, judge)
                resolved[name] = _inherit_tie_flip(outcome, [resolve(f, (*seen, name)) for f in follows])
            return resolved[name]

        out = [self._with_text(resolve(name)) for name in self._checks]
        checked = [o for o in [*out, *self._decided] if o.against == "reference" and o.status not in NOT_CHECKS]
        self.references = {o.field: RecordedReference.from_outcome(o) for o in checked}
        self.references.update(self._recorded)
        out += [Outcome(self.suite, self.case, name, r.kind, Status(r.status), r.detail, Category(r.category),
                        {}, "reference") for name, r in self._recorded.items()]
        out = self._by_oracles(out)
        # a reference of a route a fix no longer takes (the SDPA calls' masks, once the model loads eager)
        gone = {str(self._checks[o.field].observed.extras.get("checked_by")): o for o in out
                if o.category is Category.FIXED and "mechanism_of" in o.diff and o.field in self._checks}
        decided = [self._by_oracle(o) if o.against == "reference" and o.status not in NOT_CHECKS
                   else self._cannot_run(o, gone.get(o.field)) for o in self._decided]
        return [self._apply_rules(o) if o.against == "baseline" else o for o in out] + decided

    def _upgrade(self) -> bool:
        """The baseline record was taken under other library versions than this run (an upgrade
        check, `harness compare` of two releases): only then can a failure be the baseline's too.
        Within one env a failing reference stays a regression unless it fails exactly as the record
        holds it (`oracles.same_failure`: an exact reference's same detail, a tensor's same error size)."""
        return is_upgrade(self.rules.env, self.baseline.env if self.baseline else {})

    def _by_oracles(self, out: list[Outcome]) -> list[Outcome]:
        """`_by_oracle` on every outcome; then a field that follows one its oracle found fixed (the
        text of tokens that moved to the engine's), or an outcome field that is fixed (a load that
        works now: the layout it loads into), is the same fix, not a second finding."""
        out = [self._by_oracle(o) for o in out]
        out = self._composed(out)
        fixed = {o.field: o for o in out if o.against == "baseline" and o.category is Category.FIXED
                 and (ORACLE in o.diff or o.field in self._checks and self._checks[o.field].observed.extras.get("outcome"))}
        return [_follow_fix(o, [fixed[f] for f in (*self._checks[o.field].follows, *self._checks[o.field].mechanism_of)
                                if f in fixed], mechanism=set(self._checks[o.field].mechanism_of))
                if o.against == "baseline" and o.field in self._checks else o for o in out]

    def _composed(self, out: list[Outcome]) -> list[Outcome]:
        """A composed reference (oracles.py `COMPOSED`) the baseline has no verdict of, judged by its steps."""
        before = self.baseline.references if self.baseline else {}
        refs = {o.field: o for o in out if o.against == "reference"}
        measures = {name: r.measure for name, r in self.references.items()}
        return [composed_known(o, refs.get(COMPOSED[o.field][0]), refs.get(COMPOSED[o.field][1]), measures)
                if o.against == "reference" and o.field in COMPOSED and o.field not in before else o for o in out]

    def _by_oracle(self, o: Outcome) -> Outcome:
        """The oracle arbitrates (harness/checking/oracles.py): a reference failing in the baseline
        record too is known; a field that names its oracle moved toward it (fixed) or away (broken)."""
        before = self.baseline.references if self.baseline else {}
        where = self.rules.baseline_key or "the baseline"
        if o.against == "reference":
            return known_failure(o, before.get(o.field), where) if self._upgrade() else same_failure(o, before.get(o.field))
        if self._upgrade():
            o = failed_before_too(o, where)
        check = self._checks.get(o.field)
        named = (check.observed.extras.get(ORACLE) or OUTCOME_ORACLES.get(o.field, "")) if check else ""
        names = [str(n) for n in ([named] if isinstance(named, str) else named) if n]
        # a field may name several oracles (a tokenizer's ids, decode and specials): one that moved away
        # breaks it, else one that moved toward fixes it, else its own verdict stands
        judged = [arbitrate(o, name, self.references.get(name), before.get(name), where) for name in names]
        return next((j for j in judged if j.category is Category.BROKEN and o.category is not Category.BROKEN),
                    next((j for j in judged if j != o), o))

    def _cannot_run(self, o: Outcome, gone_with: Outcome | None = None) -> Outcome:
        """A reference skipped because it cannot run now (`CANNOT_RUN`: a keyword, class or route the
        version lacks) is never a quiet skip where it matters:

        - it ran in the baseline record (a verdict there): a regression, `reference-lost` - the check
          the baseline had is gone, whatever the reason (a removed keyword is how it usually goes) -
          except where it failed there (`changed`, reference-lost: a known failure is not the
          upgrade's, and nothing checks it now) or where it checks a route that a fix no longer
          takes (`gone_with`: the mechanism field naming it ``checked_by`` followed a fix - the SDPA
          masks of a model that loads eager now, its logits at the engine's: `changed`, fixed);
        - a first run (no baseline record): `not checked` with the reason - nothing says it ever ran,
          so it is not a regression, but nothing was checked either; under --strict it fails;
        - the baseline could not run it either: skipped, as it was.

        A reference `not checked` in this run (the call it reads raised, the version returned nothing to
        judge it by) follows the same rule: a check the baseline had is lost whatever the reason, and
        --strict fails a first run that checked nothing there."""
        if o.against != "reference" or o.status is not Status.SKIPPED or o.category not in (*CANNOT_RUN,
                                                                                           Category.NOT_CHECKED):
            return o
        where = self.rules.baseline_key or "the baseline"
        if self.baseline is None and self.unreadable is None:
            if o.category is Category.NOT_CHECKED and not self.rules.strict:
                return o
            if self.rules.strict:
                return replace(o, status=Status.REGRESSION, category=Category.NOT_CHECKED,
                               detail=f"not checked: {o.detail} (--strict: a reference that cannot run on a first "
                                      "run fails)")
            return replace(o, category=Category.NOT_CHECKED,
                           detail=f"not checked: {o.detail} (a first run: no baseline record says it ran before)")
        before = self.baseline.references.get(o.field) if self.baseline else None
        if before is None or before.status in {s.value for s in NOT_CHECKS}:
            return o
        was = {**o.diff, "was_status": before.status, "was_category": before.category}
        if before.failed:
            return replace(o, status=Status.CHANGED, category=Category.REFERENCE_LOST, diff=was,
                           detail=f"failed in {where} ({before.detail[:120]}) and cannot run now: {o.detail} - "
                                  "not the upgrade's failure, and nothing checks it now")
        if gone_with is not None:
            return replace(o, status=Status.CHANGED, category=Category.FIXED, diff={**was, "follows": gone_with.field},
                           detail=f"the route it checked is gone with the fix `{gone_with.field}` is the mechanism of "
                                  f"({gone_with.detail[:120]}); ran in {where} ({before.status}) and cannot run now: "
                                  f"{o.detail}")
        return replace(o, status=Status.REGRESSION, category=Category.REFERENCE_LOST,
                       detail=f"ran in {where} ({before.status}: {before.detail[:120]}) and cannot run now: {o.detail}",
                       diff={**o.diff, "was_status": before.status, "was_category": before.category})

    def _with_text(self, o: Outcome) -> Outcome:
        """A tokens field that diverged, in a case that also records its decoded `text` against the
        same baseline: the detail shows the text around the first divergence (the diff keeps both)."""
        text = self._checks.get(TEXT_FIELD)
        if o.kind != "tokens" or "divergences" not in o.diff or text is None or text.expected is None:
            return o
        old, new = text.expected.value, text.observed.value
        if not (isinstance(old, str) and isinstance(new, str)) or old == new or o.against != text.outcome.against:
            return o
        return replace(o, detail=f"{o.detail}; text: {text_around(old, new)}",
                       diff={**o.diff, "old_text": old, "new_text": new})

    def _apply_rules(self, o: Outcome) -> Outcome:
        if self.rules.regen and o.status in (Status.REGRESSION, Status.CHANGED):
            return replace(o, status=Status.CHANGED, category=Category.REGENERATED,
                           detail=f"record rewritten (--force-regen); was {o.status.value}: {o.detail}",
                           diff={**o.diff, "was_status": o.status.value, "was_category": o.category.value})
        if self.rules.latency_strict and o.kind == "latency" and o.category is Category.NOT_JUDGED:
            return replace(o, status=Status.REGRESSION, detail=f"{o.detail} (--latency-strict: a field not judged fails)")
        if self.rules.strict and o.status is Status.NEW:
            return replace(o, status=Status.REGRESSION, category=Category.MISSING_RECORD,
                           detail=f"no golden record in {self.rules.baseline_key or 'the baseline'} "
                                  "(--strict: missing records fail)")
        return o


def _rng_stream(outcome: Outcome, distribution: Outcome) -> Outcome:
    """A seeded sampled stream that differs from its record while the path's sampled
    distribution (`distribution`, the same case's G-test of fit) still fits: the release draws its
    random numbers differently - `changed` (information), not a regression. A distribution that
    no longer fits keeps the stream's regression (and is one itself); a fit `not checked` at the
    smallest effect that matters still found no misfit at the size it detects (its detail says which),
    so the stream is the same rng-stream, with that detail."""
    if outcome.status is not Status.REGRESSION or outcome.category is not Category.REAL_CHANGE:
        return outcome
    fits = distribution.status is Status.PASS or distribution.category is Category.NOT_CHECKED
    if not fits:
        return outcome
    return replace(outcome, status=Status.CHANGED, category=Category.RNG_STREAM,
                   detail=f"seeded stream differs, but the sampled distribution still fits ({distribution.field}: "
                          f"{distribution.detail}); here: {outcome.detail}",
                   diff={**outcome.diff, "seeded_by": distribution.field})


def _follow_fix(outcome: Outcome, sources: list[Outcome], mechanism: Collection[str] = ()) -> Outcome:
    """A regression of a field derived from a field that moved to its oracle's value, or that
    follows an outcome field fixed (a load that works now), or the mechanism that computes a field
    that moved to its oracle's value (`mechanism`: those fields): the same fix."""
    if outcome.status is not Status.REGRESSION or not sources:
        return outcome
    source = sources[0]
    how = "moved to its oracle's value" if ORACLE in source.diff else "works now"
    if source.field in mechanism:
        if ORACLE not in source.diff:
            return outcome
        return replace(outcome, status=Status.CHANGED, category=Category.FIXED,
                       detail=f"the mechanism of the fix of {source.field} ({how}); here: {outcome.detail}",
                       diff={**outcome.diff, "mechanism_of": source.field})
    return replace(outcome, status=Status.CHANGED, category=Category.FIXED,
                   detail=f"follows the fix of {source.field} ({how}); here: {outcome.detail}",
                   diff={**outcome.diff, "follows": source.field})


def _inherit_tie_flip(outcome: Outcome, sources: list[Outcome]) -> Outcome:
    """A field derived from token streams differs because a stream tie-flipped or is a seeded
    stream drawn differently (rng-stream), and none of them changed for real: the same outcome
    as its source, not a second finding."""
    flips = [s for s in sources if s.category in (Category.TIE_FLIP, Category.RNG_STREAM)]
    if outcome.status is not Status.REGRESSION or not flips or any(s.status is Status.REGRESSION for s in sources):
        return outcome
    source = flips[0]
    return replace(outcome, status=source.status, category=source.category,
                   detail=f"follows the {source.category.value} of {source.field} ({source.detail}); here: {outcome.detail}",
                   diff={**outcome.diff, "follows": source.field})


def missing_fields(record: Record, observed: set[str], rules: Rules, crashed: str = "",
                   not_run: bool = False) -> list[Outcome]:
    """The baseline record's fields that no check of the case observed (several tests may share
    one record, so call this once all of them are in): a suite that stops checking something must
    not stay green. `missing` (accept with a regen), a regression under --strict / in CI. Where the
    case raises now (`crashed`: its error field's detail) the fields are lost to the crash: the advice
    is about the crash, never to accept the loss (a regen would record the crash as golden). Where the
    case's test did not run (`not_run`: skipped or xfailed before it finished) nothing was removed: regen
    keeps its records, so the advice is to run it, never to accept a removal."""
    where = rules.baseline_key or "the baseline"
    status = Status.REGRESSION if rules.strict else Status.MISSING
    if not_run:
        detail = (f"recorded in {where}; not observed because its test did not run (skipped or xfailed) - the "
                  "records are kept (harness regen keeps them too): run the test to check them")
    elif crashed:
        detail = (f"recorded in {where}; not observed because the case raises now ({crashed}): the crash is the "
                  "finding - accepting this loss with `harness regen` would record the crash as golden")
    elif rules.strict:
        detail = f"recorded in {where} but not observed (--strict: a field that disappears fails)"
    else:
        detail = f"recorded in {where} but not observed; accept its removal with `harness regen`"
    return [Outcome(record.suite, record.case, name, f.kind, status, detail, Category.MISSING_FIELD,
                    {"baseline": f.value} if _short_scalar(f.value) else {})
            for name, f in record.fields.items() if name not in observed]


def _short_scalar(value: Any) -> bool:
    """A recorded value small enough to carry beside a missing field (what the baseline ran on, a count)."""
    return isinstance(value, (str, int, float, bool)) and len(str(value)) <= 80


def compare_records(records_a: Mapping[Any, Record], records_b: Mapping[Any, Record], *, alpha: float,
                    thresholds: Thresholds, name_a: str = "A", name_b: str = "B") -> list[Outcome]:
    """Every field of every record of B against A's record of the same case, with the rules of a
    live run (`CaseCheck`, Holm within a case at `alpha`). A record or field in B only is `new`;
    a field in A only is `missing`; a record in A only is `skipped` (record-removed)."""
    outcomes: list[Outcome] = []
    for key in sorted(set(records_a) | set(records_b)):
        a, b = records_a.get(key), records_b.get(key)
        if a is None or b is None:
            record, status = (b, Status.NEW) if a is None else (a, Status.SKIPPED)
            where, other = (name_b, name_a) if a is None else (name_a, name_b)
            category = Category.RECORD_ADDED if a is None else Category.RECORD_REMOVED
            outcomes += [Outcome(record.suite, record.case, name, f.kind, status,
                                 f"record only in {where}; none in {other}", category)
                         for name, f in record.fields.items()]
            continue
        check = CaseCheck(b.suite, b.case, Rules(alpha, thresholds, b.env, baseline_key=name_a), baseline=a)
        for name, f in b.fields.items():
            check.observe(name, f)
        for name, r in b.references.items():
            check.recorded(name, r)
        judged = check.outcomes()
        crashed = crashed_cases(judged).get((b.suite, b.case), "")
        outcomes += judged + [unkept_latency(o, name_b) for o in missing_fields(a, set(b.fields), check.rules, crashed)]
    return outcomes


def unkept_latency(outcome: Outcome, where: str) -> Outcome:
    """A latency field a record of `where` lacks was not removed: `harness regen` keeps only a
    measurement a later run can judge (harness/checking/regen.py `latency_field`), so every run of
    that env was too busy to keep one - not judged (never a pass), not `missing`."""
    if outcome.kind != "latency":
        return outcome
    return replace(outcome, status=Status.SKIPPED, category=Category.NOT_JUDGED,
                   detail=f"not judged: {where} holds no judgeable measurement of it (regen keeps latency only "
                          "where a later run can judge it; its runs there were too busy)")
