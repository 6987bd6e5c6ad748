"""Findings, not rows: outcomes with the same suite-independent cause, grouped. Pure functions.

A comparison of two envs yields hundreds of outcomes, but usually a handful of causes: 13 cases
raising "Assisted decoding requires a cache that can be cropped" are one finding, and so are
"index 43 is out of bounds ... size 43" and "index 106 ... size 106". The cause of an outcome is

    (field, kind, status, category, normalised detail)

where the detail is normalised by masking numbers (indices, sizes, steps, values) and the case ids
and env keys it may quote (`cause`). Passes and information rows (`info`) are not findings. A case whose `error` field is itself
a finding (broken, error-changed, fixed) no longer observes its other fields: those `missing`
outcomes are folded into that finding as `follows` instead of being findings of their own.
Order: regressions first, then changed / missing, then the rest (new, skipped); larger first.
Findings of one cause that spans fields - a removed name and what names it, a model's attention
backend and its numeric differences (harness/checking/causes.py) - are merged into one that lists
every affected field (`by_cause`).

A changed checkpoint of yours comes before everything (category `checkpoint-changed`: its
fingerprint differs from the baseline's, harness/zoo/checkpoint.py): the differences
(regressions, changes, missing fields) of the cases it was observed in are grouped `under` it, so a
reader tells a change of the model from a change of the library. New and skipped fields are not
differences and stay where they are.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from harness.checking.causes import (
    LOAD_FIELDS,
    added_names,
    attention_model,
    divergence_of,
    exception_gone,
    exception_of,
    failure_key,
    failure_of,
    follows_attention,
    follows_exception,
    gone_key,
    mechanism_of,
    names_value,
    other_changes,
    raised,
    removed_names,
    step_broken,
    step_fixed,
    subject_of,
)
from harness.checking.oracles import ORACLE, numbers_masked
from harness.schema import Category, Outcome, Results, Status

CHECKPOINT = Category.CHECKPOINT_CHANGED
DIFFERENCES = (Status.REGRESSION, Status.CHANGED, Status.MISSING)  # what a changed checkpoint can explain
STATUS_RANK = {Status.REGRESSION: 0, Status.CHANGED: 1, Status.MISSING: 1, Status.NEW: 2, Status.SKIPPED: 2}
NOT_FINDINGS = (Status.PASS, Status.INFO)  # a pass, and information shown beside the checks
ERROR_FIELD = "error"  # the outputs suite's exception-as-data field
ERROR_CATEGORIES = (Category.BROKEN, Category.ERROR_CHANGED, Category.FIXED)

_ENV_KEY = re.compile(r"\btf[\w.+-]*-torch[\w.+-]*")
_NUMBER = re.compile(r"(?<![A-Za-z_])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def normalise(detail: str, cases: Iterable[str] = ()) -> str:
    """`detail` with the parts that vary between cases of one cause masked: case ids -> <case>,
    env keys -> <env>, numbers -> N (not digits inside identifiers, e.g. `index_copy_`, `sm90`)."""
    text = detail
    for case in sorted({c for c in cases if c}, key=len, reverse=True):
        text = re.sub(rf"(?<![\w.-]){re.escape(case)}(?![\w.-])", "<case>", text)
    text = _ENV_KEY.sub("<env>", text)
    return " ".join(_NUMBER.sub("N", text).split())


ANY_FIELD = "*"
FIELDLESS = (Status.NEW, Status.SKIPPED)  # "no baseline record" says nothing about one field


def cause(outcome: Outcome) -> tuple[str, str, str, str, str]:
    """The suite-independent cause of an outcome: (field, kind, status, category, normalised detail);
    a new or skipped record's fields share one cause (field and kind "*")."""
    fieldless = outcome.status in FIELDLESS
    return (ANY_FIELD if fieldless else outcome.field, ANY_FIELD if fieldless else outcome.kind,
            outcome.status.value, outcome.category.value, normalise(outcome.detail, (outcome.case,)))


