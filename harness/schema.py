"""The nouns every part of the harness shares, and where each one lives.

Data flows one way (docs/design.md):

    Case --Subject--> Observation (named Fields) --golden store--> Record
    Field + baseline Field --compare (per kind)--> Outcome --run--> Results (results.json)

Defined here, as plain data with a stable JSON form:

- `Case`: one thing a suite checks (a model on a decoding path, a model, a contract); its `id`
  names the record file ``<golden_dir>/<env-key>/<suite>/<case id>.json``.
- `Field`: one observed value with its comparison `kind` (see `KINDS`) and `extras`.
- `Observation`: the named fields a subject observed for one case.
- `Record`: an observation as stored for one env (with the env's fingerprint and schema version).
- `Status` and `Category`: the verdict on one field and the word that refines it; the comparer
  (harness/checking/compare.py), the checking core (harness/checking/core.py), the report and its CSS use
  these two vocabularies only.
- `Outcome`: (suite, case, field, status, category, detail, diff) - what the checking core says.
- `Results`: a run's outcomes plus both environments: results.json, read by the report and CLI.

Elsewhere: subjects (harness/subjects/) produce observations, the store (harness/store/records.py)
reads and writes records, the comparers (harness/checking/compare.py) judge one field, the checking core
(harness/checking/core.py) judges a case, the plugin (harness/plugin/) wires that into pytest.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 2  # 2: a record also holds its case's in-run reference verdicts (`RecordedReference`)
# the env's version strings: names of releases, never free text (a version is shown in reports, file
# names and `harness repro`'s scripts - a quote or a newline in one is refused when a record is read)
ENV_VERSIONS = ("transformers", "torch", "tokenizers", "safetensors", "python")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63}")
READABLE_SCHEMAS = (1, 2)  # a schema-1 record is a schema-2 record without references
RESULTS_VERSION = 1

# Field kinds: the kind decides how a field is compared (harness/checking/compare.py, docs/design.md).
KINDS = ("exact", "tokens", "tensor", "rate", "distribution", "latency", "memory", "capability", "checkpoint",
         "deviation")
STATISTICAL_KINDS = ("rate", "distribution", "latency")


class Status(str, Enum):
    PASS = "pass"
    CHANGED = "changed"  # differs within the policy of an intended change: needs a regen
    REGRESSION = "regression"  # fails the run
    NEW = "new"  # no baseline to compare with (written, reported)
    MISSING = "missing"  # in the baseline, not observed this run (a regression under --strict / in CI)
    SKIPPED = "skipped"  # not applicable, with the reason
    INFO = "info"  # information shown beside the checks (e.g. an exact bias point): never a check, never a pass

    def __str__(self) -> str:
        return self.value


class Category(str, Enum):
    """Refines a status for the reader. One vocabulary for the comparers, the report and its CSS
    (every member has a `.cat-<value>` style in harness/report/report.css; a test checks that)."""

    NONE = ""
    # numerics
    TIE_FLIP = "tie-flip"  # greedy tokens diverge at a near-tie, across different numerics
    TOLERATED_DRIFT = "tolerated-drift"  # tensor values differ within the dtype's tolerance
    WITHIN_NOISE = "within-noise"  # counts differ, not significantly
    RNG_STREAM = "rng-stream"  # a seeded sampled stream differs while its sampled distribution still fits
    # statistics
    BIAS = "bias"  # a known, intended bias (ensemble verifier)
    UNDERPOWERED = "underpowered"  # fits, but the sample cannot rule out the smallest effect that matters
    NOT_CHECKABLE = "not-checkable"  # the observation cannot distinguish anything (one bin, nothing observed)
    DEVIATION = "deviation"  # an observed sampled quantity differs from its exact value (white box)
    KNOWN_DEVIATION = "known-deviation"  # ... the one the baseline record has (mechanism, positions, size)
    COVERAGE_LOST = "coverage-lost"  # an observation saw less than it must (fewer positions, hooks, pieces)
    NOT_CHECKED = "not-checked"  # the sample cannot rule out the smallest effect that matters: no verdict
    KNOWN_FAILURE = "known-failure"  # an in-run reference that fails in the baseline record too (not the upgrade's)
    DISTRIBUTION_MISMATCH = "distribution-mismatch"
    DISTRIBUTION_SHIFT = "distribution-shift"
    EXACT_DISTRIBUTION_CHANGED = "exact-distribution-changed"  # the exact (computed) distribution itself changed
    RATE_UP = "rate-up"
    RATE_DOWN = "rate-down"
    SLOWDOWN = "slowdown"
    SPEEDUP = "speedup"
    NOT_COMPARABLE = "not-comparable"  # e.g. latency across hardware classes
    NOT_JUDGED = "not-judged"  # latency measured on a machine too busy to judge (never a pass)
    MEMORY_GROWTH = "memory-growth"
    MEMORY_SAVING = "memory-saving"
    # features
    FEATURE_ADDED = "feature-added"
    FEATURE_REMOVED = "feature-removed"
    FEATURE_IGNORED = "feature-ignored"  # accepted before, silently does nothing now
    PATH_LOST = "path-lost"  # a decoding path that ran in the baseline does not run now (a regression)
    REFERENCE_LOST = "reference-lost"  # an in-run reference that ran in the baseline cannot run now (a regression)
    CAPABILITY_CHANGED = "capability-changed"
    NOT_APPLICABLE = "not-applicable"
    UNSUPPORTED = "unsupported"
    # errors: the subject's exception recorded as data
    FIXED = "fixed"  # raised before, generates now (changed, not a regression)
    BROKEN = "broken"  # generated before, raises now
    ERROR_CHANGED = "error-changed"  # another exception than before
    # your checkpoint
    CHECKPOINT_CHANGED = "checkpoint-changed"  # a file of your model differs from the baseline's (sha256)
    # records
    REAL_CHANGE = "real-change"
    PRESENTATION_CHANGED = "presentation-changed"  # the same result presented otherwise (a streamer's cuts): changed
    KIND_CHANGED = "kind-changed"
    INVALID_VALUE = "invalid-value"
    REGENERATED = "regenerated"
    MISSING_RECORD = "missing-record"  # --strict: a field without a baseline
    MISSING_FIELD = "missing-field"  # a baseline field (or record) nobody observed this run
    UNREADABLE_RECORD = "unreadable-record"
    RECORD_ADDED = "record-added"
    RECORD_REMOVED = "record-removed"
    FIELD_REMOVED = "field-removed"

    def __str__(self) -> str:
        return self.value


# What each word means, for a reader: the report's legend and docs/vocabulary.md (generated:
# `python -m harness.docs`) are built from these two tables; a test checks every member has a line.
STATUS_MEANING: dict[Status, str] = {
    Status.PASS: "compared with its baseline (a record, or an in-run reference) and within what the field allows",
    Status.CHANGED: "differs within the policy of an intended change: review it, `harness regen` accepts it",
    Status.REGRESSION: "differs in a way no policy allows: fails the run; never written as golden",
    Status.NEW: "no baseline to compare with yet: written as this env's record (a first run, a new case)",
    Status.MISSING: "in the baseline, not observed this run (a regression under --strict and in CI)",
    Status.SKIPPED: "not checked here, with the reason: not applicable, unsupported by this version, or a check that could not decide (its smallest detectable effect is named) - never a pass",
    Status.INFO: "information shown beside the checks (an exact bias, a measured size): never a check, never a pass",
}
CATEGORY_MEANING: dict[Category, str] = {
    Category.TIE_FLIP: "greedy tokens diverge at a near-tie of the top two logits, across different numerics",
    Category.TOLERATED_DRIFT: "tensor values differ within the dtype's tolerance",
    Category.WITHIN_NOISE: "counts differ, not significantly at the run's alpha",
    Category.RNG_STREAM: "a seeded sampled stream differs while its sampled distribution still fits (not a regression)",
    Category.BIAS: "a known, intended bias (the ensemble verifier), of the size computed exactly",
    Category.UNDERPOWERED: "fits, but the sample cannot rule out the smallest effect that matters",
    Category.NOT_CHECKABLE: "the observation cannot distinguish anything (one bin, nothing observed)",
    Category.DEVIATION: "a sampled quantity observed inside generate() differs from its exact value (white box)",
    Category.KNOWN_DEVIATION: "a deviation the baseline record has too (the same mechanism, positions and size)",
    Category.COVERAGE_LOST: "an observation saw less than it must (fewer positions, hooks or stream pieces)",
    Category.NOT_CHECKED: "the sample cannot rule out the smallest effect that matters: no verdict, never a pass",
    Category.KNOWN_FAILURE: "an in-run reference that fails in the baseline record too: not the upgrade's",
    Category.DISTRIBUTION_MISMATCH: "the sampled distribution does not fit the path's exact one",
    Category.DISTRIBUTION_SHIFT: "the sampled distribution moved from the baseline's",
    Category.EXACT_DISTRIBUTION_CHANGED: "the exact (computed) distribution itself changed",
    Category.RATE_UP: "a rate (acceptance, a count per step) rose significantly",
    Category.RATE_DOWN: "a rate (acceptance, a count per step) fell significantly",
    Category.SLOWDOWN: "slower than the baseline by more than the field's threshold, significantly",
    Category.SPEEDUP: "faster than the baseline, significantly",
    Category.NOT_COMPARABLE: "measured on another hardware class than the baseline's: not compared",
    Category.NOT_JUDGED: "latency measured on a machine too busy to judge: never a pass",
    Category.MEMORY_GROWTH: "peak memory grew past the field's threshold",
    Category.MEMORY_SAVING: "peak memory fell",
    Category.FEATURE_ADDED: "an argument, path or capability the baseline lacked",
    Category.FEATURE_REMOVED: "an argument, path or capability the baseline had is gone",
    Category.FEATURE_IGNORED: "accepted before and now silently does nothing",
    Category.PATH_LOST: "a decoding path that ran in the baseline does not run now",
    Category.REFERENCE_LOST: "an in-run reference that ran in the baseline cannot run now",
    Category.CAPABILITY_CHANGED: "what a call accepts or refuses changed",
    Category.NOT_APPLICABLE: "the case does not apply to this model or version",
    Category.UNSUPPORTED: "this version refuses the call on purpose (ValueError / NotImplementedError)",
    Category.FIXED: "raised before, generates now (a change to accept, not a regression)",
    Category.BROKEN: "generated before, raises now: the fields it no longer observes are listed under it",
    Category.ERROR_CHANGED: "raises another exception than before",
    Category.CHECKPOINT_CHANGED: "a file of your model differs from the baseline's (sha256): the differences follow from it",
    Category.REAL_CHANGE: "the value differs beyond what its kind tolerates",
    Category.PRESENTATION_CHANGED: "the same result presented otherwise (a streamer's cuts, a warning's text)",
    Category.KIND_CHANGED: "the field's comparison kind changed between the records",
    Category.INVALID_VALUE: "the observed value is not of the form its kind requires",
    Category.REGENERATED: "a regression or change whose record `harness regen` (--force-regen) rewrote",
    Category.MISSING_RECORD: "--strict: a field without a baseline record",
    Category.MISSING_FIELD: "a baseline field (or record) nobody observed this run",
    Category.UNREADABLE_RECORD: "a golden record that cannot be read (corrupt, or another schema)",
    Category.RECORD_ADDED: "a record one env has and the other lacks (comparing two envs' records)",
    Category.RECORD_REMOVED: "a record the other env has and this one lacks (comparing two envs' records)",
    Category.FIELD_REMOVED: "a field the baseline record has that this record lacks",
}


@dataclass(frozen=True)
class Case:
    """One thing a suite checks. Frozen; `id` is stable text that names the record file.

    A generation case sets the decoding settings (path, cache, prompt, decoding, seed, ensemble
    weight, draft schedule, assistant); a case that is not a generation setting (one model, one API
    contract) gives its id as `name` and anything its probe needs as `params`.
    """

    model: str
    path: str = "plain"  # one of PATHS
    cache: str = "dynamic"  # "dynamic" | "static"
    prompt: str = ""  # prompt id (harness.zoo.prompts)
    decoding: str = "greedy"  # "greedy" | "sample"
    seed: int | None = None
    weight: float | None = None  # assistant_ensemble_weight
    draft_tokens: int | None = None  # a constant draft length (no confidence early stop)
    assistant: str | None = None
    new_tokens: int = 24
    name: str = ""  # explicit id (model-level and contract cases)
    params: tuple[tuple[str, Any], ...] = ()  # probe parameters, sorted by name

    @property
    def id(self) -> str:
        if self.name:
            return self.name
        parts = [self.model, self.path]
        if self.weight is not None:
            parts.append(f"w{self.weight}")
        parts += [self.cache, self.prompt, self.decoding if self.seed is None else f"{self.decoding}{self.seed}"]
        return ".".join(parts)

    @property
    def lossless(self) -> bool:
        """A greedy case on a path whose output must equal plain greedy decoding."""
        return self.path in LOSSLESS and self.decoding == "greedy"

    def plain(self) -> Case:
        """The plain-decoding twin of this case (same model, cache, prompt, decoding)."""
        return Case(self.model, "plain", self.cache, self.prompt, self.decoding, self.seed, new_tokens=self.new_tokens)

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)


PATHS = ("plain", "assisted", "prompt_lookup", "mtp", "ensemble", "early_exit")
LOSSLESS = ("assisted", "prompt_lookup", "mtp", "early_exit")


@dataclass(frozen=True)
class Field:
    """One observed value. `extras` carries what the comparison needs besides the value
    (e.g. per-step margins for tokens, dtype for tensors, exact probabilities for distributions)."""

    kind: str
    value: Any
    extras: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown field kind {self.kind!r}; expected one of {', '.join(KINDS)}")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value, **({"extras": self.extras} if self.extras else {})}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Field:
        return cls(kind=data["kind"], value=data["value"], extras=dict(data.get("extras", {})))


@dataclass(frozen=True)
class Reference:
    """An observed value and the value it must equal, computed in the same run (the reference
    engine's, or the same library's by another route: `implementations_differ` False)."""

    observed: Field
    expected: Field
    implementations_differ: bool = True


@dataclass(frozen=True)
class Note:
    """A field that is not compared: a skip with its reason (status `skipped`), or information shown
    beside the checks (status `info`: never a check, never counted as a pass)."""

    kind: str
    status: str
    detail: str
    category: str = ""
    diff: dict[str, Any] = field(default_factory=dict)


@dataclass
class Observation:
    """What a subject observed for one case, in the order it was observed: fields compared with
    the baseline record (`add`), values compared with a reference computed in the run
    (`reference`), fields not compared (`skipped`, `info`), data shown beside a field (`shows`),
    and `stopped`: the reason the rest of the case could not be observed (the test is then
    reported skipped, after its checks so far are in)."""

    fields: dict[str, Field] = field(default_factory=dict)
    references: dict[str, Reference] = field(default_factory=dict)
    notes: dict[str, Note] = field(default_factory=dict)
    shows: dict[str, dict[str, Any]] = field(default_factory=dict)
    stopped: str = ""

    def _claim(self, name: str) -> None:
        if name in self.fields or name in self.references or name in self.notes:
            raise ValueError(f"field {name!r} observed twice")

    def add(self, name: str, value: Any, kind: str = "exact", *, show: dict[str, Any] | None = None,
            **extras: Any) -> None:
        """Field `name`, compared with the baseline record's field of that name. `show`: data for
        the reader (e.g. a chart's series), never compared."""
        self._claim(name)
        self.fields[name] = Field(kind, value, extras)
        if show:
            self.shows[name] = dict(show)

    def reference(self, name: str, observed: Any, expected: Any, kind: str = "exact", *,
                  observed_extras: dict[str, Any] | None = None, expected_extras: dict[str, Any] | None = None,
                  implementations_differ: bool = True) -> None:
        """`observed` against `expected`, a value computed in this run (nothing read or written)."""
        self._claim(name)
        self.references[name] = Reference(Field(kind, observed, dict(observed_extras or {})),
                                          Field(kind, expected, dict(expected_extras or {})), implementations_differ)

    def skipped(self, name: str, kind: str, reason: str, category: str = "not-applicable") -> None:
        """Field `name` could not be checked on this case, and why."""
        self._claim(name)
        self.notes[name] = Note(kind, "skipped", reason, category)

    def info(self, name: str, detail: str, diff: dict[str, Any] | None = None, category: str = "") -> None:
        """Information shown beside the checks (e.g. an exact bias point): never a check."""
        self._claim(name)
        self.notes[name] = Note("exact", "info", detail, category, dict(diff or {}))

    def stop(self, reason: str) -> Observation:
        """The rest of the case cannot be observed (the test is reported skipped with `reason`)."""
        self.stopped = reason
        return self

    def merge(self, other: Observation) -> Observation:
        """Another observation's fields after this one's (each name still observed once)."""
        for name in [*other.fields, *other.references, *other.notes]:
            self._claim(name)
        self.fields.update(other.fields)
        self.references.update(other.references)
        self.notes.update(other.notes)
        self.shows.update(other.shows)
        self.stopped = self.stopped or other.stopped
        return self


class NotSupported(Exception):
    """The installed library has no support for what a case needs - a model family it does not have
    (harness/subjects/hf.py `family_gap`). Raised by a subject before anything runs; the plugin
    reports the case skipped (category unsupported) with this message as the reason, a per-version
    fact in results.json, never a harness error."""


class MissingExtra(NotSupported):
    """What a case needs is an optional extra of the harness that is not installed (torchao for the
    quantized suite: `pip install 'genharness[serving]'`): the case is reported skipped (unsupported)
    with the install line, and its records are neither checked nor `missing` - the environment that
    recorded them had the extra, this run cannot observe them (harness/plugin/session.py)."""


class RecordError(Exception):
    """A golden record that cannot be used. The message starts with the file's path."""

    def __init__(self, path: Path | str, reason: str):
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path}: {reason}")


