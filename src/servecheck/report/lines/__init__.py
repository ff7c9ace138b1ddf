"""Each command's terminal report, rendered from its typed result alone: the command prints it when
its run ends and `servecheck show` prints the same lines for a saved run. One module per command;
each adds its report to REPORTS. A report is handed the run and what the analysis read off it
(`model.readings.RunReading`); it formats both and computes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.console import RenderableType

from servecheck.model.readings import RunReading
from servecheck.model.result import RunResult

Report = Callable[[RunResult[Any], RunReading], list[RenderableType]]

# command -> its report; filled by the modules below as they are imported
REPORTS: dict[str, Report] = {}

# Each module registers its report in REPORTS.
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