@dataclass
class Finding:
    """One cause and the outcomes that show it; `follows` are the outcomes it explains (the fields
    a case no longer observes because it raises); `under` are the findings on the cases of a
    changed checkpoint (only a checkpoint finding has them)."""

    key: tuple[str, str, str, str, str]
    outcomes: list[Outcome] = field(default_factory=list)
    follows: list[Outcome] = field(default_factory=list)
    under: list[Finding] = field(default_factory=list)
    cause: str = ""  # the one cause several findings were merged under (`by_cause`), in words

    @property
    def status(self) -> Status:
        return Status(self.key[2])

    @property
    def category(self) -> str:
        return self.key[3]

    @property
    def fields(self) -> list[str]:
        return list(dict.fromkeys(o.field for o in self.outcomes))

    @property
    def cases(self) -> list[str]:
        """'suite/case' of every affected case, in order of first appearance."""
        return list(dict.fromkeys(f"{o.suite}/{o.case}" for o in self.outcomes))

    @property
    def example(self) -> str:
        """The first outcome's own detail (real numbers, not masks)."""
        return self.outcomes[0].detail

    @property
    def models(self) -> list[str]:
        """The models of the affected cases (a case id starts with its model's name, which has no dots)."""
        return list(dict.fromkeys(o.case.split(".", 1)[0] for o in self.outcomes))

    def sentence(self, width: int = 160) -> str:
        """One line: '<status> (<category>) in <field> of N case(s): <detail>'; a changed checkpoint:
        'the checkpoint of M changed (<file> sha256 old -> new): ...'."""
        if self.category == CHECKPOINT.value:
            return self._checkpoint_sentence(width)
        what = self.status.value + (f" ({self.category})" if self.category else "")
        n = len(self.cases)
        detail = " ".join(self.example.split())
        if len(detail) > width:
            detail = detail[: width - 3] + "..."
        extra = f" (+{len(self.follows)} fields no longer observed)" if self.follows else ""
        fields, shown = self.fields, 12 if self.cause else 4  # a merged cause lists what it affects
        where = f"`{fields[0]}`" if len(fields) == 1 else f"{len(fields)} fields ({', '.join(fields[:shown])}" + (
            ", ...)" if len(fields) > shown else ")")
        cause = f"one cause, {self.cause}: " if self.cause else ""
        return (f"{cause}{what} in {where} of {n} case{'s' if n != 1 else ''}: {detail}{extra}{self._ran_with()}"
                f"{self._fell_back()}")

    def _fell_back(self) -> str:
        """'; in the baseline 26 of these cases ran on a dynamic cache ...' - the `.static` cases that raise now
        whose baseline record says generate() fell back from the static cache asked (outputs' `cache_ran_on`,
        now a field no longer observed): what "worked before" really ran."""
        fell = {(o.suite, o.case): o.diff.get("baseline") for o in self.follows
                if o.field == "cache_ran_on" and isinstance(o.diff, dict) and o.diff.get("baseline") not in (None, "static")}
        if not fell:
            return ""
        families = ", ".join(sorted({str(v) for v in fell.values()}))
        return (f"; in the baseline {len(fell)} of these cases ran on a {families} cache, not the static one asked "
                "(generate() fell back)")

    def _ran_with(self) -> str:
        """'; ran with DynamicCache, attention sdpa, warned: "..."' - the setup the first case really
        ran with, where its subject recorded one (diff "ran_with", harness/subjects/hf.py `ran_with`)."""
        ran = next((o.diff["ran_with"] for o in self.outcomes
                    if isinstance(o.diff, dict) and isinstance(o.diff.get("ran_with"), dict)), None)
        if not ran:
            return ""
        parts = [p for p in (ran.get("cache"), f"attention {ran['attn_implementation']}"
                             if ran.get("attn_implementation") else None) if p]
        said = ran.get("warnings") or []
        warned = f", warned: {said[0][:100]!r}" + (f" (+{len(said) - 1} more)" if len(said) > 1 else "") if said else ""
        return f"; ran with {', '.join(parts) or 'no cache returned'}{warned}"

    def _checkpoint_sentence(self, width: int) -> str:
        detail = " ".join(self.example.split()).removeprefix("the checkpoint changed ")
        if len(detail) > width:
            detail = detail[: width - 4] + "...)"
        models = ", ".join(self.models)
        n = len(self.cases)
        cases = f"{n} case{'s' if n != 1 else ''}"
        if not self.under:
            return f"the checkpoint of {models} changed {detail}; nothing else differs on its {cases}"
        k = len(self.under)
        these = f"the {k} findings under it are" if k != 1 else "the finding under it is"
        return (f"the checkpoint of {models} changed {detail}; {these} on its {cases}: "
                f"{'they' if k != 1 else 'it'} may follow from your change, not the library's")

    def anchor(self, index: int) -> str:
        return f"f{index}"


