"""The JSON file a run writes (`--json PATH`, `-` for stdout), as a `results.runner.Sink`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servecheck.model.result import written_doc
from servecheck.results.jsonout import check_writable, write_json
from servecheck.results.runner import Run


class JsonFileSink:
    """Rewritten atomically after every point, so a run killed outright (SIGKILL) still leaves the
    file with what was measured, marked incomplete. Standard output gets only the last document."""

    def __init__(self, path: str) -> None:
        if path != "-":
            check_writable(path)  # refused before anything is measured
        self.path = path

    def start(self, run: Run) -> Mapping[str, Any]:
        return {}

    def partial(self, run: Run) -> None:
        if self.path != "-":
            write_json(self.path, written_doc(run))

    def finish(self, run: Run) -> None:
        write_json(self.path, written_doc(run))

    def close(self) -> None:
        pass
