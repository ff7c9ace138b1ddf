"""The interference run as a section of the HTML report (`report.html` draws the page around it; the
terminal lines are `report.lines.interference`, registered beside it)."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.model.bodies.interference import InterferenceBody, InterferencePoint, InterferenceRep
from servecheck.model.result import RunResult
from servecheck.model.readings import RunReading
from servecheck.report.svg import (
    Marker,
    Series,
    esc,
    line_chart,
)

from servecheck.report.html_kit import fmt, fmt_range, reason_line, table, verdict_line


def section(run: RunResult[InterferenceBody], _: RunReading) -> str:
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
            bands.append(Marker(f"S={fmt(r.prompt_tokens, 0)} prefill: {i.send_s:.3f}-{i.first_token_s:.3f} s",
                                i.send_s, i.first_token_s, "prefill"))
    if not series:
        return ""
    return line_chart(series, title=f"Rep {rep + 1}: a victim's inter-token interval, each intruder's prefill shaded",
                      x_label="seconds since the run started", y_label="gap (ms)", bands=bands, dots=False)


def _interference_table(points: Sequence[InterferencePoint]) -> str:
    rows = [[fmt(p.prompt_tokens, 0), fmt(p.baseline_interval_s, 4), fmt(p.victim_max_gap_s, 4),
             fmt(p.victim_p99_gap_s, 4), fmt(p.step_gap_s, 4), fmt(p.stretched, 0), fmt(p.victim_lost_s, 3),
             fmt(p.intruder_ttft_s, 3), fmt(p.prefill_tok_s, 0), fmt(p.chunk_tokens, 0),
             "yes" if p.valid else "no"] for p in points]
    headers = ["prompt tokens", "baseline s", "longest gap s", "p99 gap s", "step s", "stretched", "lost s", "TTFT s",
               "prefill tok/s", "chunk", "valid"]
    return table(headers, rows, frozenset(range(10)))
