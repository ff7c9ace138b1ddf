"""The self-contained HTML report: one file, inline CSS and SVG, no scripts, nothing fetched.

Documents come from every command and may be partial or from another version, so each section
renders what it finds and shows "—" for what is missing. Every string is escaped, wherever it
came from.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from servecheck import __version__
from servecheck.model.bodies.arms import INTERVAL_LEVEL, Arm, ArmsBody, DeviantCell
from servecheck.model.bodies.bandwidth import BandwidthBody
from servecheck.model.bodies.capacity import CapacityBody, CapacityPoint
from servecheck.model.bodies.common import Finding, LogAudit, Request, RequestRef, Server
from servecheck.model.bodies.common import LogFinding, LogLine
from servecheck.model.bodies.context import ContextBody, ContextDrift, ContextPoint, ContextRooflineRow
from servecheck.model.bodies.demo import DemoBody
from servecheck.model.bodies.interference import InterferenceBody, InterferencePoint, InterferenceRep
from servecheck.model.bodies.log import LogBody
from servecheck.model.bodies.prefix_cache import CacheAnalysis, PrefixCacheBody, PrefixSend
from servecheck.model.bodies.roofline import Ceiling, Headroom, RooflineBody, Target
from servecheck.model.bodies.staircase import Batch as StaircaseBatch
from servecheck.model.bodies.staircase import Point as StaircasePoint
from servecheck.model.bodies.speculative import SpeculativeBody, SpeculativePoint
from servecheck.model.bodies.staircase import StaircaseBody
from servecheck.model.result import RunResult, environment_rows, run_findings, to_doc
from servecheck.model.bodies.staircase import RISING_RATIO
from servecheck.model.readings import ArmsReading, ReportReading, RunReading, StaircasePointReading
from servecheck.model.sidebyside import Diff, label_for
from servecheck.report.diff import diff_context_runs, per_stream
from servecheck.results.fields import as_float, as_int, as_list, as_str
from servecheck.results.jsonout import write_text_atomic
from servecheck.report.svg import (
    Bar,
    Marker,
    RangeBar,
    Segment,
    Series,
    TimelineRow,
    bar_chart,
    esc,
    line_chart,
    range_chart,
    timeline_chart,
)

DASH = "—"
# Long runs (256 requests x many reps) would make the file unreadable; beyond these the
# report says how many rows it left out.
MAX_TABLE_ROWS = 200
MAX_TEXT_CHARS = 160
MAX_NAMED_REQUESTS = 20
# the side-by-side chart: distinct line styles in report.css, and legends that fit one row
SERIES_STYLES = 6
MAX_SERIES = 6
ENVELOPE_KEYS = frozenset(
    {"schema_version", "command", "servecheck_version", "created_at", "environment", "params", "simulated",
     "complete", "valid", "run_id", "server", "target", "warnings", "invalid"}
)

Renderer = Callable[[RunResult[Any], RunReading], str]
CHART_TITLE = re.compile(r'(<text class="chart-title"[^>]*>)([^<]*)(</text>)')


# ---------------------------------------------------------------- entry points


def write_html(path: str | Path, runs: Sequence[RunResult[Any]], reading: ReportReading) -> None:
    """Render `runs` into one self-contained HTML file, written atomically; `reading` is what
    `analysis.readings.read_report` read off them (the renderer formats, it computes nothing)."""
    write_text_atomic(Path(path), render_html(runs, reading))


def render_html(runs: Sequence[RunResult[Any]], reading: ReportReading) -> str:
    readings = reading.runs if len(reading.runs) == len(runs) else tuple(RunReading() for _ in runs)
    sections = [side_by_side(reading.side_by_side), context_side_by_side(runs)]
    sections += [render_doc(run, r, i) for i, (run, r) in enumerate(zip(runs, readings))]
    title = "servecheck report" if len(runs) != 1 else f"servecheck {runs[0].command} report"
    if any(run.simulated for run in runs):
        title = f"SIMULATED · {title}"
    return _template().substitute(
        title=esc(title),
        subtitle=esc(_subtitle(runs)),
        toc=_toc(runs),
        body="\n".join(sections),
        css=_css(),
        version=esc(__version__),
        generated=esc(datetime.now(UTC).isoformat(timespec="seconds")),
    )


def _template() -> Template:
    text = resources.files("servecheck.report").joinpath("templates/report.html").read_text(encoding="utf-8")
    return Template(text)


def _css() -> str:
    return resources.files("servecheck.report").joinpath("templates/report.css").read_text(encoding="utf-8")


def _subtitle(runs: Sequence[RunResult[Any]]) -> str:
    commands = sorted({run.command for run in runs})
    return f"{len(runs)} run{'s' if len(runs) != 1 else ''}: {', '.join(commands) or 'none'}"


def _toc(runs: Sequence[RunResult[Any]]) -> str:
    if len(runs) < 2:
        return ""
    links = [f'<a href="#run-{i}">{esc(_run_title(r))}</a>' for i, r in enumerate(runs)]
    return f'<nav class="toc">{"".join(links)}</nav>'


# ---------------------------------------------------------------- several runs


def side_by_side(result: Diff | None) -> str:
    """Seed 000 section 3 as a page: aggregate per concurrency level, one line per staircase or arms run."""
    if result is None:
        return ""
    rows = []
    for line in result.lines:
        cells = [fmt(line.aggregate_tok_s.get(n), 1) for n in result.levels]
        rows.append([esc(line.label), esc(line.config), *cells, esc(per_stream(line)), fmt_ratio(line.ratio),
                     f'<span class="trend-{esc(line.trend)}">{esc(line.trend)}</span>', esc(" ".join(line.marks)) or DASH])
    headers = ["run", "differs by", *[f"C={n}" for n in result.levels], "per-stream tok/s", "agg ratio", "trend", "marks"]
    series = [Series(line.label, tuple(sorted((float(n), v) for n, v in line.aggregate_tok_s.items())), f"s{k % SERIES_STYLES}")
              for k, line in enumerate(result.lines[:MAX_SERIES]) if line.aggregate_tok_s]
    chart = line_chart(series, title="Aggregate tok/s against concurrency, one line per run", x_label="concurrent requests",
                       y_label="aggregate tok/s") if series else ""
    if any("simulated" in line.marks for line in result.lines):
        chart = mark_charts_simulated(chart)
    return "\n".join([
        '<section class="side-by-side" id="side-by-side"><h2>Side by side</h2>',
        verdict_line("Across runs", result.verdict),
        table(headers, rows, frozenset(range(2, 2 + len(result.levels) + 2))),
        chart,
        f'<p class="key">A line rises when agg(highest C) / agg(C=1) is at least {RISING_RATIO}× (or the run itself said so); '
        "a flat line is a queue, whatever each request reports about itself.</p>",
        "</section>",
    ])


def context_side_by_side(runs: Sequence[RunResult[Any]]) -> str:
    """Context runs side by side by depth: each run's decode rate and ratio, one line per run on the chart."""
    picked = [(i, r) for i, r in enumerate(runs) if r.command == "context"]
    if len(picked) < 2:
        return ""
    result = diff_context_runs([r for _, r in picked], labels=[label_for(r, f"run {i + 1}") for i, r in picked])
    rows = [[fmt(depth, 0), *[f"{fmt(line.decode_tok_s.get(depth), 1)} ({fmt_ratio(line.ratio.get(depth))})" for line in result.lines]]
            for depth in result.depths]
    headers = ["depth", *[f"{line.label} decode tok/s (ratio)" for line in result.lines]]
    series = [Series(line.label, tuple(sorted((float(d), v) for d, v in line.decode_tok_s.items())), f"s{k % SERIES_STYLES}")
              for k, line in enumerate(result.lines[:MAX_SERIES]) if line.decode_tok_s]
    chart = line_chart(series, title="Decode rate against context depth, one line per run", x_label="context depth (prompt tokens)",
                       y_label="decode tok/s") if series else ""
    if any("simulated" in line.marks for line in result.lines):
        chart = mark_charts_simulated(chart)
    return "\n".join(['<section class="side-by-side" id="context-side-by-side"><h2>Context runs side by side</h2>',
                      table(headers, rows, frozenset(range(len(headers)))), chart, "</section>"])


