"""The `staircase` document's body (docs/schema.md); registered in BODIES below.

The verdict words are defined here, once: `analysis.staircase` and `analysis.witness` import them
(the model sits below the analysis), so a word the analysis returns is one the body reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from servecheck.model.bodies import BODIES
from servecheck.model.bodies.common import (
    Calibrated,
    ClientCheck,
    EvidenceMode,
    Finding,
    LogAudit,
    UnscannedLogAudit,
    Request,
    Server,
)
from servecheck.model.codec import only_when_recorded, record, until_finished
from servecheck.model.reason import Text

Verdict = Literal["baseline", "cluster", "staircase", "partial", "inconclusive"]
Schedule = Literal["cluster", "staircase", "partial"]
Trend = Literal["rising", "flat", "inconclusive"]
# Real batching climbs well above N=1 by N=4 (seed 000: "it is not flat"); a queue stays within a
# few percent (91.2 vs 93.0 tok/s). Rising needs +30%; flat means within -15%..+15%; between the
# two (or a fall below -15%) is left inconclusive rather than guessed.
# `analysis.staircase` judges with it; `diff` prints it and writes it as `rising_ratio`.
RISING_RATIO = 1.3
WitnessSource = Literal["completion_times", "server_gauges", "server_timings"]  # what one reading reads
Evidence = Literal[WitnessSource, "generation_windows"]  # what decided a verdict


@record
class Witness:
    """One server witness's reading of a batch's schedule."""

    source: Evidence | None = None
    schedule: Schedule | None = None
    slots: int | None = None  # requests the reading shows running at once
    description: Text | None = None


@record
class Windows:
    """What the requests' generation windows (first token -> completion, client stamps) showed."""

    schedule: Verdict | None = None
    open_max: int | None = None  # the most windows open at one instant
    description: Text | None = None


@record
class BatchVerdict:
    """What one batch's finish times (and the server's witnesses) said; times in seconds."""

    verdict: Verdict | None = None
    reason: Text | None = None
    evidence: tuple[Evidence, ...] = ()
    times_verdict: Verdict | None = None  # what the finish times alone said, when a witness changed it
    reference_disagrees: bool | None = None  # a staircase decided by its own even steps against an off N=1 time
    witnesses: tuple[Witness, ...] = ()
    single_s: float | None = None
    group_sizes: tuple[int, ...] = ()
    steps_s: tuple[float, ...] = ()
    step_ratios: tuple[float, ...] = ()  # each step over the single-request time
    spread_s: float | None = None
    spread_ratio: float | None = None
    first_over_single: float | None = None  # the first finish / the single time; None in documents before it
    last_over_single: float | None = None
    max_gap_ratio: float | None = None
    slots: int | None = None  # a partial's requests at once
    windows: Windows | None = None  # what the generation windows showed
    contradicted_by: tuple[Witness, ...] | None = None  # witnesses against a clean stopwatch verdict, which stood
    decided_by_witness: bool | None = None  # the stopwatch was ambiguous and the server's word decided
    # the stopwatch verdicts of other batches ("N=4 rep 1 staircase") that set aside the schedule this
    # batch's witnesses decided: the batch is undecided; None in documents before it
    overruled_by: tuple[Text, ...] | None = None


@record
class GaugeSample:
    t_s: float | None = None  # run clock, when the reading came back
    running: int | None = None
    waiting: int | None = None


@record
class Gauges:
    """The server's own running / waiting gauges, polled while the batch ran."""

    source: str | None = None  # "llama.cpp /metrics", "llama.cpp /slots", "vllm /metrics", ...
    interval_s: float | None = None
    peak_running: int | None = None
    peak_waiting: int | None = None
    failed_reads: int | None = None
    samples: tuple[GaugeSample, ...] = ()


@record
class ClientNoise:
    """How noisy the client machine was while the batch ran."""

    cpus: int | None = None
    load_avg_1m: float | None = None
    busy_frac: float | None = None  # fractions of CPU time over the batch
    steal_frac: float | None = None
    loop_lag_p99_ms: float | None = None  # how late the client's event loop woke
    loop_lag_max_ms: float | None = None
    stalls_ns: tuple[tuple[int, int], ...] = ()  # [from_ns, to_ns] stretches the event loop did not run


