"""`scan_log`: stream a server log through the rule table and say, per feature the user switched on,
whether the log confirms it, refuses it, or says nothing; a feature the user did not ask for is never
`refused` (`decide_findings` holds the rule)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from servecheck.logscan.flags import FeatureRequest, guess_engine, parse_flags, split_flags, switched_off
from servecheck.logscan.reader import Level, RawLine, iter_log
from servecheck.logscan.rules import Rule, RuleStatus, check_engine, load_rules, rules_for
from servecheck.model.bodies import log as body_
from servecheck.model.bodies.common import LogFinding
from servecheck.model.bodies.common import LogLine as LogLineRecord

FindingStatus = Literal["confirmed", "refused", "unconfirmed", "not asked"]
# A feature the server shows off that nobody asked it to switch on: the server declined nothing.
NOT_ASKED: FindingStatus = "not asked"

# WARNING/ERROR lines kept for the report; a log with more is still scanned to the end.
MAX_KEPT_LINES = 2000
# A matching line longer than this is kept as an excerpt around the match (vLLM prints its whole
# engine configuration on one line of several kilobytes).
MAX_EVIDENCE_CHARS = 300
EXCERPT_CONTEXT_CHARS = 100
# Lines read to guess which engine wrote the log when the user said "auto".
DETECT_LINES = 400
_ENGINE_MARKERS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ollama", re.compile(r"OLLAMA_|level=\w+ source=\S+\.go:")),
    ("vllm", re.compile(r"\bvllm\b|vllm\.|\[\w+\.py:\d+\].*(?:Engine|Running: \d+ reqs)", re.IGNORECASE)),
    ("sglang", re.compile(r"\bsglang\b|Prefill batch\.|Decode batch\.", re.IGNORECASE)),
    ("mlx", re.compile(r"\bmlx[_-]lm\b|mlx_lm\.server", re.IGNORECASE)),
    ("tgi", re.compile(r"text_generation_(?:launcher|router|server)")),
    ("llamacpp", re.compile(r"llama_server|llama_model_loader|llama_context|load_model:|--gpu-layers|srv\s")),
)


@dataclass(frozen=True)
class Evidence:
    """One thing that speaks about a feature: a matched log line or a live reading from the server."""

    feature: str
    status: RuleStatus
    line: str
    rule_id: str
    meaning: str
    source: str  # "log" or "live"
    line_no: int | None = None
    value: float | None = None
    requires_request: bool = False
    yields_to_confirmed: bool = False  # a refusal any confirmation of the feature overrides
    provenance: str | None = None  # where the rule's wording was checked (Provenance.describe)

    def record(self) -> body_.LogEvidence:
        return body_.LogEvidence(feature=self.feature, status=self.status, line=self.line, rule=self.rule_id,
                                 meaning=self.meaning, source=self.source, line_no=self.line_no, value=self.value,
                                 provenance=self.provenance)


@dataclass(frozen=True)
class Finding:
    """The verdict on one feature, with the line that decided it (None when nothing did)."""

    feature: str
    status: FindingStatus
    line: str | None
    requested: bool
    asked: str | None = None
    rule_id: str | None = None
    meaning: str | None = None
    source: str | None = None
    line_no: int | None = None
    value: float | None = None  # the number the deciding line gave (slots, a batch size, ...)
    provenance: str | None = None  # where the deciding rule's wording was checked

    def record(self) -> LogFinding:
        return LogFinding(feature=self.feature, status=self.status, line=self.line, requested=self.requested,
                          asked=self.asked, rule=self.rule_id, meaning=self.meaning, source=self.source,
                          line_no=self.line_no, value=self.value, provenance=self.provenance)


@dataclass(frozen=True)
class LogLine:
    level: Level
    text: str
    line_no: int

    def record(self) -> LogLineRecord:
        return LogLineRecord(level=self.level, text=self.text, line_no=self.line_no)


@dataclass(frozen=True)
class LogScanResult:
    """Everything `servecheck log` reports about one log file."""

    path: str
    engine: str  # the engine whose rules and flag syntax were used ("auto": every rule)
    requests: tuple[FeatureRequest, ...]
    findings: tuple[Finding, ...]
    evidence: tuple[Evidence, ...]
    lines: tuple[LogLine, ...]  # WARNING/ERROR lines, at most MAX_KEPT_LINES
    lines_total: int
    warnings: int
    errors: int
    lines_dropped: int = 0  # WARNING/ERROR lines beyond MAX_KEPT_LINES
    evidence_repeated: int = 0  # matching lines that repeated a reading already in `evidence`
    notes: tuple[str, ...] = field(default=())
    switched_off: tuple[str, ...] = ()  # features the flags name and leave off (`--parallel 1`)
    listed: tuple[str, ...] = ()  # features decided even when nothing asked for them (the demo's)

    @property
    def refused(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.status == "refused")

    def with_live(self, live: Sequence[Evidence]) -> LogScanResult:
        """The same scan with live evidence from the running server added."""
        evidence = (*self.evidence, *live)
        return replace(self, evidence=evidence,
                       findings=decide_findings(self.requests, evidence, self.switched_off, self.listed))

    def body(self) -> body_.LogBody:
        """The `log` document's body, all but `refused` (the command lists it; a demo's audit does not)."""
        return body_.LogBody(
            path=self.path, engine=self.engine, requests=tuple(r.record() for r in self.requests),
            findings=tuple(f.record() for f in self.findings), evidence=tuple(e.record() for e in self.evidence),
            lines=tuple(ln.record() for ln in self.lines), lines_total=self.lines_total, warnings=self.warnings,
            errors=self.errors, lines_dropped=self.lines_dropped, evidence_repeated=self.evidence_repeated,
            notes=self.notes)


def scan_log(
    path: str | Path,
    engine: str = "auto",
    flags: str | None = None,
    *,
    rules: tuple[Rule, ...] | None = None,
    listed: Sequence[str] = (),
) -> LogScanResult:
    """Scan one log file. `flags` is the server's command line (Ollama: its environment).

    `listed` names features to report whether or not the flags switched them on: the demo shows
    whether each of its two servers batches, and a `--parallel 1` server's own `n_slots = 1` line
    then answers `not asked` (no request was declined), a `--parallel 4` one's `confirmed`."""
    check_engine(engine)
    all_rules = load_rules() if rules is None else rules
    scan = _Scan(rules_for(all_rules, engine))
    for raw in iter_log(path):
        scan.feed(raw)
    flag_engine = _flag_engine(engine, flags, scan.detected)
    requests = parse_flags(flags, flag_engine)
    off = switched_off(flags, flag_engine)
    listed = tuple(dict.fromkeys(listed))
    notes = _notes(engine, flag_engine, flags)
    return LogScanResult(
        path=str(path),
        engine=_reported_engine(engine, flags, flag_engine, scan.detected),
        requests=requests,
        findings=decide_findings(requests, scan.evidence, off, listed),
        evidence=tuple(scan.evidence),
        lines=tuple(scan.kept),
        lines_total=scan.total,
        warnings=scan.warnings,
        errors=scan.errors,
        lines_dropped=scan.dropped,
        evidence_repeated=scan.repeated_evidence,
        notes=notes,
        switched_off=off,
        listed=listed,
    )


