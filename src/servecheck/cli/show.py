"""`servecheck show RUN`: re-render a saved run (or a JSON result file)."""

from __future__ import annotations

import click

from servecheck.cli.context import AppContext
from servecheck.report.jsonout import write_json
from servecheck.report.terminal import render_doc
from servecheck.store.refs import load_runs


@click.command("show")
@click.argument("run")
@click.option("--json", "json_path", default=None, metavar="PATH", help="Write the saved document ('-' for stdout).")
@click.option("--db", "db_path", default=None, metavar="PATH", help="History database (default: $SERVECHECK_DB or the user data directory).")
@click.pass_obj
def cmd(app: AppContext, run: str, json_path: str | None, db_path: str | None) -> int:
    """Show a saved run: RUN is an id from `servecheck history`, `last`, or a JSON result file."""
    (doc,) = load_runs([run], db_path)
    if json_path:
        write_json(json_path, doc)
        if json_path == "-":
            return 0
    app.out.print(render_doc(doc))
    return 0
