"""The `log` document's body (docs/schema.md); registered in BODIES below.

`log` is the one command whose `warnings` is a count of WARNING lines, not a list of findings."""

from __future__ import annotations

from servecheck.model.bodies import BODIES
from servecheck.model.bodies.common import LogFinding, LogLine, UnscannedLogAudit
from servecheck.model.codec import record


@record
class LogEvidence:
    """One line (or live reading) that speaks about a feature; every matching one is kept."""

    feature: str | None = None
    status: str | None = None  # confirmed | refused | info
    line: str | None = None
    line_no: int | None = None
    meaning: str | None = None
    rule: str | None = None
    source: str | None = None  # log | live
    value: float | None = None
    provenance: str | None = None  # where the rule was checked (older documents: absent)


@record
class FeatureAsk:
    """What the server's flags asked for (--flags)."""

    feature: str | None = None
    asked: str | None = None  # the flag, e.g. "-np 4"
    value: float | None = None


@record
class LogBody:
    path: str | None = None
    engine: str | None = None  # the engine whose rules were used ("auto": every rule)
    lines_total: int | None = None
    lines_dropped: int | None = None  # WARNING/ERROR lines beyond the kept ones
    warnings: int | None = None  # a count of WARNING lines
    errors: int | None = None  # a count of ERROR lines
    findings: tuple[LogFinding, ...] = ()
    evidence: tuple[LogEvidence, ...] = ()
    evidence_repeated: int | None = None  # matching lines that repeated a reading already in evidence
    requests: tuple[FeatureAsk, ...] = ()
    refused: tuple[str, ...] | None = None  # the refused features (None: a demo run's audit, which does not list them)
    lines: tuple[LogLine, ...] = ()  # WARNING/ERROR lines
    notes: tuple[str, ...] = ()


BODIES["log"] = LogBody

__all__ = ["LogBody", "UnscannedLogAudit"]
