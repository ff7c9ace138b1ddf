"""The run's findings, pure: each builder names one way a run is invalid (failed requests, unequal
outputs, skew, a client-bound N) or worth a warning (cache contamination, a moving reference, a
witness against the stopwatch, ...), with the requests it concerns and a hint."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.analysis.cache import record_contaminated
from servecheck.analysis.rules import CLIENT_ERROR_FRAC, FIGURE_FRAC, OUTPUT_LENGTH_TOLERANCE
from servecheck.analysis.findings import Finding, RequestRef
from servecheck.analysis.staircase.records import LevelAnalysis, MeasuredBatch
from servecheck.analysis.staircase.trend import REFERENCE_SPREAD_WARN
from servecheck.analysis.staircase.validity import DISPATCH_SKEW_FRAC, length_outliers, skew_invalid
from servecheck.model.client import FIX as CLIENT_FIX
from servecheck.model.client import ClientCheck, client_bound_message
from servecheck.model.reason import Reason
from servecheck.model.records import NS_PER_S, RequestRecord


def _ref(mb: MeasuredBatch, r: RequestRecord, detail: Reason) -> RequestRef:
    return RequestRef(n=mb.n, rep=mb.rep, index=r.index, nonce=r.nonce, detail=detail)


def length_finding(batches: Sequence[MeasuredBatch]) -> tuple[int | None, Finding | None]:
    pairs = [(mb, r) for mb in batches for r in mb.batch.records if r.ok]
    modal, bad = length_outliers([r.tokens for _, r in pairs])
    if not bad:
        return modal, None
    refs = tuple(_ref(pairs[i][0], pairs[i][1], Reason("staircase.detail_length", tokens=pairs[i][1].tokens,
                                                            modal=modal))
                 for i in bad)
    return modal, Finding(
        code="output_length",
        message=Reason("staircase.output_length", requests=len(refs), tolerance=OUTPUT_LENGTH_TOLERANCE,
                            modal=modal),
        hint=Reason("staircase.output_length_hint"),
        requests=refs,
    )


def failed_finding(batches: Sequence[MeasuredBatch]) -> Finding | None:
    refs = tuple(
        _ref(mb, r, Reason("staircase.detail_failed", status=r.status, error=r.error))
        for mb in batches for r in mb.batch.records if not r.ok
    )
    if not refs:
        return None
    return Finding(
        code="failed_requests",
        message=Reason("staircase.failed_requests", requests=len(refs)),
        hint=Reason("staircase.failed_requests_hint"),
        requests=refs,
    )


def skew_finding(batches: Sequence[MeasuredBatch], single_s: float | None) -> Finding | None:
    bad = [mb for mb in batches if skew_invalid(mb.batch.dispatch_skew_ns / NS_PER_S, single_s)]
    if not bad or single_s is None:
        return None
    worst = max(mb.batch.dispatch_skew_ns for mb in bad) / NS_PER_S
    return Finding(
        code="dispatch_skew",
        message=Reason("staircase.dispatch_skew", worst_s=worst, skew_frac=DISPATCH_SKEW_FRAC,
                   where=tuple((mb.n, mb.rep) for mb in bad)),
        hint=Reason("staircase.dispatch_skew_hint"), requests=(),
    )


def contamination_finding(batches: Sequence[MeasuredBatch]) -> Finding | None:
    refs = tuple(
        _ref(mb, r, Reason("staircase.detail_cached", cached=r.server.cached_prompt_tokens if r.server else None))
        for mb in batches
        for r in mb.batch.records
        if record_contaminated(r)
    )
    if not refs:
        return None
    return Finding(
        code="prefix_cache_contamination",
        message=Reason("staircase.prefix_cache_contamination", requests=len(refs)),
        hint=Reason("staircase.prefix_cache_contamination_hint"),
        requests=refs,
    )


def approximate_finding(batches: Sequence[MeasuredBatch]) -> Finding | None:
    refs = tuple(
        _ref(mb, r, Reason("staircase.detail_counted", source=r.tokens_source))
        for mb in batches
        for r in mb.batch.records
        if r.ok and r.tokens_approximate
    )
    if not refs:
        return None
    return Finding(
        code="approximate_tokens",
        message=Reason("staircase.approximate_tokens", requests=len(refs)),
        hint=Reason("staircase.approximate_tokens_hint"),
        requests=refs,
    )


def short_of_request_finding(modal: int | None, requested: int) -> Finding | None:
    if modal is None or modal >= requested * (1 - OUTPUT_LENGTH_TOLERANCE):
        return None
    return Finding(
        code="short_outputs",
        message=Reason("staircase.short_outputs", modal=modal, requested=requested),
        hint=Reason("staircase.short_outputs_hint"), requests=(),
    )


def reference_finding(times: Sequence[float]) -> Finding | None:
    """The N=1 measurements moved by more than REFERENCE_SPREAD_WARN, faster or slower."""
    if len(times) < 2 or min(times) <= 0 or max(times) / min(times) - 1.0 <= REFERENCE_SPREAD_WARN:
        return None
    return Finding(
        code="reference_spread",
        message=Reason("staircase.reference_spread", times_s=tuple(times), slower=times[-1] > times[0],
                   apart=max(times) / min(times) - 1.0),
        hint=Reason("staircase.reference_spread_hint"), requests=(),
    )


def reference_disagreement_finding(points: Sequence[LevelAnalysis], single_s: float | None) -> Finding | None:
    """Staircases decided by their own even steps where the N=1 reference was off: named."""
    where = tuple(
        (p.n, b.rep, b.finish_s[0])
        for p in points
        for b in p.batches
        if b.verdict.reference_disagrees and b.finish_s
    )
    if not where or single_s is None:
        return None
    return Finding(
        code="reference_disagrees",
        message=Reason("staircase.reference_disagrees", single_s=single_s, where=where),
        hint=Reason("staircase.reference_disagrees_hint"), requests=(),
    )


def witness_finding(points: Sequence[LevelAnalysis]) -> Finding | None:
    """Witnesses that contradicted the stopwatch, which stood: the server's self-report does not
    describe its schedule, and that is a finding of its own. Either they read another schedule than
    a clean stopwatch verdict of their own batch, or they decided a batch the times left ambiguous
    against what the stopwatch decided at another N or rep, and were set aside (`overruled_by`)."""
    seen = [(p, b) for p in points for b in p.batches if b.verdict.contradicted_by]
    if not seen:
        return None
    stood = [(p, b) for p, b in seen if not b.verdict.overruled_by]
    aside = [(p, b) for p, b in seen if b.verdict.overruled_by]
    p, b = (stood or aside)[-1]  # the largest N shows the contradiction most plainly
    stood_said = None
    if stood:
        stood_said = Reason("staircase.witnesses_stood_against", n=p.n,
                   said=tuple(w.description for w in b.verdict.contradicted_by), reason=b.verdict.reason)
    aside_said = None
    if aside:
        q, c = aside[-1]
        aside_said = (
            Reason("staircase.witnesses_set_aside", n=q.n, rep=c.rep, schedule=c.verdict.contradicted_by[0].schedule,
                   said=tuple(w.description for w in c.verdict.contradicted_by), overruled_by=c.verdict.overruled_by))
    sources = tuple(dict.fromkeys(w.source for _, c in seen for w in c.verdict.contradicted_by))
    return Finding(
        code="witness_contradicts",
        message=Reason("staircase.witness_contradicts", sources=sources, where=tuple((q.n, c.rep) for q, c in seen),
                   stood=stood_said, aside=aside_said),
        hint=Reason("staircase.witness_contradicts_hint"), requests=(),
    )


def client_finding(checks: Sequence[ClientCheck]) -> Finding | None:
    """The run is invalid when the pre-flight found the client itself the bottleneck at some N: its
    finish times there would be the client's as much as the server's."""
    message = client_bound_message(checks)
    return None if message is None else Finding(code="client_bound", message=message, hint=CLIENT_FIX, requests=())


def aggregate_error_fracs(points: Sequence[LevelAnalysis], checks: Sequence[ClientCheck]) -> dict[int, float]:
    """Per N with a pre-flight: how far the client's timing error (p99 stamp delay + skew) can move
    the aggregate, as a fraction of it: the error over the point's last finish."""
    by_n = {c.streams: c for c in checks}
    out = {}
    for p in points:
        check = by_n.get(p.n)
        if check is not None and p.finish_s and p.finish_s[-1] > 0:
            out[p.n] = check.chosen.error_ms / 1e3 / p.finish_s[-1]
    return out


def aggregate_finding(fracs: dict[int, float]) -> Finding | None:
    """A warning naming each N whose aggregate the client cannot resolve to FIGURE_FRAC."""
    loose = {n: f for n, f in sorted(fracs.items()) if f > FIGURE_FRAC}
    if not loose:
        return None
    return Finding(
        code="aggregate_client_bound",
        message=Reason("staircase.aggregate_client_bound", loose=tuple(loose.items()), figure_frac=FIGURE_FRAC,
                   client_error_frac=CLIENT_ERROR_FRAC),
        hint=CLIENT_FIX, requests=(),
    )
