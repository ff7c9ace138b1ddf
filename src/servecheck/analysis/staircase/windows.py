"""The generation windows, the stopwatch's second reading, pure: each streamed request's first token to
its completion on the client's clock, and the schedule their overlaps show (`read_windows`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servecheck.analysis.client_timing import longest_holding
from servecheck.model.bodies.staircase import Verdict
from servecheck.model.client import ClientLateness
from servecheck.model.reason import Reason
from servecheck.model.records import NS_PER_S, RequestRecord

# --- generation windows ------------------------------------------------------------------
# A streamed request's first token and its completion bound the window in which the server
# generated it. A queue's windows do not overlap (the next request's first token comes after a
# prefill that starts when the one before it finished); a batch's all overlap, whatever the
# machine's speed did in between. The client can only delay a stamp, never advance one: a stall
# piles tokens up and stamps them at its end, which shortens windows and can make two touch, but
# never makes a queue's windows overlap or a batch's come apart. Two windows overlap when they
# share more than WINDOW_OVERLAP_TOL x T1 (two sockets read in one wake-up are stamped in either
# order, microseconds apart); a window shorter than WINDOW_MIN_FRAC of the batch's median window
# had its tokens read in one burst and shows nothing.
WINDOW_OVERLAP_TOL = 0.05
WINDOW_MIN_FRAC = 0.5
WINDOW_MIN_EVENTS = 3


@dataclass(frozen=True, slots=True)
class WindowReading:
    """What the requests' generation windows (first token -> completion, the client's own stamps)
    show: the most windows that were open at one instant, and the schedule that implies."""

    schedule: Verdict  # cluster, staircase, partial, or inconclusive when the windows fit none
    open_max: int  # the most windows that shared one instant (beyond the overlap tolerance)
    description: Reason


def generation_windows(records: Sequence[RequestRecord]) -> list[tuple[int, int]] | None:
    """Each finished request's (first token, completion) on the run clock, in start order; None when
    any request streamed too few events to have a window (a non-streaming dialect, one burst)."""
    out = []
    for r in records:
        if not r.ok:
            continue
        if r.first_token_ns is None or r.end_ns is None or len(r.token_ns) < WINDOW_MIN_EVENTS:
            return None
        out.append((r.first_token_ns, r.end_ns))
    return sorted(out)


def _open_max(windows: Sequence[tuple[int, int]], tol_ns: int) -> int:
    """The most windows sharing one instant, each trimmed by half the tolerance at both ends."""
    half = tol_ns // 2
    trimmed = [(a + half, b - half) for a, b in windows if b - a > tol_ns]
    return max((sum(1 for a2, b2 in trimmed if a2 <= a < b2) for a, _ in trimmed), default=0)


def _fifo_slots(windows: Sequence[tuple[int, int]], k: int, tol_ns: int) -> bool:
    """K slots taken in turn: window i (in start order) opens after window i - k has closed."""
    return all(windows[i][0] >= windows[i - k][1] - tol_ns for i in range(k, len(windows)))


def read_windows(records: Sequence[RequestRecord], n: int, single_s: float | None,
                 lateness: ClientLateness | None = None) -> WindowReading | None:
    """The schedule the generation windows show, or None when they cannot show one (too few
    windows, degenerate ones, no single-request time to size the tolerance, or a window's first or
    last token read late by more than the overlap tolerance: after a stall the loop reads the streams
    that piled up in any order, so one request's last token can be stamped after the next one's first,
    an overlap the client made; a late first token can hide one as well)."""
    windows = generation_windows(records)
    if windows is None or len(windows) != n or n < 2 or not single_s or single_s <= 0:
        return None
    stamps = [t for r in records for t in (r.first_token_ns, r.end_ns) if t is not None]
    if lateness is not None and longest_holding(lateness, stamps, WINDOW_OVERLAP_TOL * single_s * NS_PER_S):
        return None
    lengths = sorted(b - a for a, b in windows)
    typical = lengths[len(lengths) // 2]
    if typical <= 0 or lengths[0] < WINDOW_MIN_FRAC * typical:
        return None
    tol_ns = int(WINDOW_OVERLAP_TOL * single_s * NS_PER_S)
    k = _open_max(windows, tol_ns)
    if k == 1:
        return WindowReading("staircase", 1, Reason("staircase.windows_queue", n=n))
    if k == n:
        return WindowReading("cluster", n, Reason("staircase.windows_batch", n=n))
    if 1 < k < n and _fifo_slots(windows, k, tol_ns):
        return WindowReading("partial", k, Reason("staircase.windows_slots", slots=k))
    return WindowReading("inconclusive", k, Reason("staircase.windows_unslotted", open_max=k, n=n))