def group_findings(outcomes: Iterable[Outcome]) -> list[Finding]:
    """Every non-pass outcome in exactly one finding (as a member, as one that `follows`, or in a
    finding `under` a changed checkpoint): changed checkpoints first, each with the differences of
    its cases under it, then regressions, changed / missing, the rest; within a rank, most cases first."""
    outcomes = list(outcomes)
    listed = [o for o in outcomes if o.status not in NOT_FINDINGS]
    checkpoints = _group([o for o in listed if o.category == CHECKPOINT])
    case_of = {(o.suite, o.case): f for f in checkpoints for o in f.outcomes}
    rest: list[Outcome] = []
    explained: dict[int, list[Outcome]] = {}
    for o in listed:
        if o.category == CHECKPOINT:
            continue
        owner = case_of.get((o.suite, o.case)) if o.status in DIFFERENCES else None
        if owner is None:
            rest.append(o)
        else:
            explained.setdefault(id(owner), []).append(o)
    for f in checkpoints:
        f.under = _group(explained.get(id(f), []))
    known = {(o.suite, o.case): known_failure(o.detail) for o in outcomes
             if o.status is Status.INFO and o.field == KNOWN_UPSTREAM}
    return checkpoints + by_cause(_group(rest), known)


def _rank(f: Finding) -> tuple[int, int, tuple[str, str, str, str, str]]:
    return STATUS_RANK.get(f.status, 3), -len(f.cases), f.key


def _merged(members: list[Finding], cause: str) -> Finding:
    """One finding of several: the worst member's cause key and example first, every outcome kept."""
    members = sorted(members, key=_rank)
    return Finding(members[0].key, [o for m in members for o in m.outcomes], [o for m in members for o in m.follows],
                   cause=cause)


def _split(f: Finding, inside: Callable[[Outcome], bool]) -> tuple[Finding | None, Finding | None]:
    """A finding's outcomes that `inside` claims, and the rest, each a finding of the same key (None: empty)."""
    claimed = [o for o in f.outcomes if inside(o)]
    left = [o for o in f.outcomes if not inside(o)]
    if not claimed:
        return None, f
    if not left:
        return f, None
    return Finding(f.key, claimed), Finding(f.key, left, f.follows)


KNOWN_UPSTREAM = "known_upstream_failure"  # the info a case states when it failed as a declared upstream failure does


def known_failure(detail: str) -> str:
    """A declared upstream failure's words ("3 of 3 failed as a known upstream failure does: without psutil
    ..." -> "without psutil ..."), up to its first parenthesis: the same words in every case it declares."""
    return str(detail).split(" does: ", 1)[-1].split(" (", 1)[0]


def declared_does(o: Outcome) -> bool:
    """What a declared upstream failure does in a case it declares: raises, fails otherwise, leaves a
    reference or a field unchecked, logs - not a difference with a cause of its own (tokens that moved)."""
    return (raised(o) or o.status is Status.SKIPPED
            or o.category in (Category.REFERENCE_LOST, Category.PRESENTATION_CHANGED, Category.ERROR_CHANGED))


