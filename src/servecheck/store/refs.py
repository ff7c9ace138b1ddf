"""Turning what a user typed for RUN (a saved run id, `last`, or a JSON result file) into documents."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servecheck.errors import UsageError
from servecheck.runs.jsonout import read_json
from servecheck.store.db import Store, open_store

LATEST = ("last", "latest")
# SQLite's largest INTEGER: a run id above it cannot exist (and sqlite3 overflows on it).
MAX_RUN_ID = 2**63 - 1


def _is_id(ref: str) -> bool:
    return ref.isascii() and ref.isdigit()  # str.isdigit() alone takes '²', which int() refuses


def is_file_ref(ref: str) -> bool:
    return ref.endswith(".json") or (not _is_id(ref) and ref not in LATEST and Path(ref).exists())


def load_runs(refs: Sequence[str], db_path: str | None) -> list[dict[str, Any]]:
    """Documents in the order given; the database is opened only when a ref needs it."""
    store: Store | None = None
    try:
        docs = []
        for ref in refs:
            if is_file_ref(ref):
                docs.append(read_json(ref))
                continue
            if store is None:
                store = open_store(db_path, create=False)
            docs.append(store.get_run(run_id(ref, store)))
        return docs
    finally:
        if store is not None:
            store.close()


def run_id(ref: str, store: Store) -> int:
    if ref in LATEST:
        latest = store.latest_run_id()
        if latest is None:
            raise UsageError(f"no saved runs in {store.path}", "run a measuring command first")
        return latest
    if not _is_id(ref):
        raise UsageError(
            f"{ref!r} is not a run id, 'last', or a JSON result file",
            "list saved runs with `servecheck history`",
        )
    if int(ref) > MAX_RUN_ID:
        raise UsageError(f"run id {ref} is out of range (at most {MAX_RUN_ID})",
                         "list saved runs with `servecheck history`")
    return int(ref)
