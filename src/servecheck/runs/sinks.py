"""Every place a run is written, as a `runs.runner.Sink`: the JSON file (`--json PATH`, `-` for stdout),
the history database, and the HTML report (`--html PATH`). Each is written again after every measured
point, so a run killed outright still leaves what it measured, marked incomplete. The document is
`model.result.written_doc`'s, the one writer of a result; the history and the HTML page get their
writers handed in by the CLI (`store.db.open_store`, `report.html.write_html`), so the run loop
imports neither."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from servecheck.model.readings import ReportReading
from servecheck.model.result import RunResult, written_doc
from servecheck.runs.jsonout import check_writable, write_json
from servecheck.runs.runner import Run


class JsonFileSink:
    """Rewritten atomically after every point. Standard output gets only the last document."""

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


class History(Protocol):
    """What the history sink needs of the database (`store.db.Store`)."""

    def begin_run(self, run: Run) -> int: ...

    def update_run(self, run_id: int, run: Run, *, complete: bool) -> None: ...

    def close(self) -> None: ...


class HistorySink:
    """The row is written when the run starts and updated after every point. The database is opened
    only when the run starts: a run refused before it starts leaves no row."""

    def __init__(self, path: str | Path | None, open_store: Callable[[str | Path | None], History]) -> None:
        self.path = path  # None: $SERVECHECK_DB is not set either, the user data directory
        self.open_store = open_store
        self._store: History | None = None
        self.run_id: int | None = None

    def start(self, run: Run) -> Mapping[str, Any]:
        self._store = self.open_store(self.path)
        self.run_id = self._store.begin_run(run)
        return {"run_id": self.run_id}

    def partial(self, run: Run) -> None:
        if self._store is not None and self.run_id is not None:
            self._store.update_run(self.run_id, run, complete=False)

    def finish(self, run: Run) -> None:
        if self._store is not None and self.run_id is not None:
            self._store.update_run(self.run_id, run, complete=run.complete)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


WriteHtml = Callable[[str, Sequence[RunResult[Any]], ReportReading], None]


class HtmlFileSink:
    """Redrawn after every point, like the JSON file; `-` writes it to stdout, at the end only."""

    def __init__(self, path: str, read: Callable[[Sequence[RunResult[Any]]], ReportReading],
                 write_html: WriteHtml) -> None:
        """`read` is `analysis.readings.read_report` and `write_html` `report.html.write_html`, handed in
        by the CLI: the report computes nothing, and the run loop draws nothing itself."""
        if path != "-":
            check_writable(path)
        self.path = path
        self.read = read
        self.write_html = write_html

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
        self.write_html(self.path, runs, self.read(runs))

    def close(self) -> None:
        pass