def by_cause(findings: list[Finding], known: dict[tuple[str, str], str] | None = None) -> list[Finding]:
    """Findings that one cause explains, merged into one that lists every affected field
    (harness/checking/causes.py): a removed name and the differences that name it; one exception
    raised now by several calls, with the fields it left unchecked and what its own cases lost; one
    exception gone, with what its cases report now; a sampler mechanism in several white-box fields; a
    checkpoint's load that works or fails now, with its model's cases; a model's attention backend and
    its cases' numeric differences; a field broken by its oracle and that oracle's failing reference;
    one case's references reading its tokens part at one step; a model's references that fail in the
    baseline too (known-failure); one presenter's changes of one field; the fields a declared upstream
    failure of their cases left unchecked (`known`: (suite, case) -> its words); the timed fields one
    reason left unjudged. Differences are merged, and the new and skipped fields that follow from one of them;
    other new and skipped fields stay where they are."""
    rest = [f for f in findings if f.status in DIFFERENCES]
    kept = [f for f in findings if f.status not in DIFFERENCES]
    out: list[Finding] = []
    for name in removed_names(o for f in rest for o in f.outcomes):
        group = [f for f in rest if name in removed_names(f.outcomes)
                 or (names_value(f.example, name) and not other_changes(f.outcomes, name))]
        if len(group) > 1:
            rest = [f for f in rest if f not in group]
            out.append(_merged(group, f"`{name}` no longer honoured (removed or ignored)"))
    for name in added_names(o for f in rest for o in f.outcomes):
        group = [f for f in rest if name in added_names(f.outcomes)
                 or (names_value(f.example, name) and not other_changes(f.outcomes, name))]
        if len(group) > 1:  # a keyword renamed to `name`: the capability that takes it and what names it
            rest = [f for f in rest if f not in group]
            out.append(_merged(group, f"`{name}` introduced (added, or renamed to)"))
    crashes: list[Finding] = []  # one exception raised now, and the fields it left unchecked
    firsts = {failure_key(o): o for f in reversed(rest) for o in reversed(f.outcomes)}  # each failure's first outcome
    for key, o in reversed(firsts.items()):
        group = [f for f in rest if key and any(failure_key(g) == key for g in f.outcomes)]
        # the fields that could not be checked because of it - in-run references that lost their run, fields
        # skipped because the step they need raised - are its consequences, not findings of their own
        lost = [f for f in rest + kept if key and f not in group and all(follows_exception(g, key) for g in f.outcomes)]
        if group and len(group) + len(lost) > 1:  # one exception raised now by many calls, wherever the baseline stood
            rest = [f for f in rest if f not in group and f not in lost]
            kept = [f for f in kept if f not in lost]
            crashes.append(_merged(group + lost, _crash_cause(o)))
    gone: dict[int, str] = {}  # a merged 'exception gone' finding -> its masked key
    firsts = {gone_key(o): o for f in reversed(rest) for o in reversed(f.outcomes)}
    for key, first in reversed(firsts.items()):
        group = [f for f in rest if key and all(gone_key(o) == key for o in f.outcomes)]
        if len(group) > 1:  # one exception no longer raised by several fields' calls: one fix
            exc = exception_gone(first) or str(first.diff.get("old") if isinstance(first.diff, dict) else key)
            rest = [f for f in rest if f not in group]
            # and what the calls that work now report in their cases (the rollback supported, its fields recorded)
            cases = {(o.suite, o.case) for f in group for o in f.outcomes}
            followers, pool = _take([f for f in rest + kept if f.status in (*DIFFERENCES, Status.NEW)],
                                    lambda o, c=cases: (o.suite, o.case) in c and follows_step(o))
            rest = [f for f in pool if f.status in DIFFERENCES]
            kept = [f for f in pool if f.status not in DIFFERENCES] + [f for f in kept if f.status not in
                                                                        (*DIFFERENCES, Status.NEW)]
            out.append(_merged(group + followers, f"one exception gone: `{exc if len(exc) <= 120 else exc[:117] + '...'}`"))
            gone[id(out[-1])] = key
    for key in dict.fromkeys((mechanism_of(o), f.category) for f in rest for o in f.outcomes):
        group = [f for f in rest if key[0] and f.category == key[1] and all(mechanism_of(o) == key[0] for o in f.outcomes)]
        if len(group) > 1:  # one verifier mechanism seen (or gone) in several of its white-box fields
            rest = [f for f in rest if f not in group]
            out.append(_merged(group, f"one mechanism of the sampler: {key[0]}"))
    rest, kept, crashes, stepped = _steps(rest, kept, crashes)
    rest, kept, crashes = _in_case(rest, kept, crashes)
    for i, f in enumerate(out):  # a fix elsewhere that quotes the gone exception (a request's loop logged it)
        key = gone.get(id(f))
        quoting = [g for g in stepped if key and g.status is Status.CHANGED
                   and any(key in numbers_masked(f"{o.detail} {o.diff}") for o in g.outcomes)]
        if quoting:
            stepped = [g for g in stepped if g not in quoting]
            out[i] = _merged([f, *quoting], f.cause)
    out += crashes + stepped
    for model in dict.fromkeys(attention_model(o) for f in rest for o in f.outcomes):
        if not model:
            continue
        group = [f for f in rest if any(attention_model(o) == model for o in f.outcomes)]
        # a field its oracle found fixed stays told apart from a backend change that is no fix; when the
        # change is one (every attention field a fix or a change, one of them fixed) its fixes are its own
        fix = (all(f.status is not Status.REGRESSION for f in group)
               and any(f.category == Category.FIXED.value for f in group))
        parts = [_split(f, lambda o, m=model: follows_attention(o, m)) if fix or f.category != Category.FIXED.value
                 else (None, f) for f in rest if f not in group]
        followers = [inside for inside, _ in parts if inside is not None]
        if group and followers:
            rest = [outside for _, outside in parts if outside is not None]
            out.append(_merged(group + followers, f"the attention backend of {model} changed"))
    for f in [f for f in rest if f.category == Category.BROKEN.value]:
        # a field that moved away from its oracle, and that oracle's reference failing now in the
        # same case: one break, told once (streamed and stream_as_decode)
        names = {(o.suite, o.case, o.diff.get(ORACLE)) for o in f.outcomes if isinstance(o.diff, dict)}
        refs = [g for g in rest if g is not f and g.status is Status.REGRESSION
                and all(o.against == "reference" and (o.suite, o.case, o.field) in names for o in g.outcomes)]
        if refs and f in rest:
            rest = [g for g in rest if g is not f and g not in refs]
            oracles = sorted({str(n) for *_, n in names if n})
            out.append(_merged([f, *refs], f"{', '.join(f'`{n}`' for n in oracles)} fails now"))
    for part in dict.fromkeys(divergence_of(o) for f in rest for o in f.outcomes):
        if not part:
            continue
        parts = [_split(f, lambda o, p=part: divergence_of(o) == p) for f in rest]
        inside = [i for i, _ in parts if i is not None]
        if len(inside) > 1:  # several oracles of one case reading the same token at the same step
            rest = [outside for _, outside in parts if outside is not None]
            case, step = part.rsplit("@", 1)
            out.append(_merged(inside, f"the tokens of {case} part from their oracles at step {step}"))
    for model in dict.fromkeys(o.case.split(".", 1)[0] for f in rest for o in f.outcomes):
        group = [f for f in rest if f.category == Category.KNOWN_FAILURE.value and f.models == [model]]
        fields = {name for f in group for name in f.fields}
        # the same references failing in cases the baseline could not run (they crashed there): its cause too
        group += [f for f in rest if f not in group and group and f.models == [model] and f.status is Status.REGRESSION
                  and all(o.against == "reference" and (o.field in fields or o.kind == "tensor") for o in f.outcomes)]
        if len(group) > 1:
            rest = [f for f in rest if f not in group]
            also = (", and in cases the baseline could not run" if any(f.status is Status.REGRESSION for f in group)
                    else "")
            out.append(_merged(group, f"{model}'s in-run references fail in the baseline too{also}"))
    for name in dict.fromkeys(f.fields[0] for f in rest if f.category == Category.PRESENTATION_CHANGED.value):
        group = [f for f in rest if f.category == Category.PRESENTATION_CHANGED.value and f.fields == [name]]
        if len(group) > 1:  # one presenter (a streamer's cuts, the warnings it logs) changed: one finding
            rest = [f for f in rest if f not in group]
            out.append(_merged(group, f"`{name}` presented otherwise"))
    for what in dict.fromkeys((known or {}).values()):
        # what a declared upstream failure does in its cases - raised, failed otherwise, left unchecked, logged
        every = out + rest + kept
        declared = {case for case, words in (known or {}).items() if words == what}
        group = [f for f in every if f.status in (*DIFFERENCES, Status.SKIPPED)
                 and (all((o.suite, o.case) in declared and declared_does(o) for o in f.outcomes)
                      or any((o.suite, o.case) in declared and raised(o) for o in f.outcomes))]  # and where else it raises
        if group and (len(group) > 1 or group[0].status is Status.SKIPPED):
            out, rest, kept = ([f for f in part if f not in group] for part in (out, rest, kept))
            out.append(_merged(group, f"a known upstream failure: {what}"))
    for category in dict.fromkeys(f.category for f in kept if f.status is Status.SKIPPED):
        group = [f for f in kept if f.status is Status.SKIPPED and f.category == category
                 and all(o.kind in TIMED_KINDS for o in f.outcomes)]
        if len(group) > 1:  # the machine's state or the run's noise: one reason for every timed field it left
            kept = [f for f in kept if f not in group]
            out.append(_merged(group, f"timed fields {category}"))
    return sorted(out + rest + kept, key=_rank)


