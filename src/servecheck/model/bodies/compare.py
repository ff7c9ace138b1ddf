"""The `compare` document's body (docs/schema.md); registered in BODIES below."""

from __future__ import annotations

from servecheck.model.bodies import BODIES
from servecheck.model.codec import record


@record
class Engine:
    name: str | None = None
    bytes_per_token: int | None = None
    tok_s: float | None = None
    achieved_gb_s: float | None = None
    source: str | None = None  # "given" or "audit of PATH"


@record
class Comparison:
    """Engine `a` against the baseline `b`: measured ratio = bytes ratio x utilization ratio."""

    a: str | None = None
    b: str | None = None
    measured_ratio: float | None = None
    bytes_ratio: float | None = None
    utilization_ratio: float | None = None
    product: float | None = None
    bytes_share: float | None = None  # share of ln(ratio); null when the ratio is 1
    utilization_share: float | None = None


@record
class CompareBody:
    engines: tuple[Engine, ...] = ()
    comparisons: tuple[Comparison, ...] = ()


BODIES["compare"] = CompareBody