# ---------------------------------------------------------------- one document


def render_doc(run: RunResult[Any], reading: RunReading, index: int = 0) -> str:
    renderer = RENDERERS.get(run.command)
    try:
        body = renderer(run, reading) if renderer is not None else _generic_section(run, reading)
    except Exception as exc:  # noqa: BLE001 - a malformed document must still give a report
        body = f'<p class="warn">This section could not be drawn ({esc(type(exc).__name__)}: {esc(exc)}).</p>'
        body += _generic_section(run, reading)
    if run.simulated:
        body = mark_charts_simulated(body)
    parts = [
        f'<section class="run {esc(run.command)}" id="run-{index}">',
        f"<h2>{esc(_run_title(run))}</h2>",
        _meta_line(run),
        _banners(run),
        body,
        _serve_log_audit(run, reading),
        _client_checks(run),
        _warnings(run),
        _environment(run),
        "</section>",
    ]
    return "\n".join(p for p in parts if p)


def mark_charts_simulated(body: str) -> str:
    """A chart is often cut out of a report on its own: its title must say the numbers are simulated."""
    return CHART_TITLE.sub(lambda m: f"{m.group(1)}{m.group(2)} — SIMULATED server{m.group(3)}", body)


def _run_title(run: RunResult[Any]) -> str:
    run_id = run.envelope.run_id
    prefix = f"Run {run_id}: " if run_id is not None else ""
    return f"{prefix}{run.command}"


def _meta_line(run: RunResult[Any]) -> str:
    server = run.server or Server()
    items = [
        ("server", run.url),
        ("model", run.model),
        ("engine", " ".join(x for x in (server.engine, server.version) if x) or None),
        ("time", run.envelope.created_at),
    ]
    text = " · ".join(f"{name} <b>{esc(value)}</b>" for name, value in items if value)
    return f'<p class="meta">{text}</p>' if text else ""


def _banners(run: RunResult[Any]) -> str:
    out = []
    if run.simulated:
        out.append('<div class="banner simulated">SIMULATED: these numbers come from servecheck\'s simulated server, not a real one.</div>')
    if not run.complete:
        out.append('<div class="banner incomplete">INCOMPLETE: the run stopped before it finished; only the points measured so far are shown.</div>')
    if run.valid is False:
        out.append('<div class="banner invalid">INVALID: the run completed but failed a validity check (see the warnings).</div>')
    return "\n".join(out)


def _serve_log_audit(run: RunResult[Any], reading: RunReading) -> str:
    """With --serve, servecheck audited the server's log: a refused feature there made the run exit 3."""
    audit = getattr(run.body, "log_audit", None)
    if run.command == "demo" or not isinstance(audit, LogAudit):
        return ""
    head = f"<h3>Server log audit</h3><p class=\"key\">{esc(audit.log_path or '')}</p>"
    if audit.error:
        return head + f'<p class="warn">The log could not be audited: {esc(audit.error)}</p>'
    return head + _log_findings(audit.findings, audit.lines, reading.log_audit) if audit.findings else ""


def _client_checks(run: RunResult[Any]) -> str:
    """The pre-flight of a measuring run: per N, the client's timing error against the command's bound."""
    checks = getattr(run.body, "client_checks", None)
    if not checks:
        return ""
    def ms(x: float | None) -> str:
        return "—" if x is None else f"{x:.1f}"

    def chosen_clock(c: Any) -> float | None:
        mine = [t for t in c.tried if t.workers == c.workers and t.clock_uncertainty_ms is not None]
        return mine[-1].clock_uncertainty_ms if mine else None

    on_ray = any(t.clock_uncertainty_ms is not None for c in checks for t in c.tried)
    rows = [[fmt(c.streams), fmt(c.workers), ms(c.stamp_delay_p99_ms), ms(c.dispatch_skew_ms),
             *([ms(chosen_clock(c))] if on_ray else []), ms(c.error_ms),
             ms(c.tolerance_ms), "CLIENT-BOUND" if c.client_bound else "within"] for c in checks]
    basis = esc(checks[0].basis) if checks[0].basis else "the command's bound"
    terms = "p99 stamp delay + dispatch skew" + (" + clock uncertainty between Ray actors" if on_ray else "")
    caption = f"<p>The client checked itself before each N: its timing error ({terms}) against {basis}.</p>"
    headers = ["N", "Ray actors" if on_ray else "client processes", "p99 stamp delay ms", "dispatch skew ms",
               *(["clock uncertainty ms"] if on_ray else []), "error ms", "bound ms", "client"]
    numeric = frozenset(range(len(headers) - 1))
    return "<h3>Client pre-flight</h3>" + caption + table(headers, rows, numeric=numeric)


def _warnings(run: RunResult[Any]) -> str:
    invalid, warnings, notes = run_findings(run)
    items = [f"<b>Invalid:</b> {_finding(f)}" for f in invalid]
    items += [_finding(w) for w in warnings]
    out = ""
    if items:
        out += "<h3>Warnings</h3><ul class=\"warnings\">" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"
    if notes:
        out += "<h3>Notes</h3><ul class=\"notes\">" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>"
    return out


