"""The server a load command tests: the URL given, or with `--serve` one servecheck starts, waits for,
stops on every exit path and whose log it audits; the audit is the `log_audit` record the finished
result gains. The flags and the rendering stay in `cli.serve`."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from servecheck.engine.cache import EngineCache
from servecheck.engine.managed import ManagedServer
from servecheck.engine.running import RunningRecords
from servecheck.errors import EngineError, ServecheckError, UsageError
from servecheck.logscan.scan import LogScanResult, scan_log
from servecheck.model.bodies.common import LogAudit
from servecheck.model.bodies.log import UnscannedLogAudit

Say = Callable[[str], None]


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

    def finished(self) -> dict[str, LogAudit | UnscannedLogAudit | None]:
        """Stop the server now: the body field the finished result gains, `log_audit` (None for a server
        servecheck did not start), exists only once its log is complete."""
        self.stop()
        return {"log_audit": self.log_audit()}

    @property
    def owned(self) -> bool:
        return self.command is not None

    @property
    def refused(self) -> bool:
        return self.audit is not None and bool(self.audit.refused)

    def log_audit(self) -> LogAudit | UnscannedLogAudit | None:
        """The record of the log's audit; None for a server servecheck did not start. A log the scan
        could not read has no findings, lines or refusals to list: its record names none."""
        if not self.owned:
            return None
        if self.audit is None:
            return UnscannedLogAudit(command=self.command, log_path=str(self.log_path), error=self.audit_error)
        return LogAudit(command=self.command, log_path=str(self.log_path), error=self.audit_error,
                        findings=tuple(f.record() for f in self.audit.findings),
                        lines=tuple(ln.record() for ln in self.audit.lines),
                        refused=tuple(f.feature for f in self.audit.refused))


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
    """--serve-log must be a file servecheck can create (its folder is made if missing): refused before
    the server starts."""
    if log_path is None:
        return
    path = Path(log_path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--serve-log {path}: cannot create folder {path.parent} ({exc.strerror})",
                         "give another path") from None
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
