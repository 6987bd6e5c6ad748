"""What `harness regen` would do to the current env's records, and doing it.

`diff_records(old, new, complete)` lists, per record file, the fields a regeneration adds,
removes and changes; `apply_regen` writes them (harness/cli/regen.py shows them for review).

A latency field keeps one measurement per hardware class (`latency_field`). A field counts as
changed only when its kind's own rule says so (`compare.compare_field` with the
two records' envs: status pass = unchanged, e.g. last-digit float noise in a tensor or a different
thread count); the record's env fingerprint alone is never a change. An unchanged field keeps its
old value, so a regen's diff in review shows real changes only.

`apply_regen` is one transaction (`GoldenStore.replace_records`): the env's full new set is built
next to it and swapped in, so a killed regen leaves the old set or the new set whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from harness.schema import Category, Field, Record, RecordedReference, RecordError, Status
from harness.store.records import GoldenStore

if TYPE_CHECKING:  # harness.checking.compare pulls in numpy and scipy: imported when diffing
    from harness.checking.compare import Policy


@dataclass(frozen=True)
class RecordChange:
    """One record file of the current env: what regenerating it would do."""

    name: str  # suite/case
    change: str  # "added", "removed", "changed"; "extended": only latency measurements added (a class, a field)
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[tuple[str, str], ...] = ()  # (field, 'key: old -> new' summary)
    record: Record | None = None  # the new record ("removed": None)
    note: str = ""
    machine: str = ""  # "changed": what differs of the machine the old record was made on ("" the same)
    extended: tuple[str, ...] = ()  # latency fields that gain a measurement (this machine's class), nothing else
    new_measurements: tuple[str, ...] = ()  # of those, fields the record lacked (never judgeable before)


def field_summary(old: dict[str, Any], new: dict[str, Any]) -> str:
    """One line of "key: old -> new" changes of one field's JSON (kind, value, extras)."""
    from harness.checking.humane import change_detail

    return change_detail(old, new, limit=2)


def _alike(old: Any, new: Any, floats: Any) -> bool:
    """Equal in structure - the same keys, list lengths, strings, ints and flags - with each pair of
    numbers where either is a float judged by `floats(old, new)`."""
    if isinstance(old, float) or isinstance(new, float):
        return (isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(old, bool)
                and floats(old, new))
    if isinstance(old, dict) and isinstance(new, dict):
        return old.keys() == new.keys() and all(_alike(old[k], new[k], floats) for k in old)
    if isinstance(old, list) and isinstance(new, list):
        return len(old) == len(new) and all(_alike(a, b, floats) for a, b in zip(old, new, strict=True))
    return old == new


def same_shape(old: Any, new: Any) -> bool:
    """Equal up to the values of floats: the same keys, list lengths, strings, ints and flags (an
    extra a suite added - e.g. `follows`, `loaded_as` - or dropped is a change; float noise is not)."""
    return _alike(old, new, lambda a, b: True)


# extras that describe how a statistical field was checked, not what was observed: each follows from
# the run's per-test alpha, which moves whenever a case is added anywhere in the run (0.01 / 390 ->
# 0.01 / 397 tests moved every sampling record's alpha, power and detectable TV, and regen called 14
# records of 5.0.0 changed whose samples were identical)
CHECK_PARAMETERS = frozenset({"alpha", "holm_level", "power", "detectable_tv", "detectable_at_power", "power_at_tv",
                              "statistical_fields"})


# extras that follow from the oracle's last float digits, not from what was observed: where the
# largest of many 1e-8 TVs sits, how expected frequencies pool into bins. On another CPU (this
# project's machines change between sessions) they move while the observation and the verdict do not
# (2026-12-02: 34 of 347 records of 5.24.0 'changed' that way on an Intel Xeon after an AMD EPYC regen)
LOCATORS = frozenset({"worst_at", "bins"})
FLOAT_NOISE = 1e-5  # relative: the oracle's float32 last digits across CPUs (seen: 1e-7)
# absolute, for values near 0 and for a residual: an expected frequency 0.0 on one CPU, 1.5e-9 on another;
# a joint's pooled 'other' bucket (1 - the sum of the rest, so it carries their errors) 0.0025267 on an
# AVX512 CPU, 0.0025269 on an AVX2 one (2026-12-04). Far under the white box's detectable TV of 1e-5.
FLOAT_FLOOR = 1e-6


