"""Inline SVG charts as plain data: no JS, no chart library.

Each builder returns a `Chart` (shapes + marks with pixel coordinates already computed); the
template turns it into `<svg>` with autoescaping, so text from records is never trusted here.
A `Mark` is one data point: the template renders it as `<g data-point="KIND"><title>...</title>`
around its shapes, so tests and readers can count and hover the points.

The diff-key conventions the builders read are documented in `harness/report/__init__.py`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.report.fmt import as_interval, as_number, fmt_float, fmt_value
from harness.schema import Outcome

# --------------------------------------------------------------------------- primitives


@dataclass(frozen=True)
class Shape:
    tag: str  # an SVG element name chosen by this module, never from data
    attrs: tuple[tuple[str, str], ...]
    text: str = ""


@dataclass(frozen=True)
class Mark:
    kind: str  # value of the data-point attribute
    title: str  # tooltip
    shapes: tuple[Shape, ...]


@dataclass(frozen=True)
class Chart:
    title: str
    width: int
    height: int
    shapes: tuple[Shape, ...]
    marks: tuple[Mark, ...]
    legend: tuple[tuple[str, str], ...] = ()  # (css class of the swatch, label)
    caption: str = ""


def _n(value: float) -> str:
    return f"{value:.1f}"


def line(x1: float, y1: float, x2: float, y2: float, cls: str) -> Shape:
    return Shape("line", (("x1", _n(x1)), ("y1", _n(y1)), ("x2", _n(x2)), ("y2", _n(y2)), ("class", cls)))


def rect(x: float, y: float, w: float, h: float, cls: str) -> Shape:
    return Shape(
        "rect", (("x", _n(x)), ("y", _n(y)), ("width", _n(max(w, 0.0))), ("height", _n(max(h, 0.0))), ("class", cls))
    )


def circle(cx: float, cy: float, r: float, cls: str) -> Shape:
    return Shape("circle", (("cx", _n(cx)), ("cy", _n(cy)), ("r", _n(r)), ("class", cls)))


def polyline(points: Iterable[tuple[float, float]], cls: str) -> Shape:
    return Shape("polyline", (("points", " ".join(f"{_n(x)},{_n(y)}" for x, y in points)), ("class", cls)))


def text(x: float, y: float, content: str, cls: str, anchor: str = "middle") -> Shape:
    return Shape("text", (("x", _n(x)), ("y", _n(y)), ("text-anchor", anchor), ("class", cls)), content)


# --------------------------------------------------------------------------- scales and axes


@dataclass(frozen=True)
class Scale:
    """Linear map from the data domain [lo, hi] to pixels [start, end]."""

    lo: float
    hi: float
    start: float
    end: float

    def __call__(self, value: float) -> float:
        if self.hi == self.lo:
            return (self.start + self.end) / 2
        return self.start + (value - self.lo) / (self.hi - self.lo) * (self.end - self.start)


def nice_step(span: float, count: int) -> float:
    raw = span / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= factor * magnitude:
            return factor * magnitude
    return 10 * magnitude


def nice_domain(values: Iterable[float], count: int = 5) -> tuple[float, float, list[float]]:
    """A domain covering `values`, widened to round tick boundaries, and its ticks."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return 0.0, 1.0, [0.0, 0.5, 1.0]
    lo, hi = min(finite), max(finite)
    if hi == lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    step = nice_step(hi - lo, count)
    lo, hi = math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
    ticks = [round(lo + i * step, 12) for i in range(int(round((hi - lo) / step)) + 1)]
    return lo, hi, ticks


def fmt_tick(value: float) -> str:
    return f"{round(value, 10):.4g}"


@dataclass(frozen=True)
class Box:
    """The plot area inside a chart, in pixels."""

    left: float
    top: float
    right: float
    bottom: float


