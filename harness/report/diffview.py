"""Outcome.diff -> a readable view: known keys get a dedicated rendering, the rest a key/value table.

`diff_view` never raises: every section builder accepts any shape and falls back to the
generic table for what it does not recognise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.report.charts import Chart, acceptance_chart, relative_latency
from harness.report.fmt import (
    as_number,
    common_prefix_len,
    fmt_float,
    fmt_value,
    humanize,
    is_long,
    split_common,
    tail,
    to_json_text,
    truncate,
)

# Pairs rendered as "old -> new" with the diverging part highlighted.
CHANGE_PAIRS = (("old", "new"), ("old_text", "new_text"), ("expected", "observed"), ("expected", "actual"))

# Known scalar keys, in display order, with their labels.
METRIC_LABELS = {
    "max_abs_err": "max abs error",
    "max_rel_err": "max rel error",
    "atol": "atol",
    "rtol": "rtol",
    "p_value": "p-value",
    "p_slower": "p-value (slower)",
    "p_faster": "p-value (faster)",
    "alpha": "alpha",
    "statistic": "test statistic",
    "tv": "TV distance",
    "tv_upper": "TV upper bound",
    "ratio": "latency ratio",
    "baseline_ratio": "baseline ratio",
    "noise_band": "noise band",
    "tolerance": "tolerance",
    "median_old": "median old",
    "median_new": "median new",
    "w": "ensemble weight w",
    "tv_exact": "TV exact",
    "tv_measured": "TV measured",
    "tv_ci": "TV interval",
    "acceptance_exact": "acceptance exact",
    "acceptance_measured": "acceptance measured",
    "acceptance_ci": "acceptance interval",
}


@dataclass(frozen=True)
class Change:
    label: str
    old: str
    new: str
    prefix: str  # common leading part (shown muted)
    old_rest: str  # where old diverges (highlighted)
    new_rest: str
    rows: tuple[DeepRow, ...] = ()  # old and new are both mappings: one row per key instead


@dataclass(frozen=True)
class DivergenceRow:
    """One entry of a "divergences" list (compare.compare_tokens: one per batch row)."""

    row: str
    step: str
    old: str
    new: str
    margin: str
    tie_eps: str
    tie_flip: str
    other: str


@dataclass(frozen=True)
class Divergence:
    step: str
    old_token: str
    new_token: str
    margin: str
    prefix: str
    old_rest: str
    new_rest: str
    extras: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class DeepRow:
    change: str
    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Metric:
    label: str
    value: str
    note: str = ""  # relation to its limit, e.g. "< alpha 0.01: significant"
    flag: str = ""  # "" | "bad" | "ok": colours the note


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: str
    block: bool  # long or multi-line: render in a wrapped <pre>


@dataclass
class DiffView:
    changes: list[Change] = field(default_factory=list)
    divergence: Divergence | None = None
    divergences: list[DivergenceRow] = field(default_factory=list)
    deepdiff: list[DeepRow] = field(default_factory=list)
    metrics: list[Metric] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    steps: Chart | None = None
    generic: list[KeyValue] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (
            self.changes or self.divergence or self.divergences or self.deepdiff or self.metrics or self.added or self.removed
            or self.steps or self.generic
        )


# --------------------------------------------------------------------------- sections


def change(label: str, old: Any, new: Any) -> Change:
    """Old vs new; strings and lists get their common prefix split off for highlighting."""
    old_text, new_text = fmt_value(old), fmt_value(new)
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        keys = list(dict.fromkeys([*old, *new]))
        rows = tuple(
            DeepRow(
                "changed" if old.get(k) != new.get(k) else "",
                str(k),
                fmt_value(old[k]) if k in old else "\u2014",
                fmt_value(new[k]) if k in new else "\u2014",
            )
            for k in keys
        )
        return Change(label, old_text, new_text, "", old_text, new_text, rows)
    if isinstance(old, str) and isinstance(new, str):
        prefix, old_rest, new_rest = split_common(old, new)
        return Change(label, old_text, new_text, tail(prefix), old_rest, new_rest)
    if isinstance(old, list) and isinstance(new, list):
        n = common_prefix_len(old, new)
        if n:
            prefix = ", ".join(fmt_value(v) for v in old[:n]) + ", "
            old_rest = ", ".join(fmt_value(v) for v in old[n:])
            new_rest = ", ".join(fmt_value(v) for v in new[n:])
            return Change(label, old_text, new_text, "[" + tail(prefix), old_rest + "]", new_rest + "]")
    return Change(label, old_text, new_text, "", old_text, new_text)


def divergence(data: Mapping[str, Any]) -> Divergence:
    """First divergence of two token streams: the step, both tokens, the margin there, and both
    decoded texts split at their common prefix. `old_text`/`new_text` may be full texts or the
    continuations after `common_prefix_text`; both are handled."""
    old_text, new_text = str(data.get("old_text", "")), str(data.get("new_text", ""))
    given = data.get("common_prefix_text")
    if isinstance(given, str) and given:
        old_rest = old_text[len(given):] if old_text.startswith(given) else old_text
        new_rest = new_text[len(given):] if new_text.startswith(given) else new_text
        prefix = given
    else:
        prefix, old_rest, new_rest = split_common(old_text, new_text)
    known = {"step", "old_token", "new_token", "margin", "old_text", "new_text", "common_prefix_text"}
    extras = tuple((humanize(k), fmt_value(v)) for k, v in data.items() if k not in known)
    margin = data.get("margin")
    return Divergence(
        step=fmt_value(data.get("step", "?")),
        old_token=fmt_value(data.get("old_token", "?")),
        new_token=fmt_value(data.get("new_token", "?")),
        margin=fmt_value(margin) if margin is not None else "not recorded",
        prefix=tail(prefix),
        old_rest=old_rest,
        new_rest=new_rest,
        extras=extras,
    )


def _tokens(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(fmt_value(v) for v in value)
    return fmt_value(value)


def divergence_rows(entries: list[Any]) -> list[DivergenceRow]:
    """Table rows for a list of per-row divergences: {"row", "step", "old", "new" (the next
    tokens from the step), "margin", "margin_old", "margin_new", "tie_eps", "tie_flip", ...}."""
    known = {"row", "step", "old", "new", "margin", "margin_old", "margin_new", "tie_eps", "tie_flip",
             "old_text", "new_text", "common_prefix_text"}
    rows = []
    for entry in entries:
        margin = fmt_value(entry.get("margin")) if entry.get("margin") is not None else "not recorded"
        sides = [f"{side} {fmt_value(entry[k])}" for side, k in (("old", "margin_old"), ("new", "margin_new"))
                 if entry.get(k) is not None]
        if sides:
            margin += f" ({', '.join(sides)})"
        flip = entry.get("tie_flip")
        rows.append(
            DivergenceRow(
                row=fmt_value(entry.get("row", "")),
                step=fmt_value(entry.get("step", "?")),
                old=_tokens(entry.get("old", "")),
                new=_tokens(entry.get("new", "")),
                margin=margin,
                tie_eps=fmt_value(entry["tie_eps"]) if "tie_eps" in entry else "",
                tie_flip="yes" if flip is True else "no" if flip is False else fmt_value(flip) if flip else "",
                other="; ".join(f"{k} {fmt_value(v)}" for k, v in entry.items() if k not in known),
            )
        )
    return rows


def natural(path: str) -> tuple[Any, ...]:
    """A path's sort key with its numbers as numbers: root['a'][2] before root['a'][10]."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path))


