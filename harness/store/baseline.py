"""Which recorded env a run compares with when none is named: its own records, else the env the
user recorded last before this one - the rerun after an upgrade.

A run whose env has no records of its own (a new transformers or torch version installed) would
otherwise compare with nothing: every field new, the verdict `pass`, and a crash the upgrade
brought recorded as golden. Its baseline is instead the nearest recorded env of the same device
and dtype (the key's tail: ``cpu-x86_64-fp32``, ``cuda-sm90-bf16``) under other library versions:

1. the nearest predecessor on both axes - transformers and torch each at most this run's (one
   axis moved, or both moved forward): the largest such (transformers, torch) pair;
2. else any env below this one in (transformers, torch) order (one axis went back): the largest;
3. else the nearest env above it (a downgrade: the rollback is checked against what you ran).

Envs whose key does not parse as ``tf<V>-torch<V>-<device>-<dtype>`` are never chosen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

_KEY = re.compile(r"^tf(?P<tf>[^-]+)-torch(?P<torch>[^-]+)-(?P<tail>.+)$")


@dataclass(frozen=True)
class Chosen:
    key: str
    why: str  # "the nearest earlier version of the same device and dtype", ...


def _parse(key: str) -> tuple[tuple[Version, Version], str] | None:
    match = _KEY.match(key)
    if not match:
        return None
    try:
        return (Version(match["tf"]), Version(match["torch"])), match["tail"]
    except InvalidVersion:
        return None


def nearest_recorded(current: str, recorded: list[str]) -> Chosen | None:
    """The env `current` compares with when it has no records of its own (None: nothing of the
    same device and dtype is recorded - a first run)."""
    here = _parse(current)
    if here is None:
        return None
    versions, tail = here
    same = {}
    for key in recorded:
        parsed = _parse(key)
        if key != current and parsed is not None and parsed[1] == tail and parsed[0] != versions:
            same[key] = parsed[0]
    if not same:
        return None
    both = [k for k, v in same.items() if v[0] <= versions[0] and v[1] <= versions[1]]
    if both:
        return Chosen(max(both, key=same.__getitem__), "your last recorded env: the nearest earlier versions "
                                                       "of the same device and dtype")
    below = [k for k, v in same.items() if v < versions]
    if below:
        return Chosen(max(below, key=same.__getitem__), "the nearest earlier recorded env of the same device "
                                                        "and dtype")
    return Chosen(min(same, key=same.__getitem__), "the nearest later recorded env of the same device and dtype "
                                                   "(this run is a downgrade)")
