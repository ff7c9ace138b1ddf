"""The batch policy, modes serial, slots=K and batched: up to capacity (1, K, unlimited) requests
admitted, the rest queue FIFO; the admitted decode together, one token each per step, beside the
prefill law (blocking, chunked by prefill_chunk, or isolated on a track of its own).

Plain functions over the scheduler's state (`SchedulerCore`); the loop calls `advance`.
"""

from __future__ import annotations

from servecheck.sim.scheduler.core import SchedulerCore
from servecheck.sim.scheduler.jobs import Job, _Step


def advance(sched: SchedulerCore, now: int) -> int | None:
    while True:
        if sched._step is not None:
            if sched._step.end_ns > now:
                return sched._step.end_ns
            sched._complete(sched._step)
            sched._cursor_ns = sched._step.end_ns
            sched._step = None
        sched._drop_cancelled()
        room = sched.config.capacity - len(sched._active)
        if sched._cursor_ns is not None:  # busy: the next step follows the last one on the timeline
            start = sched._start_at(sched._cursor_ns, now)
            admitted = sched._admit(room, by_ns=start)
        else:  # idle until now: start when the last admitted request arrived
            admitted = sched._admit(room, by_ns=now)
            start = sched._start_at(max((j.arrival_ns for j in admitted), default=now), now)
        sched._active.extend(admitted)
        if sched.config.prefill_isolated:
            prefill_elsewhere(sched, admitted)
        if not sched._active:
            if sched._cursor_ns is not None and sched._waiting:
                sched._cursor_ns = None  # requests arrived after the timeline went idle
                continue
            sched._cursor_ns = None
            return None
        sched._step = next_step(sched, start)


def next_step(sched: SchedulerCore, start: int) -> _Step:
    if sched.config.prefill_isolated:
        return isolated_step(sched, start)
    pending = [j for j in sched._active if j.prefill_end_ns is None]
    if pending and sched.config.prefill_chunk:
        return begin_mixed(sched, [j for j in sched._active if j.prefill_end_ns is not None], pending, start)
    if pending:
        return sched._begin_prefill(pending, start)
    return sched._begin_decode(list(sched._active), start)


def begin_mixed(sched: SchedulerCore, decoding: list[Job], pending: list[Job], start: int) -> _Step:
    """Chunked prefill: the running streams' next tokens plus at most prefill_chunk prompt tokens, FIFO."""
    room = sched.config.prefill_chunk
    chunk: list[tuple[Job, int]] = []
    for job in pending:
        if room <= 0:
            break
        if job.prefill_start_ns is None:
            sched._look_up(job)
            job.prefill_start_ns = start
        take = min(room, job.prompt_n - job.prefilled)
        chunk.append((job, take))
        room -= take
    prefill = round(sum(t for _, t in chunk) * sched.config.prompt_token_s * sched._heat(start) * 1e9)
    if decoding:
        step = sched._begin_decode(decoding, start)
        return _Step("mixed", start, step.end_ns + prefill, decoding, chunk, prefill)
    return _Step("mixed", start, start + prefill, [], chunk, prefill)


def prefill_elsewhere(sched: SchedulerCore, jobs: list[Job]) -> None:
    """Isolated prefill: each admitted prompt is prefilled in turn on a track of its own."""
    for job in jobs:
        sched._look_up(job)
        begin = max(job.arrival_ns, sched._prefill_free_ns)
        job.prefill_start_ns = begin
        job.prefill_end_ns = begin + sched._prefill_ns([job], begin)
        sched._prefill_free_ns = job.prefill_end_ns
        sched.cache.store(job.prompt_tokens)
        sched.stats.prompt_tokens += job.prompt_n
        sched.stats.prompt_s += (job.prefill_end_ns - begin) / 1e9


def isolated_step(sched: SchedulerCore, start: int) -> _Step:
    ready = [j for j in sched._active if (j.prefill_end_ns or 0) <= start]
    if ready:
        return sched._begin_decode(ready, start)
    wake = min(j.prefill_end_ns or start for j in sched._active)
    return _Step("wait", start, max(wake, start + 1), [])
