"""The self-contained HTML report: one file, inline CSS and SVG, no scripts, nothing fetched.

Documents come from every command and may be partial or from another version, so each section
renders what it finds and shows "—" for what is missing. Every string is escaped, wherever it
came from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from servecheck import __version__
from servecheck.model.bodies.common import LogAudit, Server
from servecheck.model.result import RunResult, environment_rows, run_findings, to_doc
from servecheck.model.bodies.staircase import RISING_RATIO
from servecheck.model.readings import ReportReading, RunReading
from servecheck.model.sidebyside import Diff, label_for
from servecheck.report.diff import diff_context_runs, per_stream
from servecheck.runs.fields import as_list
from servecheck.runs.jsonout import write_text_atomic
from servecheck.report.html_kit import (
    DASH,
    MAX_SERIES,
    SERIES_STYLES,
    finding,
    fmt,
    fmt_field,
    fmt_ratio,
    kv_table,
    mark_charts_simulated,
    table,
    verdict_line,
)
from servecheck.report.lines import SECTIONS
from servecheck.report.lines.log_html import log_findings
from servecheck.report.lines.text import carried_words
from servecheck.report.svg import (
    Series,
    esc,
    line_chart,
)

ENVELOPE_KEYS = frozenset(
    {"schema_version", "command", "servecheck_version", "created_at", "environment", "params", "simulated",
     "complete", "valid", "run_id", "server", "target", "warnings", "invalid"}
)


Renderer = Callable[[RunResult[Any], RunReading], str]


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


def side_by_side(result: Diff | None) -> str:
    """Seed 000 section 3 as a page: aggregate per concurrency level, one line per staircase or arms run."""
    if result is None:
        return ""
    rows = []
    for line in result.lines:
        cells = [fmt(line.aggregate_tok_s.get(n), 1) for n in result.levels]
        rows.append([esc(line.label), esc(line.config), esc(line.verdict or DASH), *cells, esc(per_stream(line)),
                     fmt_ratio(line.ratio),
                     f'<span class="trend-{esc(line.trend)}">{esc(line.trend)}</span>',
                     esc(" ".join(line.marks)) or DASH])
    headers = ["run", "differs by", "verdict", *[f"C={n}" for n in result.levels], "per-stream tok/s", "agg ratio",
               "trend", "marks"]
    series = [Series(line.label, tuple(sorted((float(n), v) for n, v in line.aggregate_tok_s.items())),
                     f"s{k % SERIES_STYLES}")
              for k, line in enumerate(result.lines[:MAX_SERIES]) if line.aggregate_tok_s]
    chart = line_chart(series, title="Aggregate tok/s against concurrency, one line per run",
                       x_label="concurrent requests", y_label="aggregate tok/s") if series else ""
    if any("simulated" in line.marks for line in result.lines):
        chart = mark_charts_simulated(chart)
    return "\n".join([
        '<section class="side-by-side" id="side-by-side"><h2>Side by side</h2>',
        verdict_line("Across runs", result.verdict),
        table(headers, rows, frozenset(range(2, 2 + len(result.levels) + 2))),
        chart,
        f'<p class="key">A line rises when agg(highest C) / agg(C=1) is at least {RISING_RATIO}× '
        '(or the run itself said so); '
        "a flat line is a queue, whatever each request reports about itself.</p>",
        "</section>",
    ])


def context_side_by_side(runs: Sequence[RunResult[Any]]) -> str:
    """Context runs side by side by depth: each run's decode rate and ratio, one line per run on the chart."""
    picked = [(i, r) for i, r in enumerate(runs) if r.command == "context"]
    if len(picked) < 2:
        return ""
    result = diff_context_runs([r for _, r in picked], labels=[label_for(r, f"run {i + 1}") for i, r in picked])
    rows = [[fmt(depth, 0), *[f"{fmt(line.decode_tok_s.get(depth), 1)} ({fmt_ratio(line.ratio.get(depth))})"
                              for line in result.lines]]
            for depth in result.depths]
    headers = ["depth", *[f"{line.label} decode tok/s (ratio)" for line in result.lines]]
    series = [Series(line.label, tuple(sorted((float(d), v) for d, v in line.decode_tok_s.items())),
                     f"s{k % SERIES_STYLES}")
              for k, line in enumerate(result.lines[:MAX_SERIES]) if line.decode_tok_s]
    chart = line_chart(series, title="Decode rate against context depth, one line per run",
                       x_label="context depth (prompt tokens)", y_label="decode tok/s") if series else ""
    if any("simulated" in line.marks for line in result.lines):
        chart = mark_charts_simulated(chart)
    return "\n".join(['<section class="side-by-side" id="context-side-by-side"><h2>Context runs side by side</h2>',
                      table(headers, rows, frozenset(range(len(headers)))), chart, "</section>"])


