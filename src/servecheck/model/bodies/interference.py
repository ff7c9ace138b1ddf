"""The `interference` document's body (docs/interference.md); registered in BODIES below."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Literal

from servecheck.model.bodies import BODIES
from servecheck.model.bodies.common import (
    Calibrated,
    ClientCheck,
    ClientLateness,
    Finding,
    LogAudit,
    Request,
    Server,
    UnscannedLogAudit,
)
from servecheck.model.codec import only_when_recorded, record, until_finished
from servecheck.model.reason import Text

InterferenceVerdict = Literal["chunked", "blocking", "isolated", "inconclusive"]


@record
class InterferenceRep:
    """One intruder of one size and what it did to its victims."""

    rep: int | None = None
    order: int | None = None
    prompt_tokens: int | None = None  # as asked
    sent_tokens: int | None = None  # by the server's tokenizer
    valid: bool | None = None
    problems: tuple[Text, ...] = ()
    baseline_interval_s: float | None = None
    victim_max_gap_s: float | None = None
    victim_p99_gap_s: float | None = None
    victim_lost_s: float | None = None
    step_gap_s: float | None = None
    stretched: int | None = None
    stretched_share: float | None = None
    intruder_ttft_s: float | None = None
    prefill_tok_s: float | None = None
    chunk_tokens: float | None = None
    # the client could not vouch for the prefill window: repeated (analysis.client_timing)
    client_late: bool | None = None
    client: ClientLateness | None = None  # the client's own lateness over this rep
    intruder: Request | None = None
    victims: tuple[Request, ...] = ()


@record
class InterferencePoint:
    """One prompt size, its valid reps pooled (medians; the p99 over all their window gaps)."""

    prompt_tokens: int | None = None
    victim_max_gap_s: float | None = None
    victim_p99_gap_s: float | None = None
    victim_lost_s: float | None = None
    intruder_ttft_s: float | None = None
    baseline_interval_s: float | None = None
    step_gap_s: float | None = None
    stretched: float | None = None
    stretched_share: float | None = None
    prefill_tok_s: float | None = None
    cover: float | None = None
    chunk_tokens: float | None = None
    valid: bool | None = None
    problems: tuple[Text, ...] = ()
    reps: tuple[InterferenceRep, ...] = ()


@record
class InterferenceEvidence:
    """The numbers that decided the verdict (smallest and largest valid sizes)."""

    size_lo: int | None = None
    size_hi: int | None = None
    gap_lo_s: float | None = None
    gap_hi_s: float | None = None
    longest_hi_s: float | None = None
    ttft_lo_s: float | None = None
    ttft_hi_s: float | None = None
    baseline_s: float | None = None
    stretch_hi: float | None = None
    cover_hi: float | None = None
    gap_growth: float | None = None
    prefill_growth: float | None = None
    stretched_share_hi: float | None = None
    stretched_share_max: float | None = None
    thresholds: Mapping[str, float] = field(default_factory=dict)


@record
class SkippedSize:
    prompt_tokens: int | None = None
    reason: str | None = None


@record
class InterferenceWitness:
    """The batch budget the engine's log stated, beside the measured chunk: it corroborates, never decides."""

    configured_tokens: float | None = None
    source: str | None = None
    agrees: bool | None = None
    note: Text | None = None


@record
class InterferenceBody:
    verdict: InterferenceVerdict | None = None
    verdict_reason: Text | None = None
    decided_by: str | None = None
    evidence: InterferenceEvidence | None = None
    sentence: Text | None = None
    chunk_tokens: float | None = None
    chunk_interval: tuple[float, float] | None = None
    baseline_interval_s: float | None = None
    expect: str | None = None
    server: Server | None = None
    streams: int | None = None
    tokens: int | None = None
    reps: int | None = None
    prompt_sizes: tuple[int, ...] = ()
    order: tuple[int, ...] = ()
    cache_prompt: bool | None = None
    points: tuple[InterferencePoint, ...] = ()
    skipped: tuple[SkippedSize, ...] = ()
    calibration: tuple[Request, ...] = ()
    warmup: Request | None = None
    witness: InterferenceWitness | None = only_when_recorded()  # with --serve, once the run ended
    # present only when not empty; why the run is invalid: `client_bound` (the pre-flight)
    invalid: tuple[Finding, ...] | None = only_when_recorded()
    notes: tuple[str, ...] = ()
    log_audit: LogAudit | UnscannedLogAudit | None = until_finished()  # with --serve; null in a finished run without
    # the client's pre-flight ("on|off|none", staircase's `calibration`: that key here is the victims' batch);
    # None: a document from before it
    preflight: Calibrated | None = None
    client_checks: tuple[ClientCheck, ...] | None = None  # the one before the first trial; None: from before it


BODIES["interference"] = InterferenceBody
