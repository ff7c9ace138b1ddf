"""The bandwidth probe as a job of `runs.runner.run_job`: the same documents, sinks and interrupt
behaviour as every measuring command, with no server to open."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from servecheck.probe import BandwidthResult, ProbePoint, measure_bandwidth
from servecheck.model.bodies.bandwidth import BandwidthBody
from servecheck.model.result import RunResult, measured
from servecheck.probe.bandwidth import Progress, partial_body

# What the probe has so far: the sizes measured, until the whole result is in.
Measured = tuple[ProbePoint, ...] | BandwidthResult


@dataclass(frozen=True)
class BandwidthJob:
    sizes: list[int] | None
    device: str = "cpu"
    threads: int | None = None
    passes: int = 5
    method: str = "auto"
    progress: Progress | None = None

    def opening(self) -> RunResult[BandwidthBody]:
        return measured("bandwidth", partial_body(self.device, ()))

    def run(self, on_point: Callable[[Measured], None]) -> Measured:
        measured: list[ProbePoint] = []

        def keep(point: ProbePoint) -> None:
            measured.append(point)
            on_point(tuple(measured))

        return measure_bandwidth(self.sizes, device=self.device, threads=self.threads, passes=self.passes,
                                 method=self.method, progress=self.progress, on_point=keep)

    def document(self, result: Measured) -> RunResult[BandwidthBody]:
        body = result.body() if isinstance(result, BandwidthResult) else partial_body(self.device, result)
        return measured("bandwidth", body)


def points_of(result: Measured | None) -> tuple[ProbePoint, ...]:
    """The sizes measured, from a whole result or a partial one."""
    if result is None:
        return ()
    return result.points if isinstance(result, BandwidthResult) else result