def render_doc(run: RunResult[Any], reading: RunReading, index: int = 0) -> str:
    renderer = SECTIONS.get(run.command)
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
        _carried(run),
        body,
        _serve_log_audit(run, reading),
        _client_checks(run),
        _warnings(run),
        _environment(run),
        "</section>",
    ]
    return "\n".join(p for p in parts if p)


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
        out.append('<div class="banner simulated">SIMULATED: these numbers come from servecheck\'s simulated server, '
                   'not a real one.</div>')
    if not run.complete:
        out.append('<div class="banner incomplete">INCOMPLETE: the run stopped before it finished; '
                   'only the points measured so far are shown.</div>')
    if run.valid is False:
        out.append('<div class="banner invalid">INVALID: the run completed but failed a validity check (see the '
                   'warnings).</div>')
    return "\n".join(out)


def _carried(run: RunResult[Any]) -> str:
    """What every request carried besides servecheck's own fields, just above the section's verdict."""
    words = carried_words(run.envelope.params)
    return f'<p class="carried">requests carried: <b>{esc(words)}</b></p>' if words else ""


def _serve_log_audit(run: RunResult[Any], reading: RunReading) -> str:
    """With --serve, servecheck audited the server's log: a refused feature there made the run exit 3."""
    audit = getattr(run.body, "log_audit", None)
    if run.command == "demo" or not isinstance(audit, LogAudit):
        return ""
    head = f"<h3>Server log audit</h3><p class=\"key\">{esc(audit.log_path or '')}</p>"
    if audit.error:
        return head + f'<p class="warn">The log could not be audited: {esc(audit.error)}</p>'
    return head + log_findings(audit.findings, audit.lines, reading.log_audit) if audit.findings else ""


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
    items = [f"<b>Invalid:</b> {finding(f)}" for f in invalid]
    items += [finding(w) for w in warnings]
    out = ""
    if items:
        out += "<h3>Warnings</h3><ul class=\"warnings\">" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"
    if notes:
        out += "<h3>Notes</h3><ul class=\"notes\">" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>"
    return out


def _environment(run: RunResult[Any]) -> str:
    envelope = run.envelope
    rows: list[tuple[str, object]] = [("servecheck", envelope.servecheck_version), ("schema", envelope.schema_version)]
    rows += sorted(environment_rows(envelope.environment))
    rows += [(f"param {k}", v) for k, v in sorted(envelope.params.items())]
    return "<details><summary>Environment and parameters</summary>" + kv_table(rows) + "</details>"


def _generic_section(run: RunResult[Any], reading: RunReading) -> str:
    doc = to_doc(run)
    rows = [(k, v) for k, v in doc.items() if k not in ENVELOPE_KEYS and _is_simple(v)]
    word = reading.verdict
    out = [verdict_line("Verdict", word)] if word else []
    if rows:
        out.append("<h3>Results</h3>" + kv_table(rows))
    for key, value in doc.items():
        records = [r for r in as_list(value) if isinstance(r, dict)]
        if key not in ENVELOPE_KEYS and records:
            out.append(f"<h3>{esc(key)}</h3>" + _dict_rows_table(records))
    return "\n".join(out)


def _dict_rows_table(rows: list[dict[str, Any]]) -> str:
    """A list of records as a table of their simple fields (audit groups, bandwidth points, ...)."""
    keys = list(dict.fromkeys(k for r in rows for k, v in r.items() if _is_simple(v)))
    return table(keys, [[fmt_field(k, r.get(k)) for k in keys] for r in rows])


def _is_simple(value: Any) -> bool:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return True
    return isinstance(value, list) and len(value) <= 16 and all(isinstance(v, (str, int, float, bool)) for v in value)