def _finding(item: Finding | str) -> str:
    """A warning as text, or as {message, hint, requests}: escaped HTML."""
    if isinstance(item, str):
        return esc(item)
    out = esc(item.message or "") + (f" <i>({esc(item.hint)})</i>" if item.hint else "")
    if item.requests:
        count = len(item.requests)
        out += f" <span class=\"key\">({count} request{'s' if count != 1 else ''})</span>"
        named = "".join(f"<li>{esc(_request_ref(r))}</li>" for r in item.requests[:MAX_NAMED_REQUESTS])
        more = count - MAX_NAMED_REQUESTS
        named += f"<li>and {more} more (see the JSON result)</li>" if more > 0 else ""
        out += f'<ul class="refs">{named}</ul>'
    return out


def _request_ref(ref: RequestRef) -> str:
    """`N=4 rep 1 request #0 (nonce ...): 29 tokens vs modal 64`, from whatever the finding names."""
    parts = [f"N={ref.n}" if ref.n is not None else None, f"rep {ref.rep + 1}" if ref.rep is not None else None,
             f"request #{ref.index}" if ref.index is not None else None,
             f"(nonce {ref.nonce})" if ref.nonce else None]
    head = " ".join(p for p in parts if p)
    return f"{head}: {ref.detail}" if head and ref.detail else head or ref.detail or "a request"


def _environment(run: RunResult[Any]) -> str:
    envelope = run.envelope
    rows: list[tuple[str, object]] = [("servecheck", envelope.servecheck_version), ("schema", envelope.schema_version)]
    rows += sorted(environment_rows(envelope.environment))
    rows += [(f"param {k}", v) for k, v in sorted(envelope.params.items())]
    return "<details><summary>Environment and parameters</summary>" + kv_table(rows) + "</details>"


# ---------------------------------------------------------------- formatting


def fmt(value: Any, digits: int = 2, suffix: str = "") -> str:
    """A number rounded, a string escaped, anything missing as a dash."""
    if value is None or value == "":
        return DASH
    number = as_float(value)
    if number is not None and not isinstance(value, bool):
        text = f"{number:,.{digits}f}" if not float(number).is_integer() or digits == 0 else f"{int(number):,}"
        return esc(text + suffix)
    if isinstance(value, (list, tuple)):
        return esc(", ".join(_plain(v) for v in value)) if value else DASH
    if isinstance(value, dict):
        return esc(", ".join(f"{k}={_plain(v)}" for k, v in value.items())) if value else DASH
    return esc(value)


def _plain(value: Any) -> str:
    number = as_float(value)
    return f"{number:g}" if number is not None and not isinstance(value, bool) else str(value)


def fmt_ratio(value: Any) -> str:
    number = as_float(value)
    return DASH if number is None else esc(f"{number:.2f}×")


def fmt_signed_pct(value: Any) -> str:
    number = as_float(value)
    return DASH if number is None else esc(f"{number * 100:+.0f}%")


def fmt_pct(value: Any) -> str:
    number = as_float(value)
    return DASH if number is None else esc(f"{number * 100:.0f}%")


def fmt_yes_no(value: Any) -> str:
    return "yes" if value is True else "no" if value is False else DASH


def fmt_range(value: Any, digits: int = 2, scale: float = 1.0, suffix: str = "") -> str:
    lo, hi = as_range(value)
    if lo is None or hi is None:
        return DASH
    if abs(lo - hi) < 1e-12:
        return esc(f"{lo * scale:.{digits}f}{suffix}")
    return esc(f"{lo * scale:.{digits}f}–{hi * scale:.{digits}f}{suffix}")


def as_range(value: Any) -> tuple[float | None, float | None]:
    """[lo, hi], a single number, or {"lo", "hi"} as (lo, hi)."""
    if isinstance(value, dict):
        return as_float(value.get("lo")), as_float(value.get("hi"))
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return as_float(value[0]), as_float(value[1])
    number = as_float(value)
    return number, number


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: frozenset[int] = frozenset()) -> str:
    """Cells must already be escaped HTML; headers are escaped here."""
    head = "".join(f'<th{" class=num" if i in numeric else ""}>{esc(h)}</th>' for i, h in enumerate(headers))
    body = []
    for row in rows[:MAX_TABLE_ROWS]:
        cells = "".join(f'<td{" class=num" if i in numeric else ""}>{c}</td>' for i, c in enumerate(row))
        body.append(f"<tr>{cells}</tr>")
    more = len(rows) - MAX_TABLE_ROWS
    note = f'<p class="key">{more} more rows not shown (see the JSON result).</p>' if more > 0 else ""
    # the wrapper scrolls a wide table sideways on a narrow screen instead of widening the page
    return f'<div class="table-wrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>{note}'


def kv_table(rows: Sequence[tuple[str, Any]]) -> str:
    return table(["", ""], [(esc(k), fmt_field(k, v)) for k, v in rows])


def fmt_field(key: str, value: Any) -> str:
    """Like `fmt`, but a byte count (a key naming bytes, or bandwidth's sizes) reads as GB and GiB."""
    name = key.removeprefix("param ")
    if name.endswith(("bytes", "bytes_per_token", "bytes_read")) or name == "sizes":
        values = value if isinstance(value, list) else [value]
        shown = [_bytes(v) for v in values]
        if shown and all(shown):
            return esc(", ".join(s for s in shown if s))
    if name == "seed":
        return fmt(value if as_int(value) is None else str(value))  # an identifier, not a quantity
    return fmt(value)


def _bytes(value: Any) -> str | None:
    """`1.85 GB (1.72 GiB)`, `84.3 MB`: decimal units (GB = 10^9 B), GiB beside gigabytes."""
    number = as_float(value)
    if number is None or isinstance(value, bool):
        return None
    if abs(number) >= 1e9:
        return f"{number / 1e9:.3g} GB ({number / 2**30:.3g} GiB)"
    for unit, size in (("MB", 1e6), ("kB", 1e3)):
        if abs(number) >= size:
            return f"{number / size:.3g} {unit}"
    return f"{number:.0f} B"


def verdict_line(label: str, word: Any, extra: str = "") -> str:
    return f'<p class="verdict">{esc(label)}: <b>{fmt(word)}</b>{" " + extra if extra else ""}</p>'


def reason_line(*reasons: Any) -> str:
    """Why the verdict came out as it did, in the analysis's own words."""
    shown = [esc(r) for r in reasons if as_str(r)]
    return f'<p class="reason">{"<br>".join(shown)}</p>' if shown else ""


def _excerpt(text: Any) -> str:
    s = str(text) if text is not None else ""
    s = s if len(s) <= MAX_TEXT_CHARS else s[:MAX_TEXT_CHARS] + "…"
    return f"<code>{esc(s)}</code>" if s else DASH


# ---------------------------------------------------------------- generic


def _generic_section(run: RunResult[Any], reading: RunReading) -> str:
    doc = to_doc(run)
    rows = [(k, v) for k, v in doc.items() if k not in ENVELOPE_KEYS and _is_simple(v)]
    word = reading.verdict
    out = [verdict_line("Verdict", word)] if word else []
    if rows:
        out.append("<h3>Results</h3>" + kv_table(rows))
    for key, value in doc.items():
        rows = [r for r in as_list(value) if isinstance(r, dict)]
        if key not in ENVELOPE_KEYS and rows:
            out.append(f"<h3>{esc(key)}</h3>" + _dict_rows_table(rows))
    return "\n".join(out)


