"""What the server's own witnesses say about one batch, pure: its running/waiting gauges, and its
per-request timings (queue = client latency - prefill - decode).

A witness reads as a schedule (`cluster`, `staircase`, or `partial` of K slots) or as nothing;
the staircase analysis weighs it after the completion times: it may decide a batch the times leave
ambiguous (unless the stopwatch decided otherwise at another N or rep), and a witness that
contradicts a clean stopwatch verdict is a finding beside it, never a reason to withhold it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servecheck.analysis.rules import STAIRCASE_STEP_TOL
from servecheck.analysis.stats import median
from servecheck.model.bodies.staircase import Schedule, Witness, WitnessSource
from servecheck.model.reason import Reason
from servecheck.model.records import NS_PER_S, ClientNoise, RequestRecord, ServerGauges


# Fewer readings than this cannot show a batch's peak: at 5 Hz, a batch shorter than ~0.6 s.
MIN_GAUGE_SAMPLES = 3
# Server timings: a request that waited for k whole requests ahead of it queued k service times;
# each within STAIRCASE_STEP_TOL of one service time (the staircase's own step tolerance) counts as k.
# Services of one batch that differ by more than this are not equal requests: no reading.
SERVICE_SPREAD_TOL = 0.5
# The client machine counts as busy from this load per core, this much CPU stolen, or this much
# event-loop lag; the numbers are then said beside an inconclusive verdict.
BUSY_LOAD_PER_CPU = 0.75
BUSY_STEAL_FRAC = 0.05
BUSY_LOOP_LAG_MS = 5.0


@dataclass(frozen=True, slots=True)
class Reading:
    """One witness's reading of a batch's schedule."""

    source: WitnessSource
    schedule: Schedule
    slots: int  # concurrent requests the reading shows (1 for a staircase, N for a cluster)
    description: Reason  # what the witness saw (witness.gauges_* or witness.timings_*), its schedule last

    def agrees(self, verdict: str, slots: int | None) -> bool:
        return self.schedule == verdict and (verdict != "partial" or slots == self.slots)

    def record(self) -> Witness:
        return Witness(source=self.source, schedule=self.schedule, slots=self.slots, description=self.description)


def gauge_reading(gauges: ServerGauges | None, n: int, min_samples: int = MIN_GAUGE_SAMPLES) -> Reading | None:
    """The schedule the server's running/waiting gauges show, when they show one unambiguously.

    `min_samples` readings are needed to decide a batch whose times are ambiguous; one reading is
    enough to contradict what the times say (a server seen running one request with three waiting
    did not run four at once, however the four finishes arrived)."""
    if gauges is None or n < 2 or len(gauges.samples) < max(1, min_samples):
        return None
    running, waiting = gauges.peak_running, gauges.peak_waiting
    if running is None or running < 1 or running > n:
        return None  # idle all batch (missed it), or other clients' requests in the gauge
    where = Reason("witness.gauges_seen", source=gauges.source, running=running, waiting=waiting,
                        readings=len(gauges.samples))
    if running == n:
        # A batch needs one reading with all n running and none waiting. A request seen waiting at
        # another reading was being admitted (a scheduler takes new requests at a step boundary, and
        # requests released a few ms apart reach it one step apart). n running with some waiting at
        # every such reading is another client's requests in the gauge: no whole picture.
        if not any(s.running == n and not s.waiting for s in gauges.samples):
            return None
        return Reading("server_gauges", "cluster", n, (
            Reason("witness.gauges_cluster", seen=where, n=n, admitted=bool(waiting))))
    if waiting is not None and waiting < n - running:
        return None  # some requests were neither running nor waiting when read: no whole picture
    if running == 1:
        return Reading("server_gauges", "staircase", 1,
                       Reason("witness.gauges_staircase", seen=where))
    return Reading("server_gauges", "partial", running,
                   Reason("witness.gauges_partial", seen=where, slots=running))


def timing_reading(records: Sequence[RequestRecord], n: int) -> Reading | None:
    """The schedule the server's per-request timings show: how long each request queued, in units
    of one request's service time (prefill + decode), grouped into levels 0, 1, 2, ..."""
    if n < 2:
        return None
    done = sorted((r for r in records if r.ok and r.end_ns is not None), key=lambda r: r.end_ns or 0)
    services, queues = [], []
    for r in done:
        s = r.server
        if s is None or s.prompt_s is None or s.decode_s is None or r.latency_ns is None:
            return None
        services.append(s.prompt_s + s.decode_s)
        queues.append(r.latency_ns / NS_PER_S - services[-1])
    if len(done) != n or min(services) <= 0:
        return None
    service = median(services)
    if (max(services) - min(services)) / service > SERVICE_SPREAD_TOL:
        return None
    levels = [round(q / service) for q in queues]
    if any(lv < 0 or abs(q - lv * service) > STAIRCASE_STEP_TOL * service for q, lv in zip(queues, levels)):
        return None
    sizes = [levels.count(lv) for lv in range(max(levels) + 1)]
    where = Reason("witness.timings_seen", queued_s=tuple(queues), service_s=service)
    if sizes == [n]:
        return Reading("server_timings", "cluster", n,
                       Reason("witness.timings_cluster", seen=where))
    if sizes == [1] * n:
        return Reading("server_timings", "staircase", 1, Reason("witness.timings_staircase", seen=where))
    head = sizes[:-1]
    if head and all(s == head[0] for s in head) and 0 < sizes[-1] <= head[0]:
        return Reading("server_timings", "partial", head[0],
                       Reason("witness.timings_partial", seen=where, slots=head[0]))
    return None


