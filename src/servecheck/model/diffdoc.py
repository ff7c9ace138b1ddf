"""The `diff --json` document, one record per kind of side by side (docs/schema.md, "diff"): written
by `model.codec` with every key present (null where a run has no value), levels and depths as keys."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field

from servecheck.model.codec import record


@record
class StaircaseLine:
    label: str = ""
    config: str = ""
    command: str = ""
    server_url: str | None = None
    model: str | None = None
    aggregate_tok_s: Mapping[str, float] = field(default_factory=dict)  # by concurrency level
    per_user_tok_s: float | None = None
    per_user_tok_s_by_level: Mapping[str, float] = field(default_factory=dict)
    ratio: float | None = None  # agg(highest N) / agg(1)
    trend: str = ""
    trend_from: str = ""  # "run" or "computed"
    marks: tuple[str, ...] = ()
    verdict: str | None = None  # the staircase run's own verdict; None for an arms run


@record
class StaircaseDiff:
    command: str = "diff"
    levels: tuple[int, ...] = ()
    verdict: str = ""
    rising_ratio: float | None = None
    lines: tuple[StaircaseLine, ...] = ()


@record
class ContextLine:
    label: str = ""
    config: str = ""
    server_url: str | None = None
    model: str | None = None
    decode_tok_s: Mapping[str, float] = field(default_factory=dict)  # by depth
    ratio: Mapping[str, float] = field(default_factory=dict)
    predicted_tok_s: Mapping[str, float] = field(default_factory=dict)
    effect: str = ""
    marks: tuple[str, ...] = ()


@record
class ContextDiff:
    command: str = "diff"
    of: str = "context"
    depths: tuple[int, ...] = ()
    change: Mapping[str, float | None] | None = None  # two runs: the second's rate over the first's, by depth
    lines: tuple[ContextLine, ...] = ()


@record
class SpeculativePoint:
    n: int | None = None
    prompt_kind: str | None = None
    tokens_per_step: float | None = None
    per_stream_tok_s: float | None = None
    pays: str | None = None


@record
class SpeculativeLine:
    label: str = ""
    config: str = ""
    server_url: str | None = None
    model: str | None = None
    verdict: str = ""
    points: tuple[SpeculativePoint, ...] = ()
    marks: tuple[str, ...] = ()


@record
class SpeculativeDiff:
    command: str = "diff"
    of: str = "speculative"
    lines: tuple[SpeculativeLine, ...] = ()


@record
class InterferencePoint:
    prompt_tokens: int | None = None
    victim_max_gap_s: float | None = None
    intruder_ttft_s: float | None = None
    victim_lost_s: float | None = None


@record
class InterferenceLine:
    label: str = ""
    config: str = ""
    server_url: str | None = None
    model: str | None = None
    verdict: str = ""
    chunk_tokens: float | None = None
    points: tuple[InterferencePoint, ...] = ()
    marks: tuple[str, ...] = ()


@record
class InterferenceDiff:
    command: str = "diff"
    of: str = "interference"
    lines: tuple[InterferenceLine, ...] = ()


@record
class CheckClaim:
    claim: str = ""  # a card, or `request_params.FIELD` for one field's probe
    verdict: str | None = None  # null: the run has no such card
    figure: str | None = None


@record
class CheckLine:
    label: str = ""
    config: str = ""
    server_url: str | None = None
    model: str | None = None
    claims: tuple[CheckClaim, ...] = ()
    marks: tuple[str, ...] = ()


@record
class CheckDiff:
    command: str = "diff"
    of: str = "check"
    changed: tuple[str, ...] = ()  # the claims whose verdict differs between the runs
    lines: tuple[CheckLine, ...] = ()