def deepdiff_rows(data: Mapping[str, Any]) -> list[DeepRow]:
    """Rows of a deepdiff-style dict: {change type: {path: {old_value, new_value}} | [paths] | ...}, each
    change type's paths in natural order - deepdiff's own order follows Python's hash seed, so the same
    comparison rendered twice listed `accepted_per_step[3]` and `[2]` either way round."""
    rows = []
    for change_type, body in data.items():
        kind = humanize(change_type)
        removed = "removed" in str(change_type)
        if isinstance(body, Mapping):
            for path, value in sorted(body.items(), key=lambda kv: natural(str(kv[0]))):
                if isinstance(value, Mapping) and ("old_value" in value or "new_value" in value):
                    old, new = fmt_value(value.get("old_value")), fmt_value(value.get("new_value"))
                    if "old_type" in value or "new_type" in value:
                        old = f"{old} ({fmt_value(value.get('old_type'))})"
                        new = f"{new} ({fmt_value(value.get('new_type'))})"
                    rows.append(DeepRow(kind, str(path), old, new))
                elif removed:
                    rows.append(DeepRow(kind, str(path), fmt_value(value), ""))
                else:
                    rows.append(DeepRow(kind, str(path), "", fmt_value(value)))
        elif isinstance(body, (list, tuple, set, frozenset)):
            for path in sorted(body, key=lambda p: natural(str(p))):
                rows.append(DeepRow(kind, fmt_value(path), "(present)" if removed else "", "" if removed else "(present)"))
        else:
            rows.append(DeepRow(kind, "", "", fmt_value(body)))
    return rows


