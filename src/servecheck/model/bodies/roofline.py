"""The `roofline` document's body (docs/schema.md); registered in BODIES below.

A range is [lo, hi]; utilization is a fraction of measured bandwidth; GB = 10^9 bytes. `target`,
`batch`, `audit`, `probe` and `measurement` are null unless --target, --batch, MODEL, --bandwidth
auto and --url asked for them. A run interrupted after its --url measurement keeps only `tok_s`,
`tok_s_source` and `measurement` (`RooflineRate`).
"""

from __future__ import annotations

from typing import Literal

from servecheck.model.bodies import BODIES
from servecheck.model.bodies.audit import AuditBody, Experts, Format, Kind
from servecheck.model.bodies.bandwidth import BandwidthBody
from servecheck.model.bodies.common import Server, ServerTimings
from servecheck.model.codec import json_keys, record
from servecheck.model.reason import Text

Range = tuple[float, float]  # [lo, hi]
Gate = Literal["close", "open", "straddle"]


@record
class Ceiling:
    """The typical best utilization of the model's kind."""

    name: Text | None = None
    utilization: Range | None = None


@record
class Headroom:
    ceiling: Text | None = None  # the ceiling's name
    factor: Range | None = None  # ceiling / utilization
    speed_of_light_factor: Range | None = None  # 100% / utilization
    speed_of_light_tok_s: Range | None = None  # every byte at the measured bandwidth


@record
class Target:
    """A tok/s target back-solved into the utilization it needs."""

    tok_s: float | None = None
    required_gb_s: float | None = None
    required_utilization: Range | None = None
    ceiling: Range | None = None
    within_reach: bool | None = None  # the whole required range is at or below the ceiling's top
    partly_within_reach: bool | None = None  # its optimistic end is


@record
class BatchRow:
    """The aggregate tok/s ceiling at one batch size, and what a saved run measured there (--run)."""

    batch: int | None = None
    step_bytes: float | None = None
    distinct_experts: float | None = None  # per layer; null for a dense model
    ceiling_tok_s: Range | None = None
    measured_tok_s: float | None = None
    measured_over_ceiling: Range | None = None


@record
class AuditSummary:
    """What the audit of MODEL found (the `audit` document's headline fields)."""

    path: str | None = None
    format: Format | None = None
    architecture: str | None = None
    bytes_per_token: int | None = None
    kv_bytes_per_token: int | None = None
    state_bytes_per_token: int | None = None
    resident_bytes: int | None = None
    experts: Experts | None = None
    tied_head: bool | None = None

    @classmethod
    def of(cls, audit: AuditBody) -> AuditSummary:
        return cls(path=audit.path, format=audit.format, architecture=audit.architecture,
                   bytes_per_token=audit.bytes_per_token, kv_bytes_per_token=audit.kv_bytes_per_token,
                   state_bytes_per_token=audit.state_bytes_per_token, resident_bytes=audit.resident_bytes,
                   experts=audit.experts, tied_head=audit.tied_head)


@record
class Measurement:
    """The --url stream the decode rate was measured on (prefill excluded)."""

    server: Server | None = None
    tokens: int | None = None
    tokens_source: str | None = None
    decode_s: float | None = None
    ttft_s: float | None = None
    server_timings: ServerTimings | None = None


@record
class RooflineRate:
    """The decode rate alone: what a --url run interrupted before its bandwidth was settled keeps."""

    tok_s: float | None = None
    tok_s_source: str | None = None
    measurement: Measurement | None = None


@record
class RooflineBody:
    bytes_per_token: int | None = None
    resident_bytes: int | None = None
    kind: Kind | None = None
    tok_s: float | None = None
    tok_s_source: str | None = None  # "given" or how it was measured
    achieved_gb_s: float | None = None
    bandwidth_gb_s: Range | None = None
    bandwidth_source: str | None = None
    utilization: Range | None = None
    gate: Gate | None = None
    gate_threshold: float | None = None
    ceiling: Ceiling | None = None
    headroom: Headroom | None = None
    target: Target | None = None
    batch: tuple[BatchRow, ...] | None = None
    audit: AuditSummary | None = None
    probe: BandwidthBody | None = None  # the bandwidth probe's own result
    measurement: Measurement | None = None
    notes: tuple[Text, ...] | None = None

    def unrecorded(self) -> tuple[str, ...]:
        """The keys this document leaves out: before the bandwidth is in, all but the rate's (`RooflineRate`)."""
        return (() if self.bandwidth_gb_s is not None
                else tuple(sorted(json_keys(RooflineBody) - json_keys(RooflineRate))))


BODIES["roofline"] = RooflineBody
