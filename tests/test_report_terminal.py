"""Terminal helpers: the delayed progress display and the short re-rendering of saved runs."""

from __future__ import annotations

import io
import time
from dataclasses import dataclass
from typing import Any

import pytest
from rich.console import Console

import samples
from servecheck.analysis.readings import read_run
from servecheck.model.result import from_doc
from servecheck.report.terminal import progress, render_doc


@dataclass
class FakeApp:
    err: Console
    quiet: bool = False


def terminal(buffer: io.StringIO) -> Console:
    return Console(file=buffer, force_terminal=True, width=80, color_system=None)


def test_progress_shows_once_the_delay_has_passed() -> None:
    buffer = io.StringIO()
    with progress(FakeApp(terminal(buffer)), "measuring N=4", total=3, delay_s=0.0) as bar:
        bar.advance()
        deadline = time.monotonic() + 20  # generous: the display starts on a timer thread
        while "measuring N=4" not in buffer.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
        bar.update(description="measuring N=8", completed=2)
    assert "measuring N=4" in buffer.getvalue()


def test_progress_silent_for_a_quick_task() -> None:
    buffer = io.StringIO()
    with progress(FakeApp(terminal(buffer)), "quick", delay_s=60.0) as bar:
        bar.advance()
    assert buffer.getvalue() == ""


def test_progress_silent_with_quiet() -> None:
    buffer = io.StringIO()
    with progress(FakeApp(terminal(buffer), quiet=True), "quiet please", delay_s=0.0) as bar:
        time.sleep(0.3)
        bar.advance()
    assert buffer.getvalue() == ""


def test_progress_silent_when_stderr_is_not_a_terminal() -> None:
    buffer = io.StringIO()
    with progress(FakeApp(Console(file=buffer, force_terminal=False)), "piped", delay_s=0.0):
        time.sleep(0.3)
    assert buffer.getvalue() == ""


def test_progress_stops_on_error() -> None:
    buffer = io.StringIO()
    with pytest.raises(RuntimeError):
        with progress(FakeApp(terminal(buffer)), "failing", delay_s=0.0):
            raise RuntimeError("boom")


def rendered(doc: dict[str, Any]) -> str:
    console = Console(file=io.StringIO(), width=120, color_system=None)
    console.print(render_doc(doc, read_run(from_doc(doc)).verdict))
    return console.file.getvalue()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (samples.staircase(serial=True),
         ["staircase", "finish at 1.00 / 2.00 / 3.00 / 4.00 s", "aggregate 64.0 tok/s", "SIMULATED"]),
        (samples.arms(), ["1.39×", "-65%", "35%", "batching", "verdict: batching at 4"]),
        (samples.prefix_cache(working=True), ["verdict: working", "0.190", "5,990"]),
        (samples.roofline(), ["1.849 GB", "265–315 GB/s", "57–68%", "close (threshold 55%)"]),
        (samples.log(), ["continuous_batching", "refused", "verdict: refused"]),
        ({"command": "bandwidth", "best_gb_s": 366.0, "points": [{"bytes": 1024, "gb_s": 12.5}]},
         ["best_gb_s", "366", "12.5"]),
        ({"command": "staircase", "complete": False, "points": [{"n": 1}]}, ["INCOMPLETE", "—"]),
    ],
)
def test_render_doc(doc: dict[str, Any], expected: list[str]) -> None:
    text = rendered(doc)
    for fragment in expected:
        assert fragment in text


def test_render_doc_keeps_markup_as_text() -> None:
    doc = samples.log(line="[bold red]not markup[/] <script>alert(1)</script>")
    assert "[bold red]not markup[/] <script>alert(1)</script>" in rendered(doc)