@record
class Batch:
    """One rep at one N: the requests released together; finish times are seconds from the release."""

    rep: int | None = None
    release_s: float | None = None  # seconds from the run start
    dispatch_skew_s: float | None = None
    # lanes on Ray actors (--ray): how far two finish times may be off against each other, read on
    # two machines' clocks; absent on one machine
    clock_uncertainty_s: float | None = only_when_recorded()
    finish_s: tuple[float, ...] = ()  # ok requests, in finishing order
    tokens: tuple[int, ...] = ()
    aggregate_tok_s: float | None = None
    verdict: BatchVerdict | None = None
    queue_s: tuple[float | None, ...] = ()  # client latency - server prefill - decode, per request
    self_reported_sum_tok_s: float | None = None  # the server's per-request rates added up
    # more than 10% off the true aggregate (analysis.staircase.MISLEADING_SUM_FRAC); None: not recorded
    self_reported_misleading: bool | None = None
    in_flight: int | None = None
    effective_concurrency: float | None = None  # Little's law: sum of latencies / wall
    token_interval_cv: float | None = None
    gauges: Gauges | None = None
    noise: ClientNoise | None = None
    requests: tuple[Request, ...] = ()


@record
class Point:
    """One N over its reps: finish times and tokens are those of one measured batch, rep `shown_rep`
    (the median aggregate); documents from before it recorded per-rank medians and no `shown_rep`."""

    n: int | None = None
    finish_s: tuple[float, ...] = ()
    tokens: tuple[int, ...] = ()
    aggregate_tok_s: float | None = None
    aggregate_range_tok_s: tuple[float, float] | None = None  # [lo, hi] over the reps
    # with a pre-flight at this N: the client's timing error / the last finish, the most it moves the
    # aggregate; client-bound above 2% (model.client.FIGURE_FRAC)
    aggregate_client_error_frac: float | None = only_when_recorded()
    aggregate_client_bound: bool | None = only_when_recorded()
    verdict: Verdict | None = None
    reason: Text | None = None
    evidence: tuple[Evidence, ...] | None = None  # None: an older document that did not record it
    reps_taken: int | None = None
    decided_by_witness: bool | None = None  # the definite verdict rests on the server's word alone
    shown_rep: int | None = None
    batches: tuple[Batch, ...] = ()


@record
class StaircaseBody:
    verdict: Verdict | None = None  # the verdict at the largest N
    verdict_reason: Text | None = None
    trend: Trend | None = None  # aggregate across N
    trend_reason: Text | None = None
    trend_ratios: Mapping[str, float] | None = None  # "N" -> agg(N) / agg(1)
    trend_rising_ratio: float | None = None  # the agg(N)/agg(1) at which the trend reads rising; None: from before it
    single_s: float | None = None  # the median of every N=1 measurement
    single_times_s: tuple[float, ...] = ()  # every N=1 measurement in run order
    single_spread: float | None = None  # slowest / fastest N=1 - 1
    evidence: tuple[Evidence, ...] = ()  # what decided the run's verdict
    evidence_mode: EvidenceMode | None = None  # stopwatch: witnesses never decide
    decided_by_witness: bool | None = None  # the run's verdict rests on the server's word alone
    trend_by_schedule: tuple[int, ...] | None = None  # N read as flat from their queue's windows
    prefill_gain_bound: float | None = None  # the most hiding prefill could gain a queue (N=1 latency / decode)
    # per N (as a string) that is a queue by its windows: the most prefill done while the request before was
    # generating could have gained it, from its own batches' stamps
    hidden_prefill_gain: Mapping[str, float] | None = None
    max_reps: int | None = None
    modal_tokens: int | None = None
    server: Server | None = None
    warmup: Request | None = None
    points: tuple[Point, ...] = ()
    invalid: tuple[Finding, ...] = ()
    warnings: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()
    log_audit: LogAudit | UnscannedLogAudit | None = until_finished()  # with --serve; null in a finished run without
    calibration: Calibrated | None = None  # the client's pre-flight; None: a document from before it
    client_checks: tuple[ClientCheck, ...] | None = None  # one per N, before its first batch; None: from before it


BODIES["staircase"] = StaircaseBody
