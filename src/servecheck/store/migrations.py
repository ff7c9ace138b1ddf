"""Named, ordered schema migrations for the history database.

Each migration is applied in its own transaction and recorded in `schema_migrations`; append
new ones at the end and never edit or reorder a released one (databases in the field replay
exactly this list). A database that records a migration this list lacks came from a newer
servecheck and is refused, never altered.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "create_runs",
        (
            """CREATE TABLE runs (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL,
                command TEXT NOT NULL,
                server_url TEXT,
                model TEXT,
                verdict TEXT,
                simulated INTEGER NOT NULL DEFAULT 0,
                complete INTEGER NOT NULL DEFAULT 0,
                doc TEXT NOT NULL
            )""",
        ),
    ),
    Migration(
        2,
        "index_runs_by_command_and_time",
        (
            "CREATE INDEX runs_command_created ON runs (command, created_at)",
            "CREATE INDEX runs_created ON runs (created_at)",
        ),
    ),
    Migration(
        3,
        "add_runs_valid",
        (
            # NULL where the command does not judge validity (audit, bandwidth, roofline, ...)
            "ALTER TABLE runs ADD COLUMN valid INTEGER",
            "UPDATE runs SET valid = json_extract(doc, '$.valid') "
            "WHERE json_valid(doc) AND json_type(doc, '$.valid') IN ('true', 'false')",
        ),
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version

BOOKKEEPING = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL
)"""