# A record is strict JSON, which has no NaN or infinity: such a float is stored as this text, and a
# numeric kind reads it back as the float (numpy's float() of it: np.asarray(value, dtype=float)).
NON_FINITE = ("NaN", "Infinity", "-Infinity")


def non_finite_text(x: float) -> str:
    """How a record stores a non-finite float (one of `NON_FINITE`)."""
    return "NaN" if x != x else ("Infinity" if x > 0 else "-Infinity")


def _numbers(value: Any) -> bool:
    if isinstance(value, list):
        return all(_numbers(v) for v in value)
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) or value is None or value in NON_FINITE


def malformed(kind: str, value: Any, extras: Any) -> str:
    """Why a stored field cannot be compared as its kind ("" when it can): a record edited by hand
    or by another tool must fail naming the field, never compare as a mislabelled change."""
    if not isinstance(extras, dict):
        return f"'extras' must be a JSON object, got {type(extras).__name__} {extras!r}"
    ok = {
        "exact": True,
        "tokens": isinstance(value, list) and all(isinstance(v, int) or (isinstance(v, list) and all(
            isinstance(t, int) for t in v)) for v in value),
        "tensor": _numbers(value) or value == [],
        "rate": isinstance(value, dict) and (all(isinstance(value.get(k), int) for k in ("k", "n"))
                                             or isinstance(value.get("p"), (int, float))),
        "distribution": (isinstance(value, dict) and all(_numbers(v) for v in value.values())) or _numbers(value),
        "latency": isinstance(value, dict) and (_numbers(value.get("samples")) or (
            isinstance(value.get("by_hardware"), dict)
            and all(isinstance(e, dict) and _numbers(e.get("samples")) for e in value["by_hardware"].values()))),
        "memory": isinstance(value, dict) and all(isinstance(value.get(k), int) for k in ("peak_bytes", "allocated_bytes")),
        "capability": isinstance(value, (bool, dict, list)),
        "checkpoint": isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()),
        "deviation": isinstance(value, dict) and isinstance(value.get("tv"), (int, float))
        and not isinstance(value.get("tv"), bool),
    }[kind]
    return "" if ok else f"a {kind} value cannot be {type(value).__name__} {str(value)[:60]!r}"


