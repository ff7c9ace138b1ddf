"""What the client itself adds to the times it measures: a calibration (one stamp-server batch read
by this client on this machine) and a pre-flight check (the calibrations tried before one
concurrency of a run, against the bound the command sets for that concurrency).

A calibration's timing error is its p99 stamp delay (how late an event is stamped after the server
wrote it) plus its dispatch skew (how far apart the streams released together were sent): the
most the client moves a first-token or a finish time. A command sets its own bound, as a fraction
of what it measures (the staircase: of the single-request time its verdicts are judged against);
a check whose best calibration exceeds it is client-bound, and so is every figure measured at
that concurrency.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from servecheck.model.bodies import common

NS_PER_MS = 1_000_000

# The ITL rule of `servecheck calibrate`: the client is the bottleneck for token gaps when its p99
# stamp delay exceeds this fraction of the gap between one stream's events (a 32 ms gap tolerates
# 1.6 ms). Measured here (the load-at-scale issue): p99 0.3-0.5 ms with one stream, 1.1-1.2 ms with
# 16, 8-39 ms at 64 and 256.
STAMP_DELAY_FRAC = 0.05
# The pre-flight rule of the measuring commands: the client's timing error at N streams may be at
# most this fraction of the time the command measures (the dispatch-skew rule's 5%).
CLIENT_ERROR_FRAC = 0.05
# The rule for a figure reported as the server's (a throughput, a TTFT): the client's timing error
# may be at most this fraction of it (the load-at-scale issue's target). A verdict judged by the
# 5% rule above can stand while a figure beside it is client-bound; the figure then says so.
FIGURE_FRAC = 0.02

FIX = "spread the streams over more client processes (--workers), use fewer streams, or a quieter machine"


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """One remote client's monotonic clock against this process's (a Ray actor on another node):
    its clock reads `offset_ns` ahead of ours, to within +-`uncertainty_ns`. The bounds come from
    `samples` round trips; the fastest (`rtt_min_ns`) bound it tightest."""

    worker: int
    node: str  # the node's address, as Ray names it
    offset_ns: int
    uncertainty_ns: int
    rtt_min_ns: int
    samples: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gap_uncertainty_ns(offsets: Sequence[ClockOffset]) -> int:
    """The most two finish times of one batch, mapped from two clients' clocks onto ours, can be
    off against each other: the two largest uncertainties added (0 with one clock)."""
    if len(offsets) < 2:
        return 0
    largest = sorted((o.uncertainty_ns for o in offsets), reverse=True)
    return largest[0] + largest[1]


@dataclass(frozen=True, slots=True)
class Calibration:
    """What this client added to token times, with `streams` streams `gap_ms` apart per stream."""

    streams: int
    gap_ms: float  # the stamp server's gap between one stream's events
    events: int  # events stamped, all streams
    stamp_delay_p50_ms: float
    stamp_delay_p99_ms: float
    stamp_delay_max_ms: float
    dispatch_skew_ms: float  # spread of the send times of the streams released together
    loop_lag_p99_ms: float | None
    loop_lag_max_ms: float | None
    workers: int = 1  # client processes that read the streams
    # Lanes on Ray actors (`--ray`): how far apart two actors' clocks may be mapped onto ours
    # (`gap_uncertainty_ns`), which moves a release or a finish time as much as skew does; None on
    # one machine, where every process reads the same monotonic clock.
    clock_uncertainty_ms: float | None = None
    clock_offsets: tuple[ClockOffset, ...] = ()

    @property
    def stamp_delay_frac(self) -> float:
        """p99 stamp delay as a fraction of the gap between events."""
        return self.stamp_delay_p99_ms / self.gap_ms

    @property
    def error_ms(self) -> float:
        """The most this client moves a first-token or finish time: p99 stamp delay + dispatch skew
        (+ the clock uncertainty between Ray actors)."""
        return self.stamp_delay_p99_ms + self.dispatch_skew_ms + (self.clock_uncertainty_ms or 0.0)

    def client_bound(self, limit: float = STAMP_DELAY_FRAC) -> str | None:
        """Why a run at this concurrency and token rate would measure the client's token gaps, or None."""
        if self.stamp_delay_frac <= limit:
            return None
        return (
            f"the client is the bottleneck at {self.streams} streams: its p99 stamp delay is "
            f"{self.stamp_delay_p99_ms:.2f} ms, {self.stamp_delay_frac:.0%} of the {self.gap_ms:g} ms between "
            f"tokens (at most {limit:.0%}); {FIX}"
        )

    def to_dict(self) -> dict[str, Any]:
        doc = {**asdict(self), "stamp_delay_frac": self.stamp_delay_frac, "error_ms": self.error_ms,
               "client_bound": self.client_bound()}
        if self.clock_uncertainty_ms is None:  # one machine: nothing to say of clocks
            del doc["clock_uncertainty_ms"], doc["clock_offsets"]
        return doc

    def body(self) -> common.Calibration:
        """The calibration as a result records it; no clock fields on one machine."""
        remote = self.clock_uncertainty_ms is not None
        return common.Calibration(
            streams=self.streams, gap_ms=self.gap_ms, events=self.events, workers=self.workers,
            stamp_delay_p50_ms=self.stamp_delay_p50_ms, stamp_delay_p99_ms=self.stamp_delay_p99_ms,
            stamp_delay_max_ms=self.stamp_delay_max_ms, stamp_delay_frac=self.stamp_delay_frac,
            dispatch_skew_ms=self.dispatch_skew_ms, error_ms=self.error_ms, loop_lag_p99_ms=self.loop_lag_p99_ms,
            loop_lag_max_ms=self.loop_lag_max_ms, client_bound=self.client_bound(),
            clock_uncertainty_ms=self.clock_uncertainty_ms,
            clock_offsets=tuple(common.ClockOffset(**asdict(o)) for o in self.clock_offsets) if remote else None,
        )


