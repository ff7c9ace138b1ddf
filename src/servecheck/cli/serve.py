"""`--serve "COMMAND"` for the load commands: servecheck starts the server, waits for health, runs
the test against it, stops it on every exit path, and audits the log it wrote (`jobs.served`).

    @serve_option
    def cmd(..., url, serve_command, serve_log, ...):
        with served(serve_command, url, say=...) as server:
            measure(..., served=server)            # the runner's epilogue: server.finished() stops the server,
                                                   # audits its log, and the finished result gains `log_audit`
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from rich.console import Console

from servecheck.cli.common import check_url
from servecheck.errors import UsageError
from servecheck.jobs.served import Served, served
from servecheck.report.lines.log import findings_table

__all__ = ["Served", "render_audit", "resolve_url", "serve_option", "served"]

F = Callable[..., Any]


def serve_option(f: F) -> F:
    """--serve "COMMAND" and --serve-log PATH."""
    f = click.option(
        "--serve-log",
        "serve_log",
        default=None,
        metavar="PATH",
        help="With --serve: where to keep the server's log (default: a temporary file, named at the end).",
    )(f)
    f = click.option(
        "--serve",
        "serve_command",
        default=None,
        metavar='"COMMAND"',
        help='Start the server with this command (e.g. "llama-server -m m.gguf --port 8091 -np 4"), wait '
        "until it is healthy, test it, stop it, and audit its log for refused features.",
    )(f)
    return f


def resolve_url(url: str | None, serve_command: str | None) -> str | None:
    """The URL to test: the one given, or (with --serve) the one the command will listen on."""
    if url is None and serve_command is None:
        raise UsageError("give the server's URL, or --serve \"COMMAND\" to start one", "e.g. http://127.0.0.1:8080")
    return None if url is None else check_url(url)


def render_audit(console: Console, served_: Served) -> None:
    """The --serve log audit: findings table and whether any feature was refused."""
    console.print(f"server log audit ({served_.log_path}):", markup=False, highlight=False, soft_wrap=True)
    if served_.audit is None:
        console.print(f"  could not scan the log: {served_.audit_error}", markup=False, highlight=False)
        return
    if served_.audit.findings:
        console.print(findings_table(served_.audit.findings))
    refused = [f.feature for f in served_.audit.refused]
    line = f"REFUSED: {', '.join(refused)}" if refused else "no feature refused"
    console.print(line, style="bold red" if refused else "green", markup=False, highlight=False)