def _dict_rows_table(rows: list[dict[str, Any]]) -> str:
    """A list of records as a table of their simple fields (audit groups, bandwidth points, ...)."""
    keys = list(dict.fromkeys(k for r in rows for k, v in r.items() if _is_simple(v)))
    return table(keys, [[fmt_field(k, r.get(k)) for k in keys] for r in rows])


def _is_simple(value: Any) -> bool:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return True
    return isinstance(value, list) and len(value) <= 16 and all(isinstance(v, (str, int, float, bool)) for v in value)


# ---------------------------------------------------------------- staircase


def _staircase(run: RunResult[StaircaseBody], reading: RunReading) -> str:
    return _staircase_section(run.body, reading.staircase)


def _staircase_section(body: StaircaseBody, readings: Sequence[StaircasePointReading], x_max: float | None = None) -> str:
    points = body.points
    parts = [
        verdict_line("Verdict", body.verdict, f"· aggregate across N: <b>{fmt(body.trend)}</b>" + _ratio_note(points)),
        reason_line(body.verdict_reason, body.trend_reason),
        "<h3>Completion times</h3>",
        _single_note(body),
        table(
            ["N", "finish at (s from release)", "aggregate tok/s", "verdict", "decided by", "reps",
             "sum of self-reported rates"],
            [[fmt(p.n, 0), _finishes(p), fmt(p.aggregate_tok_s, 1), fmt(p.verdict), _evidence(p), fmt(p.reps_taken, 0),
              _self_reported_sum(p, read)]
             for p, read in zip(points, _aligned(readings, points))],
            numeric=frozenset({0, 2, 5, 6}),
        ),
        _timeline_charts(points, x_max),
        _throughput_chart(points, readings),
        _requests_details(points),
    ]
    return "\n".join(p for p in parts if p)


def _aligned(readings: Sequence[StaircasePointReading], points: Sequence[StaircasePoint]) -> Sequence[StaircasePointReading | None]:
    """One reading per point; none where the caller read nothing (a partial run's reading may lag its points)."""
    return readings if len(readings) == len(points) else [None] * len(points)


_EVIDENCE_NAMES = {"completion_times": "finish times", "server_gauges": "server gauges", "server_timings": "server timings"}


def _evidence(point: StaircasePoint) -> str:
    """What decided a point, as the analysis recorded it; an old document says it was not recorded."""
    if point.n == 1:
        return DASH
    if point.evidence is None:
        return "not recorded"
    names = [_EVIDENCE_NAMES.get(e, e) for e in point.evidence]
    return esc(" + ".join(names)) if names else DASH


def _single_note(body: StaircaseBody) -> str:
    single, times = body.single_s, body.single_times_s
    if single is None:
        return ""
    each = f", the median of {' / '.join(f'{t:.2f}' for t in times)} s measured before and after" if len(times) > 1 else ""
    return (f'<p class="key">Single-request time {esc(f"{single:.2f}")} s (N=1{esc(each)}). A queue finishes one request per '
            "single-request time; the aggregate is tokens produced / last finish, nothing the server reports.</p>")


def _self_reported_sum(point: StaircasePoint, read: StaircasePointReading | None) -> str:
    """The sum the seed warns about (each request's own rate, added up), beside the true aggregate: the
    reading's median over the reps that have both, and whether it misleads there."""
    if read is None or read.self_reported_sum_tok_s is None or read.true_aggregate_tok_s is None or point.n == 1:
        return DASH
    if read.self_reported_misleading:
        return f'<span class="misleading">{fmt(read.self_reported_sum_tok_s, 1)} (misleading)</span>'
    return f"{fmt(read.self_reported_sum_tok_s, 1)} (agrees)"


def _ratio_note(points: Sequence[StaircasePoint]) -> str:
    aggs = [(p.n, p.aggregate_tok_s) for p in points if p.n is not None and p.aggregate_tok_s is not None]
    base = next((a for n, a in aggs if n == 1), None)
    if not base or len(aggs) < 2:
        return ""
    n_max, a_max = max(aggs)
    return f" (agg({fmt(n_max, 0)}) / agg(1) = {fmt_ratio(a_max / base)})"


def _finishes(point: StaircasePoint) -> str:
    # seed-000 shape: one decimal for runs of seconds, two when everything is under 10 s
    digits = 2 if max(point.finish_s, default=0.0) < 10 else 1
    shown = [f"{v:.{digits}f}" for v in point.finish_s]
    return esc(" / ".join(shown)) if shown else DASH


def _first_batch(point: StaircasePoint) -> StaircaseBatch | None:
    return point.batches[0] if point.batches else None


def _timeline_charts(points: Sequence[StaircasePoint], shared_x_max: float | None = None) -> str:
    lanes = [(p, _lanes(p)) for p in points]
    lanes = [(p, rows) for p, rows in lanes if rows]
    if not lanes:
        return ""
    x_max = shared_x_max or _lanes_end(points)
    charts = []
    for point, rows in lanes:
        reps = len(point.batches)
        note = f" (rep 1 of {reps})" if reps > 1 else ""
        charts.append(timeline_chart(rows, x_max, title=f"N={fmt(point.n, 0)}{note}", x_label="seconds from release"))
    key = ('<p class="key">Each request is one lane:<i class="wait"></i>sent, waiting for its first token'
           '<i class="gen"></i>generating<i class="fail"></i>failed. A staircase means the server queued them; '
           "a cluster means it ran them together.</p>")
    return key + "".join(charts)


def _lanes_end(points: Sequence[StaircasePoint]) -> float:
    """The last finish over every lane drawn: one time axis for all charts, so steps compare by eye."""
    return max((seg.end for p in points for row in _lanes(p) for seg in row.segments), default=0.0)


def _lanes(point: StaircasePoint) -> list[TimelineRow]:
    batch = _first_batch(point)
    if batch is None:
        return _lanes_from_finishes(point)
    release = batch.release_s or 0.0
    requests = sorted(batch.requests, key=lambda r: r.send_s or 0.0)
    return [row for row in (_lane(r, release) for r in requests) if row is not None]


def _lane(req: Request, release: float) -> TimelineRow | None:
    send, first, end = req.send_s, req.first_token_s, req.end_s
    if send is None or end is None:
        return None
    send, end = send - release, end - release
    failed = not req.ok
    if failed or first is None:
        segments = (Segment(send, end, "fail" if failed else "gen"),)
    else:
        segments = (Segment(send, first - release, "wait"), Segment(first - release, end, "gen"))
    index = _or_unknown(req.index)
    title = (f"request {index}: sent {send:.2f} s, first token "
             f"{'—' if first is None else f'{first - release:.2f} s'}, finished {end:.2f} s, "
             f"{_or_unknown(req.tokens)} tokens, {_or_unknown(req.status)}")
    return TimelineRow(label=f"#{index}", segments=segments, title=title)