def _relation(value: float, limit: float, below: str, above: str) -> tuple[str, str]:
    return (below, "bad") if value < limit else (above, "ok")


def metrics(diff: Mapping[str, Any]) -> tuple[list[Metric], set[str]]:
    """Known scalar keys as labelled rows; p-value vs alpha and ratio vs noise band get a verdict.
    Returns the rows and the keys consumed."""
    rows: list[Metric] = []
    used: set[str] = set()
    alpha = as_number(diff.get("alpha"))
    for key, label in METRIC_LABELS.items():
        if key not in diff:
            continue
        note, flag = "", ""
        p = as_number(diff[key])
        if key in ("p_value", "p_slower", "p_faster") and p is not None and alpha is not None:
            rel = "<" if p < alpha else "\u2265"
            word, flag = _relation(p, alpha, "significant", "not significant")
            note = f"{rel} alpha {fmt_float(alpha)}: {word}"
        if key == "ratio":
            note, flag = _band_note(diff)
        value = diff[key]
        text = fmt_value(value)
        if isinstance(value, (list, tuple)) and len(value) == 2 and all(as_number(v) is not None for v in value):
            text = f"[{fmt_value(value[0])}, {fmt_value(value[1])}]"
        rows.append(Metric(label, text, note, flag))
        used.add(key)
    return rows, used


def _band_note(diff: Mapping[str, Any]) -> tuple[str, str]:
    """"1.33x baseline, outside band" for a latency diff (see charts.relative_latency)."""
    found = relative_latency(diff)
    if found is None:
        return "", ""
    relative, band = found
    note = f"{relative:.2f}\u00d7 baseline"
    if band is None:
        return note, ""
    inside = band[0] <= relative <= band[1]
    return f"{note}, {'within' if inside else 'outside'} band {band[0]:.2f}\u2013{band[1]:.2f}\u00d7", (
        "ok" if inside else "bad"
    )


def names(value: Any) -> list[str]:
    """Capability names from a list, a mapping (its keys) or a single value."""
    if isinstance(value, Mapping):
        return [str(k) for k in value]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [fmt_value(v) for v in value]
    return [fmt_value(value)]


def key_value(key: Any, value: Any) -> KeyValue:
    if isinstance(value, (Mapping, list)) and value:
        text = fmt_value(value)
        if len(text) > 80:
            text = truncate(to_json_text(value, indent=2))
        return KeyValue(str(key), text, is_long(text))
    text = fmt_value(value)
    return KeyValue(str(key), text, is_long(text))


# --------------------------------------------------------------------------- the whole diff


def diff_view(diff: Any) -> DiffView:
    """Every key of the diff ends up in exactly one section."""
    view = DiffView()
    if not isinstance(diff, Mapping):
        if diff not in (None, {}, [], ""):
            view.generic.append(key_value("diff", diff))
        return view
    used: set[str] = set()
    for old_key, new_key in CHANGE_PAIRS:
        if old_key in diff and new_key in diff and not used & {old_key, new_key}:
            label = "value" if old_key == "old" else f"{humanize(old_key)} \u2192 {humanize(new_key)}"
            view.changes.append(change(label, diff[old_key], diff[new_key]))
            used |= {old_key, new_key}
    first = diff.get("first_divergence")
    if isinstance(first, Mapping):
        view.divergence = divergence(first)
        used.add("first_divergence")
    entries = diff.get("divergences")
    if isinstance(entries, list) and entries and all(isinstance(e, Mapping) for e in entries):
        view.divergences = divergence_rows(entries)
        with_text = [e for e in entries if "old_text" in e or "new_text" in e]
        if view.divergence is None and with_text:
            view.divergence = divergence(with_text[0])
        used.add("divergences")
    deep = diff.get("deepdiff")
    if isinstance(deep, str):
        try:
            deep = json.loads(deep)
        except ValueError:
            pass
    if isinstance(deep, Mapping):
        view.deepdiff = deepdiff_rows(deep)
        used.add("deepdiff")
    view.metrics, metric_keys = metrics(diff)
    used |= metric_keys
    for key, target in (("added", view.added), ("removed", view.removed)):
        if key in diff:
            target.extend(names(diff[key]))
            used.add(key)
    steps = acceptance_chart(diff.get("accepted_per_step"), diff.get("drafted_per_step"))
    if steps is not None:
        view.steps = steps
        used |= {"accepted_per_step", "drafted_per_step"}
    view.generic = [key_value(k, v) for k, v in diff.items() if k not in used]
    return view
