"""The HTML report a run writes (`--html PATH`), as a `results.runner.Sink`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from servecheck.model.readings import ReportReading
from servecheck.model.result import RunResult
from servecheck.report.html import write_html
from servecheck.results.jsonout import check_writable
from servecheck.results.runner import Run


class HtmlFileSink:
    """Redrawn after every point, like the JSON file; `-` writes it to stdout, at the end only."""

    def __init__(self, path: str, read: Callable[[Sequence[RunResult[Any]]], ReportReading]) -> None:
        """`read` is `analysis.readings.read_report`, handed in by the CLI: the report computes nothing."""
        if path != "-":
            check_writable(path)
        self.path = path
        self.read = read

    def start(self, run: Run) -> Mapping[str, Any]:
        return {}

    def partial(self, run: Run) -> None:
        if self.path == "-":
            return
        try:
            self._write(run)
        except (KeyError, TypeError, ValueError, IndexError):
            # A partial the report cannot draw yet must never stop the measurement; the JSON
            # and the history row hold it, and the final write renders (or reports) it.
            pass

    def finish(self, run: Run) -> None:
        self._write(run)

    def _write(self, run: Run) -> None:
        runs = [run]
        write_html(self.path, runs, self.read(runs))

    def close(self) -> None:
        pass