def _or_unknown(value: object) -> str:
    return "?" if value is None else str(value)


def _lanes_from_finishes(point: StaircasePoint) -> list[TimelineRow]:
    return [
        TimelineRow(label=f"{i + 1}", segments=(Segment(0.0, f, "gen"),), title=f"finished {f:.2f} s")
        for i, f in enumerate(point.finish_s)
    ]


def _throughput_chart(points: Sequence[StaircasePoint], readings: Sequence[StaircasePointReading]) -> str:
    agg = tuple((float(p.n), p.aggregate_tok_s) for p in points if p.n is not None and p.aggregate_tok_s is not None)
    if not agg:
        return ""
    series = [Series("aggregate tok/s", agg, "primary")]
    # the median over each point's requests of their stream rates, as the run's reading holds it
    rates = [r.per_user_rate_tok_s if r is not None else None for r in _aligned(readings, points)]
    per_user = tuple((float(p.n), rate) for p, rate in zip(points, rates) if p.n is not None and rate is not None)
    if per_user:
        series.append(Series("per-user rate tok/s", per_user, "secondary"))
    return line_chart(series, title="Throughput against N", x_label="concurrent requests (N)", y_label="tok/s")


def _requests_details(points: Sequence[StaircasePoint]) -> str:
    rows = []
    for p in points:
        batch = _first_batch(p)
        if batch is None:
            continue
        release = batch.release_s or 0.0
        for req in batch.requests:
            end = req.end_s
            rows.append([
                fmt(p.n, 0), fmt(req.index, 0), fmt(req.status), fmt(req.tokens, 0),
                fmt(req.ttft_s, 3), fmt(None if end is None else end - release, 2), _excerpt(req.text),
            ])
    if not rows:
        return ""
    headers = ["N", "request", "status", "tokens", "TTFT s", "finish s", "generated text (start)"]
    return "<details><summary>Requests (first rep of each N)</summary>" + table(headers, rows, frozenset({0, 1, 3, 4, 5})) + "</details>"


# ---------------------------------------------------------------- arms


def _arms_section(run: RunResult[ArmsBody], reading: RunReading) -> str:
    body = run.body
    parts = [_arms_headline(body), "<h3>Arms</h3>", _arms_table(body, reading.arms), _decomposition_chart(body.arms), _arms_checks(body),
             _deviant_cells(body.deviant_cells)]
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
    headers = ["in flight", "aggregate tok/s", "per-user tok/s", "aggregate speedup", "generation-stage gain", "per-user rate",
               "TTFT s", "TTFT multiple", "efficiency", "label"]
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
        for value, css, name in ((a.aggregate_speedup, "primary", "aggregate"), (a.generation_gain, "secondary", "generation")):
            if value is not None:
                bars.append(Bar(f"{c}-way {name}", value, css, f"{c}-way {name}: {value:.2f}×"))
    if not bars:
        return ""
    key = '<p class="key">Against the serial arm (dashed line = 1×, no gain): aggregate throughput gain beside the generation-stage gain. Aggregate up with generation flat is pipelining, not batching.</p>'
    return key + bar_chart(bars, title="Decomposition: aggregate vs generation-stage gain", y_label="× serial", ref_line=1.0)


def _deviant_cells(cells: tuple[DeviantCell, ...]) -> str:
    if not cells:
        return ""
    items = "".join(f"<li>{_deviant_cell(c)}</li>" for c in cells[:MAX_TABLE_ROWS])
    return f"<h3>Cells whose output length deviates</h3><ul class=\"warnings\">{items}</ul>"


def _deviant_cell(c: DeviantCell) -> str:
    """`run=1, rep=2, concurrency=4, tokens=230, modal_tokens=256, deviation=-0.1`: the cell's fields as saved."""
    named = (("run", c.run), ("rep", c.rep), ("concurrency", c.concurrency), ("tokens", c.tokens),
             ("modal_tokens", c.modal_tokens), ("deviation", c.deviation))
    return esc(", ".join(f"{k}={_plain(v)}" for k, v in named if v is not None)) or DASH


# ---------------------------------------------------------------- capacity


def _capacity_section(run: RunResult[CapacityBody], _: RunReading) -> str:
    """The answer, the probe table, and per-user rate and aggregate against N with the floor drawn."""
    body = run.body
    floor = body.design.min_user_rate_tok_s if body.design is not None else None
    least = body.least_marginal.text if body.least_marginal is not None else None
    parts = [f'<p class="verdict">{esc(body.answer)}</p>' if body.answer else "",
             reason_line(f"limit: {body.limit or DASH}", least),
             "<h3>Probes</h3>", _capacity_table(body.points), _capacity_charts(body.points, floor)]
    drift = body.drift
    if drift is not None and drift.start_tok_s is not None and drift.end_tok_s is not None and drift.change is not None:
        text = f"drift: serial baseline {drift.start_tok_s:.1f} → {drift.end_tok_s:.1f} tok/s per user (start vs end): {drift.change:+.1%}"
        parts.append(f"<h3>Checks</h3><ul><li>{esc(text)}</li></ul>")
    return "\n".join(p for p in parts if p)


def _capacity_table(points: tuple[CapacityPoint, ...]) -> str:
    rows = []
    for p in points:
        rows.append([
            fmt(p.n, 0), fmt(p.per_user_tok_s, 1) + _ci(p.per_user_interval, 1), fmt(p.ttft_s, 3) + _ci(p.ttft_interval, 3),
            fmt(p.aggregate_tok_s, 1), fmt(p.marginal_gain_tok_s_per_user, 1),
            fmt_signed_pct(p.marginal_per_user_change), fmt_pct(p.interval_level),
            f'<span class="label-{esc(p.status or "")}">{fmt(p.status)}</span>', fmt(p.reason),
        ])
    headers = ["N", "per-user tok/s", "TTFT s", "aggregate tok/s", "marginal tok/s per added user", "marginal per-user change",
               "interval level", "status", "reason"]
    return table(headers, rows, frozenset(range(7)))


def _ci(interval: tuple[float, float] | None, digits: int) -> str:
    """` [lo, hi]` after a point estimate, when the point has an interval."""
    if interval is None:
        return ""
    return f' <span class="ci">[{fmt(interval[0], digits)}, {fmt(interval[1], digits)}]</span>'