def effective_concurrency(records: Sequence[RequestRecord], release_ns: int) -> float | None:
    """Little's law: the sum of request latencies over the batch's wall clock (release to last end).
    N requests running at once give about N; a queue of N gives about (N + 1) / 2."""
    ends = [r.end_ns for r in records if r.ok and r.end_ns is not None]
    lat = [r.latency_ns for r in records if r.ok and r.latency_ns is not None]
    if not ends or not lat or max(ends) <= release_ns:
        return None
    return sum(lat) / (max(ends) - release_ns)


def token_interval_cv(records: Sequence[RequestRecord]) -> float | None:
    """The spread of inter-token intervals during a batch: the median over requests of each
    request's coefficient of variation (stdev / mean) of the gaps between its token events."""
    cvs = []
    for r in records:
        gaps = [b - a for a, b in zip(r.token_ns, r.token_ns[1:])]
        if len(gaps) < 2:
            continue
        mean = sum(gaps) / len(gaps)
        if mean <= 0:
            continue
        var = sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1)
        cvs.append(var**0.5 / mean)
    return median(cvs) if cvs else None


def busy_words(noises: Sequence[ClientNoise | None]) -> Reason | None:
    """Why the client machine was busy (witness.busy: 'the machine was busy: load 1.9 on 2 cores, ...'),
    when any batch ran on a busy client."""
    seen = [x for x in noises if x is not None]
    if not seen:
        return None
    load = max((x.load_avg_1m for x in seen if x.load_avg_1m is not None), default=None)
    steal = max((x.steal_frac for x in seen if x.steal_frac is not None), default=None)
    lag = max((x.loop_lag_p99_ms for x in seen if x.loop_lag_p99_ms is not None), default=None)
    cpus = seen[0].cpus
    parts: list[Reason] = []
    if load is not None and load / cpus >= BUSY_LOAD_PER_CPU:
        parts.append(Reason("witness.busy_load", load=load, cpus=cpus))
    if steal is not None and steal >= BUSY_STEAL_FRAC:
        parts.append(Reason("witness.busy_steal", steal=steal))
    if lag is not None and lag >= BUSY_LOOP_LAG_MS:
        parts.append(Reason("witness.busy_loop_lag", lag_ms=lag))
    if not parts:
        return None
    return Reason("witness.busy", parts=tuple(parts))