def close(old: Any, new: Any) -> bool:
    """`same_shape`, with every float pair within `FLOAT_NOISE` (relative) or `FLOAT_FLOOR` of each other."""
    return _alike(old, new, lambda a, b: abs(a - b) <= max(FLOAT_NOISE * max(abs(a), abs(b)), FLOAT_FLOOR))


def field_unchanged(name: str, before: Field, after: Field, policy: Policy) -> bool:
    """True when `after` is `before` for regen purposes:
    - equal JSON;
    - the same value and extras up to float noise (`close`), the check's own parameters
      (`CHECK_PARAMETERS`) and the locators (`LOCATORS`) - a statistical field whose draws are
      identical although the comparison of two records can only say "not checked", a known
      deviation's TV in its 7th digit;
    - or the kind's comparison passes (tolerance, tie-flip, statistical noise) under `policy` with
      the two records' envs, and the extras keep their shape (`same_shape`; a locator's value aside)."""
    from harness.checking.compare import compare_field

    if before.to_json() == after.to_json():
        return True
    a, b = before.extras or {}, after.extras or {}
    if before.kind != after.kind or set(a) != set(b):
        return False
    if close(before.to_json()["value"], after.to_json()["value"]):
        if all(close(a[k], b[k]) for k in a if k not in CHECK_PARAMETERS | LOCATORS):
            return True
    if not all(same_shape(a[k], b[k]) for k in a if k not in LOCATORS):
        return False
    return compare_field(name, after, before, policy).status is Status.PASS


def reference_unchanged(before: RecordedReference | None, after: RecordedReference) -> bool:
    """A recorded reference verdict is unchanged for regen purposes when its kind, status and
    category are (a tensor's detail quotes numbers that move within the comparer's tolerance; a pass
    that is `identical` on one CPU and a `tolerated-drift` of 2e-8 on another is the same pass) - and,
    for a failing exact reference, its detail too: where the library and the oracle differ is what a
    rerun of the same env matches it by (`oracles.same_failure`)."""
    if before is None or (before.kind, before.status) != (after.kind, after.status):
        return False
    passing = after.status == Status.PASS.value
    drift = {Category.NONE.value, Category.TOLERATED_DRIFT.value}
    if before.category != after.category and not (passing and {before.category, after.category} <= drift):
        return False
    return after.kind != "exact" or not after.failed or before.detail == after.detail


JUDGE_ALPHA = 1e-5  # below a full default run's per-test alpha (0.01 / ~310 golden tests = 3.2e-5)


RECORDABLE_SLOWDOWN = 0.5  # a measurement whose rerun against itself detects no slowdown under 50 % is not kept


def judgeable(name: str, entry: dict[str, Any], env: dict[str, Any] | None, policy: Policy) -> bool:
    """A latency measurement a later run can judge: taken on a quiet machine, and against itself
    detecting a slowdown under `RECORDABLE_SLOWDOWN` at `JUDGE_ALPHA` (tests/test_compare.py holds
    every committed entry to this). This is what is worth recording, not a pass: whether a check
    against it passes is `latency_tolerance`'s (a record-path field detecting only 20 % is `not
    checked` at a 5 % tolerance, and still the best record this machine has)."""
    from harness.checking.compare import compare_field
    from harness.checking.compare_stats import busy
    from harness.store.env import hardware_class

    if busy(entry, policy.thresholds):
        return False
    f = Field("latency", {"by_hardware": {hardware_class(env or {}): entry}})
    same = replace(policy, alpha=min(policy.alpha, JUDGE_ALPHA), observed_env=env, baseline_env=env)
    got = compare_field(name, f, f, same)
    return got.status is Status.PASS or (
        got.category == Category.NOT_CHECKED and got.diff.get("detectable_slowdown", math.inf) <= RECORDABLE_SLOWDOWN)


def drifted(name: str, before: Field, after: Field, policy: Policy) -> bool:
    """The comparison of `after` with `before` is not judged because the calibration's time moved
    beyond `latency_calibration_drift`: a measurement of another machine state, never recorded over
    a judgeable one (a regen at a slow moment of the host would otherwise rewrite every latency record)."""
    from harness.checking.compare import compare_field

    got = compare_field(name, after, before, policy)
    return got.category is Category.NOT_JUDGED and got.diff.get("busy") == "drift"