@dataclass(frozen=True)
class RecordedReference:
    """The verdict of one in-run reference (an observation against the value its oracle computed in
    the same run: the reference engine, the harness's own search, another route of the library),
    as a record stores it (schema 2): its kind, status, category and one-line detail, and `measure`
    - the size of the failure where the comparer gives one (a tensor's max abs error), else None.
    Only the verdict is stored, never the two values: what a later run needs is whether this env's
    oracle agreed (harness/checking/oracles.py: a reference failing in the baseline too is known; a
    field moving toward its oracle is fixed)."""

    kind: str
    status: str
    category: str = ""
    detail: str = ""
    measure: float | None = None

    @property
    def failed(self) -> bool:
        return self.status == Status.REGRESSION.value

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "status": self.status, "category": self.category,
                                "detail": self.detail}
        return {**data, "measure": self.measure} if self.measure is not None else data

    @classmethod
    def from_outcome(cls, outcome: Outcome) -> RecordedReference:
        measure = outcome.diff.get("max_abs_err")
        ok = isinstance(measure, (int, float)) and not isinstance(measure, bool) and measure == measure
        return cls(outcome.kind, outcome.status.value, outcome.category.value, outcome.detail[:500],
                   float(measure) if ok and measure != float("inf") else None)

    @classmethod
    def from_json(cls, data: Any, path: Path | str, name: str) -> RecordedReference:
        if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("kind", "status")):
            raise RecordError(path, f"reference {name!r} needs 'kind' and 'status' as text")
        if data["status"] not in {s.value for s in Status}:
            raise RecordError(path, f"reference {name!r} has unknown status {data['status']!r}")
        measure = data.get("measure")
        if measure is not None and (not isinstance(measure, (int, float)) or isinstance(measure, bool)):
            raise RecordError(path, f"reference {name!r}: 'measure' must be a number, got {measure!r}")
        return cls(data["kind"], data["status"], str(data.get("category", "")), str(data.get("detail", "")),
                   None if measure is None else float(measure))


