"""Terminal output helpers: a delayed progress display on stderr, and short re-renderings of saved
result documents as rich renderables. Formatters return renderables; only the CLI prints them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from rich.console import Console, Group, RenderableType
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from servecheck.model.bodies.arms import ArmsBody
from servecheck.model.bodies.log import LogBody
from servecheck.model.bodies.prefix_cache import PrefixCacheBody
from servecheck.model.bodies.roofline import RooflineBody
from servecheck.model.bodies.staircase import StaircaseBody
from servecheck.model.result import RunResult, from_doc
from servecheck.results.fields import as_dict, as_float, as_list

# Anything shorter finishes before a user wonders whether it hangs; a progress display that
# flashes for a fraction of a second is noise.
PROGRESS_DELAY_S = 2.0
DASH = "—"


class _App(Protocol):
    err: Console
    quiet: bool


class ProgressHandle:
    """What a task reports while it runs; safe to call whether or not the display is showing."""

    def __init__(self, progress: Progress | None, task: TaskID | None) -> None:
        self._progress = progress
        self._task = task

    def update(self, *, description: str | None = None, completed: float | None = None, total: float | None = None) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=description, completed=completed, total=total)

    def advance(self, amount: float = 1.0) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, amount)


@contextmanager
def progress(app: _App, description: str, *, total: float | None = None, delay_s: float = PROGRESS_DELAY_S) -> Iterator[ProgressHandle]:
    """Show a spinner (or a bar when `total` is known) on stderr once the task has run `delay_s`.

    Silent with --quiet or when stderr is not a terminal, so stdout and logs stay clean.
    """
    if app.quiet or not app.err.is_terminal:
        yield ProgressHandle(None, None)
        return
    display = _make_progress(app.err, total is not None)
    task = display.add_task(description, total=total)
    lock = threading.Lock()
    state = {"started": False, "done": False}

    def start() -> None:
        with lock:
            if not state["done"]:
                display.start()
                state["started"] = True

    timer = threading.Timer(delay_s, start)
    timer.daemon = True
    timer.start()
    try:
        yield ProgressHandle(display, task)
    finally:
        timer.cancel()
        with lock:
            state["done"] = True
            if state["started"]:
                display.stop()


def _make_progress(console: Console, with_bar: bool) -> Progress:
    columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
    if with_bar:
        columns += [BarColumn(), TextColumn("{task.completed:.0f}/{task.total:.0f}")]
    columns.append(TimeElapsedColumn())
    return Progress(*columns, console=console, transient=True)


# ---------------------------------------------------------------- re-rendering saved runs


def num(value: Any, digits: int = 1, suffix: str = "") -> str:
    number = as_float(value)
    if number is None:
        return DASH if value is None else str(value)
    return f"{number:,.{digits}f}{suffix}"


def render_doc(doc: dict[str, Any], verdict: str | None, body: Sequence[RenderableType] | None = None) -> RenderableType:
    """Head and marks (SIMULATED, INCOMPLETE, INVALID), then `body` (the command's own report) or a short
    rendering of any result document: `verdict` (the run's word, `analysis.run_verdict`), the key numbers,
    its table."""
    run = from_doc(doc)
    parts: list[RenderableType] = [_head(run)]
    parts += _marks(run)
    if body is not None:
        return Group(*parts, *body)
    if verdict:
        parts.append(Text.assemble("verdict: ", (verdict, "bold")))
    short = _BODIES.get(run.command)
    parts += short(run) if short is not None else _generic_body(doc)
    return Group(*parts)


def _head(run: RunResult[Any]) -> Text:
    run_id = run.envelope.run_id
    bits = [f"run {run_id}" if run_id is not None else None, run.command, run.envelope.created_at, run.url, run.model]
    return Text(" · ".join(b for b in bits if b), style="bold")


def _marks(run: RunResult[Any]) -> list[RenderableType]:
    marks = []
    if run.simulated:
        marks.append(Text("SIMULATED: measured against servecheck's simulated server", style="yellow"))
    if not run.complete:
        marks.append(Text("INCOMPLETE: the run stopped before it finished", style="red"))
    if run.valid is False:
        marks.append(Text("INVALID: the run failed a validity check", style="red"))
    return marks


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    table = Table(*headers, box=None, pad_edge=False, header_style="bold", show_header=any(headers))
    for row in rows:
        table.add_row(*[Text(c) for c in row])  # Text: server strings are never read as markup
    return table


def _staircase_body(run: RunResult[StaircaseBody]) -> list[RenderableType]:
    rows = []
    for p in run.body.points:
        # as the staircase report prints them: two decimals while everything is under 10 s
        digits = 2 if max(p.finish_s, default=0.0) < 10 else 1
        finishes = " / ".join(num(t, digits) for t in p.finish_s) or DASH
        rows.append([f"N={num(p.n, 0)}", f"finish at {finishes} s", f"aggregate {num(p.aggregate_tok_s)} tok/s",
                     p.verdict or DASH])
    out: list[RenderableType] = [Text(f"aggregate across N: {run.body.trend or DASH}")]
    return out + [_table(["", "", "", ""], rows)]


def _arms_body(run: RunResult[ArmsBody]) -> list[RenderableType]:
    body = run.body
    out: list[RenderableType] = []
    if body.headline:
        out.append(Text(body.headline))
    rows = [
        [num(a.concurrency, 0), num(a.aggregate_speedup, 2, "×"), num(a.generation_gain, 2, "×"),
         _pct(a.per_user_rate_change, signed=True), num(a.ttft_multiple, 2, "×"), _pct(a.efficiency), a.label or DASH]
        for a in body.arms
    ]
    headers = ["in flight", "aggregate", "generation", "per-user rate", "TTFT", "efficiency", "label"]
    return out + [_table(headers, rows)]


def _pct(value: float | None, *, signed: bool = False) -> str:
    if value is None:
        return DASH
    return f"{value * 100:+.0f}%" if signed else f"{value * 100:.0f}%"


def _prefix_body(run: RunResult[PrefixCacheBody]) -> list[RenderableType]:
    body = run.body
    if body.sends:
        rows = [[str(i + 1), s.kind or DASH, num(s.ttft_s, 3), num(s.cached_tokens, 0)] for i, s in enumerate(body.sends)]
    else:  # a document without its sends: the repeats' TTFTs, then the control's
        cached = body.cached_tokens
        rows = [[str(i + 1), "repeat", num(t, 3), num(cached[i] if i < len(cached) else None, 0)] for i, t in enumerate(body.ttft_s)]
        rows.append([str(len(rows) + 1), "control", num(body.control_ttft_s, 3), DASH])
    return [_table(["send", "kind", "TTFT s", "cached tokens"], rows)]


def _roofline_body(run: RunResult[RooflineBody]) -> list[RenderableType]:
    b = run.body
    rows = [
        ["bytes per token", num(None if b.bytes_per_token is None else b.bytes_per_token / 1e9, 3, " GB")],
        ["achieved", num(b.achieved_gb_s, 1, " GB/s")],
        ["measured bandwidth", _range(b.bandwidth_gb_s, 1.0, " GB/s", 0)],
        ["utilization", _range(b.utilization, 100.0, "%", 0)],
        ["gate", f"{b.gate or DASH} (threshold {_range(b.gate_threshold, 100.0, '%', 0)})"],
    ]
    return [_table(["", ""], rows)]


def _range(value: tuple[float, ...] | float | None, scale: float, suffix: str, digits: int) -> str:
    """`265–315 GB/s`, or one figure where both ends (or the one value) print alike."""
    values = value if isinstance(value, tuple) else () if value is None else (value,)
    shown = [f"{v * scale:.{digits}f}" for v in values]
    return "–".join(dict.fromkeys(shown)) + suffix if shown else DASH


def _log_body(run: RunResult[LogBody]) -> list[RenderableType]:
    # value and provenance columns only where the document has them: older documents print as they did
    findings = run.body.findings
    with_value = any(f.value is not None for f in findings)
    with_provenance = any(f.provenance for f in findings)
    headers = ["feature", "status", *(["value"] if with_value else []), "evidence",
               *(["provenance"] if with_provenance else [])]
    rows = [
        [f.feature or DASH, f.status or DASH, *([_scalar(f.value)] if with_value else []), f.line or DASH,
         *([f.provenance or DASH] if with_provenance else [])]
        for f in findings
    ]
    return [_table(headers, rows)]


def _generic_body(doc: dict[str, Any]) -> list[RenderableType]:
    skip = {"environment", "params", "server", "target", "command", "created_at", "run_id", "schema_version"}
    rows = [[k, _scalar(v)] for k, v in doc.items() if k not in skip and not isinstance(v, (dict, list))]
    out: list[RenderableType] = [_table(["", ""], rows)]
    points = [as_dict(p) for p in as_list(doc.get("points"))]
    if points:
        keys = [k for k, v in points[0].items() if not isinstance(v, (dict, list))]
        out.append(_table(keys, [[_scalar(p.get(k)) for k in keys] for p in points]))
    return out


def _scalar(value: Any) -> str:
    number = as_float(value)
    return DASH if value is None else f"{number:g}" if number is not None else str(value)


Body = Callable[[RunResult[Any]], list[RenderableType]]


_BODIES: dict[str, Body] = {
    "staircase": _staircase_body,
    "arms": _arms_body,
    "prefix-cache": _prefix_body,
    "roofline": _roofline_body,
    "log": _log_body,
}
