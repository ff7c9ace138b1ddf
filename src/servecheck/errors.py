"""The servecheck error tree. Library code raises these; only the CLI turns them into one line and an exit code.

    ServecheckError            any failure a user can act on (message + hint)
    ├── UsageError             bad flags or arguments (exit 2)
    ├── ConnectError           the server cannot be reached
    ├── ProtocolError          the server answered, but not like an LLM server of that dialect
    ├── ServerError            the server answered with an HTTP error
    ├── RequestTimeout         the server never sent what we waited for
    ├── AuditError             a weight file cannot be read
    ├── ProbeError             the bandwidth probe cannot run
    ├── EngineError            building, finding or launching the local engine failed
    ├── StoreError             the history database cannot be used
    └── LogScanError           a log file cannot be scanned

Third-party exceptions are translated into these at exactly one place per seam, with `raise ... from exc`.
"""

from __future__ import annotations


class ServecheckError(Exception):
    """A failure with a one-line message and an optional hint saying what to do."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(ServecheckError):
    """Bad flags or arguments; exits 2."""


class ConnectError(ServecheckError):
    pass


class ProtocolError(ServecheckError):
    pass


class ServerError(ServecheckError):
    def __init__(self, message: str, hint: str | None = None, status: int | None = None) -> None:
        super().__init__(message, hint)
        self.status = status


class RequestTimeout(ServecheckError):
    pass


class AuditError(ServecheckError):
    pass


class ProbeError(ServecheckError):
    pass


class EngineError(ServecheckError):
    pass


class StoreError(ServecheckError):
    pass


class LogScanError(ServecheckError):
    pass