@dataclass
class Record:
    """One case's observed fields in one environment, as stored, with the verdicts of its in-run
    references (`references`, schema 2; none in a schema-1 record)."""

    suite: str
    case: str
    env: dict[str, Any]
    fields: dict[str, Field] = field(default_factory=dict)
    schema: int = SCHEMA_VERSION
    references: dict[str, RecordedReference] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = {
            "schema": SCHEMA_VERSION,
            "suite": self.suite,
            "case": self.case,
            "env": self.env,
            "fields": {name: f.to_json() for name, f in self.fields.items()},
        }
        if self.references:
            data["references"] = {name: r.to_json() for name, r in self.references.items()}
        return data

    @classmethod
    def from_json(cls, data: Any, path: Path | str, suite: str | None = None, case: str | None = None) -> Record:
        """Validate and build; every problem is a `RecordError` naming `path`."""
        if not isinstance(data, dict):
            raise RecordError(path, f"a record must be a JSON object, got {type(data).__name__}")
        schema = data.get("schema")
        if schema not in READABLE_SCHEMAS or isinstance(schema, bool):
            raise RecordError(path, f"unknown schema version {schema!r} (this harness reads schema "
                                    f"{', '.join(map(str, READABLE_SCHEMAS))})")
        for key in ("suite", "case", "env", "fields"):
            if key not in data:
                raise RecordError(path, f"missing key {key!r}")
        if case is not None and data["case"] != case:
            raise RecordError(path, f"record is for case {data['case']!r}, expected case {case!r}")
        if suite is not None and data["suite"] != suite:
            raise RecordError(path, f"record is for suite {data['suite']!r}, expected suite {suite!r}")
        if not isinstance(data["env"], dict) or not isinstance(data["fields"], dict):
            raise RecordError(path, "'env' and 'fields' must be JSON objects")
        for name in ENV_VERSIONS:
            version = data["env"].get(name)
            if name in data["env"] and not (isinstance(version, str) and _VERSION.fullmatch(version)):
                raise RecordError(path, f"env {name!r} is not a version ({str(version)[:60]!r}: a version is "
                                        "letters, digits and '.+!_-', at most 64 characters)")
        fields: dict[str, Field] = {}
        for name, raw in data["fields"].items():
            if not isinstance(raw, dict) or "kind" not in raw or "value" not in raw:
                raise RecordError(path, f"field {name!r} needs 'kind' and 'value'")
            if raw["kind"] not in KINDS:
                raise RecordError(path, f"field {name!r} has unknown kind {raw['kind']!r}")
            problem = malformed(raw["kind"], raw["value"], raw.get("extras", {}))
            if problem:
                raise RecordError(path, f"field {name!r}: {problem}")
            fields[name] = Field.from_json(raw)
        raw_refs = data.get("references", {})
        if not isinstance(raw_refs, dict) or (raw_refs and schema < 2):
            raise RecordError(path, "'references' must be a JSON object, in a record of schema 2")
        references = {name: RecordedReference.from_json(r, path, name) for name, r in raw_refs.items()}
        return cls(suite=data["suite"], case=data["case"], env=data["env"], fields=fields, schema=schema,
                   references=references)