def _capacity_charts(points: tuple[CapacityPoint, ...], floor: float | None) -> str:
    per_user = tuple((float(p.n), p.per_user_tok_s) for p in points if p.n is not None and p.per_user_tok_s is not None)
    aggregate = tuple((float(p.n), p.aggregate_tok_s) for p in points if p.n is not None and p.aggregate_tok_s is not None)
    if not per_user and not aggregate:
        return ""
    series = [Series("per-user rate tok/s", per_user, "secondary")] if per_user else []
    if floor is not None and per_user:
        xs = [x for x, _ in per_user]
        series.append(Series(f"floor {floor:g} tok/s", ((min(xs), floor), (max(xs), floor)), "s4"))
    charts = [line_chart(series, title="Per-user rate against N (floor in red)", x_label="users in flight (N)", y_label="tok/s")] if series else []
    if aggregate:
        charts.append(line_chart([Series("aggregate tok/s", aggregate, "primary")], title="Aggregate against N",
                                 x_label="users in flight (N)", y_label="tok/s"))
    return "\n".join(charts)


# ---------------------------------------------------------------- prefix cache


def _prefix_cache_section(run: RunResult[PrefixCacheBody], _: RunReading) -> str:
    body = run.body
    sends = _sends(body)
    bars = [
        Bar(f"{i + 1} {s.kind}", s.ttft_s, s.kind if s.kind in ("repeat", "control") else "primary",
            f"send {i + 1} ({s.kind}): TTFT {s.ttft_s:.3f} s, cached {s.cached_tokens}")
        for i, s in enumerate(sends)
        if s.ttft_s is not None
    ]
    rows = [[fmt(i + 1, 0), fmt(s.kind), fmt(s.ttft_s, 3), fmt(s.cached_tokens, 0), fmt(s.prompt_tokens, 0)]
            for i, s in enumerate(sends)]
    parts = [
        verdict_line("Verdict", body.verdict),
        reason_line(body.verdict_reason or (body.analysis or CacheAnalysis()).reason),
        bar_chart(bars, title="Time to first token per send", y_label="seconds") if bars else "",
        "<h3>Sends</h3>",
        table(["send", "kind", "TTFT s", "cached tokens", "prompt tokens"], rows, frozenset({0, 2, 3, 4})),
    ]
    return "\n".join(p for p in parts if p)


def _sends(body: PrefixCacheBody) -> tuple[PrefixSend, ...]:
    """The sends as recorded, each with a kind; a document without them lists its repeats' TTFTs and the control's."""
    if body.sends:
        return tuple(s if s.kind else replace(s, kind="send") for s in body.sends)
    cached = body.cached_tokens
    out = [PrefixSend(kind="repeat", ttft_s=t, cached_tokens=cached[i] if i < len(cached) else None)
           for i, t in enumerate(body.ttft_s)]
    if body.control_ttft_s is not None:
        out.append(PrefixSend(kind="control", ttft_s=body.control_ttft_s))
    return tuple(out)


# ---------------------------------------------------------------- speculative

_SPEC_KINDS = (("unpredictable", "prose"), ("predictable", "verbatim repetition"))


def _speculative_section(run: RunResult[SpeculativeBody], _: RunReading) -> str:
    """Tokens per step and the per-stream rate against N, one line per prompt kind, and the table."""
    body = run.body
    parts = [verdict_line("Speculative decoding", body.verdict), reason_line(body.verdict_reason),
             _spec_chart(body.points, lambda p: p.tokens_per_step, "Tokens per step against N", "tokens per step"),
             _spec_chart(body.points, lambda p: p.per_stream_tok_s, "Per-stream decode rate against N", "tok/s"),
             "<h3>By N and prompt kind</h3>", _spec_table(body.points)]
    stops = [f"{kind}: {why}" for kind, why in body.stops_paying_reason.items()]
    notes = [f"N={fmt(p.n, 0)} {fmt(p.prompt_kind)}: {fmt(p.counters_note)}" for p in body.points if p.counters_note]
    notes += [f"N={fmt(p.n, 0)} {fmt(p.prompt_kind)} not grouped: {why}" for p in body.points for why in p.problems]
    items = stops + notes + list(body.notes)
    if items:
        parts.append("<h3>Checks</h3><ul>" + "".join(f"<li>{esc(line)}</li>" for line in items) + "</ul>")
    return "\n".join(p for p in parts if p)


def _spec_chart(points: Sequence[SpeculativePoint], value: Callable[[SpeculativePoint], float | None], title: str,
                y_label: str) -> str:
    series = []
    for k, (kind, label) in enumerate(_SPEC_KINDS):
        pts = tuple(sorted((float(p.n), v) for p in points if p.prompt_kind == kind and p.n is not None
                           and (v := value(p)) is not None))
        if pts:
            series.append(Series(label, pts, "primary" if k == 0 else "secondary"))
    return line_chart(series, title=title, x_label="N (streams at once)", y_label=y_label) if series else ""


def _spec_table(points: Sequence[SpeculativePoint]) -> str:
    rows = [[fmt(p.n, 0), fmt(p.prompt_kind), fmt(p.tokens_per_step, 2), fmt_range(p.tokens_per_step_interval, 2),
             fmt(p.per_stream_tok_s, 1), fmt(p.aggregate_tok_s, 1), fmt(p.baseline_per_stream_tok_s, 1), fmt(p.pays),
             fmt(p.server_tokens_per_step, 2), fmt(p.verdict)] for p in points]
    headers = ["N", "prompt kind", "tokens per step", "95% interval", "per-stream tok/s", "aggregate tok/s",
               "baseline tok/s", "pays", "server tokens per step", "verdict"]
    return table(headers, rows, frozenset({0, 2, 3, 4, 5, 6, 8}))


# ---------------------------------------------------------------- interference


def _interference_section(run: RunResult[InterferenceBody], _: RunReading) -> str:
    """The seed's sentence, a victim's inter-token interval over time with every intruder's prefill window
    shaded (one chart per rep), the table by prompt size, and what decided the verdict."""
    body = run.body
    parts = [verdict_line("Prefill interference", body.verdict), f"<p>{esc(body.sentence or '')}</p>",
             reason_line(f"decided by {body.decided_by or '?'}: {body.verdict_reason or ''}")]
    reps = sorted({r.rep for p in body.points for r in p.reps if r.rep is not None})
    parts += [_interference_chart(body.points, rep) for rep in reps]
    parts += ["<h3>By prompt size</h3>", _interference_table(body.points)]
    items = [f"S={p.prompt_tokens}: {why}" for p in body.points for why in p.problems]
    items += [f"S={s.prompt_tokens} skipped: {s.reason}" for s in body.skipped]
    if body.chunk_tokens is not None:
        items.append(f"chunk: about {body.chunk_tokens:,.0f} tokens a step ({fmt_range(body.chunk_interval, 0)})")
    if body.witness is not None and body.witness.note:
        items.append(f"witness: {body.witness.note}")
    items += list(body.notes)
    if items:
        parts.append("<h3>Checks</h3><ul>" + "".join(f"<li>{esc(line)}</li>" for line in items) + "</ul>")
    return "\n".join(p for p in parts if p)


