"""The weight-file audit as a job of `runs.runner.run_job`: one read of the headers, written to the
sinks like every other command's document (no point before the whole result, so an interrupt saves nothing)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from servecheck.audit import AuditOptions, AuditResult, audit_model
from servecheck.model.bodies.audit import AuditBody
from servecheck.model.result import RunResult, measured


@dataclass(frozen=True)
class AuditJob:
    path: Path  # checked by the caller
    options: AuditOptions

    def opening(self) -> RunResult[AuditBody]:
        return measured("audit", AuditBody())

    def run(self, on_point: Callable[[AuditResult], None]) -> AuditResult:
        return audit_model(self.path, self.options)

    def document(self, result: AuditResult) -> RunResult[AuditBody]:
        return measured("audit", result.body())
