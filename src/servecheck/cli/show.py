"""`servecheck show RUN`: re-render a saved run (or a JSON result file) as the command printed it."""

from __future__ import annotations

from typing import Any

import click
from rich.console import RenderableType
from rich.text import Text

from servecheck.analysis.readings import read_run
from servecheck.cli.context import AppContext
from servecheck.runs.jsonout import write_json
from servecheck.model.result import RunResult, from_doc
from servecheck.report.lines import REPORTS
from servecheck.report.terminal import render_doc
from servecheck.store.refs import load_runs

ALARM = ("INVALID", "INCOMPLETE", "REFUSED")


@click.command("show")
@click.argument("run")
@click.option("--json", "json_path", default=None, metavar="PATH", help="Write the saved document ('-' for stdout).")
@click.option("--db", "db_path", default=None, metavar="PATH",
              help="History database (default: $SERVECHECK_DB or the user data directory).")
@click.pass_obj
def cmd(app: AppContext, run: str, json_path: str | None, db_path: str | None) -> int:
    """Show a saved run: RUN is an id from `servecheck history`, `last`, or a JSON result file."""
    (doc,) = load_runs([run], db_path)
    if json_path:
        write_json(json_path, doc)
        if json_path == "-":
            return 0
    run_ = from_doc(doc)
    app.out.print(render_doc(doc, read_run(run_).verdict, command_report(run_)))
    return 0


def command_report(run: RunResult[Any]) -> list[RenderableType] | None:
    """The report the command itself printed, or None where a document is partial or from another
    version and lacks what that report needs (the short rendering copes with any document)."""
    report = REPORTS.get(run.command)
    if report is None:
        return None
    try:
        body = report(run, read_run(run))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError):
        return None
    # the head above already carries the SIMULATED mark
    return [Text(b, style="bold yellow" if b.startswith(ALARM) else "") if isinstance(b, str) else b
            for b in body if not (isinstance(b, str) and b.startswith("SIMULATED"))]