def _victim_series(r: InterferenceRep) -> tuple[tuple[float, float], ...]:
    """The first victim's gaps in ms, each at the arrival that ended it (run-clock seconds)."""
    times = next((v.token_s for v in r.victims if v.token_s), None) or ()
    return tuple((b, (b - a) * 1e3) for a, b in zip(times, times[1:]))


def _interference_chart(points: Sequence[InterferencePoint], rep: int) -> str:
    trials = sorted((r for p in points for r in p.reps if r.rep == rep), key=lambda r: r.order or 0)
    series, bands = [], []
    for k, r in enumerate(trials):
        if pts := _victim_series(r):
            series.append(Series(f"S={fmt(r.prompt_tokens, 0)}", pts, "primary" if k % 2 == 0 else "secondary"))
        i = r.intruder
        if i is not None and i.send_s is not None and i.first_token_s is not None:
            bands.append(Marker(f"S={fmt(r.prompt_tokens, 0)} prefill: {i.send_s:.3f}-{i.first_token_s:.3f} s", i.send_s,
                                i.first_token_s, "prefill"))
    if not series:
        return ""
    return line_chart(series, title=f"Rep {rep + 1}: a victim's inter-token interval, each intruder's prefill shaded",
                      x_label="seconds since the run started", y_label="gap (ms)", bands=bands, dots=False)


def _interference_table(points: Sequence[InterferencePoint]) -> str:
    rows = [[fmt(p.prompt_tokens, 0), fmt(p.baseline_interval_s, 4), fmt(p.victim_max_gap_s, 4), fmt(p.victim_p99_gap_s, 4),
             fmt(p.step_gap_s, 4), fmt(p.stretched, 0), fmt(p.victim_lost_s, 3), fmt(p.intruder_ttft_s, 3),
             fmt(p.prefill_tok_s, 0), fmt(p.chunk_tokens, 0), "yes" if p.valid else "no"] for p in points]
    headers = ["prompt tokens", "baseline s", "longest gap s", "p99 gap s", "step s", "stretched", "lost s", "TTFT s",
               "prefill tok/s", "chunk", "valid"]
    return table(headers, rows, frozenset(range(10)))


# ---------------------------------------------------------------- context


def _context_section(run: RunResult[ContextBody], _: RunReading) -> str:
    """Decode rate against depth (measured, and predicted at constant utilization with a model), the table by depth."""
    body = run.body
    roof = {r.depth: r for r in body.roofline or ()}
    parts = [verdict_line("Context effect", body.effect), reason_line(body.effect_reason),
             _context_chart(body.points, tuple(roof.values())), "<h3>By depth</h3>", _context_table(body.points, roof)]
    drift = body.drift or ContextDrift()
    first, last, change = drift.first_tok_s, drift.last_tok_s, drift.change
    if first is not None and last is not None and change is not None:
        parts.append(f"<h3>Checks</h3><ul><li>{esc(f'drift: shallowest depth {first:.1f} → {last:.1f} tok/s (first vs last): {change:+.1%}')}</li></ul>")
    skipped = [f"depth {fmt(s.depth, 0)} skipped: {fmt(s.reason)}" for s in body.skipped]
    if skipped:
        parts.append("<ul>" + "".join(f"<li>{line}</li>" for line in skipped) + "</ul>")
    return "\n".join(p for p in parts if p)


def _context_chart(points: Sequence[ContextPoint], roof: Sequence[ContextRooflineRow]) -> str:
    measured = tuple((float(p.depth), p.decode_tok_s) for p in points if p.depth is not None and p.decode_tok_s is not None)
    if not measured:
        return ""
    series = [Series("measured decode tok/s", measured, "primary")]
    predicted = tuple((float(r.depth), r.predicted_tok_s) for r in roof if r.depth is not None and r.predicted_tok_s is not None)
    if predicted:
        series.append(Series("predicted at constant utilization", predicted, "secondary"))
    return line_chart(series, title="Decode rate against context depth", x_label="context depth (prompt tokens)", y_label="tok/s")


def _context_table(points: Sequence[ContextPoint], roof: dict[int | None, ContextRooflineRow]) -> str:
    rows = []
    for p in points:
        r = roof.get(p.depth) or ContextRooflineRow()
        rows.append([fmt(p.depth, 0), fmt(p.context_tokens, 0), fmt(p.ttft_s, 3), fmt(p.prefill_tok_s, 1),
                     fmt(p.decode_tok_s, 1), fmt_ratio(p.ratio), fmt(r.predicted_tok_s, 1),
                     fmt_ratio(r.measured_over_predicted), _gb(r.bytes_per_token),
                     fmt(r.achieved_gb_s, 2), fmt_range(r.utilization, 0, 100, "%"),
                     "valid" if p.valid is not False else "INVALID"])
    headers = ["depth", "context tokens", "TTFT s", "prefill tok/s", "decode tok/s", "ratio", "predicted tok/s", "measured/predicted",
               "bytes per token", "achieved GB/s", "utilization", ""]
    return table(headers, rows, frozenset(range(11)))


# ---------------------------------------------------------------- roofline


def _roofline_section(run: RunResult[RooflineBody], _: RunReading) -> str:
    b = run.body
    rows = [
        ("bytes per token (GB = 10^9 B)", _gb(b.bytes_per_token)),
        ("achieved bandwidth", fmt(b.achieved_gb_s, 1, " GB/s")),
        ("measured bandwidth", fmt_range(b.bandwidth_gb_s, 0, suffix=" GB/s")),
        ("utilization", fmt_range(b.utilization, 0, 100, "%")),
        ("kill gate", f"{fmt(b.gate)} (threshold {fmt_range(b.gate_threshold, 0, 100, '%')})"),
    ]
    headroom, ceiling, target = b.headroom or Headroom(), b.ceiling or Ceiling(), b.target or Target()
    if ceiling != Ceiling() or headroom != Headroom():
        rows.append(("ceiling", fmt(ceiling.name or headroom.ceiling)))
        rows.append(("headroom a perfect engine could win", fmt_range(headroom.factor, 2, suffix="×")))
        rows.append(("speed of light (100% of measured)", fmt_range(headroom.speed_of_light_tok_s, 0, suffix=" tok/s")))
    if target != Target():
        rows.append(("target", f"{fmt(target.tok_s, 1)} tok/s needs {fmt(target.required_gb_s, 0)} GB/s = "
                               f"{fmt_range(target.required_utilization, 0, 100, '%')}; within reach: {fmt_yes_no(target.within_reach)}"))
    table_html = table(["", ""], [(esc(k), v) for k, v in rows])
    return "\n".join([verdict_line("Gate", b.gate), _roofline_chart(b), table_html])


