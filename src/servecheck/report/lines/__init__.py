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
Short = Callable[[RunResult[Any]], list[RenderableType]]

# command -> its terminal report, and its HTML section; filled by the modules below as they are imported
REPORTS: dict[str, Report] = {}
SECTIONS: dict[str, Section] = {}
SHORTS: dict[str, Short] = {}


def register(command: str, *, lines: Report | None = None, html: Section | None = None,
             short: Short | None = None) -> None:
    """A command's presentation: its terminal report (None: `show` prints the short form), its HTML section,
    and its short form (`show`, for a document its report cannot read)."""
    if lines is not None:
        REPORTS[command] = lines
    if html is not None:
        SECTIONS[command] = html
    if short is not None:
        SHORTS[command] = short


# Each module registers its presentation.
from servecheck.report.lines import (  # noqa: E402,F401
    arms,
    audit,
    bandwidth,
    calibrate,
    capacity,
    check,
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
