"""`servecheck history`: the saved runs, newest first."""

from __future__ import annotations

from datetime import datetime

import click
from rich.table import Table
from rich.text import Text

from servecheck.cli.context import AppContext
from servecheck.model.codec import encode
from servecheck.runs.jsonout import dumps
from servecheck.store.db import RunSummary, open_store


@click.command("history")
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True, help="Show at most this many runs.")
@click.option("--command", "command_name", default=None, metavar="NAME",
              help="Only runs of this command (e.g. staircase).")
@click.option("--db", "db_path", default=None, metavar="PATH",
              help="History database (default: $SERVECHECK_DB or the user data directory).")
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON on stdout.")
@click.pass_obj
def cmd(app: AppContext, limit: int, command_name: str | None, db_path: str | None, as_json: bool) -> int:
    """List saved runs: id, time, command, server, model, verdict."""
    with open_store(db_path, create=False) as store:
        rows = store.list_runs(limit=limit, command=command_name)
        location = store.path
    if as_json:
        click.echo(dumps({"runs": [encode(r, nulls=True) for r in rows]}), nl=False)
        return 0
    if not rows:
        app.err.print(f"No saved runs{f' of {command_name}' if command_name else ''} in {location}.", markup=False,
                      highlight=False)
        return 0
    app.out.print(history_table(rows))
    return 0


def history_table(rows: list[RunSummary]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for name in ("id", "time", "command", "server", "model", "verdict", "marks"):
        # On a narrow terminal server and model give way first, cut with an ellipsis: folding
        # them into a few characters a line made every row ten lines tall.
        # (rich collapses only wrappable columns, so those two are; their cells never wrap).
        shrinks = name in ("server", "model")
        table.add_column(name, no_wrap=not shrinks, overflow="ellipsis", max_width=48 if shrinks else None)
    for r in rows:
        flags = (("incomplete", not r.complete), ("invalid", r.valid is False), ("simulated", r.simulated))
        marks = " ".join(m for m, on in flags if on)
        table.add_row(
            str(r.id), _local_time(r.created_at), Text(r.command), _one_line(r.server_url), _one_line(r.model),
            Text(r.verdict or "—"), Text(marks, style="yellow"),
        )
    return table


def _one_line(value: str | None) -> Text:
    return Text(value or "—", no_wrap=True, overflow="ellipsis")


def _local_time(stamp: str) -> str:
    try:
        return datetime.fromisoformat(stamp).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return stamp
