"""The saved runs `arms --pool` names: JSON files servecheck wrote, or runs of the history by id."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servecheck.runs.jsonout import read_json
from servecheck.store.db import open_store

POOL_FILE_HINT = "pass a JSON file written by `servecheck arms --json`, or a run id"


def load_pool(sources: Sequence[str], db_path: str | None) -> list[dict[str, Any]]:
    """The documents in the order named: a path that exists, or anything but digits, is a file;
    digits are a run id of the history database."""
    return [
        read_json(src, flag="--pool", hint=POOL_FILE_HINT) if Path(src).exists() or not src.isdigit()
        else _load_run(int(src), db_path)
        for src in sources
    ]


def _load_run(run_id: int, db_path: str | None) -> dict[str, Any]:
    store = open_store(db_path, create=False)
    try:
        return store.get_run(run_id)
    finally:
        store.close()
