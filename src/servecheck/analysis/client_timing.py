"""Whether the client could time a moment it judges, pure: one answer for every command.

The stopwatch is only as good as the client that reads it. The driver's ticker (`load.lateness`)
records each window in which the client's event loop may have been blocked (`ClientLateness`): data
that arrived inside one was read, and stamped, at its end. A command asks here, for a stretch of time
and the resolution its rule needs (the smallest lateness that could change what it reads), whether
the client can vouch for it; a moment it cannot vouch for is never evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servecheck.model.client import ClientLateness
from servecheck.model.reason import Reason
from servecheck.model.records import RequestRecord

# After a late window ends the loop drains what queued up in it: reads this soon after its end
# carry data that arrived inside it. Two ticks: the ticker fires in the same pass as the backlog's
# first reads, and a catch-up longer than that leaves a late tick of its own (see chains()).
DRAIN_TICKS = 2


@dataclass(frozen=True, slots=True)
class Vouch:
    """The client's word on one stretch: vouched for, or why not (a code and the numbers behind it)."""

    ok: bool
    code: str  # "on_time" | "no_meter" | "coarse" | "late" | "uncovered" | "dropped"
    late_ms: float = 0.0  # the longest late window that overlapped the stretch
    resolution_ms: float | None = None  # the meter's
    needed_ms: float | None = None  # the resolution the rule asked for

    def words(self) -> Reason:
        """The reason, for a problem list (`model.words.run`'s one sentence per code)."""
        return Reason("run.vouch", code=self.code, late_ms=self.late_ms, resolution_ms=self.resolution_ms,
                           needed_ms=self.needed_ms)



def chains(lateness: ClientLateness) -> list[tuple[int, int]]:
    """The late windows joined where the loop never fired on time between them: after a long stall the
    loop catches up (parses what piled up), its next ticks are late too, and a read in that catch-up was
    held since the first window began. A window that starts within a tick of the last one's end (the
    ticker re-arms as soon as it fires) continues its chain."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(lateness.late_ns):
        if out and a <= out[-1][1] + lateness.tick_ns:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _meter_problem(lateness: ClientLateness | None, lo_ns: int, hi_ns: int, needed_ns: float) -> Vouch | None:
    """Why the meter cannot answer for [lo_ns, hi_ns] at `needed_ns` (missing, full, coarse, not covering
    it), or None when it can."""
    if lateness is None:
        return Vouch(False, "no_meter", needed_ms=needed_ns / 1e6)
    res_ms, need_ms = lateness.resolution_ns / 1e6, needed_ns / 1e6
    if lateness.dropped:
        return Vouch(False, "dropped", resolution_ms=res_ms, needed_ms=need_ms)
    if lateness.resolution_ns > needed_ns:
        return Vouch(False, "coarse", resolution_ms=res_ms, needed_ms=need_ms)
    if lateness.tick_ns and (lo_ns < lateness.from_ns or hi_ns > lateness.to_ns):
        return Vouch(False, "uncovered", resolution_ms=res_ms, needed_ms=need_ms)
    return None


def _worst(lateness: ClientLateness, worst_ns: int, needed_ns: float) -> Vouch:
    res_ms, need_ms = lateness.resolution_ns / 1e6, needed_ns / 1e6
    if worst_ns:
        return Vouch(False, "late", late_ms=worst_ns / 1e6, resolution_ms=res_ms, needed_ms=need_ms)
    return Vouch(True, "on_time", resolution_ms=res_ms, needed_ms=need_ms)


def vouch(lateness: ClientLateness | None, lo_ns: int, hi_ns: int, needed_ns: float) -> Vouch:
    """Could the client time [lo_ns, hi_ns] to within `needed_ns`? Every late window longer than that
    which overlaps the stretch (its drain included) says no, and so does a meter coarser than it."""
    if (problem := _meter_problem(lateness, lo_ns, hi_ns, needed_ns)) is not None or lateness is None:
        return problem or Vouch(False, "no_meter", needed_ms=needed_ns / 1e6)
    drain = DRAIN_TICKS * lateness.tick_ns
    worst = max((b - a for a, b in chains(lateness) if a < hi_ns and b + drain > lo_ns and b - a > needed_ns),
                default=0)
    return _worst(lateness, worst, needed_ns)


def vouch_reads(lateness: ClientLateness | None, reads_ns: Sequence[int], needed_ns: float) -> Vouch:
    """Could the client have made each of `reads_ns` within `needed_ns` of its data's arrival? A figure
    timed from a few reads (a send, a first token, an end) is as good as its worst read: the longest late
    window that held one of them says no, and so does a meter that cannot tell (missing, coarse, full)."""
    span = (lateness.from_ns, lateness.to_ns) if lateness is not None else (0, 0)
    lo, hi = (min(reads_ns), max(reads_ns)) if reads_ns else span  # no reads: nothing to be uncovered
    if (problem := _meter_problem(lateness, lo, hi, needed_ns)) is not None or lateness is None:
        return problem or Vouch(False, "no_meter", needed_ms=needed_ns / 1e6)
    return _worst(lateness, longest_holding(lateness, reads_ns, needed_ns), needed_ns)


def longest_holding(lateness: ClientLateness, reads_ns: Sequence[int], needed_ns: float) -> int:
    """The longest chain of late windows, longer than `needed_ns`, that held one of `reads_ns` (the read
    fell inside it or in its drain), in ns; 0 when none did."""
    drain = DRAIN_TICKS * lateness.tick_ns
    return max((b - a for a, b in chains(lateness) if b - a > needed_ns and any(a < t <= b + drain for t in reads_ns)),
               default=0)


def request_reads(record: RequestRecord) -> tuple[int, ...]:
    """The stamps a request's figures are timed from: its send (a loop blocked right after it holds the
    request back), its first token and its end."""
    return tuple(t for t in (record.send_ns, record.first_token_ns, record.end_ns) if t is not None)


def vouch_requests(lateness: ClientLateness | None, records: Sequence[RequestRecord], needed_ns: float) -> Vouch:
    """`vouch_reads` over every stamp the requests' figures are timed from."""
    return vouch_reads(lateness, [t for r in records for t in request_reads(r)], needed_ns)


