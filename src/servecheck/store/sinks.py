"""The history database as a `results.runner.Sink`: the row is written when the run starts and
updated after every measured point, so a run that is killed is still there, marked incomplete."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servecheck.results.runner import Doc
from servecheck.store.db import Store, open_store


class HistorySink:
    """Opens the database only when the run starts: a run refused before it starts leaves no row."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = path  # None: $SERVECHECK_DB is not set either, the user data directory
        self._store: Store | None = None
        self.run_id: int | None = None

    def start(self, doc: Doc) -> Mapping[str, Any]:
        self._store = open_store(self.path)
        self.run_id = self._store.begin_run(doc)
        return {"run_id": self.run_id}

    def partial(self, doc: Doc) -> None:
        if self._store is not None and self.run_id is not None:
            self._store.update_run(self.run_id, doc, complete=False)

    def finish(self, doc: Doc) -> None:
        if self._store is not None and self.run_id is not None:
            self._store.update_run(self.run_id, doc, complete=bool(doc.get("complete")))

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
