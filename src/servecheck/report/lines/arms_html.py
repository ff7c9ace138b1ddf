"""The arms run as a section of the HTML report (`report.html` draws the page around it; the
terminal lines are `report.lines.arms`, registered beside it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from servecheck.model.bodies.arms import INTERVAL_LEVEL, Arm, ArmsBody, DeviantCell
from servecheck.model.result import RunResult
from servecheck.model.readings import ArmsReading, RunReading
from servecheck.report.svg import (
    Bar,
    bar_chart,
    esc,
)

from servecheck.report.html_kit import DASH, MAX_TABLE_ROWS, fmt, fmt_pct, fmt_ratio, fmt_signed_pct, plain, table


def section(run: RunResult[ArmsBody], reading: RunReading) -> str:
    body = run.body
    parts = [_arms_headline(body), "<h3>Arms</h3>", _arms_table(body, reading.arms), _decomposition_chart(body.arms),
             _arms_checks(body), _deviant_cells(body.deviant_cells)]
    return "\n".join(p for p in parts if p)


def _arms_headline(body: ArmsBody) -> str:
    if body.headline_refused is True:
        return f'<p class="verdict">Headline withheld: <b>{esc(body.refusal or "position bias too large")}</b></p>'
    return f'<p class="verdict">{esc(body.headline)}</p>' if body.headline else ""


def _arms_table(body: ArmsBody, reading: ArmsReading) -> str:
    # the reading's per-arm medians: the arm's own, else (an older document kept only its cells) its cells'
    rows = []
    for a in body.arms:
        at = -1 if a.concurrency is None else a.concurrency
        rows.append([
            fmt(a.concurrency, 0), fmt(reading.aggregate_tok_s.get(at), 1), fmt(reading.per_user_rate_tok_s.get(at), 1),
            _with_interval(fmt_ratio, a.aggregate_speedup, a.aggregate_speedup_interval),
            _with_interval(fmt_ratio, a.generation_gain, a.generation_gain_interval),
            _with_interval(fmt_signed_pct, a.per_user_rate_change, a.per_user_rate_change_interval),
            fmt(reading.ttft_s.get(at), 3),
            _with_interval(fmt_ratio, a.ttft_multiple, a.ttft_multiple_interval), fmt_pct(a.efficiency),
            f'<span class="label-{esc(a.label or "")}">{fmt(a.label)}</span>',
        ])
    headers = ["in flight", "aggregate tok/s", "per-user tok/s", "aggregate speedup", "generation-stage gain",
               "per-user rate", "TTFT s", "TTFT multiple", "efficiency", "label"]
    return table(headers, rows, frozenset(range(9))) + _interval_key(reading.interval_level)


def _interval_key(level: float | None) -> str:
    """What the brackets cover: their confidence depends on the number of reps (three give 75%, not 95%)."""
    if level is None:
        return ""
    short = f" (fewer reps than the {INTERVAL_LEVEL:.0%} level needs)" if level < INTERVAL_LEVEL else ""
    return (f'<p class="key">Brackets: order-statistic interval of the within-rep ratios, covering the median with '
            f"{level:.0%} confidence{short}.</p>")


def _with_interval(formatter: Callable[[Any], str], value: float | None, interval: tuple[float, float] | None) -> str:
    """`1.48× [1.45, 1.51]`: the point estimate and, when the run gives one, its interval."""
    point = formatter(value)
    if interval is None or point == DASH:
        return point
    return f'{point} <span class="ci">[{formatter(interval[0])}, {formatter(interval[1])}]</span>'


def _arms_checks(body: ArmsBody) -> str:
    """The checks that decide whether the headline may be trusted: position bias, drift, thermal state."""
    items = []
    bias, limit = body.position_bias, body.bias_limit
    if bias is not None and bias.spread is not None:
        how = "across positions" if bias.method == "positions" else "estimated from drift (fixed order)"
        items.append(f"position bias: widest spread {bias.spread:.1%} ({fmt(bias.concurrency, 0)}-way, {how})"
                     + (f"; limit {limit:.0%}" if limit is not None else ""))
    drift = body.drift
    if drift is not None and drift.first_tok_s is not None and drift.last_tok_s is not None and drift.loss is not None:
        items.append(f"drift: serial arm {drift.first_tok_s:.1f} → {drift.last_tok_s:.1f} tok/s (first vs last reps): "
                     f"loss {drift.loss:.1%}")
    if body.thermal is not None and body.thermal.summary:
        items.append(f"thermal: {body.thermal.summary}")
    if not items:
        return ""
    return "<h3>Checks</h3><ul>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>"


def _decomposition_chart(arms: tuple[Arm, ...]) -> str:
    bars = []
    for a in arms:
        c = fmt(a.concurrency, 0)
        for value, css, name in ((a.aggregate_speedup, "primary", "aggregate"),
                                 (a.generation_gain, "secondary", "generation")):
            if value is not None:
                bars.append(Bar(f"{c}-way {name}", value, css, f"{c}-way {name}: {value:.2f}×"))
    if not bars:
        return ""
    key = ('<p class="key">Against the serial arm (dashed line = 1×, no gain): aggregate throughput gain beside the '
           'generation-stage gain. Aggregate up with generation flat is pipelining, not batching.</p>')
    return key + bar_chart(bars, title="Decomposition: aggregate vs generation-stage gain", y_label="× serial",
                           ref_line=1.0)


def _deviant_cells(cells: tuple[DeviantCell, ...]) -> str:
    if not cells:
        return ""
    items = "".join(f"<li>{_deviant_cell(c)}</li>" for c in cells[:MAX_TABLE_ROWS])
    return f"<h3>Cells whose output length deviates</h3><ul class=\"warnings\">{items}</ul>"


def _deviant_cell(c: DeviantCell) -> str:
    """`run=1, rep=2, concurrency=4, tokens=230, modal_tokens=256, deviation=-0.1`: the cell's fields as saved."""
    named = (("run", c.run), ("rep", c.rep), ("concurrency", c.concurrency), ("tokens", c.tokens),
             ("modal_tokens", c.modal_tokens), ("deviation", c.deviation))
    return esc(", ".join(f"{k}={plain(v)}" for k, v in named if v is not None)) or DASH