TIMED_KINDS = ("latency", "memory")


def follows_step(o: Outcome) -> bool:
    """What a step that works (or fails) now takes with it in its own case: the fields it records for the
    first time (new), the capabilities it reports or no longer reports, the references it lets run or
    not, the fields that say they follow it, another step of the case moving the same way - never a
    difference with a cause of its own (a reference failing in the baseline too, a numeric change)."""
    if o.status is Status.NEW or str(o.detail).startswith("follows the"):
        return True
    if o.category in (Category.FEATURE_ADDED, Category.FEATURE_REMOVED, Category.PATH_LOST, Category.REFERENCE_LOST):
        return True
    if o.field == "warnings" and o.category is Category.PRESENTATION_CHANGED:  # what the failing step logged
        return True
    return step_fixed(o) is not None or step_broken(o) is not None


def _crash_cause(o: Outcome) -> str:
    exc = exception_of(o) or failure_of(o)
    what = "one exception raised now" if exception_of(o) else "one failure now"
    return f"{what}: `{exc if len(exc) <= 120 else exc[:117] + '...'}`"


def _take(pool: list[Finding], inside: Callable[[Outcome], bool]) -> tuple[list[Finding], list[Finding]]:
    """The parts of `pool`'s findings that `inside` claims, and the pool without them."""
    taken: list[Finding] = []
    left: list[Finding] = []
    for f in pool:
        claimed, rest = _split(f, inside)
        taken += [claimed] if claimed is not None else []
        left += [rest] if rest is not None else []
    return taken, left