class _Scan:
    """Accumulates matches and WARNING/ERROR lines while the log streams past."""

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        self.rules = rules
        self.evidence: list[Evidence] = []
        self.kept: list[LogLine] = []
        self.total = self.warnings = self.errors = self.dropped = 0
        self.detected: str | None = None
        self._seen: set[tuple[str, str, float | None, bool]] = set()
        self.repeated_evidence = 0  # matches of a rule, status and value already kept

    def feed(self, raw: RawLine) -> None:
        self.total = raw.line_no
        if self.detected is None and raw.line_no <= DETECT_LINES:
            self.detected = _detect(raw.text)
        if raw.level is not None:
            self._keep(raw)
        for ev in match_line(self.rules, raw.text, raw.line_no):
            self._add(ev)

    def _add(self, ev: Evidence) -> None:
        # A long-running server repeats the same line (a slot line per restart, a warning per
        # request): the first of each kind decides, so memory stays bounded by distinct readings.
        key = (ev.rule_id, ev.status, ev.value, ev.requires_request)
        if key in self._seen:
            self.repeated_evidence += 1
            return
        self._seen.add(key)
        self.evidence.append(ev)

    def _keep(self, raw: RawLine) -> None:
        if raw.level == "warning":
            self.warnings += 1
        else:
            self.errors += 1
        if len(self.kept) < MAX_KEPT_LINES:
            self.kept.append(LogLine(raw.level, raw.text, raw.line_no))  # type: ignore[arg-type]
        else:
            self.dropped += 1


def match_line(rules: Iterable[Rule], text: str, line_no: int | None = None) -> list[Evidence]:
    """Evidence from every rule that matches one line."""
    out = []
    lowered = text.lower()
    for rule in rules:
        m = rule.search(text, lowered)
        if m is None:
            continue
        value = _number(m.groupdict().get("value"))
        status = rule.value_status(value)
        below_min = status != rule.status
        out.append(
            Evidence(
                feature=rule.feature,
                status=status,
                line=excerpt(text.strip(), m.group(0)),
                rule_id=rule.id,
                meaning=rule.meaning,
                source="log",
                line_no=line_no,
                value=value,
                # "n_slots = 1" refuses parallel slots only when they were asked for.
                requires_request=rule.requires_request or below_min,
                yields_to_confirmed=rule.yields_to_confirmed and status == "refused",
                provenance=rule.provenance.describe(),
            )
        )
    return out