def y_axis(box: Box, scale: Scale, ticks: Sequence[float], label: str) -> list[Shape]:
    shapes: list[Shape] = []
    for tick in ticks:
        y = scale(tick)
        shapes.append(line(box.left, y, box.right, y, "grid"))
        shapes.append(text(box.left - 6, y + 4, fmt_tick(tick), "tick", "end"))
    shapes.append(line(box.left, box.top, box.left, box.bottom, "axis"))
    mid = (box.top + box.bottom) / 2
    shapes.append(
        Shape(
            "text",
            (("x", _n(12)), ("y", _n(mid)), ("text-anchor", "middle"), ("class", "axis-label"),
             ("transform", f"rotate(-90 12 {_n(mid)})")),
            label,
        )
    )
    return shapes


def x_axis(box: Box, scale: Scale, ticks: Sequence[float], label: str) -> list[Shape]:
    shapes = [line(box.left, box.bottom, box.right, box.bottom, "axis")]
    for tick in ticks:
        x = scale(tick)
        shapes.append(line(x, box.bottom, x, box.bottom + 4, "axis"))
        shapes.append(text(x, box.bottom + 16, fmt_tick(tick), "tick"))
    shapes.append(text((box.left + box.right) / 2, box.bottom + 32, label, "axis-label"))
    return shapes


# --------------------------------------------------------------------------- bias curve

BIAS_METRICS: dict[str, tuple[str, str, str, str]] = {
    # metric: (exact key, measured key, interval key, axis label)
    "tv": ("tv_exact", "tv_measured", "tv_ci", "TV distance to target"),
    "acceptance": ("acceptance_exact", "acceptance_measured", "acceptance_ci", "acceptance rate"),
}


@dataclass(frozen=True)
class BiasPoint:
    w: float
    exact: float | None
    measured: float | None
    interval: tuple[float, float] | None
    label: str
    status: str