def latency_field(name: str, before: Field | None, after: Field, policy: Policy) -> tuple[Field | None, bool]:
    """(the latency field to record, unchanged?). A record keeps one measurement per hardware class
    (``{"by_hardware": {class: ...}}``), and only measurements a later run can judge (`judgeable`):

    - one that cannot be judged (a busy machine, too noisy to see `RECORDABLE_SLOWDOWN`) is never
      recorded over an existing record; where this class's recorded one cannot be judged either, it
      is dropped - a later run then says the class is not recorded, instead of never judging it;
    - a recorded one that cannot be judged is replaced by one that can;
    - otherwise this machine's is added, or replaced when it was taken another way (`same_method`:
      within one env only the method or the host can differ, and the host is not recorded over a
      judgeable measurement); the other classes' are kept.
    A field the record lacks (a new field or a new record) is recorded in the same form, only if
    judgeable: (None, False) otherwise - the field is left out."""
    from harness.checking.compare_stats import latency_entries

    hw, entry = next(iter(latency_entries(after, policy.observed_env).items()))
    if before is None:
        if not judgeable(name, entry, policy.observed_env, policy):
            return None, False
        return Field("latency", {"by_hardware": {hw: entry}}, after.extras), False
    old = latency_entries(before, policy.baseline_env)
    old_ok = hw in old and judgeable(name, old[hw], policy.observed_env, policy)
    if not judgeable(name, entry, policy.observed_env, policy):
        if hw in old and not old_ok:
            return Field("latency", {"by_hardware": {k: v for k, v in old.items() if k != hw}}, before.extras), False
        return before, True
    if old_ok and field_unchanged(name, before, after, policy):
        return before, True
    if old_ok and drifted(name, before, after, policy):  # measured in another machine state: not over it
        return before, True
    if old_ok and same_method(old[hw], entry, before.extras, after.extras):  # the same env, timed the same way:
        return before, True  # what differs is the host's state, not the library (see `same_method`)
    return Field("latency", {"by_hardware": {**old, hw: entry}}, after.extras), False


# functions of the timings (the serving paths' too: the compile's seconds, generate_batch's wall time beside the
# sequential calls - a regen on an unchanged checkout read them as another method, 1 changed in every env)
TIMED_EXTRAS = frozenset({"ratio_to_calibration", "speedup", "theoretical_speedup", "compile_seconds",
                          "continuous_seconds", "continuous_speedup_over_generate", "continuous_tokens_per_second"})


def same_method(old: dict[str, Any], new: dict[str, Any], old_extras: dict[str, Any] | None,
                new_extras: dict[str, Any] | None) -> bool:
    """Two judgeable measurements of one latency field on one hardware class, taken the same way:
    the same keys, as many samples, the same calibration, and the same untimed extras (tokens,
    target forwards, acceptance, draft length - what the timed call did).

    A regen records into the env it runs in, whose key already fixes transformers, torch, dtype and
    device: between two such measurements the library cannot have changed, so a judged difference
    between them is the host's state (a neighbour, the clock, the cache - stop 47 saw the same env
    read 0, 2 and 1 latency fields changed over two quiet hours) and is not recorded over the
    judgeable record: `harness regen --dry-run` stays at 0 changed on an unchanged checkout. A
    change of method - other sample counts, another calibration, a timed call that now does other
    work (harness code changed what it times) - is re-recorded; `harness check` judges the library."""
    a, b = old_extras or {}, new_extras or {}
    return (set(old) == set(new) and len(old.get("samples", ())) == len(new.get("samples", ()))
            and old.get("calibration_of") == new.get("calibration_of") and set(a) == set(b)
            and all(close(a[k], b[k]) for k in a if k not in TIMED_EXTRAS))


def only_adds_a_class(before: Field, after: Field) -> bool:
    """`after` is `before` with one more hardware class's latency measurement and nothing else: a
    machine of a class the record has not seen (this project's machines change from session to
    session), not a change to anything recorded."""
    old, new = (f.to_json()["value"].get("by_hardware", {}) for f in (before, after))
    return (set(old) < set(new) and all(new[k] == old[k] for k in old)  # the extras quote the newest
            and same_shape(before.to_json().get("extras"), after.to_json().get("extras")))  # class's timings


def another_machine(before: dict[str, Any], after: dict[str, Any]) -> str:
    """What differs of the machine when the record was made on other CPU kernels than this run's (its
    rounding, and in bf16 its tie-breaks and draws, are that machine's), else ""."""
    from harness.store.env import kernel_differences

    return "; ".join(kernel_differences(after, before)[0])


