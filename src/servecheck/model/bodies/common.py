"""The parts every result document shares: the machine, the server, request records, findings, and
the server-log audit a `--serve` run carries. Field names are the JSON keys (docs/schema.md)."""

from __future__ import annotations

from typing import Literal

from servecheck.model.codec import only_when_recorded, record
from servecheck.model.reason import Text

# The pre-flight of a run: "on" (checked before each concurrency), "off" (--no-calibrate), "none"
# (a driver without a client of its own: a scripted test fake).
Calibrated = Literal["on", "off", "none"]


@record
class Gpu:
    vendor: str | None = None
    name: str | None = None
    memory_bytes: int | None = None
    driver: str | None = None


@record
class Environment:
    """The machine that measured; every probe is best effort, so every value may be null."""

    servecheck_version: str | None = None
    os: str | None = None
    platform: str | None = None
    machine: str | None = None
    cpu_model: str | None = None
    cpu_count: int | None = None
    memory_bytes: int | None = None
    python: str | None = None
    python_implementation: str | None = None
    gpu: tuple[Gpu, ...] | None = None


@record
class Server:
    """What detection learned about the server."""

    url: str | None = None
    dialect: str | None = None
    model: str | None = None
    models: tuple[str, ...] = ()
    engine: str | None = None
    version: str | None = None
    simulated: bool | None = None
    n_ctx_per_request: int | None = None
    total_slots: int | None = None
    notes: tuple[str, ...] = ()


@record
class ServerTimings:
    """The server's own account of one request (seconds)."""

    prompt_tokens: int | None = None
    prompt_s: float | None = None
    generated_tokens: int | None = None
    decode_s: float | None = None
    cached_prompt_tokens: int | None = None
    self_reported_tok_s: float | None = None
    draft_tokens: int | None = only_when_recorded()  # llama.cpp timings.draft_n: draft tokens the server tested
    draft_accepted: int | None = only_when_recorded()  # timings.draft_n_accepted


@record
class Request:
    """One request as the driver measured it; times are seconds from the run start."""

    index: int | None = None
    nonce: str | None = None
    status: str | None = None  # ok | error | timeout | cancelled
    tokens_requested: int | None = None
    send_s: float | None = None
    first_token_s: float | None = None
    end_s: float | None = None
    ttft_s: float | None = None
    latency_s: float | None = None
    tokens: int | None = None
    tokens_source: str | None = None
    tokens_approximate: bool | None = None
    finish_reason: str | None = None
    http_status: int | None = None
    error: str | None = None
    prompt_tokens: int | None = None
    server: ServerTimings | None = None
    text: str | None = None  # untrusted: always escaped on output
    token_s: tuple[float, ...] | None = only_when_recorded()  # left out of a warm-up request

    @property
    def ok(self) -> bool:
        return (self.status or "ok") == "ok"


@record
class RequestRef:
    """A request a finding names."""

    n: int | None = None
    rep: int | None = None
    index: int | None = None
    nonce: str | None = None
    detail: Text | None = None


@record
class Finding:
    """A validity finding or a warning: what was wrong, and what to do."""

    code: str | None = only_when_recorded()  # absent where the command names no code
    message: Text | None = None
    hint: Text | None = None
    requests: tuple[RequestRef, ...] | None = only_when_recorded()  # absent where the finding names no request


Warning = Finding | Text  # older documents and some commands keep plain strings
# --evidence: "stopwatch" keeps the server's own witnesses (gauges, timings, cache counters) from deciding
EvidenceMode = Literal["all", "stopwatch"]


@record
class LogFinding:
    """One feature the log audit decided (the `log` command's finding shape)."""

    feature: str | None = None
    status: str | None = None  # confirmed | refused | unconfirmed
    line: str | None = None
    line_no: int | None = None
    meaning: str | None = None
    rule: str | None = None
    source: str | None = None
    asked: str | None = None  # the flag that asked for it, e.g. "-np 4"
    requested: bool | None = None
    value: float | None = None  # the number the deciding line gave, e.g. a batch size (older documents: absent)
    provenance: str | None = None  # where the deciding rule was checked: a real log, or documentation only


@record
class LogLine:
    level: str | None = None
    text: str | None = None
    line_no: int | None = None


@record
class LogAudit:
    """The audit of the server log a `--serve` run started (a refused feature makes the run exit 3)."""

    command: str | None = None
    log_path: str | None = None
    error: str | None = None
    findings: tuple[LogFinding, ...] = ()
    lines: tuple[LogLine, ...] = ()
    refused: tuple[str, ...] = ()


@record
class UnscannedLogAudit:
    """A --serve run's log audit whose scan failed (`error` says why): the command and the log, and no
    findings, lines or refusals, not even empty ones. It reads back as a `LogAudit` that found nothing,
    and reads as one here too (its findings, lines and refusals are empty, and are not fields)."""

    command: str | None = None
    log_path: str | None = None
    error: str | None = None

    @property
    def findings(self) -> tuple[LogFinding, ...]:
        return ()

    @property
    def lines(self) -> tuple[LogLine, ...]:
        return ()

    @property
    def refused(self) -> tuple[str, ...]:
        return ()


@record
class ClockOffset:
    """A Ray actor's monotonic clock against the driver's: it reads `offset_ns` ahead, +-`uncertainty_ns`."""

    worker: int | None = None
    node: str | None = None
    offset_ns: int | None = None
    uncertainty_ns: int | None = None
    rtt_min_ns: int | None = None  # the fastest of the round trips that bound the offset
    samples: int | None = None


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
    error_ms: float | None = None  # p99 stamp delay + dispatch skew
    loop_lag_p99_ms: float | None = None
    loop_lag_max_ms: float | None = None
    client_bound: str | None = None  # why a run at this concurrency and rate would measure the client
    # lanes on Ray actors: how far two actors' mapped clocks may differ
    clock_uncertainty_ms: float | None = only_when_recorded()
    clock_offsets: tuple[ClockOffset, ...] | None = only_when_recorded()  # absent on one machine


@record
class ClientCheck:
    """The pre-flight before one concurrency of a run (`load.preflight`): the calibrations tried, one
    per client-process count, against the command's bound on the client's timing error."""

    streams: int | None = None
    tolerance_ms: float | None = None  # the most timing error the command allows at this N
    # the tighter error an automatic worker count searched for (2% of the reference)
    aim_ms: float | None = only_when_recorded()
    basis: str | None = None  # what the bound is a fraction of, in words
    workers: int | None = None  # client processes the batches at this N ran on
    error_ms: float | None = None  # the chosen calibration's p99 stamp delay + dispatch skew
    stamp_delay_p99_ms: float | None = None
    dispatch_skew_ms: float | None = None
    client_bound: bool | None = None
    reason: Text | None = None  # why every figure at this N would measure the client
    tried: tuple[Calibration, ...] = ()


@record
class ClientLateness:
    """How late the client's own event loop was over a stretch of the run (model.client.ClientLateness):
    moments inside a late window are not evidence."""

    resolution_ms: float | None = None  # outside every late window the client read within this of an arrival
    covered_s: float | None = None  # how long the ticker watched
    late_windows: int | None = None  # windows in which the loop may have been blocked longer than the resolution
    late_s: float | None = None  # their summed length
    longest_late_ms: float | None = None
    dropped: int | None = None  # windows the meter could not keep: then nothing is vouched for
