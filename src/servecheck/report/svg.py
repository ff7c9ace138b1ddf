"""Inline SVG charts built as strings: no JavaScript, nothing fetched when the report is viewed.

Every text that reaches a chart goes through `esc`, because labels can carry model names and
other strings a server chose.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

WIDTH = 760
LEFT = 64  # room for y tick labels
RIGHT = 24
TOP = 28
BOTTOM = 44  # room for x tick labels and the axis title
PLOT_W = WIDTH - LEFT - RIGHT
LEGEND_W = 180
LEGENDS_PER_ROW = PLOT_W // LEGEND_W


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _n(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") or "0"


def nice_ticks(hi: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least `hi`."""
    if not hi > 0:
        return [0.0, 1.0]
    raw = hi / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(int(math.ceil(hi / step - 1e-9)) + 1)]


def value_label(value: float) -> str:
    """Three significant digits: a 4 ms time to first token beside 205 ms must not read as 0."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def tick_label(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else _n(value)


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    css: str  # bar class: wait, gen, fail, ...


@dataclass(frozen=True)
class TimelineRow:
    label: str
    segments: tuple[Segment, ...]
    title: str  # tooltip


@dataclass(frozen=True)
class Series:
    name: str
    points: tuple[tuple[float, float], ...]
    css: str


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    css: str
    title: str = ""


def _open(height: int, title: str, kind: str) -> list[str]:
    return [
        f'<svg class="chart {esc(kind)}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}" role="img" aria-label="{esc(title)}">',
        f'<text class="chart-title" x="{LEFT}" y="16">{esc(title)}</text>',
    ]


def _x_axis(ticks: Sequence[float], scale: float, y0: float, label: str) -> list[str]:
    parts = [f'<line class="axis" x1="{LEFT}" y1="{_n(y0)}" x2="{LEFT + PLOT_W}" y2="{_n(y0)}"/>']
    for t in ticks:
        x = LEFT + t * scale
        parts.append(f'<line class="grid" x1="{_n(x)}" y1="{TOP}" x2="{_n(x)}" y2="{_n(y0)}"/>')
        parts.append(f'<text class="tick" x="{_n(x)}" y="{_n(y0 + 14)}" '
                     f'text-anchor="middle">{esc(tick_label(t))}</text>')
    parts.append(f'<text class="axis-title" x="{LEFT + PLOT_W / 2:.1f}" y="{_n(y0 + 32)}" '
                 f'text-anchor="middle">{esc(label)}</text>')
    return parts


def _y_axis(ticks: Sequence[float], scale: float, y0: float, label: str) -> list[str]:
    parts = [f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{_n(y0)}"/>']
    for t in ticks:
        y = y0 - t * scale
        parts.append(f'<line class="grid" x1="{LEFT}" y1="{_n(y)}" x2="{LEFT + PLOT_W}" y2="{_n(y)}"/>')
        parts.append(f'<text class="tick" x="{LEFT - 6}" y="{_n(y + 4)}" text-anchor="end">{esc(tick_label(t))}</text>')
    mid = (TOP + y0) / 2
    parts.append(
        f'<text class="axis-title" x="14" y="{_n(mid)}" text-anchor="middle" transform="rotate(-90 14 '
        f'{_n(mid)})">{esc(label)}</text>'
    )
    return parts


def timeline_chart(rows: Sequence[TimelineRow], x_max: float, *, title: str, x_label: str) -> str:
    """One horizontal lane per request, segments placed on a shared time axis (a Gantt chart)."""
    row_h = max(3.0, min(18.0, 320.0 / max(1, len(rows))))
    y0 = TOP + row_h * len(rows) + 4
    ticks = nice_ticks(x_max)
    scale = PLOT_W / ticks[-1]
    parts = _open(int(y0 + BOTTOM), title, "timeline")
    parts += _x_axis(ticks, scale, y0, x_label)
    for i, row in enumerate(rows):
        y = TOP + i * row_h + row_h * 0.15
        parts.append(f"<g><title>{esc(row.title)}</title>")
        for seg in row.segments:
            x = LEFT + max(0.0, seg.start) * scale
            w = max(1.0, (seg.end - seg.start) * scale)
            parts.append(
                f'<rect class="bar {esc(seg.css)}" x="{_n(x)}" y="{_n(y)}" width="{_n(w)}" height="{_n(row_h * 0.7)}"/>'
            )
        parts.append("</g>")
        if row_h >= 10:
            parts.append(f'<text class="lane" x="{LEFT - 6}" y="{_n(y + row_h * 0.55)}" '
                         f'text-anchor="end">{esc(row.label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def line_chart(series: Sequence[Series], *, title: str, x_label: str, y_label: str, height: int = 280,
               bands: Sequence[Marker] = (), dots: bool = True) -> str:
    """Lines with markers over a numeric x axis (for example aggregate tok/s against N); `bands` shade x
    ranges behind them (an intruder's prefill window); `dots` False draws the lines alone (long series)."""
    xs = [x for s in series for x, _ in s.points] + [m.hi for m in bands]
    ys = [y for s in series for _, y in s.points]
    x_ticks = nice_ticks(max(xs, default=1.0))
    y_ticks = nice_ticks(max(ys, default=1.0) * 1.1)
    y0 = height - BOTTOM
    x_scale = PLOT_W / x_ticks[-1]
    y_scale = (y0 - TOP) / y_ticks[-1]
    parts = _open(height, title, "lines")
    parts += _x_axis(x_ticks, x_scale, y0, x_label) + _y_axis(y_ticks, y_scale, y0, y_label)
    for m in bands:
        x_lo = LEFT + m.lo * x_scale
        parts.append(f'<rect class="band {esc(m.css)}" x="{_n(x_lo)}" y="{TOP}" '
                     f'width="{_n(max(1.0, (m.hi - m.lo) * x_scale))}" '
                     f'height="{_n(y0 - TOP)}"><title>{esc(m.label)}</title></rect>')
    for k, s in enumerate(series):
        coords = [(LEFT + x * x_scale, y0 - y * y_scale) for x, y in s.points]
        path = " ".join(f"{_n(x)},{_n(y)}" for x, y in coords)
        parts.append(f'<polyline class="line {esc(s.css)}" points="{path}"/>')
        for (x, y), (vx, vy) in zip(coords, s.points) if dots else ():
            parts.append(
                f'<circle class="dot {esc(s.css)}" cx="{_n(x)}" cy="{_n(y)}" r="4"><title>{esc(s.name)}: '
                f"{esc(tick_label(vx))} → {esc(_n(vy))}</title></circle>"
            )
        legend_x, legend_y = LEFT + 10 + LEGEND_W * (k % LEGENDS_PER_ROW), TOP + 12 + 14 * (k // LEGENDS_PER_ROW)
        parts.append(f'<text class="legend {esc(s.css)}" x="{legend_x}" y="{legend_y}">{esc(s.name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(bars: Sequence[Bar], *, title: str, y_label: str, ref_line: float | None = None,
              height: int = 260) -> str:
    """Vertical bars with their values printed above, and an optional dashed reference line."""
    top_value = max([b.value for b in bars] + [ref_line or 0.0, 1e-9])
    y_ticks = nice_ticks(top_value * 1.15)
    y0 = height - BOTTOM
    y_scale = (y0 - TOP) / y_ticks[-1]
    slot = PLOT_W / max(1, len(bars))
    parts = _open(height, title, "bars")
    parts += _y_axis(y_ticks, y_scale, y0, y_label)
    parts.append(f'<line class="axis" x1="{LEFT}" y1="{_n(y0)}" x2="{LEFT + PLOT_W}" y2="{_n(y0)}"/>')
    for i, bar in enumerate(bars):
        x = LEFT + i * slot + slot * 0.15
        h = max(0.0, bar.value) * y_scale
        parts.append(f"<g><title>{esc(bar.title or bar.label)}</title>")
        parts.append(f'<rect class="bar {esc(bar.css)}" x="{_n(x)}" y="{_n(y0 - h)}" width="{_n(slot * 0.7)}" '
                     f'height="{_n(max(h, 0.5))}"/>')
        parts.append("</g>")
        cx = x + slot * 0.35
        parts.append(f'<text class="value" x="{_n(cx)}" y="{_n(y0 - h - 4)}" '
                     f'text-anchor="middle">{esc(value_label(bar.value))}</text>')
        parts.append(f'<text class="tick" x="{_n(cx)}" y="{_n(y0 + 14)}" text-anchor="middle">{esc(bar.label)}</text>')
    if ref_line is not None:
        y = y0 - ref_line * y_scale
        parts.append(f'<line class="ref" x1="{LEFT}" y1="{_n(y)}" x2="{LEFT + PLOT_W}" y2="{_n(y)}"/>')
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class RangeBar:
    label: str
    lo: float
    hi: float
    css: str
    title: str = ""


@dataclass(frozen=True)
class Marker:
    label: str
    lo: float
    hi: float  # equal to lo for a single line
    css: str = "gate"


def range_chart(bars: Sequence[RangeBar], markers: Sequence[Marker], *, title: str, x_label: str) -> str:
    """Horizontal bars: solid up to `lo`, lighter from `lo` to `hi`; markers are dashed lines or bands."""
    x_max = max([b.hi for b in bars] + [m.hi for m in markers] + [1e-9]) * 1.1
    ticks = nice_ticks(x_max)
    scale = PLOT_W / ticks[-1]
    lane = 34
    y0 = TOP + lane * len(bars) + 8
    parts = _open(int(y0 + BOTTOM + 16 * len(markers)), title, "ranges")
    parts += _x_axis(ticks, scale, y0, x_label)
    for i, bar in enumerate(bars):
        y = TOP + i * lane + 6
        parts.append(f"<g><title>{esc(bar.title or bar.label)}</title>")
        parts.append(f'<rect class="bar {esc(bar.css)}" x="{LEFT}" y="{y}" width="{_n(max(1.0, bar.lo * scale))}" '
                     'height="22"/>')
        if bar.hi > bar.lo:
            parts.append(
                f'<rect class="bar range {esc(bar.css)}" x="{_n(LEFT + bar.lo * scale)}" y="{y}" '
                f'width="{_n((bar.hi - bar.lo) * scale)}" height="22"/>'
            )
        parts.append("</g>")
        parts.append(f'<text class="lane-in" x="{LEFT + 6}" y="{y + 15}">{esc(bar.label)}</text>')
    for k, m in enumerate(markers):
        x_lo, x_hi = LEFT + m.lo * scale, LEFT + m.hi * scale
        if m.hi > m.lo:
            parts.append(f'<rect class="band {esc(m.css)}" x="{_n(x_lo)}" y="{TOP}" width="{_n(x_hi - x_lo)}" '
                         f'height="{_n(y0 - TOP)}"/>')
        for x in {x_lo, x_hi}:
            parts.append(f'<line class="ref {esc(m.css)}" x1="{_n(x)}" y1="{TOP - 4}" x2="{_n(x)}" y2="{_n(y0)}"/>')
        parts.append(f'<text class="marker {esc(m.css)}" x="{_n(x_lo)}" '
                     f'y="{_n(y0 + BOTTOM + 4 + 16 * k)}">{esc(m.label)}</text>')
    parts.append("</svg>")
    return "".join(parts)
