"""`servecheck calibrate` as a job of `runs.runner.run_job`: one calibration of this client against
its own loopback stamp server, written to the sinks like every other command's document (no point
before the whole result, so an interrupt saves nothing)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from servecheck.load.calibrate import Calibration, calibrate
from servecheck.model.bodies.calibrate import CalibrateBody
from servecheck.model.result import RunResult, measured


@dataclass(frozen=True)
class CalibrateJob:
    streams: int
    gap_ms: float
    events: int
    workers: int = 1

    def opening(self) -> RunResult[CalibrateBody]:
        return measured("calibrate", CalibrateBody())

    def run(self, on_point: Callable[[Calibration], None]) -> Calibration:
        return asyncio.run(calibrate(self.streams, self.gap_ms, self.events, self.workers))

    def document(self, result: Calibration) -> RunResult[CalibrateBody]:
        return measured("calibrate", CalibrateBody(calibration=result.body()))
