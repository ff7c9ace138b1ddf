"""Shared fixtures. Servers started by tests listen on 127.0.0.1 on ports the OS picks."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _history_in_tmp(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Runs saved by tests go to a throw-away database, never the user's history."""
    if "SERVECHECK_DB" not in os.environ:
        monkeypatch.setenv("SERVECHECK_DB", str(tmp_path_factory.mktemp("history") / "history.sqlite3"))
    yield
