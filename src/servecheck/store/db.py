"""The history database: one row per run, inserted when the run starts and updated after every
measured point, so a run killed mid-way stays readable and marked incomplete."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import platformdirs

from servecheck.errors import StoreError
from servecheck.analysis.run_verdict import run_verdict
from servecheck.model.result import RunResult, written_doc
from servecheck.runs.jsonout import dumps_compact
from servecheck.store.migrations import BOOKKEEPING, LATEST_VERSION, MIGRATIONS, Migration

ENV_VAR = "SERVECHECK_DB"
DB_FILENAME = "history.sqlite3"
MEMORY = ":memory:"
# Another servecheck process holds the write lock for milliseconds per update; 15 s rides out a
# heavily loaded machine without hanging forever on a lock that is never released.
BUSY_TIMEOUT_MS = 15_000
LOCK_RETRY_S = 0.05
_HINT_OTHER_DB = "move it aside, or pass --db PATH (or set SERVECHECK_DB) to use another database"


@dataclass(frozen=True, slots=True)
class RunSummary:
    """One history row without its document."""

    id: int
    created_at: str
    command: str
    server_url: str | None
    model: str | None
    verdict: str | None
    simulated: bool
    complete: bool
    valid: bool | None = None  # None: the command does not judge validity


def default_path() -> Path:
    return platformdirs.user_data_path("servecheck") / DB_FILENAME


def resolve_path(path: str | Path | None) -> Path:
    """--db PATH, else $SERVECHECK_DB, else the user data directory."""
    if path is not None and str(path) != "":
        return Path(path).expanduser()
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else default_path()


def open_store(path: str | Path | None = None, *, create: bool = True) -> Store:
    """Open (creating and migrating when `create`) the history database."""
    if str(path) == MEMORY:
        return Store(_connect(MEMORY, MEMORY), MEMORY)
    db_path = resolve_path(path)
    _check_location(db_path, create=create, explicit=path is not None or ENV_VAR in os.environ)
    return Store(_connect(str(db_path), str(db_path)), str(db_path))


def _check_location(db_path: Path, *, create: bool, explicit: bool) -> None:
    if db_path.is_dir():
        raise StoreError(f"history database {db_path} is a folder", "pass --db with a file path")
    if db_path.exists() and not db_path.is_file():  # a FIFO or a device: SQLite would block or fail obscurely
        raise StoreError(f"history database {db_path} is not a regular file", "pass --db with a file path")
    if not db_path.exists() and not create:
        raise StoreError(f"no history database at {db_path}", "run a measuring command first, or pass --db PATH")
    if db_path.parent.is_dir():
        return
    if explicit:
        raise StoreError(f"cannot create {db_path}: folder {db_path.parent} does not exist",
                         "create it or pass another --db PATH")
    try:
        db_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot create {db_path.parent}: {exc.strerror}", "pass --db PATH or use --no-save") from exc


def _connect(target: str, label: str) -> sqlite3.Connection:
    with translate_errors(label):
        conn = sqlite3.connect(target, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        try:
            def set_up() -> None:
                _configure(conn)
                migrate(conn, label)

            _retry_when_locked(set_up)
        except BaseException:
            conn.close()
            raise
    return conn


def _retry_when_locked(step: Callable[[], object], wait_s: float = BUSY_TIMEOUT_MS / 1000) -> None:
    """Run an idempotent set-up step, again while another process holds the lock.

    SQLite skips the busy handler where waiting could deadlock (switching to WAL while another
    connection reads, or two first opens racing), so two servecheck runs starting together got
    "database is locked" at once instead of waiting their turn.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            step()
            return
        except sqlite3.OperationalError as exc:
            if not _is_lock_error(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(LOCK_RETRY_S)


def _is_lock_error(exc: sqlite3.OperationalError) -> bool:
    text = str(exc)
    return "locked" in text or "busy" in text


def _configure(conn: sqlite3.Connection) -> None:
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    # Reading the schema first makes a file that is not SQLite fail here, with a clear message.
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    # WAL lets `history` read while a run writes; NORMAL sync in WAL mode keeps every committed
    # update across a killed process (only an OS crash can lose the last few).
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")


@contextmanager
def translate_errors(label: str) -> Iterator[None]:
    """The one seam where sqlite3 failures become StoreErrors."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        raise _operational(label, exc) from exc
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"history database {label} is not a SQLite database or is damaged ({exc})",
                         _HINT_OTHER_DB) from exc
    except sqlite3.Error as exc:
        raise StoreError(f"history database {label} failed: {exc}", _HINT_OTHER_DB) from exc


def _operational(label: str, exc: sqlite3.OperationalError) -> StoreError:
    text = str(exc)
    if _is_lock_error(exc):
        return StoreError(f"history database {label} is locked by another process",
                          "retry when the other servecheck finishes")
    if "readonly" in text or "read-only" in text:
        return StoreError(f"cannot write history database {label}: it is read-only", "pass --db PATH or use --no-save")
    if "unable to open" in text:
        return StoreError(f"cannot open history database {label}",
                          "check the path and its permissions, or pass --db PATH")
    if "not a database" in text or "malformed" in text:
        return StoreError(f"history database {label} is not a SQLite database or is damaged", _HINT_OTHER_DB)
    return StoreError(f"history database {label} failed: {text}", _HINT_OTHER_DB)


def applied_migrations(conn: sqlite3.Connection) -> dict[int, str]:
    rows = conn.execute("SELECT version, name FROM schema_migrations").fetchall()
    return {int(version): str(name) for version, name in rows}


def migrate(conn: sqlite3.Connection, label: str) -> None:
    """Apply every missing migration in order, each in its own transaction."""
    conn.execute(BOOKKEEPING)
    _refuse_unknown_schema(applied_migrations(conn), label)
    for migration in MIGRATIONS:
        _apply(conn, migration)


def _refuse_unknown_schema(applied: dict[int, str], label: str) -> None:
    newest = max(applied, default=0)
    if newest > LATEST_VERSION:
        raise StoreError(
            f"history database {label} has schema version {newest}, "
            f"newer than this servecheck knows ({LATEST_VERSION})",
            "upgrade servecheck, pass --db PATH to use another database, or --no-save to run without one; "
            "it was left untouched",
        )
    known = {m.version: m.name for m in MIGRATIONS}
    for version, name in applied.items():
        if known.get(version) != name:
            raise StoreError(f"history database {label} has an unknown migration {version} {name!r}", _HINT_OTHER_DB)


def _apply(conn: sqlite3.Connection, migration: Migration) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have applied it while we waited for the write lock.
        if migration.version not in applied_migrations(conn):
            for statement in migration.statements:
                conn.execute(statement)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, _now()),
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _row_values(run: RunResult[Any], complete: bool) -> dict[str, Any]:
    return {
        "command": run.command,
        "server_url": run.url,
        "model": run.model,
        "verdict": None if (word := run_verdict(run)) is None else str(word),
        "simulated": int(run.simulated),
        "complete": int(complete),
        "valid": None if run.valid is None else int(run.valid),
        "doc": dumps_compact(written_doc(run)),
        "updated_at": _now(),
    }


class Store:
    """The history database. One connection; every write is its own short transaction."""

    def __init__(self, conn: sqlite3.Connection, label: str) -> None:
        self._conn = conn
        self.path = label

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def begin_run(self, run: RunResult[Any]) -> int:
        values = _row_values(run, complete=False)
        values["created_at"] = run.envelope.created_at or _now()
        columns = ", ".join(values)
        marks = ", ".join(f":{name}" for name in values)
        with translate_errors(self.path):
            cursor = self._conn.execute(f"INSERT INTO runs ({columns}) VALUES ({marks})", values)
        assert cursor.lastrowid is not None
        return int(cursor.lastrowid)

    def update_run(self, run_id: int, run: RunResult[Any], complete: bool) -> None:
        values = _row_values(run, complete=complete)
        assignments = ", ".join(f"{name} = :{name}" for name in values)
        with translate_errors(self.path):
            cursor = self._conn.execute(f"UPDATE runs SET {assignments} WHERE id = :id", {**values, "id": run_id})
        if cursor.rowcount == 0:
            raise self._unknown(run_id)

    def get_run(self, run_id: int) -> dict[str, Any]:
        """The saved document, with `run_id` and the row's `complete` mark."""
        if not 0 <= run_id < 2**63:  # beyond SQLite's INTEGER: no such row, and sqlite3 would overflow
            raise self._unknown(run_id)
        with translate_errors(self.path):
            row = self._conn.execute("SELECT doc, complete FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise self._unknown(run_id)
        try:
            doc = json.loads(row[0])
        except ValueError as exc:
            raise StoreError(f"run {run_id} in {self.path} holds a damaged document", _HINT_OTHER_DB) from exc
        if not isinstance(doc, dict):
            raise StoreError(f"run {run_id} in {self.path} holds a damaged document", _HINT_OTHER_DB)
        return {**doc, "run_id": run_id, "complete": bool(row[1])}

    def list_runs(self, *, limit: int | None = None, command: str | None = None) -> list[RunSummary]:
        """Newest first."""
        sql = "SELECT id, created_at, command, server_url, model, verdict, simulated, complete, valid FROM runs"
        params: list[Any] = []
        if command:
            sql += " WHERE command = ?"
            params.append(command)
        sql += " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        with translate_errors(self.path):
            rows = self._conn.execute(sql, params).fetchall()
        return [_summary(row) for row in rows]

    def latest_run_id(self) -> int | None:
        with translate_errors(self.path):
            row = self._conn.execute("SELECT max(id) FROM runs").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def schema_versions(self) -> dict[int, str]:
        with translate_errors(self.path):
            return applied_migrations(self._conn)

    def close(self) -> None:
        self._conn.close()

    def _unknown(self, run_id: int) -> StoreError:
        return StoreError(f"no run {run_id} in {self.path}", "list the saved runs with `servecheck history`")


def _summary(row: tuple[Any, ...]) -> RunSummary:
    run_id, created_at, command, server_url, model, verdict, simulated, complete, valid = row
    return RunSummary(
        id=int(run_id),
        created_at=str(created_at),
        command=str(command),
        server_url=server_url,
        model=model,
        verdict=verdict,
        simulated=bool(simulated),
        complete=bool(complete),
        valid=None if valid is None else bool(valid),
    )
