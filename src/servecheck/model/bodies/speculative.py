"""The `speculative` document's body (docs/speculative.md); registered in BODIES below."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Literal, get_args

from servecheck.model.bodies import BODIES
from servecheck.model.bodies.common import (
    Calibrated,
    ClientCheck,
    Finding,
    LogAudit,
    UnscannedLogAudit,
    Request,
    Server,
)
from servecheck.model.codec import only_when_recorded, record, until_finished
from servecheck.model.reason import Text

SpecVerdict = Literal["speculating", "not_speculating", "inconclusive"]
PaysVerdict = Literal["pays", "costs", "inconclusive"]
PromptKind = Literal["predictable", "unpredictable"]
PROMPT_KINDS: tuple[PromptKind, ...] = get_args(PromptKind)
KIND_LABELS: dict[str, str] = {"predictable": "verbatim repetition", "unpredictable": "prose"}  # as a reader says it


def kind_label(kind: str | None) -> str:
    """A prompt kind as every report names it (the JSON keeps `predictable` / `unpredictable`)."""
    return KIND_LABELS.get(kind or "", kind or "?")


@record
class SpeculativePoint:
    """One N and prompt kind: tokens per step from the streams' arrivals, the rates, and against the baseline."""

    n: int | None = None
    prompt_kind: PromptKind | None = None
    tokens_per_step: float | None = None
    tokens_per_step_interval: tuple[float, float] | None = None
    per_stream_tok_s: float | None = None
    aggregate_tok_s: float | None = None
    pays: PaysVerdict | None = None  # None without --baseline
    verdict: SpecVerdict | None = None
    reason: Text | None = None
    steps: int | None = None
    streams: int | None = None
    grouped: int | None = None
    grouping: tuple[Text, ...] = ()  # how the streams' arrivals were split into steps
    problems: tuple[Text, ...] = ()  # why a stream could not be grouped
    failed: int | None = None
    server_tokens_per_step: float | None = None  # from llama.cpp's draft counters: a witness
    server_acceptance: float | None = None  # draft_n_accepted / draft_n
    counters_agree: bool | None = None
    counters_note: Text | None = None
    baseline_per_stream_tok_s: float | None = None
    pays_ratio: float | None = None
    pays_interval: tuple[float, float] | None = None
    pays_reason: Text | None = None
    client_late_groups: int | None = None  # groups left out: the client read them late (analysis.client_timing)
    coalesced_streams: int | None = None  # streams whose groups were bursts made in transit, not steps
    # reps beyond the planned ones, taken while pays / costs was undecided; None without a baseline
    extra_reps: int | None = None


@record
class SpeculativeBody:
    verdict: SpecVerdict | None = None
    verdict_reason: Text | None = None
    expect: str | None = None
    server: Server | None = None
    baseline: Server | None = None
    ns: tuple[int, ...] = ()
    tokens: int | None = None
    reps: int | None = None
    max_reps: int | None = None  # reps in all an undecided pays / costs may take; None without a baseline
    points: tuple[SpeculativePoint, ...] = ()
    stops_paying_n: Mapping[str, int | None] = field(default_factory=dict)
    stops_paying_reason: Mapping[str, Text] = field(default_factory=dict)
    warmup: Request | None = None
    # present only when not empty; why the run is invalid: `client_bound` (the pre-flight)
    invalid: tuple[Finding, ...] | None = only_when_recorded()
    notes: tuple[str, ...] = ()
    log_audit: LogAudit | UnscannedLogAudit | None = until_finished()  # with --serve; null in a finished run without
    calibration: Calibrated | None = None  # the client's pre-flight; None: a document from before it
    client_checks: tuple[ClientCheck, ...] | None = None  # one per N, before its first batch; None: from before it


BODIES["speculative"] = SpeculativeBody
