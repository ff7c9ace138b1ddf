"""`servecheck report RUN... --html PATH`: one self-contained HTML file from saved runs."""

from __future__ import annotations

import click

from servecheck.analysis.readings import read_report
from servecheck.cli.context import AppContext
from servecheck.model.result import from_doc
from servecheck.report.html import write_html
from servecheck.store.refs import load_runs


@click.command("report")
@click.argument("runs", nargs=-1, required=True)
@click.option("--html", "html_path", required=True, metavar="PATH", help="Where to write the HTML report.")
@click.option("--db", "db_path", default=None, metavar="PATH",
              help="History database (default: $SERVECHECK_DB or the user data directory).")
@click.pass_obj
def cmd(app: AppContext, runs: tuple[str, ...], html_path: str, db_path: str | None) -> int:
    """Write an HTML report of RUNS (ids from `servecheck history`, `last`, or JSON result files)."""
    docs = load_runs(runs, db_path)
    typed = [from_doc(doc) for doc in docs]
    write_html(html_path, typed, read_report(typed))
    app.err.print(f"Wrote {html_path} ({len(docs)} run{'s' if len(docs) != 1 else ''}).", markup=False, highlight=False)
    return 0