def _gb(nbytes: float | None) -> str:
    return DASH if nbytes is None else esc(f"{nbytes / 1e9:.3f} GB ({nbytes:,.0f} B)")


def _roofline_chart(b: RooflineBody) -> str:
    lo, hi = b.bandwidth_gb_s or (None, None)
    bars = []
    if lo is not None and hi is not None:
        bars.append(RangeBar(f"measured bandwidth {lo:.0f}–{hi:.0f} GB/s", lo, hi, "measured", "measured bandwidth at the model's working set"))
    if b.achieved_gb_s is not None:
        achieved = b.achieved_gb_s
        bars.append(RangeBar(f"achieved {achieved:.0f} GB/s", achieved, achieved, "achieved", "tok/s × bytes per token"))
    if not bars:
        return ""
    gate = b.gate_threshold
    markers = []
    if gate is not None and lo is not None and hi is not None:
        markers.append(Marker(f"gate {gate * 100:.0f}% of measured: {gate * lo:.0f}–{gate * hi:.0f} GB/s", gate * lo, gate * hi))
    c_lo, c_hi = (b.ceiling and b.ceiling.utilization) or (None, None)
    if c_lo is not None and c_hi is not None and lo is not None and hi is not None:
        markers.append(Marker(f"typical ceiling {c_lo * 100:.0f}–{c_hi * 100:.0f}% of measured: {c_lo * lo:.0f}–{c_hi * hi:.0f} GB/s",
                              c_lo * lo, c_hi * hi, "ceiling"))
    return range_chart(bars, markers, title="Roofline: achieved against measured bandwidth", x_label="GB/s (10^9 bytes per second)")


# ---------------------------------------------------------------- log


def _log_section(run: RunResult[LogBody], reading: RunReading) -> str:
    return _log_findings(run.body.findings, run.body.lines, reading.log_audit)


def _log_findings(findings: Sequence[LogFinding], lines: Sequence[LogLine], word: str | None) -> str:
    """A log audit's word, its findings and the WARNING/ERROR lines: the `log` command's, or a --serve run's."""
    # value and provenance columns only where the document has them: older documents render as they did
    with_value = any(f.value is not None for f in findings)
    with_provenance = any(f.provenance for f in findings)
    rows = [
        [fmt(f.feature), f'<span class="status-{esc(f.status or "")}">{fmt(f.status)}</span>',
         *([fmt(f.value)] if with_value else []), _excerpt(f.line), fmt(f.meaning),
         *([fmt(f.provenance)] if with_provenance else [])]
        for f in findings
    ]
    headers = ["feature", "status", *(["value"] if with_value else []), "evidence", "meaning",
               *(["provenance"] if with_provenance else [])]
    parts = [verdict_line("Verdict", word), "<h3>Findings</h3>", table(headers, rows)]
    if lines:
        line_rows = [[fmt(line.level), _excerpt(line.text)] for line in lines]
        parts.append("<details><summary>Warning and error lines</summary>" + table(["level", "line"], line_rows) + "</details>")
    return "\n".join(parts)


# ---------------------------------------------------------------- bandwidth


def _bandwidth_section(run: RunResult[BandwidthBody], _: RunReading) -> str:
    points = run.body.points or ()
    bars = [
        Bar(f"{p.bytes / 2**30:g} GiB", p.gb_s, "primary", f"{p.bytes / 2**30:g} GiB working set: {p.gb_s:.1f} GB/s")
        for p in points
        if p.bytes is not None and p.gb_s is not None
    ]
    chart = bar_chart(bars, title="Read bandwidth by working-set size", y_label="GB/s") if bars else ""
    return chart + _bandwidth_tables(run.body)


# A point's columns in the order its JSON object keeps them (sorted keys), as the tables always listed them.
PROBE_POINT_COLUMNS = ("bytes", "gb_s", "gb_s_4k", "gb_s_huge", "gib", "low_gb_s", "median_gb_s_4k", "median_gb_s_huge", "pages_differ")


def _bandwidth_tables(b: BandwidthBody) -> str:
    """The probe's settings, its points and the sizes it skipped, laid out as the generic section lays out
    any document: the simple fields in key order, then a table per list of records."""
    # as there, an empty list is a field that reads "—", and a list longer than 16 is not a simple field
    settings = [("device", b.device), ("method", b.method), ("notes", b.notes if b.notes is None or len(b.notes) <= 16 else None),
                ("passes", b.passes), ("points", () if b.points == () else None), ("skipped", () if b.skipped == () else None),
                ("threads", b.threads)]
    rows = [(k, v) for k, v in settings if v is not None]
    out = ["<h3>Results</h3>" + kv_table(rows)] if rows else []
    if b.points:
        cells = [[fmt_field(k, getattr(p, k)) for k in PROBE_POINT_COLUMNS] for p in b.points]
        out.append("<h3>points</h3>" + table(PROBE_POINT_COLUMNS, cells))
    if b.skipped:
        out.append("<h3>skipped</h3>" + table(["bytes", "reason"], [[fmt_field("bytes", s.bytes), fmt(s.reason)] for s in b.skipped]))
    return "\n".join(out)


# ---------------------------------------------------------------- demo


def _demo_section(run: RunResult[DemoBody], reading: RunReading) -> str:
    """The demo's staircase runs (one per server configuration), each drawn like a staircase run."""
    parts = []
    runs = run.body.runs
    readings = reading.parts if len(reading.parts) == len(runs) else tuple(RunReading() for _ in runs)
    # the same time axis for both configurations: the cluster ends visibly before the staircase
    x_max = max((_lanes_end(r.staircase.points) for r in runs if r.staircase is not None), default=0.0) or None
    for r, part in zip(runs, readings):
        parts.append(f"<h3>--parallel {fmt(r.parallel, 0)}: expected {fmt(r.expected)}, got {fmt(r.verdict)}</h3>")
        if r.staircase is not None:
            parts.append(_staircase_section(r.staircase, part.staircase, x_max))
        if r.log_audit is not None and r.log_audit.findings:
            parts.append(_log_findings(r.log_audit.findings, r.log_audit.lines, part.log_audit))
    return "\n".join(parts) or _demo_nothing_measured(run.body)


def _demo_nothing_measured(body: DemoBody) -> str:
    """A demo stopped before its first point: the simple fields, as the generic section lists them."""
    return "<h3>Results</h3>" + kv_table([("model_path", body.model_path), ("runs", body.runs), ("as_expected", body.as_expected)])


RENDERERS: dict[str, Renderer] = {
    "demo": _demo_section,
    "bandwidth": _bandwidth_section,
    "staircase": _staircase,
    "arms": _arms_section,
    "capacity": _capacity_section,
    "prefix-cache": _prefix_cache_section,
    "context": _context_section,
    "speculative": _speculative_section,
    "interference": _interference_section,
    "roofline": _roofline_section,
    "log": _log_section,
}
