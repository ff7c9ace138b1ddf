"""Pre-flight: before the first batch of each concurrency, the client checks itself.

A `CheckedDriver` is the `LaneDriver` the measuring commands open. Before a run's first batch of N
streams the experiment asks it for a `ClientCheck`: N streams from a stamp server of its own
(`load.calibrate`), at the token rate the warm-up showed (one stream's gap between tokens, so N
streams emit at least as fast as the real batch can), read by this client on this machine, now.
With `--workers` left to it, it tries one client process, then two, up to the ceiling, and stops
at the first whose timing error is within the command's bound; batches of N then run on that many
processes. A check whose best calibration is still outside the bound marks every figure at that
N client-bound (the experiment's analysis makes the run invalid). `--no-calibrate` skips it.
"""

from __future__ import annotations

import math
from contextlib import ExitStack

from servecheck.wire.base import RunClock, Target
from servecheck.load.calibrate import MAX_GAP_MS, MAX_STREAMS, MIN_GAP_MS, calibrate, stamp_server
from servecheck.load.lanes import LaneDriver, WorkerPool
from servecheck.load.ray_lanes import RayPool
from servecheck.model.client import Calibration, ClientCheck

# How long one calibration streams: long enough for a p99 over a few dozen events per stream, short
# beside the run (a staircase over 1, 2, 4, 8 spends about 2 s on its four checks).
PREFLIGHT_S = 0.5
MIN_EVENTS, MAX_EVENTS = 20, 100
# Calibrations at one worker count before it is judged too few: a client is client-bound only when
# every attempt at every count was over the bound.
ATTEMPTS = 2


def preflight_events(gap_ms: float) -> int:
    """Events per stream for a calibration at `gap_ms`: about PREFLIGHT_S of streaming, 20 to 100."""
    return max(MIN_EVENTS, min(MAX_EVENTS, math.ceil(PREFLIGHT_S * 1e3 / gap_ms)))


def calibration_gap_ms(gap_ms: float) -> float:
    """The gap the stamp server can emit at: the run's, within MIN_GAP_MS..MAX_GAP_MS."""
    return max(MIN_GAP_MS, min(MAX_GAP_MS, gap_ms))


class CheckedDriver(LaneDriver):
    """A `LaneDriver` that calibrates its client before each new concurrency (`preflight`).

    `workers` is the most client processes a batch may use. With `auto`, each concurrency gets the
    fewest that pass its check (a concurrency never checked: one, this process); otherwise every
    batch uses all `workers`, and the check says whether that is enough. `calibrate=False` (the
    `--no-calibrate` flag) checks nothing."""

    def __init__(self, target: Target, workers: int, *, auto: bool, calibrate: bool = True,
                 clock: RunClock | None = None, pool: WorkerPool | None = None) -> None:
        super().__init__(target, workers, clock, pool)
        self.auto = auto
        self.calibrate = calibrate
        if auto:
            self.default_workers = 1
        self._stack = ExitStack()
        self._url: str | None = None

    async def __aexit__(self, *exc: object) -> None:
        try:
            await super().__aexit__(*exc)
        finally:
            self._stack.close()

    async def preflight(self, streams: int, gap_ms: float, tolerance_ms: float, basis: str,
                        aim_ms: float | None = None) -> ClientCheck | None:
        """The check before `streams` streams whose tokens come `gap_ms` apart, against a timing error of
        `tolerance_ms` (`basis` says what it is a fraction of); None with calibration off. With `auto`,
        more processes are tried until one count's error is within `aim_ms` (the figures' tighter
        bound), and the fewest within it are chosen; failing that, the fewest within `tolerance_ms`."""
        if not self.calibrate or not 1 <= streams <= MAX_STREAMS:
            return None
        aim = tolerance_ms if aim_ms is None else min(aim_ms, tolerance_ms)
        gap = calibration_gap_ms(gap_ms)
        ceiling = min(self.workers, self.pool.capacity()) if isinstance(self.pool, RayPool) else self.workers
        counts = range(1, ceiling + 1) if self.auto else (self.workers,)
        tried: list[Calibration] = []
        passed = False
        for workers in counts:
            # a failed calibration is measured once more before it counts: one burst of other work
            # on the machine is not evidence that the client cannot keep up
            for _ in range(ATTEMPTS):
                tried.append(await self._calibrate(streams, gap, preflight_events(gap), workers))
                passed = tried[-1].error_ms <= aim
                if passed:
                    break
            if passed:
                break
        check = ClientCheck(streams=streams, tolerance_ms=tolerance_ms, basis=basis, tried=tuple(tried),
                            aim_ms=None if aim == tolerance_ms else aim)
        self.use(streams, check.workers)
        return check

    async def _calibrate(self, streams: int, gap_ms: float, events: int, workers: int) -> Calibration:
        if isinstance(self.pool, RayPool):  # each actor against a stamp server on its own node
            info = self.local.info or await self.local.detect()
            return await self.pool.calibrate(streams, gap_ms, events, workers, self.target, info, self.clock)
        return await calibrate(streams, gap_ms, events, workers, url=self._stamp_url(gap_ms))

    def _stamp_url(self, gap_ms: float) -> str:
        """One stamp server for the run, started at the first check (each request names its gap)."""
        if self._url is None:
            self._url = self._stack.enter_context(stamp_server(gap_ms))
        return self._url
