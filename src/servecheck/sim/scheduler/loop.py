"""`Scheduler`: the event loop that sleeps until each scheduled event, the dispatch to the mode's
policy, and the side the HTTP handlers see (submit, cancel, the gauges and /slots).

Scheduler extends SchedulerCore (one base, nothing overridden) rather than holding one: the policies
take the core, so they need not import this module (no cycle), and every method moved out of the
old single class still reads and writes the one object the server holds.
"""

from __future__ import annotations

import asyncio

from servecheck.sim.scheduler import batch, pipeline
from servecheck.sim.scheduler.core import SchedulerCore
from servecheck.sim.scheduler.jobs import Job, JobAborted


class Scheduler(SchedulerCore):
    # ----------------------------------------------------------------- public
    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="servecheck-sim-scheduler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for job in self._all_jobs():
            if not job.finished:
                job.events.put_nowait(JobAborted("server shutting down"))

    def new_task_id(self) -> int:
        self._next_task_id += 1
        return self._next_task_id - 1

    def now_ns(self) -> int:
        return self._clock()

    def submit(self, job: Job) -> None:
        self._waiting.append(job)
        self._wake.set()

    def cancel(self, job: Job) -> None:
        job.cancelled = True
        self._wake.set()

    @property
    def processing(self) -> int:
        """Requests admitted and not finished."""
        return len(self._slots_busy)

    @property
    def deferred(self) -> int:
        """Requests waiting for a slot."""
        return sum(not j.cancelled for j in self._waiting)

    def slot_view(self) -> list[tuple[int, Job | None]]:
        """(slot id, job or None) for the slots in use plus idle ones, for /slots."""
        jobs = {j.slot: j for j in self._all_jobs() if j.slot >= 0 and not j.finished}
        shown = max(len(jobs), min(self.config.capacity, 64))
        ids = sorted(set(range(shown)) | set(jobs))
        return [(i, jobs.get(i)) for i in ids]

    # ------------------------------------------------------------ event loop
    async def _run(self) -> None:
        while True:
            self._wake.clear()
            deadline = self.advance(self._clock())
            if deadline is None:
                await self._wake.wait()
                continue
            delay_s = (deadline - self._clock()) / 1e9
            if delay_s <= 0:
                continue
            try:
                async with asyncio.timeout(delay_s):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def advance(self, now: int) -> int | None:
        """Complete everything due by `now`, start what can start; return the next deadline (None: idle).

        The event loop calls this on every wake-up; tests drive it directly with a fake clock.
        """
        if self.config.mode == "pipelined":
            return pipeline.advance(self, now)
        return batch.advance(self, now)
