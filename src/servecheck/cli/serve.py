"""`--serve "COMMAND"` for the load commands: servecheck starts the server, waits for health, runs
the test against it, stops it on every exit path, and audits the log it wrote.

    @serve_option
    def cmd(..., url, serve_command, serve_log, ...):
        with served(serve_command, url, say=...) as server:
            ... measure against server.url ...
            doc.update(server.finished())          # stops the server and audits its log: {"log_audit": ...}
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from servecheck.cli.common import check_url
from servecheck.engine.cache import EngineCache
from servecheck.engine.process import ManagedServer
from servecheck.engine.running import RunningRecords
from servecheck.errors import EngineError, ServecheckError, UsageError
from servecheck.logscan.scan import LogScanResult, scan_log
from servecheck.model.codec import encode
from servecheck.report.lines.log import findings_table

F = Callable[..., Any]
Say = Callable[[str], None]


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


@dataclass
class Served:
    """The server under test: its URL and, with --serve, its log and the audit of that log."""

    url: str
    command: str | None = None
    log_path: Path | None = None
    audit: LogScanResult | None = None
    audit_error: str | None = None
    _stopper: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    def stop(self) -> None:
        """Stop the server servecheck started and audit its log, once: by the run that finished, or on
        the way out of `served`, whichever comes first. Nothing for a server it did not start."""
        stopper, self._stopper = self._stopper, None
        if stopper is not None:
            stopper()

    def finished(self) -> dict[str, Any]:
        """Stop the server now: the field the finished document gains, `log_audit` (None for a server
        servecheck did not start), exists only once its log is complete."""
        self.stop()
        return {"log_audit": self.audit_doc()}

    @property
    def owned(self) -> bool:
        return self.command is not None

    @property
    def refused(self) -> bool:
        return self.audit is not None and bool(self.audit.refused)

    def audit_doc(self) -> dict[str, Any] | None:
        if not self.owned:
            return None
        doc: dict[str, Any] = {"command": self.command, "log_path": str(self.log_path), "error": self.audit_error}
        if self.audit is not None:
            doc.update(findings=encode(tuple(f.record() for f in self.audit.findings), nulls=True),
                       lines=encode(tuple(ln.record() for ln in self.audit.lines), nulls=True),
                       refused=[f.feature for f in self.audit.refused])
        return doc


def resolve_url(url: str | None, serve_command: str | None) -> str | None:
    """The URL to test: the one given, or (with --serve) the one the command will listen on."""
    if url is None and serve_command is None:
        raise UsageError("give the server's URL, or --serve \"COMMAND\" to start one", "e.g. http://127.0.0.1:8080")
    return None if url is None else check_url(url)


@contextmanager
def served(
    serve_command: str | None,
    url: str | None,
    *,
    engine: str = "auto",
    log_path: str | Path | None = None,
    say: Say | None = None,
) -> Iterator[Served]:
    """Yield the server to test; with a command, own it: start, wait for health, stop, audit its log."""
    if serve_command is None:
        if url is None:
            raise UsageError("no server URL", "give the server's URL or --serve \"COMMAND\"")
        yield Served(url=url)
        return
    _check_log_path(log_path)
    records = RunningRecords.in_cache(EngineCache.default())
    for line in records.warnings():
        _say(say, line)
    server = ManagedServer.from_command_string(serve_command, log_path=None if log_path is None else Path(log_path),
                                               records=records)
    _say(say, f"starting {server.name} (log: {server.log_path}) and waiting until it is healthy ...")
    result = Served(url=url or server.url, command=serve_command, log_path=server.log_path)
    try:
        server.start()  # stops the process itself when it never becomes healthy
    except EngineError as exc:
        _audit(result, engine)
        raise EngineError(exc.message + _refusal_text(result), exc.hint) from exc
    _say(say, f"{server.name} is up at {server.url}")
    result._stopper = lambda: _stop_and_audit(server, result, engine)
    try:
        yield result
    finally:
        result.stop()


def _stop_and_audit(server: ManagedServer, result: Served, engine: str) -> None:
    try:
        server.stop()
    finally:
        _audit(result, engine)


def _check_log_path(log_path: str | Path | None) -> None:
    """--serve-log must be a file servecheck can create (its folder is made if missing): refused before the server starts."""
    if log_path is None:
        return
    path = Path(log_path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--serve-log {path}: cannot create folder {path.parent} ({exc.strerror})", "give another path") from None
    if path.exists() and not path.is_file():
        raise UsageError(f"--serve-log {path} is not a regular file", "give a file path for the server's log")


def _audit(result: Served, engine: str) -> None:
    """Scan the stopped server's log; a scan failure is recorded, never raised over the run's own error."""
    assert result.log_path is not None
    try:
        result.audit = scan_log(result.log_path, engine, result.command)
    except ServecheckError as exc:
        result.audit_error = exc.one_line()


def _refusal_text(result: Served) -> str:
    """What the log audit says about a server that never came up (often the real reason)."""
    if result.audit is None or not result.audit.refused:
        return ""
    return "\nthe log refuses: " + "; ".join(f"{f.feature} ({f.line})" for f in result.audit.refused)


def _say(say: Say | None, line: str) -> None:
    if say is not None:
        say(line)


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
