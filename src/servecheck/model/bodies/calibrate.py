"""The `calibrate` document's body (docs/schema.md); registered in BODIES below."""

from __future__ import annotations

from servecheck.model.bodies import BODIES
from servecheck.model.codec import record


@record
class Calibration:
    """What this client added to token times at `streams` streams, against its own loopback stamp server."""

    streams: int | None = None
    gap_ms: float | None = None  # the stamp server's gap between one stream's events
    events: int | None = None  # events stamped, all streams
    workers: int | None = None  # client processes that read the streams (None: one, before --workers)
    stamp_delay_p50_ms: float | None = None  # client stamp - server write, one clock
    stamp_delay_p99_ms: float | None = None
    stamp_delay_max_ms: float | None = None
    stamp_delay_frac: float | None = None  # p99 / gap
    dispatch_skew_ms: float | None = None
    loop_lag_p99_ms: float | None = None
    loop_lag_max_ms: float | None = None
    client_bound: str | None = None  # why a run at this concurrency and rate would measure the client


@record
class CalibrateBody:
    calibration: Calibration | None = None


BODIES["calibrate"] = CalibrateBody