@dataclass(frozen=True, slots=True)
class ClientCheck:
    """The pre-flight before `streams` streams of a run: the calibrations tried (fewest workers first;
    a count whose first attempt failed is tried twice) against `tolerance_ms`, the command's bound
    on the client's timing error."""

    streams: int
    tolerance_ms: float
    basis: str  # what the bound is a fraction of, in words: "5% of the 212 ms single request"
    tried: tuple[Calibration, ...]
    # the tighter error the worker search aimed at (FIGURE_FRAC of the same reference); None: the bound
    aim_ms: float | None = None

    @property
    def chosen(self) -> Calibration:
        """The first calibration within the aim (the fewest workers that reach it), else the first within
        the bound, else the least error."""
        for limit in (self.aim_ms, self.tolerance_ms):
            passing = [c for c in self.tried if limit is not None and c.error_ms <= limit]
            if passing:
                return passing[0]
        return min(self.tried, key=lambda c: c.error_ms)

    @property
    def workers(self) -> int:
        return self.chosen.workers

    @property
    def client_bound(self) -> bool:
        return self.chosen.error_ms > self.tolerance_ms

    def reason(self) -> str | None:
        """Why every figure at this concurrency would measure the client, or None."""
        if not self.client_bound:
            return None
        c = self.chosen
        if c.clock_uncertainty_ms is None:
            who = f"client {'process' if c.workers == 1 else 'processes'}"
            clocks = ""
        else:
            who = f"Ray {'actor' if c.workers == 1 else 'actors'}"
            clocks = f" + clock uncertainty {c.clock_uncertainty_ms:.1f} ms"
        return (
            f"the client is the bottleneck at N={self.streams}: with {c.workers} {who} its timing error "
            f"is {c.error_ms:.1f} ms (p99 stamp delay {c.stamp_delay_p99_ms:.1f} ms + dispatch skew "
            f"{c.dispatch_skew_ms:.1f} ms{clocks}), above the {self.tolerance_ms:.1f} ms allowed ({self.basis})"
        )

    def to_dict(self) -> dict[str, Any]:
        c = self.chosen
        return {
            "streams": self.streams,
            "tolerance_ms": self.tolerance_ms,
            **({} if self.aim_ms is None else {"aim_ms": self.aim_ms}),
            "basis": self.basis,
            "workers": c.workers,
            "error_ms": c.error_ms,
            "stamp_delay_p99_ms": c.stamp_delay_p99_ms,
            "dispatch_skew_ms": c.dispatch_skew_ms,
            "client_bound": self.client_bound,
            "reason": self.reason(),
            "tried": [t.to_dict() for t in self.tried],
        }

    def body(self) -> common.ClientCheck:
        c = self.chosen
        return common.ClientCheck(
            streams=self.streams, tolerance_ms=self.tolerance_ms, aim_ms=self.aim_ms, basis=self.basis,
            workers=c.workers, error_ms=c.error_ms, stamp_delay_p99_ms=c.stamp_delay_p99_ms,
            dispatch_skew_ms=c.dispatch_skew_ms, client_bound=self.client_bound, reason=self.reason(),
            tried=tuple(t.body() for t in self.tried),
        )


def client_bound_message(checks: Sequence[ClientCheck]) -> str | None:
    """Why a run is invalid when its pre-flight found the client the bottleneck at some concurrency:
    the first such check's reason, and every concurrency where it was; None where none was."""
    bound = [c for c in checks if c.client_bound]
    if not bound:
        return None
    where = ", ".join(f"N={c.streams}" for c in bound)
    return f"{bound[0].reason()}" + (f"; client-bound at {where}" if len(bound) > 1 else "")


@dataclass(frozen=True, slots=True)
class ClientLateness:
    """When the client's own event loop could not have read a stream on time, over one stretch of a run.

    A ticker re-armed every `tick_ns` on the run's loop proves the loop ran each time it fires. A tick
    that fires more than `floor_ns` late leaves a window, from when it was armed to when it fired, in
    which the loop may have been blocked (a descheduled process, a busy loop, a late reader): data that
    reached the socket inside it was read, and stamped, as late as its end. Outside every window the
    client read within `resolution_ns` (a tick plus the floor) of the data's arrival. `from_ns`..`to_ns`
    is the span the ticker covered (run-clock ns); nothing outside it is vouched for. A scripted driver,
    whose clock is virtual, is never late: resolution 0 and no windows.
    """

    tick_ns: int
    floor_ns: int
    from_ns: int
    to_ns: int
    late_ns: tuple[tuple[int, int], ...] = ()  # [armed, fired] of every late tick in the span, in time order
    dropped: int = 0  # windows the meter could not keep (its memory bound): then nothing in the span is vouched for

    @property
    def resolution_ns(self) -> int:
        return self.tick_ns + self.floor_ns

    @property
    def late_s(self) -> float:
        return sum(b - a for a, b in self.late_ns) / 1e9

    def body(self) -> common.ClientLateness:
        return common.ClientLateness(
            resolution_ms=self.resolution_ns / NS_PER_MS, covered_s=(self.to_ns - self.from_ns) / 1e9,
            late_windows=len(self.late_ns), late_s=self.late_s,
            longest_late_ms=max((b - a for a, b in self.late_ns), default=0) / NS_PER_MS, dropped=self.dropped)
