"""The `arms` document's body (docs/schema.md); registered in BODIES below.

`diff` reads `arms[]` (the per-arm aggregates: concurrency, aggregate_tok_s, aggregate_speedup, label,
...): their names are the document's keys. Ratios are against the serial arm (1.39); changes and
efficiency are fractions (-0.65, 0.35)."""

from __future__ import annotations

from typing import Literal

from servecheck.model.bodies import BODIES
from servecheck.model.bodies.common import (
    Calibrated,
    ClientCheck,
    EvidenceMode,
    LogAudit,
    UnscannedLogAudit,
    Request,
    Server,
    Warning,
)
from servecheck.model.codec import only_when_recorded, record, until_finished
from servecheck.model.reason import Text

Label = Literal["batching", "pipelining", "none", "inconclusive"]
BiasMethod = Literal["positions", "drift"]  # across the positions an arm held, or along the run
Interval = tuple[float, float]  # [lo, hi]: the order-statistic interval of a median over the reps
# Intervals for the median of within-rep ratios are distribution-free order statistics: exact
# coverage from the binomial, no resampling, no seed. 95% is reached from six reps; below that the
# widest interval there is ([min, max]) is used and its real level reported (three reps: 75%).
INTERVAL_LEVEL = 0.95


@record
class ArmsDesign:
    """What every arm sent and how the reps were ordered."""

    arms: tuple[int, ...] = ()
    requests: int | None = None
    reps: int | None = None
    tokens: int | None = None
    prompt_tokens: int | None = None
    fixed_order: bool | None = None
    max_reps: int | None = None  # the rep budget while the headline is withheld or a label undecided


@record
class Arm:
    """One arm's medians across reps and its within-rep ratios against the serial arm."""

    concurrency: int | None = None
    cells: int | None = None  # how many cells (reps) the arm has
    aggregate_tok_s: float | None = None
    generation_tok_s: float | None = None
    per_user_rate_tok_s: float | None = None
    ttft_s: float | None = None
    mean_decoding: float | None = None  # requests decoding at once while any was
    aggregate_speedup: float | None = None
    aggregate_speedup_interval: Interval | None = None
    generation_gain: float | None = None
    generation_gain_interval: Interval | None = None
    per_user_rate_change: float | None = None
    per_user_rate_change_interval: Interval | None = None
    ttft_multiple: float | None = None
    ttft_multiple_interval: Interval | None = None
    efficiency: float | None = None
    label: Label | None = None
    label_reason: Text | None = None


@record
class ArmsCell:
    """One rep of one arm. A cell pooled in from a saved run keeps only what the analysis reads (no
    release_s, dispatch_skew_s or requests)."""

    run: int | None = None  # which pooled run it came from
    rep: int | None = None
    position: int | None = None
    concurrency: int | None = None
    start_s: float | None = None
    release_s: float | None = only_when_recorded()  # measured cells only
    wall_s: float | None = None
    batch_wall_s: float | None = None
    dispatch_skew_s: float | None = only_when_recorded()  # measured cells only
    tokens: int | None = None
    decode_tokens: int | None = None
    failed: int | None = None
    aggregate_tok_s: float | None = None
    per_user_rate_tok_s: float | None = None
    generation_tok_s: float | None = None
    ttft_s: float | None = None
    decoding_sum_s: float | None = None
    decoding_union_s: float | None = None
    deviant: bool | None = None
    peak_running: int | None = None  # the most the server's gauges showed running at once
    # The longest late window of the client's own that held one of the cell's stamps (a send, a first
    # token, an end), beyond what the rule tolerates (analysis.client_timing); present only where it was
    # late: the cell's whole rep is then left out of the ratios.
    client_late_ms: float | None = only_when_recorded()
    # how long a hop that buffers the stream may have held an event of the cell, where beyond the same
    # tolerance (analysis.transit): its rep is left out too
    hop_held_ms: float | None = only_when_recorded()
    requests: tuple[Request, ...] | None = only_when_recorded()  # measured cells only


@record
class PositionMedian:
    position: int | None = None
    aggregate_tok_s: float | None = None


@record
class PositionBias:
    """The widest spread of one arm's median throughput across the positions it occupied."""

    concurrency: int | None = None
    spread: float | None = None  # fraction: (highest - lowest) / lowest
    method: BiasMethod | None = None
    by_position: tuple[PositionMedian, ...] = ()


@record
class ArmsDrift:
    """The serial arm's throughput in the first reps against the last."""

    first_tok_s: float | None = None
    last_tok_s: float | None = None
    loss: float | None = None  # fraction lost (negative: gained)
    reps_each: int | None = None
    run: int | None = None  # with pooled runs, the one that lost most


@record
class Thermal:
    summary: str | None = None
    samples: int | None = None
    pressure_samples: int | None = None
    max_temp_c: float | None = None
    sources: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()


@record
class DeviantCell:
    """A cell whose total output is more than 5% away from its run's modal output."""

    run: int | None = None
    rep: int | None = None
    concurrency: int | None = None
    tokens: int | None = None
    modal_tokens: int | None = None
    deviation: float | None = None  # fraction: (tokens - modal) / modal


@record
class ArmsBody:
    headline: Text | None = None
    headline_refused: bool | None = None
    refusal: Text | None = None  # why the headline was withheld
    design: ArmsDesign | None = None
    reps_taken: int | None = None
    arms: tuple[Arm, ...] = ()
    cells: tuple[ArmsCell, ...] = ()
    pooled_from: tuple[str, ...] = ()
    position_bias: PositionBias | None = None
    bias_limit: float | None = None
    drift: ArmsDrift | None = None
    thermal: Thermal | None = None
    deviant_cells: tuple[DeviantCell, ...] = ()
    cached_prompt_requests: tuple[Text, ...] = ()
    server: Server | None = None
    warmup: Request | None = None
    warnings: tuple[Warning, ...] = ()
    notes: tuple[str, ...] = ()
    log_audit: LogAudit | UnscannedLogAudit | None = until_finished()  # with --serve; null in a finished run without
    calibration: Calibrated | None = None  # the client's pre-flight; None: a document from before it
    # one per concurrency, before its first batch; None: from before it
    client_checks: tuple[ClientCheck, ...] | None = None
    evidence_mode: EvidenceMode | None = None  # stopwatch: the gauges never decide a label; None: from before it

    def unrecorded(self) -> tuple[str, ...]:
        """The keys this document leaves out: the analysis's, before the serial arm has a cell."""
        return ANALYSIS_KEYS if self.bias_limit is None else ()


# Keys of the analysis a document has only once the serial arm has a cell: before it (the opening
# document, a run interrupted in its first cell) they are absent, not null.
ANALYSIS_KEYS = ("position_bias", "bias_limit", "drift")

BODIES["arms"] = ArmsBody
