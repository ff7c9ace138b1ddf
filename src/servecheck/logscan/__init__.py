"""Server log audit: a rule table (data, `rules.toml`) of known refused/confirmed feature lines,
a streaming matcher, the server's flags parsed into features, and live evidence from its endpoints."""

from servecheck.logscan.flags import FeatureRequest, parse_flags
from servecheck.logscan.rules import ENGINE_CHOICES, Rule, load_rules
from servecheck.logscan.scan import Evidence, Finding, LogLine, LogScanResult, decide_findings, scan_log

__all__ = [
    "ENGINE_CHOICES",
    "Evidence",
    "FeatureRequest",
    "Finding",
    "LogLine",
    "LogScanResult",
    "Rule",
    "decide_findings",
    "load_rules",
    "parse_flags",
    "scan_log",
]