def _steps(rest: list[Finding], kept: list[Finding], crashes: list[Finding]
           ) -> tuple[list[Finding], list[Finding], list[Finding], list[Finding]]:
    """A checkpoint's load that works now or fails now, and what follows from it: the fixes (breaks) of
    every case of that model whose step raised the same exception type (each case loads it; the load
    fields - load, load_error, loading_info - of that model moving the same way), and the other
    differences and new fields of those cases (a checkpoint that loads now generates, records the
    fields it could not, and loads its MTP head). Then a step of one case that raised in the baseline
    and works now, with the differences of its case. Returns (rest, kept, crashes, merged)."""
    models = {o.case.split(".", 1)[0] for f in rest + kept + crashes for o in f.outcomes}
    out: list[Finding] = []
    for moved in (step_fixed, step_broken):
        loads: dict[str, str] = {}
        for o in [o for f in rest + crashes for o in f.outcomes if o.field in LOAD_FIELDS and moved(o) is not None]:
            subject = subject_of(o.case, models)
            loads[subject] = loads.get(subject) or moved(o) or ""
        for subject, kind in loads.items():
            def on_load(o: Outcome, s: str = subject, k: str = kind, m: Callable = moved) -> bool:
                return (subject_of(o.case, models) == s and m(o) is not None
                        and (o.field in LOAD_FIELDS or (bool(k) and m(o) == k)))
            group = [f for f in rest + crashes if all(on_load(o) for o in f.outcomes)]
            cases = {(o.suite, o.case) for f in group for o in f.outcomes}
            followers, pool = _take([f for f in rest + kept if f not in group and f.status in (*DIFFERENCES, Status.NEW)],
                                    lambda o, c=cases: (o.suite, o.case) in c and follows_step(o))
            if len(group) + len(followers) > 1:
                untouched = [f for f in rest + kept if f in group or f.status not in (*DIFFERENCES, Status.NEW)]
                rest = [f for f in pool + untouched if f.status in DIFFERENCES and f not in group]
                kept = [f for f in pool + untouched if f.status not in DIFFERENCES and f not in group]
                crashes = [f for f in crashes if f not in group]
                how = f"works now (it raised {kind} in the baseline)" if moved is step_fixed else (
                    f"fails now ({kind or 'see its fields'})")
                out.append(_merged(group + followers, f"the load of {subject} {how}"))
    for f in [f for f in rest if all(step_fixed(o) is not None for o in f.outcomes)]:
        # a step that works now in these cases: what their cases report now follows it (one finding, whatever
        # the number of cases - 36 assisted cases on sliding-window models generating once the crop works)
        cases = {(o.suite, o.case) for o in f.outcomes}
        followers, pool = _take([g for g in rest + kept if g is not f and g.status in (*DIFFERENCES, Status.NEW)],
                                lambda o, c=cases: (o.suite, o.case) in c and follows_step(o))
        if not followers:
            continue
        rest = [g for g in pool if g.status in DIFFERENCES]
        kept = [g for g in pool if g.status not in DIFFERENCES]
        o = f.outcomes[0]
        subjects = list(dict.fromkeys(subject_of(x.case, models) for x in f.outcomes))
        gone = exception_gone(o)
        what = (f"one exception gone: `{gone if len(gone) <= 120 else gone[:117] + '...'}`" if gone else
                f"a step of {subjects[0] if len(subjects) == 1 else f'{len(subjects)} models'} raised "
                f"{step_fixed(o) or 'an error'} in the baseline and works now")
        out.append(_merged([f, *followers], what))
    return rest, kept, crashes, out