def diff_records(old: dict[tuple[str, str], Record | RecordError], new: dict[tuple[str, str], Record],
                 complete: bool = True, policy: Policy | None = None) -> list[RecordChange]:
    """Per (suite, case, field): what the new records add, remove and change.

    A partial run (`complete=False`: deselected or failing tests) removes nothing: records it did
    not produce are left alone and fields it did not observe are carried over from the old record.
    Fields are compared with `field_unchanged` (`policy` gives alpha and thresholds; its envs are
    each record's); an unchanged field keeps its old value in the new record.
    """
    from harness.checking.compare import Policy

    policy = policy or Policy()
    changes = []
    for key in sorted(set(old) | set(new)):
        name = "/".join(key)
        before, after = old.get(key), new.get(key)
        if after is None:
            if complete:
                fields = tuple(before.fields) if isinstance(before, Record) else ()
                changes.append(RecordChange(name, "removed", removed=fields))
        elif before is None:
            same = replace(policy, observed_env=after.env, baseline_env=after.env)
            fields = {f: latency_field(f, None, v, same)[0] if v.kind == "latency" else v for f, v in after.fields.items()}
            after = replace(after, fields={f: v for f, v in fields.items() if v is not None})
            if after.fields or after.references:
                changes.append(RecordChange(name, "added", added=tuple(after.fields), record=after))
        elif isinstance(before, RecordError):
            changes.append(RecordChange(name, "changed", added=tuple(after.fields), record=after,
                                        note=f"replaces an unreadable record ({before.reason})"))
        else:
            if not complete:
                after = replace(after, fields={**before.fields, **after.fields})
            same = replace(policy, observed_env=after.env, baseline_env=before.env)
            fields, kept, extended, newly = dict(after.fields), set(), [], set()
            for f, v in after.fields.items():
                if v.kind == "latency":
                    kept_field, unchanged = latency_field(f, before.fields.get(f), v, same)
                    if kept_field is None:  # a new field measured too busy to be judged: not recorded
                        del fields[f]
                        continue
                    fields[f] = kept_field
                    if not unchanged and f in before.fields and only_adds_a_class(before.fields[f], fields[f]):
                        extended.append(f)
                        kept.add(f)
                        continue
                    if f not in before.fields:  # judgeable now, where the record held no measurement (its
                        extended.append(f)  # earlier runs were too busy to keep one): nothing recorded changes
                        newly.add(f)
                        continue
                else:
                    unchanged = f in before.fields and field_unchanged(f, before.fields[f], v, same)
                    fields[f] = before.fields[f] if unchanged else v
                if unchanged:
                    kept.add(f)
            if not complete:
                after = replace(after, references={**before.references, **after.references})
            refs = {n: before.references[n] if reference_unchanged(before.references.get(n), r) else r
                    for n, r in after.references.items()}
            after = replace(after, fields=fields, references=refs)
            added = tuple(f for f in after.fields if f not in before.fields and f not in newly)
            added += tuple(f"reference:{n}" for n in refs if n not in before.references)
            removed = tuple(f for f in before.fields if f not in after.fields)
            removed += tuple(f"reference:{n}" for n in before.references if n not in refs)
            changed = tuple((f, field_summary(before.fields[f].to_json(), after.fields[f].to_json()))
                            for f in after.fields if f in before.fields and f not in kept)
            changed += tuple((f"reference:{n}", f"{before.references[n].status} -> {r.status}")
                             for n, r in refs.items() if n in before.references and r is not before.references[n])
            if added or removed or changed:
                changes.append(RecordChange(name, "changed", added, removed, changed, after, extended=tuple(extended),
                                            machine=another_machine(before.env, after.env),
                                            new_measurements=tuple(sorted(newly))))
            elif extended:
                changes.append(RecordChange(name, "extended", record=after, extended=tuple(extended),
                                            new_measurements=tuple(sorted(newly))))
    return changes


def apply_regen(store: GoldenStore, key: str, changes: list[RecordChange]) -> None:
    """Write the current env's changed records and delete the removed ones, as one transaction
    (the env's records are the old set or the new set, whatever happens). OS errors propagate."""
    write = [c.record for c in changes if c.record is not None]
    remove = [tuple(c.name.split("/", 1)) for c in changes if c.record is None]
    store.replace_records(key, write, remove)  # type: ignore[arg-type]