@dataclass(frozen=True)
class Outcome:
    """What the checking core says about one field of one case.

    `detail` is human text (one line); `diff` is structured (e.g. deepdiff output, first
    divergence, test statistic) and is what the report renders as a table. `against` is
    "baseline" (a golden record) or "reference" (the reference engine, or another run of the
    subject). `p_value` is set by the statistical kinds (used for Holm; not written to JSON).
    """

    suite: str
    case: str
    field: str
    kind: str
    status: Status
    detail: str = ""
    category: Category = Category.NONE
    diff: dict[str, Any] = field(default_factory=dict)
    against: str = "baseline"
    p_value: float | None = None

    def __post_init__(self) -> None:
        # accept "pass" as well as Status.PASS; an unknown status or category fails here, not in a report
        object.__setattr__(self, "status", Status(self.status))
        object.__setattr__(self, "category", Category(self.category))

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        data["category"] = self.category.value
        del data["p_value"]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        category = LEGACY_CATEGORIES.get(data.get("category", ""), data.get("category", ""))
        return cls(**{**data, "status": Status(data["status"]), "category": Category(category)})


LEGACY_CATEGORIES = {"within-tolerance": "tolerated-drift"}  # results.json written before Category existed


def count_statuses(outcomes: list[Outcome]) -> dict[str, int]:
    """Outcomes per status, every status listed (in `Status` order)."""
    counts = {s.value: 0 for s in Status}
    for outcome in outcomes:
        counts[outcome.status.value] += 1
    return counts


