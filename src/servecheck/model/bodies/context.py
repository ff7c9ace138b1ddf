"""The `context` document's body (docs/schema.md); registered in BODIES below."""

from __future__ import annotations

from typing import Literal

from servecheck.model.bodies import BODIES
from servecheck.model.bodies.common import (
    Calibrated,
    ClientCheck,
    LogAudit,
    UnscannedLogAudit,
    Request,
    Server,
    Warning,
)
from servecheck.model.codec import only_when_recorded, record, until_finished
from servecheck.model.reason import Text

Effect = Literal["falls", "flat", "rises", "inconclusive"]


@record
class ContextDrift:
    """The shallowest depth's first and last decode rate: change = last / first - 1."""

    first_tok_s: float | None = None
    last_tok_s: float | None = None
    first_s: float | None = None
    last_s: float | None = None
    change: float | None = None
    warn_above: float | None = None


@record
class ContextSample:
    """One stream at one depth; times are seconds from the run start."""

    rep: int | None = None
    order: int | None = None  # position in the run's plan
    prompt_tokens: int | None = None  # as sent, by the server's tokenizer
    reported_prompt_tokens: int | None = None  # as the server counted it
    tokens: int | None = None
    ttft_s: float | None = None
    decode_s: float | None = None
    decode_tok_s: float | None = None
    prefill_tok_s: float | None = None
    mid_s: float | None = None
    problem: Text | None = None  # why it cannot stand for its depth
    # how late the client itself read it, ms beyond 5% of its own time; present only where it was (the
    # sample then stands for nothing: `problem` says so)
    client_late_ms: float | None = only_when_recorded()
    # sends of this depth and rep before this one, resent because the client read them late
    resent: int | None = only_when_recorded()
    # how long a hop that buffers the stream may have held it, ms beyond 5% of its own time; present only
    # where so (the sample then stands for nothing; such a stream is not resent: a hop holds every send)
    hop_held_ms: float | None = only_when_recorded()
    request: Request | None = None


@record
class ContextPoint:
    """One depth: medians over its reps."""

    depth: int | None = None  # as asked
    context_tokens: int | None = None  # prompt tokens sent
    ttft_s: float | None = None
    prefill_tok_s: float | None = None
    decode_tok_s: float | None = None
    decode_range_tok_s: tuple[float, float] | None = None
    tokens: int | None = None
    ratio: float | None = None  # over the shallowest depth's decode rate, drift-corrected; None when invalid
    ratio_raw: float | None = None
    valid: bool | None = None
    problems: tuple[Text, ...] = ()
    samples: tuple[ContextSample, ...] = ()


@record
class SkippedDepth:
    """A depth whose prompt and output exceed the server's context: never sent."""

    depth: int | None = None
    reason: str | None = None


@record
class ContextRooflineRow:
    """The roofline at one depth (with --model): bytes per token at its mean context, and the rate predicted
    at the shallowest depth's utilization."""

    depth: int | None = None
    mean_context_tokens: float | None = None
    kv_bytes_per_token: int | None = None
    bytes_per_token: int | None = None  # weights + recurrent state + KV
    decode_tok_s: float | None = None
    predicted_tok_s: float | None = None
    measured_over_predicted: float | None = None  # drift-corrected
    steeper: bool | None = None
    achieved_gb_s: float | None = None
    utilization: tuple[float, float] | None = None  # against the measured bandwidth range


@record
class ModelBytesSummary:
    """What the weight file's audit says each token reads besides the KV cache, and the cache's layout."""

    path: str | None = None
    architecture: str | None = None
    kind: str | None = None
    weights_bytes_per_token: int | None = None
    state_bytes_per_token: int | None = None
    resident_bytes: int | None = None
    kv_type: str | None = None
    kv_element_bytes: float | None = None
    kv_layers: int | None = None
    kv_heads: int | tuple[int, ...] | None = None  # one count, or each distinct count when layers differ
    key_length: int | None = None
    value_length: int | None = None
    sliding_layers: int | None = None
    kv_layout: str | None = None
    kv_bytes_per_context_token: float | None = None
    notes: tuple[str, ...] = ()


@record
class ContextBody:
    server: Server | None = None
    tokens: int | None = None  # output tokens per stream
    reps: int | None = None
    order: tuple[int, ...] = ()  # the plan as run
    cache_prompt: bool | None = None  # false, or None where the engine does not take it
    effect: Effect | None = None
    effect_reason: Text | None = None
    drift: ContextDrift | None = None
    points: tuple[ContextPoint, ...] = ()
    skipped: tuple[SkippedDepth, ...] = ()
    roofline: tuple[ContextRooflineRow, ...] | None = None  # None without --model
    model_bytes: ModelBytesSummary | None = None
    bandwidth_gb_s: tuple[float, float] | None = None
    bandwidth_source: str | None = None
    warmup: Request | None = None
    invalid: tuple[Warning, ...] = ()
    warnings: tuple[Warning, ...] = ()
    notes: tuple[Text, ...] = ()
    log_audit: LogAudit | UnscannedLogAudit | None = until_finished()  # with --serve; null in a finished run without
    calibration: Calibrated | None = None  # the client's pre-flight; None: a document from before it
    client_checks: tuple[ClientCheck, ...] | None = None  # the one before the first stream; None: from before it


BODIES["context"] = ContextBody
