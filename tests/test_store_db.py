"""The history database: rows, migrations, refusals, concurrent writers and a killed writer."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from servecheck.errors import StoreError
from servecheck.model.result import from_doc
from servecheck.store import db as store_db
from servecheck.store.db import RunSummary, open_store
from servecheck.store.migrations import LATEST_VERSION, MIGRATIONS


def make_doc(**extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schema_version": 1,
        "command": "staircase",
        "created_at": "2026-01-02T03:04:05+00:00",
        "server": {"url": "http://127.0.0.1:9", "model": "sim-model", "simulated": True},
        "simulated": True,
        "complete": False,
        "verdict": "staircase",
        "points": [],
    }
    doc.update(extra)
    return doc


def test_run_round_trip_in_memory() -> None:
    with open_store(":memory:") as store:
        run_id = store.begin_run(from_doc(make_doc()))
        store.update_run(run_id, from_doc(make_doc(points=[{"n": 1, "aggregate_tok_s": 93.0}])), complete=True)
        doc = store.get_run(run_id)
        rows = store.list_runs()
    assert doc["run_id"] == run_id
    assert doc["complete"] is True
    assert [(p["n"], p["aggregate_tok_s"]) for p in doc["points"]] == [(1, 93.0)]
    assert rows == [
        RunSummary(
            id=run_id,
            created_at="2026-01-02T03:04:05+00:00",
            command="staircase",
            server_url="http://127.0.0.1:9",
            model="sim-model",
            verdict="staircase",
            simulated=True,
            complete=True,
        )
    ]


def test_nan_is_stored_as_null() -> None:
    with open_store(":memory:") as store:
        run_id = store.begin_run(from_doc(make_doc()).with_body(single_s=float("nan")))
        assert store.get_run(run_id)["single_s"] is None


def test_list_runs_filters_and_limits_newest_first(tmp_path: Path) -> None:
    with open_store(tmp_path / "h.db") as store:
        ids = [store.begin_run(from_doc(make_doc(command=c))) for c in ("staircase", "arms", "staircase", "log")]
        assert [r.id for r in store.list_runs()] == ids[::-1]
        assert [r.id for r in store.list_runs(command="staircase")] == [ids[2], ids[0]]
        assert [r.id for r in store.list_runs(limit=2)] == [ids[3], ids[2]]
        assert store.latest_run_id() == ids[3]


def test_verdict_column_for_other_commands() -> None:
    with open_store(":memory:") as store:
        roof = store.begin_run(from_doc({"command": "roofline", "gate": "close"}))
        arms = store.begin_run(from_doc({"command": "arms", "headline_refused": True}))
        log = store.begin_run(from_doc({"command": "log",
                                        "findings": [{"feature": "prefix_cache", "status": "refused"}]}))
        demo = store.begin_run(from_doc({"command": "demo",
                                         "verdicts": {"parallel_1": "staircase", "parallel_4": "partial"},
                                         "as_expected": False}))
        verdicts = {r.id: r.verdict for r in store.list_runs()}
    assert verdicts == {roof: "close", arms: "refused", log: "refused", demo: "staircase, partial (not as expected)"}


def test_migrations_replay_from_empty(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    with open_store(path) as store:
        assert store.schema_versions() == {m.version: m.name for m in MIGRATIONS}
    conn = sqlite3.connect(path)
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table','index')")}
    assert {"runs", "schema_migrations", "runs_command_created", "runs_created"} <= tables
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    with open_store(path) as store:  # reopening applies nothing twice
        assert len(store.schema_versions()) == len(MIGRATIONS)


def test_partial_schema_is_completed(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(store_db.BOOKKEEPING)
    for statement in MIGRATIONS[0].statements:
        conn.execute(statement)
    conn.execute("INSERT INTO schema_migrations VALUES (1, ?, 'then')", (MIGRATIONS[0].name,))
    conn.execute("INSERT INTO runs (created_at, updated_at, command, doc) VALUES ('t', 't', 'log', '{\"command\": "
                 "\"log\"}')")
    conn.close()
    with open_store(path) as store:
        assert max(store.schema_versions()) == LATEST_VERSION
        assert store.get_run(1)["command"] == "log"


def test_newer_schema_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with open_store(path):
        pass
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO schema_migrations VALUES (?, 'from_the_future', 'later')", (LATEST_VERSION + 1,))
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="newer than this servecheck"):
        open_store(path)
    assert path.read_bytes() == before


@pytest.mark.parametrize("content", [b"this is not a database at all" * 100, b"SQLite format 3\x00" + b"\xff" * 4000])
def test_corrupt_file_is_a_store_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.db"
    path.write_bytes(content)
    with pytest.raises(StoreError) as info:
        open_store(path)
    assert str(path) in info.value.one_line()
    assert "not a SQLite database or is damaged" in info.value.message


def test_missing_database_when_not_creating(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no history database at"):
        open_store(tmp_path / "absent.db", create=False)
    assert not (tmp_path / "absent.db").exists()


def test_missing_folder_for_explicit_path(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        open_store(tmp_path / "nope" / "h.db")


def test_folder_as_database(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a folder"):
        open_store(tmp_path)


def test_unknown_run_id() -> None:
    with open_store(":memory:") as store:
        with pytest.raises(StoreError, match="no run 42"):
            store.get_run(42)
        with pytest.raises(StoreError, match="no run 42"):
            store.update_run(42, from_doc(make_doc()), complete=True)


def test_env_var_and_default_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVECHECK_DB", str(tmp_path / "env.db"))
    assert store_db.resolve_path(None) == tmp_path / "env.db"
    assert store_db.resolve_path(tmp_path / "flag.db") == tmp_path / "flag.db"
    monkeypatch.delenv("SERVECHECK_DB")
    assert store_db.resolve_path(None).name == "history.sqlite3"


WRITER = textwrap.dedent(
    """
    import sys, time
    from servecheck.model.result import from_doc
    from servecheck.store.db import open_store
    path, tag, count, hang = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "hang"
    store = open_store(path)
    for i in range(count):
        doc = {"command": "staircase", "params": {"tag": tag}, "points": []}
        run_id = store.begin_run(from_doc(doc))
        for n in (1, 2, 4):
            doc["points"].append({"n": n, "aggregate_tok_s": float(n)})
            store.update_run(run_id, from_doc(doc), complete=False)
        if not hang:
            store.update_run(run_id, from_doc(doc), complete=True)
    if hang:
        print(run_id, flush=True)
        time.sleep(600)
    """
)


def _writer(path: Path, tag: str, count: int, hang: bool) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), tag, str(count), "hang" if hang else "done"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.timeout(120)
def test_two_processes_write_at_once(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    writers = [_writer(path, tag, 30, hang=False) for tag in ("a", "b")]
    for proc in writers:
        _, err = proc.communicate(timeout=100)
        assert proc.returncode == 0, err
    with open_store(path) as store:
        rows = store.list_runs()
        docs = [store.get_run(r.id) for r in rows]
    assert len(rows) == 60
    assert all(r.complete for r in rows)
    assert sorted(d["params"]["tag"] for d in docs) == ["a"] * 30 + ["b"] * 30
    assert all([p["n"] for p in d["points"]] == [1, 2, 4] for d in docs)


@pytest.mark.timeout(120)
def test_sigkilled_writer_leaves_a_readable_incomplete_run(tmp_path: Path) -> None:
    path = tmp_path / "killed.db"
    proc = _writer(path, "k", 1, hang=True)
    try:
        assert proc.stdout is not None
        run_id = int(proc.stdout.readline())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    with open_store(path) as store:
        (row,) = store.list_runs()
        doc = store.get_run(run_id)
    assert row.complete is False
    assert doc["complete"] is False
    assert [p["n"] for p in doc["points"]] == [1, 2, 4]


def test_valid_column_is_filled_from_the_documents_of_an_older_database(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(store_db.BOOKKEEPING)
    for migration in MIGRATIONS[:2]:
        for statement in migration.statements:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations VALUES (?, ?, 'then')", (migration.version, migration.name))
    for doc in ('{"command": "staircase", "valid": false}', '{"command": "arms", "valid": true}',
                '{"command": "audit"}', "not json"):
        conn.execute("INSERT INTO runs (created_at, updated_at, command, doc) VALUES ('t', 't', 'x', ?)", (doc,))
    conn.close()
    with open_store(path) as store:
        assert [r.valid for r in sorted(store.list_runs(), key=lambda r: r.id)] == [False, True, None, None]
        new = store.begin_run(from_doc({"command": "staircase", "valid": False}))
        assert store.list_runs(limit=1)[0].id == new and store.list_runs(limit=1)[0].valid is False


OPENER = """
import sys, time
from servecheck.model.result import from_doc
from servecheck.store.db import open_store
start = float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))
with open_store(sys.argv[1]) as store:
    store.begin_run(from_doc({"command": "staircase", "tag": sys.argv[3]}))
"""


@pytest.mark.timeout(120)
def test_many_first_opens_at_once_wait_their_turn(tmp_path: Path) -> None:
    """Several runs starting together on a new database: SQLite skips its busy handler while one of them
    switches the file to WAL, so without retries some failed at once with "database is locked"."""
    import time

    for attempt in range(3):
        path = tmp_path / f"fresh{attempt}.db"
        start = time.time() + 1.5
        procs = [subprocess.Popen([sys.executable, "-c", OPENER, str(path), str(start), str(k)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(6)]
        for proc in procs:
            _, err = proc.communicate(timeout=100)
            assert proc.returncode == 0, err
        with open_store(path) as store:
            assert len(store.list_runs()) == 6