RUN_ERRORS = ("error", "interrupted", "collection_errors", "write_errors")  # meta keys that make a run's verdict 'error'


@dataclass
class Results:
    """One run (or one offline comparison): the outcomes plus both environments."""

    env: dict[str, Any]  # the environment the observations were taken in
    baseline_env: dict[str, Any] | None  # the environment of the records compared against
    outcomes: list[Outcome] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # command line, duration, alpha, ...

    def counts(self) -> dict[str, int]:
        return count_statuses(self.outcomes)

    @property
    def verdict(self) -> str:
        """The one verdict of a run, from the facts its results hold - the report, JUnit and the
        exit code all read it (exit 2, 1, 1, 0, 0):

        'error'       the run itself broke: meta["error"] (pytest stopped, a render failed),
                      meta["interrupted"] (stopped by Ctrl-C: partial results),
                      meta["collection_errors"] (a suite that did not import) or meta["write_errors"]
                      (a record that could not be written) - it checked less than it claims;
        'regression'  an outcome failed;
        'failed'      a test failed other than by its golden verdict (meta["broken_tests"], meta["failed"]);
        'changed'     an outcome needs a regen (a change, or a baseline field no longer observed) -
                      a known deviation the baseline already holds (`tracked`) is none: regen
                      would change nothing;
        'pass'        none of these (the tracked deviations are listed beside it)."""
        meta = self.meta if isinstance(self.meta, dict) else {}
        if any(meta.get(key) for key in RUN_ERRORS):
            return "error"
        statuses = {o.status for o in self.outcomes}
        if Status.REGRESSION in statuses:
            return "regression"
        if meta.get("broken_tests") or meta.get("failed"):
            return "failed"
        if Status.MISSING in statuses or any(o.status is Status.CHANGED and o not in self.tracked
                                             for o in self.outcomes):
            return "changed"
        return "pass"

    @property
    def tracked(self) -> list[Outcome]:
        """Known upstream deviations the baseline already holds at this size (changed,
        known-deviation): findings in the library, reported every run, nothing to regenerate."""
        return [o for o in self.outcomes if o.status is Status.CHANGED and o.category is Category.KNOWN_DEVIATION]

    @classmethod
    def combine(cls, parts: list[Results], phases: list[str]) -> Results:
        """The phases of one run (e.g. the parallel one and the timing one of `harness check`) as one
        run: every outcome once (each phase collects every suite, so a record whose suite is gone is
        missing in both), the first part's envs and settings, the phases' durations added and their
        writes and broken tests joined; meta.phases says what each phase was."""
        first = parts[0]
        meta = dict(first.meta)
        meta["duration_s"] = round(sum(float(p.meta.get("duration_s", 0)) for p in parts), 3)
        for key in ("writes", "broken_tests"):
            meta[key] = [x for p in parts for x in p.meta.get(key, [])]
        observable = sorted({x for p in parts for x in p.meta.get("not_observable", [])})
        if observable:
            meta["not_observable"] = observable
        meta["phases"] = [{"phase": name, "duration_s": p.meta.get("duration_s"), "outcomes": len(p.outcomes),
                           "argv": p.meta.get("argv")} for name, p in zip(phases, parts, strict=True)]
        unique: dict[str, Outcome] = {}  # a fact both phases report (a deleted suite's missing field) counts once
        for o in (o for p in parts for o in p.outcomes):
            unique.setdefault(json.dumps(o.to_json(), sort_keys=True, default=str), o)
        outcomes = sorted(unique.values(), key=lambda o: (o.suite, o.case, o.field, o.against))
        return cls(env=first.env, baseline_env=first.baseline_env, outcomes=outcomes, meta=meta)

    def to_json(self) -> dict[str, Any]:
        return {
            "results_version": RESULTS_VERSION,
            "env": self.env,
            "baseline_env": self.baseline_env,
            "meta": self.meta,
            "outcomes": [o.to_json() for o in self.outcomes],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Results:
        if data.get("results_version") != RESULTS_VERSION:
            raise ValueError(
                f"results_version {data.get('results_version')!r} is not supported (expected {RESULTS_VERSION})"
            )
        return cls(
            env=data["env"],
            baseline_env=data.get("baseline_env"),
            meta=data.get("meta", {}),
            outcomes=[Outcome.from_json(o) for o in data["outcomes"]],
        )