def excerpt(line: str, matched: str) -> str:
    """The line, or the part of a very long one around what the rule matched, marked with ellipses."""
    if len(line) <= MAX_EVIDENCE_CHARS:
        return line
    at = line.find(matched)
    if at < 0:
        return line[:MAX_EVIDENCE_CHARS] + " ..."
    # a match that runs over most of the line (a pattern with .*) keeps its start and its end
    if len(matched) > MAX_EVIDENCE_CHARS - 2 * EXCERPT_CONTEXT_CHARS:
        head, tail = (line[: at + EXCERPT_CONTEXT_CHARS],
                      line[at + len(matched) - EXCERPT_CONTEXT_CHARS : at + len(matched)])
        return f"{head} ... {tail}" + (" ..." if at + len(matched) < len(line) else "")
    lo, hi = max(0, at - EXCERPT_CONTEXT_CHARS), min(len(line), at + len(matched) + EXCERPT_CONTEXT_CHARS)
    return ("... " if lo > 0 else "") + line[lo:hi] + (" ..." if hi < len(line) else "")


def decide_findings(
    requests: Sequence[FeatureRequest],
    evidence: Sequence[Evidence],
    off: Sequence[str] = (),
    listed: Sequence[str] = (),
) -> tuple[Finding, ...]:
    """Per feature: refused if any line refuses it, else confirmed if any line confirms it, else
    refused if a line refuses it that only a confirmation overrides, else unconfirmed (asked for,
    nothing either way).

    Only a request can be refused. A feature is asked for when the flags switch it on; when they do
    not, a line the engine prints only in answer to a request (`--gpu-layers option will be ignored`:
    a rule without `requires_request`) still shows one, unless the flags name the feature and leave
    it off (`off`: `--max-num-seqs 1`, then a request queued is what was asked). Any other refusal of
    a feature nobody asked for reads `not asked`. Features nobody asked for appear only with evidence
    that speaks without a request, or when `listed`."""
    asked = {r.feature: r for r in requests}
    features = list(dict.fromkeys((*asked, *listed)))
    for ev in evidence:
        if ev.feature not in asked and ev.status != "info" and ev.feature not in features:
            features.append(ev.feature)
    findings = [_decide(f, asked.get(f), [e for e in evidence if e.feature == f], f in off, f in listed)
                for f in features]
    return tuple(f for f in findings if f is not None)


def _decide(feature: str, request: FeatureRequest | None, evidence: list[Evidence], off: bool,
            listed: bool) -> Finding | None:
    usable = [_against_request(e, request) for e in evidence
              if request is not None or listed or not e.requires_request]
    strong = [e for e in usable if not e.yields_to_confirmed]
    weak = [e for e in usable if e.yields_to_confirmed]
    for status, pool in (("refused", strong), ("confirmed", strong), ("refused", weak)):
        hit = next((e for e in pool if e.status == status), None)
        if hit is not None:
            if status == "refused" and request is None and (off or hit.requires_request):
                return _finding(feature, NOT_ASKED, request, hit)
            return _finding(feature, status, request, hit)  # type: ignore[arg-type]
    if request is None:
        return Finding(feature, NOT_ASKED, None, False) if listed else None
    return Finding(feature, "unconfirmed", None, True, asked=request.asked)


def _against_request(ev: Evidence, request: FeatureRequest | None) -> Evidence:
    """`-np 4` but `n_slots = 2`: the feature is on, but not as asked -- that is a refusal too."""
    if request is None or request.value is None or ev.value is None or ev.status != "confirmed":
        return ev
    if ev.value < request.value:
        return replace(ev, status="refused", meaning=f"{request.asked} asked for {request.value:g}, got {ev.value:g}")
    return ev


def _finding(feature: str, status: FindingStatus, request: FeatureRequest | None, ev: Evidence) -> Finding:
    return Finding(
        feature=feature,
        status=status,
        line=ev.line,
        requested=request is not None,
        asked=None if request is None else request.asked,
        rule_id=ev.rule_id,
        meaning=ev.meaning,
        source=ev.source,
        line_no=ev.line_no,
        value=ev.value,
        provenance=ev.provenance,
    )


def _detect(text: str) -> str | None:
    return next((engine for engine, marker in _ENGINE_MARKERS if marker.search(text)), None)


def _flag_engine(engine: str, flags: str | None, detected: str | None) -> str:
    if engine != "auto":
        return engine
    from_flags = guess_engine(split_flags(flags)) if flags else None
    return from_flags or detected or "llamacpp"


def _reported_engine(engine: str, flags: str | None, flag_engine: str, detected: str | None) -> str:
    """The engine named in the result: the user's choice, else what the flags or the log showed."""
    if engine != "auto":
        return engine
    return flag_engine if flags else detected or "auto"


def _notes(engine: str, flag_engine: str, flags: str | None) -> tuple[str, ...]:
    if engine == "auto" and flags:
        return (f"--flags read as {flag_engine} flags (pass --engine to choose)",)
    return ()


def _number(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        return float(raw.replace(",", ""))
    except ValueError:
        return None
