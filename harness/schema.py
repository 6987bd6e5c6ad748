"""The nouns every part of the harness shares: fields, observations, outcomes, results.

Data flows one way (see DESIGN.md): a subject or the reference engine produces an
`Observation` (named `Field`s); the golden store keeps it as a record; `compare` turns a pair
of fields into an `Outcome`; a run's outcomes plus both environments are `Results`, written as
`results.json`, which the report and the CLI read without running any model.

Everything here is plain data with a stable JSON form (`to_json` / `from_json`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

SCHEMA_VERSION = 1
RESULTS_VERSION = 1

# Field kinds: the kind decides how a field is compared (see compare.py and DESIGN.md).
KINDS = ("exact", "tokens", "tensor", "rate", "distribution", "latency", "capability")


class Status(str, Enum):
    PASS = "pass"
    CHANGED = "changed"  # differs within the policy of an intended change: needs a regen
    REGRESSION = "regression"  # fails the run
    NEW = "new"  # no baseline to compare with (written, reported)
    SKIPPED = "skipped"  # not applicable, with the reason

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Field:
    """One observed value. `extras` carries what the comparison needs besides the value
    (e.g. per-step margins for tokens, dtype for tensors, n for rates)."""

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
class Outcome:
    """What the comparison says about one field of one case.

    `detail` is human text (one line); `diff` is structured (e.g. deepdiff output, first
    divergence, test statistic) and is what the report renders as a table.
    `category` refines a status for the reader: "tie-flip", "tolerated-drift", "bias",
    "feature-added", "feature-removed", "real-change", ... or "" when nothing to add.
    """

    suite: str
    case: str
    field: str
    kind: str
    status: Status
    detail: str = ""
    category: str = ""
    diff: dict[str, Any] = field(default_factory=dict)
    against: str = "baseline"  # "baseline" (golden record) or "reference" (our engine)

    def __post_init__(self) -> None:
        # accept "pass" as well as Status.PASS; an unknown status fails here, not in a report
        object.__setattr__(self, "status", Status(self.status))

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        return cls(**{**data, "status": Status(data["status"])})


@dataclass
class Results:
    """One run (or one offline comparison): the outcomes plus both environments."""

    env: dict[str, Any]  # the environment the observations were taken in
    baseline_env: dict[str, Any] | None  # the environment of the records compared against
    outcomes: list[Outcome] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)  # command line, duration, alpha, ...

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Status}
        for outcome in self.outcomes:
            counts[outcome.status.value] += 1
        return counts

    @property
    def verdict(self) -> str:
        """'regression' if any outcome failed, else 'changed' if any needs a regen, else 'pass'."""
        statuses = {o.status for o in self.outcomes}
        if Status.REGRESSION in statuses:
            return "regression"
        if Status.CHANGED in statuses:
            return "changed"
        return "pass"

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
