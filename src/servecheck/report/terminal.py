"""Terminal output helpers: a delayed progress display on stderr, and short re-renderings of saved
result documents as rich renderables. Formatters return renderables; only the CLI prints them."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from rich.console import Console, Group, RenderableType
from rich.progress import BarColumn, Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.text import Text

from servecheck.model.reason import Reason
from servecheck.model.result import RunResult, from_doc
from servecheck.report.lines import SHORTS
from servecheck.report.lines.short import scalar, table
from servecheck.runs.fields import as_dict, as_list

# Anything shorter finishes before a user wonders whether it hangs; a progress display that
# flashes for a fraction of a second is noise.
PROGRESS_DELAY_S = 2.0


class _App(Protocol):
    err: Console
    quiet: bool


class ProgressHandle:
    """What a task reports while it runs; safe to call whether or not the display is showing."""

    def __init__(self, progress: Progress | None, task: TaskID | None) -> None:
        self._progress = progress
        self._task = task

    def update(self, *, description: str | None = None, completed: float | None = None,
               total: float | None = None) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=description, completed=completed, total=total)

    def advance(self, amount: float = 1.0) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, amount)


@contextmanager
def progress(app: _App, description: str, *, total: float | None = None,
             delay_s: float = PROGRESS_DELAY_S) -> Iterator[ProgressHandle]:
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


def render_doc(doc: dict[str, Any], verdict: str | Reason | None,
               body: Sequence[RenderableType] | None = None) -> RenderableType:
    """Head and marks (SIMULATED, INCOMPLETE, INVALID), then `body` (the command's own report) or a short
    rendering of any result document: `verdict` (the run's word, `analysis.run_verdict`), the key numbers,
    its table."""
    run = from_doc(doc)
    parts: list[RenderableType] = [_head(run)]
    parts += _marks(run)
    if body is not None:
        return Group(*parts, *body)
    if verdict:
        parts.append(Text.assemble("verdict: ", (str(verdict), "bold")))
    short = SHORTS.get(run.command)
    parts += short(run) if short is not None else _generic_body(doc)
    return Group(*parts)


def _head(run: RunResult[Any]) -> Text:
    run_id = run.envelope.run_id
    bits = [f"run {run_id}" if run_id is not None else None, run.command, run.envelope.created_at, run.url, run.model]
    return Text(" · ".join(b for b in bits if b), style="bold")


def _marks(run: RunResult[Any]) -> list[RenderableType]:
    marks: list[RenderableType] = []
    if run.simulated:
        marks.append(Text("SIMULATED: measured against servecheck's simulated server", style="yellow"))
    if not run.complete:
        marks.append(Text("INCOMPLETE: the run stopped before it finished", style="red"))
    if run.valid is False:
        marks.append(Text("INVALID: the run failed a validity check", style="red"))
    return marks


def _generic_body(doc: dict[str, Any]) -> list[RenderableType]:
    skip = {"environment", "params", "server", "target", "command", "created_at", "run_id", "schema_version"}
    rows = [[k, scalar(v)] for k, v in doc.items() if k not in skip and not isinstance(v, (dict, list))]
    out: list[RenderableType] = [table(["", ""], rows)]
    points = [as_dict(p) for p in as_list(doc.get("points"))]
    if points:
        keys = [k for k, v in points[0].items() if not isinstance(v, (dict, list))]
        out.append(table(keys, [[scalar(p.get(k)) for k in keys] for p in points]))
    return out


