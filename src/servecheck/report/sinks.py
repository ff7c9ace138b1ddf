"""The HTML report a run writes (`--html PATH`), as a `results.runner.Sink`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servecheck.report.html import write_html
from servecheck.results.jsonout import check_writable
from servecheck.results.runner import Doc


class HtmlFileSink:
    """Redrawn after every point, like the JSON file; `-` writes it to stdout, at the end only."""

    def __init__(self, path: str) -> None:
        if path != "-":
            check_writable(path)
        self.path = path

    def start(self, doc: Doc) -> Mapping[str, Any]:
        return {}

    def partial(self, doc: Doc) -> None:
        if self.path == "-":
            return
        try:
            write_html(self.path, [doc])
        except (KeyError, TypeError, ValueError, IndexError):
            # A partial the report cannot draw yet must never stop the measurement; the JSON
            # and the history row hold it, and the final write renders (or reports) it.
            pass

    def finish(self, doc: Doc) -> None:
        write_html(self.path, [doc])

    def close(self) -> None:
        pass
