"""The `bandwidth` document's body (docs/schema.md); registered in BODIES below. `roofline --bandwidth
auto` keeps the same record as its `probe`."""

from __future__ import annotations

from typing import Literal

from servecheck.model.bodies import BODIES
from servecheck.model.codec import record

Device = Literal["cpu", "cuda", "mps"]
Method = Literal["c-kernel", "numpy-threads", "torch"]


@record
class ProbePoint:
    """One working-set size: the best pass, the median, and each page size where both were read."""

    bytes: int | None = None
    gib: float | None = None
    gb_s: float | None = None  # the best pass
    low_gb_s: float | None = None  # the median pass
    gb_s_4k: float | None = None
    gb_s_huge: float | None = None
    median_gb_s_4k: float | None = None
    median_gb_s_huge: float | None = None
    pages_differ: bool | None = None


@record
class Skipped:
    """A size the probe did not read, and why."""

    bytes: int | None = None
    reason: str | None = None


@record
class BandwidthBody:
    """Read bandwidth per working-set size. Lists may be missing: a run interrupted before its end
    keeps `device` and the points measured so far."""

    device: Device | None = None
    method: Method | None = None
    threads: int | None = None
    passes: int | None = None
    points: tuple[ProbePoint, ...] | None = None
    skipped: tuple[Skipped, ...] | None = None
    notes: tuple[str, ...] | None = None


BODIES["bandwidth"] = BandwidthBody
