"""The pipeline policy, mode pipelined: two stages that overlap, one request prefilling while another
decodes; decode never batches (one sequence at a time).

Plain functions over the scheduler's state (`SchedulerCore`); the loop calls `advance`.
"""

from __future__ import annotations

from servecheck.sim.scheduler.core import SchedulerCore


def advance(sched: SchedulerCore, now: int) -> int | None:
    """Process the two stages' events in time order, starting new work at the event that allowed it."""
    t = sched._cursor_ns
    while True:
        start_work(sched, t, now)
        due = [s for s in (sched._prefilling, sched._decoding) if s is not None and s.end_ns <= now]
        if not due:
            break
        step = min(due, key=lambda s: s.end_ns)
        t = step.end_ns
        sched._complete(step)
        if step is sched._prefilling:
            sched._prefilling = None
            sched._ready.extend(j for j in step.jobs if not j.cancelled)
        else:
            sched._decoding = None
            job = step.jobs[0]
            if not job.finished and not job.cancelled:
                sched._decoding = sched._begin_decode([job], sched._start_at(step.end_ns, now))
    deadlines = [s.end_ns for s in (sched._prefilling, sched._decoding) if s is not None]
    sched._cursor_ns = t if deadlines or sched._ready else None
    return min(deadlines) if deadlines else None


def start_work(sched: SchedulerCore, t: int | None, now: int) -> None:
    floor = t if t is not None else 0
    sched._drop_cancelled()
    if sched._decoding is None and sched._ready:
        job = sched._ready.popleft()
        sched._decoding = sched._begin_decode([job], sched._start_at(max(floor, job.prefill_end_ns or 0), now))
    in_flight = len(sched._ready) + (sched._prefilling is not None) + (sched._decoding is not None)
    if sched._prefilling is None and in_flight < sched.config.capacity:
        admitted = sched._admit(1, by_ns=now)
        if admitted:
            job = admitted[0]
            sched._prefilling = sched._begin_prefill([job], sched._start_at(max(floor, job.arrival_ns), now))
