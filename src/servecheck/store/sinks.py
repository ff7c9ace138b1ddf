"""The history database as a `results.runner.Sink`: the row is written when the run starts and
updated after every measured point, so a run that is killed is still there, marked incomplete."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servecheck.results.runner import Run
from servecheck.store.db import Store, open_store


class HistorySink:
    """Opens the database only when the run starts: a run refused before it starts leaves no row."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = path  # None: $SERVECHECK_DB is not set either, the user data directory
        self._store: Store | None = None
        self.run_id: int | None = None

    def start(self, run: Run) -> Mapping[str, Any]:
        self._store = open_store(self.path)
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
