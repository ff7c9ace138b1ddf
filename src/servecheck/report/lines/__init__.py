"""Each command's presentation, rendered from its typed result alone: its terminal report (the
command prints it when its run ends, `servecheck show` prints the same lines for a saved run) in
`<command>.py`, and its section of the HTML report in `<command>_html.py` beside it. The command's
module registers both, once (`register`). A report or a section is handed the run and what the
analysis read off it (`model.readings.RunReading`); it formats both and computes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import RenderableType

from servecheck.model.readings import RunReading
from servecheck.model.result import RunResult

Report = Callable[[RunResult[Any], RunReading], list[RenderableType]]
Section = Callable[[RunResult[Any], RunReading], str]

# command -> its terminal report, and its HTML section; filled by the modules below as they are imported
REPORTS: dict[str, Report] = {}
SECTIONS: dict[str, Section] = {}


def register(command: str, *, lines: Report | None = None, html: Section | None = None) -> None:
    """A command's presentation: its terminal report (None: `show` prints the short form) and its HTML section."""
    if lines is not None:
        REPORTS[command] = lines
    if html is not None:
        SECTIONS[command] = html


# Each module registers its presentation.
from servecheck.report.lines import (  # noqa: E402,F401
    arms,
    audit,
    bandwidth,
    calibrate,
    capacity,
    compare,
    context,
    demo,
    interference,
    log,
    prefix_cache,
    roofline,
    speculative,
    staircase,
)
