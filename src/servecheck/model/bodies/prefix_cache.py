"""The `prefix-cache` document's body (docs/schema.md); registered in BODIES below."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
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

CacheVerdict = Literal["working", "inert", "unknown"]
CacheSignal = Literal["counters", "timing", "none"]  # what decided the verdict
SendKind = Literal["repeat", "control", "floor"]


@record
class CacheThresholds:
    """The constants `analysis.cache` decided with, as the run recorded them."""

    working_ttft_ratio: float | None = None
    inert_ttft_ratio: float | None = None
    hit_fraction: float | None = None
    flat_fraction: float | None = None
    floor_max_ratio: float | None = None


@record
class CacheAnalysis:
    """The verdict with what decided it (counters, timing or nothing) and the ratios it read."""

    verdict: CacheVerdict | None = None
    reason: Text | None = None
    signal: CacheSignal | None = None
    warm_ttft_ratio: float | None = None  # median warm repeat TTFT / first send's TTFT
    control_ttft_ratio: float | None = None  # median warm repeat TTFT / control TTFT
    warm_cached_fraction: float | None = None  # smallest cached share of the prompt over warm repeats
    floor_ttft_ratio: float | None = None  # the short floor prompt's TTFT / the control's TTFT
    thresholds: CacheThresholds | None = None
    # the timing left it open and the server's cache counters decided; None in documents before it
    decided_by_witness: bool | None = None
    # what the cache counters read, in words, where the timing decided otherwise (the run warns witness_contradicts)
    witness_contradicts: Text | None = None


@record
class PrefixSend:
    """One send of the prompt (or of the control) and every cache signal read for it."""

    index: int | None = None
    kind: SendKind | None = None
    status: str | None = None
    error: str | None = None
    ttft_s: float | None = None  # None when the request failed
    cached_tokens: int | None = None  # None when the server reports no cache counter
    cached_source: str | None = None  # where cached_tokens came from
    prompt_tokens: int | None = None
    server_prompt_tokens: int | None = None
    server_prompt_s: float | None = None
    counter_deltas: Mapping[str, float] = field(default_factory=dict)  # /metrics cache counters' change over the send
    # how late the client itself read the send (ms beyond 5% of the first send's TTFT); present only where
    # it was: the send is then no evidence (analysis.client_timing)
    client_late_ms: float | None = only_when_recorded()
    request: Request | None = None


@record
class PrefixCacheBody:
    verdict: CacheVerdict | None = None
    verdict_reason: Text | None = None
    analysis: CacheAnalysis | None = None
    prompt_tokens: int | None = None  # as sent (capped to the per-request context)
    prompt_tokens_asked: int | None = None
    capped: bool | None = None
    repeats: int | None = None
    cache_prompt: bool | None = None  # None: the server's default
    n_ctx_per_request: int | None = None
    n_ctx_source: str | None = None
    ttft_s: tuple[float | None, ...] = ()  # per repeat, in order
    cached_tokens: tuple[int | None, ...] = ()  # per repeat; None where the server reports no counter
    control_ttft_s: float | None = None
    control_cached_tokens: int | None = None
    sends: tuple[PrefixSend, ...] = ()
    server: Server | None = None
    # findings beside the verdict: `witness_contradicts` when the cache counters read otherwise than the
    # timing; the key only where there is one
    warnings: tuple[Finding, ...] | None = only_when_recorded()
    evidence_mode: EvidenceMode | None = None  # stopwatch: the counters never decide
    # present only when not empty; why the run is invalid beside a failed send: `client_bound` (the pre-flight)
    invalid: tuple[Finding, ...] | None = only_when_recorded()
    notes: tuple[str, ...] = ()
    log_audit: LogAudit | UnscannedLogAudit | None = until_finished()  # with --serve; null in a finished run without
    warmup: Request | None = None  # a fresh prefill of the prompt's length, its own nonce: the pre-flight's reference
    calibration: Calibrated | None = None  # the client's pre-flight; None: a document from before it
    client_checks: tuple[ClientCheck, ...] | None = None  # the one before the first send; None: from before it


BODIES["prefix-cache"] = PrefixCacheBody