def _bias_candidates(diff: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The point dicts of one diff: the diff itself when it has "w", plus its "bias_curve" list."""
    candidates: list[Mapping[str, Any]] = [diff] if "w" in diff else []
    curve = diff.get("bias_curve")
    if isinstance(curve, list):
        candidates.extend(p for p in curve if isinstance(p, Mapping))
    return candidates


def bias_points(outcomes: Iterable[Outcome], metric: str) -> dict[str, list[BiasPoint]]:
    """Points of one metric ("tv" or "acceptance") grouped by series (diff "series", else suite)."""
    exact_key, measured_key, interval_key, _ = BIAS_METRICS[metric]
    series: dict[str, list[BiasPoint]] = {}
    for outcome in outcomes:
        if not isinstance(outcome.diff, Mapping):
            continue
        for point in _bias_candidates(outcome.diff):
            w = as_number(point.get("w"))
            exact, measured = as_number(point.get(exact_key)), as_number(point.get(measured_key))
            if w is None or (exact is None and measured is None):
                continue
            name = str(point.get("series") or outcome.diff.get("series") or outcome.suite)
            series.setdefault(name, []).append(
                BiasPoint(
                    w=w,
                    exact=exact,
                    measured=measured,
                    interval=as_interval(point.get(interval_key)),
                    label=f"{outcome.case} :: {outcome.field}",
                    status=str(getattr(outcome.status, "value", outcome.status)),
                )
            )
    return series


def _bias_title(point: BiasPoint, metric: str, which: str) -> str:
    name = "TV" if metric == "tv" else "acceptance"
    parts = [f"w = {fmt_float(point.w)}"]
    if which == "measured" and point.measured is not None:
        parts.append(f"measured {name} {fmt_float(point.measured)}")
        if point.interval:
            parts.append(f"interval [{fmt_float(point.interval[0])}, {fmt_float(point.interval[1])}]")
    if point.exact is not None:
        parts.append(f"exact {name} {fmt_float(point.exact)}")
    return f"{', '.join(parts)} \u2014 {point.label} ({point.status})"


def bias_chart(title: str, points: Sequence[BiasPoint], metric: str) -> Chart | None:
    """Exact curve (line + small markers) vs measured points with interval bars, against w."""
    if not points:
        return None
    axis_label = BIAS_METRICS[metric][3]
    width, height = 460, 280
    box = Box(left=58, top=14, right=width - 16, bottom=height - 46)
    ws = [p.w for p in points]
    xscale = Scale(min(0.0, *ws), max(1.0, *ws), box.left, box.right)
    x_lo, x_hi, x_ticks = nice_domain([xscale.lo, xscale.hi])
    xscale = Scale(x_lo, x_hi, box.left, box.right)
    ys = [0.0]
    for p in points:
        ys += [v for v in (p.exact, p.measured) if v is not None]
        ys += list(p.interval or ())
    y_lo, y_hi, y_ticks = nice_domain(ys)
    yscale = Scale(y_lo, y_hi, box.bottom, box.top)

    shapes = y_axis(box, yscale, y_ticks, axis_label) + x_axis(box, xscale, x_ticks, "ensemble weight w")
    exact = sorted((p for p in points if p.exact is not None), key=lambda p: p.w)
    if len(exact) >= 2:
        shapes.append(polyline(((xscale(p.w), yscale(p.exact or 0.0)) for p in exact), "exact-line"))
    marks = [
        Mark("exact", _bias_title(p, metric, "exact"), (circle(xscale(p.w), yscale(p.exact or 0.0), 3, "exact-dot"),))
        for p in exact
    ]
    for p in points:
        if p.measured is None:
            continue
        x, y = xscale(p.w), yscale(p.measured)
        parts: list[Shape] = []
        if p.interval:
            lo, hi = yscale(p.interval[0]), yscale(p.interval[1])
            parts += [line(x, lo, x, hi, "ci"), line(x - 4, lo, x + 4, lo, "ci"), line(x - 4, hi, x + 4, hi, "ci")]
        parts.append(circle(x, y, 4.5, f"measured st-{p.status}"))
        marks.append(Mark("measured", _bias_title(p, metric, "measured"), tuple(parts)))
    return Chart(
        title=f"{title}: {axis_label} vs w",
        width=width,
        height=height,
        shapes=tuple(shapes),
        marks=tuple(marks),
        legend=(("sw-exact", "exact (reference engine)"), ("sw-measured", "measured, with interval (colour = status)")),
    )


# --------------------------------------------------------------------------- latency


@dataclass(frozen=True)
class LatencyRow:
    label: str
    relative: float  # this run / baseline: 1 = unchanged, above 1 = slower
    band: tuple[float, float] | None  # in the same relative units
    values: str  # the raw diff values, for the tooltip
    status: str
    ci: tuple[float, float] | None = None  # the ratio's confidence interval, where the field has one
    detects: float | None = None  # the smallest slowdown the field's test detects (0.35 = 35 %)

    @property
    def shown(self) -> str:
        """The dot's class: the field's status, except a pass outside its band - slower or faster than
        the tolerance allows, yet not significant at the run's alpha - which is `unresolved` (the
        run could not tell), never drawn as a pass."""
        if self.status == "pass" and self.band and not self.band[0] <= self.relative <= self.band[1]:
            return "unresolved"
        return self.status


def noise_band(value: Any, baseline: float | None) -> tuple[float, float] | None:
    """[lo, hi] is an absolute band in ratio units; a number is a relative half-width around
    the baseline ratio (0.1 -> baseline * [0.9, 1.1])."""
    interval = as_interval(value)
    if interval:
        return interval
    half = as_number(value)
    if half is None or baseline is None:
        return None
    return (baseline * (1 - abs(half)), baseline * (1 + abs(half)))


def relative_latency(diff: Mapping[str, Any]) -> tuple[float, tuple[float, float] | None] | None:
    """(this run / baseline, band in the same units) from a latency diff, or None.

    With "baseline_ratio", "ratio" and it are both times / in-run calibration: the point is their
    quotient and "noise_band" (absolute or relative, see `noise_band`) is divided by it too.
    Without it, "ratio" is already this run / baseline (as compare.compare_latency emits); the
    band is "noise_band" around 1, else [1 / (1 + t), 1 + t] from "tolerance" t.
    """
    ratio, baseline = as_number(diff.get("ratio")), as_number(diff.get("baseline_ratio"))
    if ratio is None or (baseline is not None and baseline <= 0):
        return None
    if baseline is not None:
        band = noise_band(diff.get("noise_band"), baseline)
        return ratio / baseline, (band[0] / baseline, band[1] / baseline) if band else None
    band = noise_band(diff.get("noise_band"), 1.0)
    tolerance = as_number(diff.get("tolerance"))
    if band is None and tolerance is not None and tolerance > -1:
        band = (1 / (1 + tolerance), 1 + tolerance)
    return ratio, band


def latency_rows(outcomes: Iterable[Outcome]) -> list[LatencyRow]:
    rows = []
    for outcome in outcomes:
        diff = outcome.diff if isinstance(outcome.diff, Mapping) else {}
        found = relative_latency(diff)
        if found is None:
            continue
        keys = ("ratio", "baseline_ratio", "noise_band", "tolerance")
        values = ", ".join(f"{k} {fmt_value(diff[k])}" for k in keys if k in diff)
        ci = diff.get("ratio_ci")
        ci_pair = (float(ci[0]), float(ci[1])) if (isinstance(ci, list) and len(ci) == 2 and all(
            as_number(v) is not None for v in ci) and diff.get("baseline_ratio") is None) else None
        rows.append(
            LatencyRow(
                label=f"{outcome.case} :: {outcome.field}",
                relative=found[0],
                band=found[1],
                values=values,
                status=str(getattr(outcome.status, "value", outcome.status)),
                ci=ci_pair,
                detects=as_number(diff.get("detectable_slowdown")),
            )
        )
    return rows


# the advance of one character of a row label (report.css: 12px monospace; DejaVu Sans Mono is
# 0.602 em, 7.2 px) with room to spare, so the longest label is never clipped at the chart's edge
LABEL_CHAR_PX = 7.6


def _short(label: str, max_chars: int = 44) -> str:
    return label if len(label) <= max_chars else label[: max_chars - 1] + "\u2026"


def _latency_title(row: LatencyRow) -> str:
    parts = [f"{row.label}: {fmt_float(row.relative)}\u00d7 baseline"]
    if row.band:
        parts.append(f"band {fmt_float(row.band[0])}\u2013{fmt_float(row.band[1])}\u00d7")
    if row.ci:
        parts.append(f"CI {fmt_float(row.ci[0])}\u2013{fmt_float(row.ci[1])}\u00d7")
    said = row.status
    if row.shown == "unresolved":
        said = ("pass, but outside the band: not significant at the run's alpha"
                + (f" (this field detects >= {row.detects:.0%})" if row.detects is not None else ""))
    return f"{', '.join(parts)} ({row.values}; {said})"


def latency_chart(rows: Sequence[LatencyRow]) -> Chart | None:
    """One row per path, relative to its baseline (the line at 1): noise or tolerance band
    (shaded) and this run (dot, coloured by status)."""
    if not rows:
        return None
    label_px = LABEL_CHAR_PX * max(len(_short(r.label)) for r in rows) + 16
    row_h = 26
    width = int(label_px + 480)
    height = 14 + row_h * len(rows) + 46
    box = Box(left=label_px, top=14, right=width - 20, bottom=14 + row_h * len(rows))
    values = [1.0] + [r.relative for r in rows] + [v for r in rows for v in (*(r.band or ()), *(r.ci or ()))]
    lo, hi, ticks = nice_domain(values)
    xscale = Scale(lo, hi, box.left, box.right)
    shapes = x_axis(box, xscale, ticks, "time relative to baseline (1 = unchanged, lower is faster)")
    shapes += [line(xscale(t), box.top, xscale(t), box.bottom, "grid") for t in ticks]
    marks = []
    for i, row in enumerate(rows):
        cy = box.top + row_h * i + row_h / 2
        shapes.append(text(box.left - 8, cy + 4, _short(row.label), "row-label", "end"))
        if row.band:
            shapes.append(rect(xscale(row.band[0]), cy - 8, xscale(row.band[1]) - xscale(row.band[0]), 16, "band"))
        whisker = (line(xscale(row.ci[0]), cy, xscale(row.ci[1]), cy, "ci"),) if row.ci else ()
        parts = (
            *whisker,
            line(xscale(1.0), cy, xscale(row.relative), cy, "delta"),
            circle(xscale(row.relative), cy, 5, f"measured st-{row.shown}"),
        )
        marks.append(Mark("latency", _latency_title(row), parts))
    shapes.append(line(xscale(1.0), box.top, xscale(1.0), box.bottom, "baseline"))
    return Chart(
        title="Latency per path vs baseline",
        width=width,
        height=height,
        shapes=tuple(shapes),
        marks=tuple(marks),
        legend=(
            ("sw-baseline", "baseline (1\u00d7)"),
            ("sw-band", "noise / tolerance band"),
            *((("sw-ci", "confidence interval"),) if any(r.ci for r in rows) else ()),
            ("sw-measured", "this run (colour = status)"),
            *((("sw-unresolved", "outside the band, not significant: the run could not tell"),)
              if any(r.shown == "unresolved" for r in rows) else ()),
        ),
    )


# --------------------------------------------------------------------------- acceptance per step


def as_counts(value: Any) -> list[float] | None:
    """A list of finite non-negative numbers, else None."""
    if not isinstance(value, list) or not value:
        return None
    numbers = [as_number(v) for v in value]
    if any(n is None or n < 0 for n in numbers):
        return None
    return [float(n) for n in numbers if n is not None]


def acceptance_chart(accepted_value: Any, drafted_value: Any = None) -> Chart | None:
    """Bars per decoding step: drafted tokens (light) behind accepted tokens (dark)."""
    accepted = as_counts(accepted_value)
    if accepted is None:
        return None
    drafted = as_counts(drafted_value) or []
    n = len(accepted)
    width, height = 720, 220
    box = Box(left=48, top=12, right=width - 12, bottom=height - 44)
    y_lo, y_hi, y_ticks = nice_domain([0.0, 1.0, *accepted, *drafted], count=4)
    yscale = Scale(y_lo, y_hi, box.bottom, box.top)
    slot = (box.right - box.left) / n
    bar = max(slot * 0.8, 0.5)
    x_ticks = sorted({int(t) for t in nice_domain([0.0, float(max(n - 1, 1))], count=8)[2] if 0 <= t <= n - 1})
    xscale = Scale(0, max(n - 1, 1), box.left + slot / 2, box.right - slot / 2)
    shapes = y_axis(box, yscale, y_ticks, "tokens") + x_axis(box, xscale, [float(t) for t in x_ticks], "step")
    marks = []
    for i, acc in enumerate(accepted):
        x = box.left + slot * i + (slot - bar) / 2
        parts: list[Shape] = []
        title = f"step {i}: {acc:g} accepted"
        if i < len(drafted):
            parts.append(rect(x, yscale(drafted[i]), bar, yscale(0) - yscale(drafted[i]), "drafted"))
            title = f"step {i}: {acc:g} of {drafted[i]:g} drafted tokens accepted"
        parts.append(rect(x, yscale(acc), bar, yscale(0) - yscale(acc), "accepted"))
        marks.append(Mark("step", title, tuple(parts)))
    total = sum(accepted)
    caption = f"{total:g} tokens accepted over {n} steps (mean {total / n:.2f} per step)"
    if drafted:
        drafted_total = sum(drafted[:n])
        if drafted_total:
            caption += f"; {total:g} of {drafted_total:g} drafted ({100 * total / drafted_total:.0f}%)"
    legend = (("sw-drafted", "drafted"), ("sw-accepted", "accepted")) if drafted else (("sw-accepted", "accepted"),)
    return Chart(
        title="Accepted tokens per step",
        width=width,
        height=height,
        shapes=tuple(shapes),
        marks=tuple(marks),
        legend=legend,
        caption=caption,
    )