def _in_case(rest: list[Finding], kept: list[Finding], crashes: list[Finding]
             ) -> tuple[list[Finding], list[Finding], list[Finding]]:
    """What a call raising now takes with it in its own cases: a capability they lost (the rollback
    `rollback_supported` no longer reports), an in-run reference that cannot run, a difference quoting
    the exception's message (the warning that logs it) - its consequences, in its finding. And a
    capability a case lost with the in-run references of that case that cannot run without it
    (`supports_sanitize_control_tokens` and `sanitized_content_is_text`)."""
    def consequence(o: Outcome, key: str) -> bool:
        if o.category in (Category.REFERENCE_LOST, Category.FEATURE_REMOVED, Category.PATH_LOST):
            return True
        return bool(key) and key in numbers_masked(f"{o.detail} {o.diff}")

    singles = [f for f in rest if any(raised(o) for o in f.outcomes)]
    rest = [f for f in rest if f not in singles]
    merged: list[Finding] = []
    for crash in crashes + singles:
        first = next((o for o in crash.outcomes if raised(o)), crash.outcomes[0])
        key = failure_key(first)
        cases = {(o.suite, o.case) for o in crash.outcomes if raised(o)}
        followers, rest = _take(rest, lambda o, c=cases, k=key: (o.suite, o.case) in c and consequence(o, k))
        if followers:
            crash = _merged([crash, *followers], crash.cause or _crash_cause(first))
        merged.append(crash)
    for f in [f for f in rest if all(o.kind == "capability" and o.category is Category.FEATURE_REMOVED for o in f.outcomes)]:
        cases = {(o.suite, o.case) for o in f.outcomes}
        lost, pool = _take([g for g in rest if g is not f], lambda o, c=cases: (o.suite, o.case) in c
                           and o.category is Category.REFERENCE_LOST)
        if lost:
            rest = pool
            merged.append(_merged([f, *lost], f"`{f.fields[0]}` lost: the in-run references that need it cannot run"))
    return rest, kept, merged


def _by_case(f: Finding) -> list[Finding]:
    """A finding's outcomes split per case, each a finding of the same key."""
    cases = dict.fromkeys((o.suite, o.case) for o in f.outcomes)
    if len(cases) == 1:
        return [f]
    return [Finding(f.key, [o for o in f.outcomes if (o.suite, o.case) == c]) for c in cases]


