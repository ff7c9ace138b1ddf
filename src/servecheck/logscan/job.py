"""The log audit as a job of `runs.runner.run_job`: one scan (and, with a URL, the running server's
live evidence), written to the sinks like every other command's document."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from servecheck.errors import LogScanError
from servecheck.logscan.live import live_evidence
from servecheck.logscan.rules import Rule
from servecheck.logscan.scan import LogScanResult, scan_log
from servecheck.model.bodies.log import LogBody
from servecheck.model.result import RunResult, measured


@dataclass(frozen=True)
class LogJob:
    file: str
    engine: str = "auto"
    flags: str | None = None
    url: str | None = None  # checked by the caller
    rules: tuple[Rule, ...] | None = None

    def opening(self) -> RunResult[LogBody]:
        return measured("log", LogBody())

    def run(self, on_point: Callable[[LogScanResult], None]) -> LogScanResult:
        """One scan, so no point before the whole result."""
        try:
            # a pipe is fine: `log <(docker logs vllm 2>&1)`
            result = scan_log(self.file, self.engine, self.flags, rules=self.rules)
        except OSError as exc:  # a special file that opens but cannot be read (EIO, ENXIO, ...)
            raise LogScanError(f"cannot read log file {self.file}: {exc.strerror or exc}",
                               "give the server's text log") from exc
        return result.with_live(live_evidence(self.url, self.engine)) if self.url is not None else result

    def document(self, result: LogScanResult) -> RunResult[LogBody]:
        """The scan's body with the features refused; a scan that ran is a valid run."""
        body = replace(result.body(), refused=tuple(f.feature for f in result.refused))
        return measured("log", body, valid=True)
