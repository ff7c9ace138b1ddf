"""What a server-log audit comes to, in one word. Pure: the findings' statuses in, the word out.

The log scan decides each feature (`logscan.scan.decide_findings`); this is the run's summary of those
decisions, the word a report and the history show beside the findings."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.model.bodies.common import LogFinding

REFUSED = "refused"
NO_REFUSALS = "no refusals"


def audit_word(findings: Sequence[LogFinding]) -> str | None:
    """`refused` when the log refused any feature, `no refusals` when it refused none; None without findings."""
    if not findings:
        return None
    return REFUSED if any(f.status == REFUSED for f in findings) else NO_REFUSALS