def _group(listed: list[Outcome]) -> list[Finding]:
    """Non-pass outcomes grouped by cause (a crashing case's missing fields follow its error)."""
    error_cases = {(o.suite, o.case): cause(o) for o in listed if raised(o)}  # any call that raises now
    error_cases.update({(o.suite, o.case): cause(o) for o in listed  # the case's own error wins
                        if o.field == ERROR_FIELD and o.category in ERROR_CATEGORIES})
    findings: dict[tuple[str, str, str, str, str], Finding] = {}
    folded: list[tuple[tuple[str, str, str, str, str], Outcome]] = []
    for o in listed:
        owner = error_cases.get((o.suite, o.case))
        if (o.status is Status.MISSING or o.category is Category.MISSING_FIELD) and owner is not None:
            folded.append((owner, o))
            continue
        key = cause(o)
        findings.setdefault(key, Finding(key)).outcomes.append(o)
    for owner, o in folded:
        findings[owner].follows.append(o)
    return sorted(findings.values(), key=lambda f: (STATUS_RANK.get(f.status, 3), -len(f.cases), f.key))


def numbered(findings: list[Finding]) -> list[tuple[str, Finding]]:
    """Every finding with its number in reading order: '1', '2', ...; those under a changed
    checkpoint '1.1', '1.2', ..."""
    out: list[tuple[str, Finding]] = []
    for i, f in enumerate(findings, 1):
        out.append((str(i), f))
        out += [(f"{i}.{j}", g) for j, g in enumerate(f.under, 1)]
    return out


def every_finding(findings: list[Finding]) -> list[Finding]:
    """The findings and those under them, in reading order."""
    return [f for _, f in numbered(findings)]


def headline(findings: list[Finding], verdict: str | None = None) -> str:
    """'N distinct findings (R regression, C changed, ...)' for the top of a report - those under a
    changed checkpoint counted too; 'no findings: every field passed' when there are none and the
    run's `verdict` is a pass - never beside a run that regressed, failed or broke (an injected fault
    nothing detected, a write that failed: the verdict says so, the headline does not contradict it)."""
    every = every_finding(findings)
    if not every:
        if verdict in (None, "pass", "changed"):
            return "no findings: every field passed"
        return f"no field findings, but the verdict is {str(verdict).upper()} (the run's reason is stated with it)"
    per: dict[str, int] = {}
    for f in every:
        per[f.status.value] = per.get(f.status.value, 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in per.items())
    return f"{len(every)} distinct finding{'s' if len(every) != 1 else ''} ({parts})"


@dataclass(frozen=True)
class Findings:
    """The findings of one run, grouped once (`Findings.of`) and handed to every renderer - the
    terminal summary, summary.md, index.html, the matrix's links, `harness repro N`'s lookup - so
    that each shows the same findings under the same numbers. `grouped`: the top-level findings in
    order (`group_findings`); `numbered`: every finding with its number, those under a changed
    checkpoint included ('1', '1.1', ...). The headline is a method of the verdict: the grouping
    depends on the outcomes alone, but the verdict can still turn 'error' after rendering (a report
    that could not be written), and the headline never contradicts it."""

    grouped: tuple[Finding, ...]
    numbered: tuple[tuple[str, Finding], ...]

    @classmethod
    def of(cls, results: Results) -> Findings:
        return cls.of_outcomes(results.outcomes)

    @classmethod
    def of_outcomes(cls, outcomes: Iterable[Outcome]) -> Findings:
        grouped = group_findings(outcomes)
        return cls(tuple(grouped), tuple(numbered(grouped)))

    @property
    def every(self) -> list[Finding]:
        """The findings and those under them, in reading order (`every_finding`)."""
        return [f for _, f in self.numbered]

    def number(self, number: str) -> Finding | None:
        """The finding numbered `number` ('2', '1.3'); None when there is none."""
        return dict(self.numbered).get(number)

    def headline(self, verdict: str | None = None) -> str:
        return headline(list(self.grouped), verdict)


def library_hint(results: Results) -> str:
    """What to do when every regression is an in-run reference the library failed (no record needed to
    see it: a user's first run on a model of theirs included) - a finding in transformers to report,
    which `harness regen` then records as a tracked known deviation; '' otherwise. A clause: the
    verdict line and summary.md put it after a dash, the page makes it a sentence."""
    regressed = [o for o in results.outcomes if o.status is Status.REGRESSION]
    if not regressed or any(o.against != "reference" for o in regressed):
        return ""
    return (f"{len(regressed)} field(s) fail the run's own references (findings in the library, not differences "
            "from a record): report them upstream, then `harness regen` records them as tracked known deviations, so "
            "later runs pass while they stay as they are")