def late_in(lateness: ClientLateness, lo_ns: int, hi_ns: int, longer_than_ns: float) -> tuple[int, int]:
    """(longest, summed) time of the late windows longer than `longer_than_ns` inside [lo_ns, hi_ns], each
    clipped to it: how much of a stretch the client's own stalls could have shaped."""
    clipped_ns = [min(b, hi_ns) - max(a, lo_ns) for a, b in chains(lateness)
                  if a < hi_ns and b > lo_ns and b - a > longer_than_ns]
    return max(clipped_ns, default=0), sum(clipped_ns)


def delayed_since(lateness: ClientLateness, t_ns: int, longer_than_ns: float) -> int | None:
    """Where a read at `t_ns` may have been held since: the start of the earliest late window longer than
    `longer_than_ns` that the read falls in (or drains), or None when it was read on time."""
    drain = DRAIN_TICKS * lateness.tick_ns
    starts = [a for a, b in chains(lateness) if b - a > longer_than_ns and a < t_ns <= b + drain]
    return min(starts) if starts else None


def late_reads(lateness: ClientLateness, reads_ns: Sequence[int], needed_ns: float) -> frozenset[int]:
    """Indices of the reads the client may have made more than `needed_ns` after their data arrived: a
    read inside a late window that long, or in the drain after one (reads in time order)."""
    drain = DRAIN_TICKS * lateness.tick_ns
    windows = [(a, b + drain) for a, b in chains(lateness) if b - a > needed_ns]
    out: set[int] = set()
    k = 0
    for i, t in enumerate(reads_ns):
        while k < len(windows) and windows[k][1] < t:
            k += 1
        if any(a < t <= b for a, b in windows[k:k + 4]):  # windows can overlap by the drain, never more
            out.add(i)
    return frozenset(out)


def merged(records: Sequence[ClientLateness | None]) -> ClientLateness | None:
    """Several clients' records of one stretch as one: every window counts (a stall in any reader is a
    stall of the batch), the coarsest meter and the narrowest common span; None if any is missing."""
    if not records or any(r is None for r in records):
        return None
    got = [r for r in records if r is not None]
    if len(got) == 1:
        return got[0]
    windows = tuple(sorted({w for r in got for w in r.late_ns}))
    worst = max(got, key=lambda r: r.resolution_ns)
    return ClientLateness(worst.tick_ns, worst.floor_ns, max(r.from_ns for r in got), min(r.to_ns for r in got),
                          windows, sum(r.dropped for r in got))
