"""The scheduler's state and the steps every policy shares.

`SchedulerCore` holds the whole state, the policies' own included (the batch's active set and step,
the pipeline's two stages), because the shared steps read it: dropping cancelled requests and
listing the jobs in flight look at every stage. It also holds the step law (`_heat`, `_prefill_ns`,
`_decode_ns`), the catch-up rule (`_start_at`), admission, beginning and completing a step, and the
token emission with its counters and log lines. The policies (batch.py, pipeline.py) are plain
functions over it; `Scheduler` (loop.py) adds the event loop and the request-facing side.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Callable

from servecheck.sim.config import SimConfig
from servecheck.sim.scheduler.cache import PrefixCache
from servecheck.sim.scheduler.jobs import Job, JobDone, SchedulerStats, TokenEvent, _Step

# A wake-up later than this behind the timeline is not caught up: the gap is lost time. Long
# enough to absorb scheduling jitter on a loaded 2-core machine, short enough that a process
# paused for seconds does not come back and burst a backlog of "overdue" tokens.
MAX_CATCHUP_NS = 100_000_000

LogFn = Callable[[str], None]
Clock = Callable[[], int]


class SchedulerCore:
    def __init__(self, config: SimConfig, *, log: LogFn, clock: Clock = time.perf_counter_ns) -> None:
        self.config = config
        self._log = log
        self._clock = clock
        self.start_ns = clock()
        self.cache = PrefixCache(config.prefix_cache)
        self._waiting: deque[Job] = deque()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._next_task_id = 0
        self._slots_busy: set[int] = set()
        # serial / slots / batched
        self._active: list[Job] = []
        self._step: _Step | None = None
        self._cursor_ns: int | None = None
        # pipelined
        self._prefilling: _Step | None = None
        self._ready: deque[Job] = deque()
        self._decoding: _Step | None = None
        # counters, for tests, /slots and /metrics
        self.completed = 0
        self.peak_decoding = 0
        self.stats = SchedulerStats()
        self._spec_rng = random.Random(config.spec_seed)
        self._prefill_free_ns = 0  # isolated prefill: when its own track is next free

    def _look_up(self, job: Job) -> None:
        """The prefix cache's hit for `job`, and what lying counters claim instead (lying_cache)."""
        job.cache_n = self.cache.lookup(job.prompt_tokens, allowed=job.cache_prompt)
        if self.config.lying_cache:
            job.claimed_cache_n = self.cache.would_hit(job.prompt_tokens, allowed=job.cache_prompt)

    # -------------------------------------------------------------- step law
    def _heat(self, t_ns: int) -> float:
        return 1.0 + self.config.heat_per_s * max(0, t_ns - self.start_ns) / 1e9

    def _start_at(self, earliest_ns: int, now: int) -> int:
        return max(earliest_ns, now - MAX_CATCHUP_NS)

    def _prefill_ns(self, jobs: list[Job], start_ns: int) -> int:
        tokens = sum(j.prompt_n for j in jobs)
        return round(tokens * self.config.prompt_token_s * self._heat(start_ns) * 1e9)

    def _decode_ns(self, jobs: list[Job], start_ns: int) -> int:
        c = self.config
        context = sum(len(j.prompt_tokens) + j.produced for j in jobs) if c.context_token_s else 0
        draft = c.spec_draft_token_s * c.spec_draft * len(jobs) if c.speculating else 0.0
        return round((c.token_s + c.per_seq_s * len(jobs) + c.context_token_s * context + draft)
                     * self._heat(start_ns) * 1e9)

    # ----------------------------------------------------------------- shared
    def _admit(self, room: int, *, by_ns: int) -> list[Job]:
        """Take up to `room` queued requests, FIFO, that had arrived by `by_ns`."""
        admitted: list[Job] = []
        while self._waiting and len(admitted) < room and self._waiting[0].arrival_ns <= by_ns:
            job = self._waiting[0]
            if not job.cancelled and self._must_wait(job, admitted):
                break  # FIFO: the requests behind it wait too
            self._waiting.popleft()
            if job.cancelled:
                continue
            job.slot = self._free_slot()
            self._slots_busy.add(job.slot)
            self._log(f"slot launch_slot_: id {job.slot:>2} | task {job.task_id} | processing task")
            admitted.append(job)
        return admitted

    def _must_wait(self, job: Job, admitted: list[Job]) -> bool:
        """A request served alone waits for the server to empty; while one runs, nothing joins it."""
        beside = [j for j in (*self._active, *admitted) if not j.cancelled]
        return bool(beside) and (job.alone or any(j.alone for j in beside))

    def _free_slot(self) -> int:
        i = 0
        while i in self._slots_busy:
            i += 1
        return i

    def _begin_prefill(self, jobs: list[Job], start: int) -> _Step:
        for j in jobs:
            self._look_up(j)
            j.prefill_start_ns = start
        return _Step("prefill", start, start + self._prefill_ns(jobs, start), jobs)

    def _begin_decode(self, jobs: list[Job], start: int) -> _Step:
        for j in jobs:
            if j.decode_start_ns is None:
                j.decode_start_ns = start
        self.peak_decoding = max(self.peak_decoding, len(jobs))
        return _Step("decode", start, start + self._decode_ns(jobs, start), jobs)

    def _complete(self, step: _Step) -> None:
        self._count(step)
        for job, take in step.chunk:
            if job.cancelled:
                self._release(job)
                continue
            job.prefilled += take
            if job.prefilled >= job.prompt_n:
                job.prefill_end_ns = step.end_ns
                self.cache.store(job.prompt_tokens)
        for job in step.jobs:
            if job.cancelled:
                self._release(job)
            elif step.kind == "prefill":
                job.prefill_end_ns = step.end_ns
                self.cache.store(job.prompt_tokens)
            elif job.decode_start_ns is not None and job.produced and self.config.speculating:
                self._emit_step(job, step.end_ns)
            else:
                self._emit_token(job, step.end_ns)

    def _emit_step(self, job: Job, t_ns: int) -> None:
        """The speculation law: a drafted step emits 1 + its accepted draft tokens together."""
        c = self.config
        p = (c.spec_mean - 1.0) / c.spec_draft
        accepted = sum(self._spec_rng.random() < p for _ in range(c.spec_draft))
        take = min(1 + accepted, job.target_tokens - job.produced)
        job.draft_n += c.spec_draft
        job.draft_accepted += take - 1
        self.stats.tokens_predicted += take - 1  # _count counted one per sequence
        for _ in range(take):
            self._emit_token(job, t_ns)

    def _count(self, step: _Step) -> None:
        live = [j for j in step.jobs if not j.cancelled]
        seconds = (step.end_ns - step.start_ns) / 1e9
        if step.kind == "wait":
            return
        if step.kind == "mixed":
            self.stats.prompt_tokens += sum(t for j, t in step.chunk if not j.cancelled)
            self.stats.prompt_s += step.prefill_ns / 1e9
            seconds -= step.prefill_ns / 1e9
            if not step.jobs:
                return
        if step.kind == "prefill":
            self.stats.prompt_tokens += sum(j.prompt_n for j in live)
            self.stats.prompt_s += seconds
        else:
            self.stats.tokens_predicted += len(live)
            self.stats.predicted_s += seconds
            self.stats.n_decode += 1
            self.stats.n_busy_slots += len(live)

    def _emit_token(self, job: Job, t_ns: int) -> None:
        job.token_ns.append(t_ns)
        job.events.put_nowait(TokenEvent(job.produced - 1, t_ns))
        if job.produced >= job.target_tokens:
            job.end_ns = t_ns
            self.completed += 1
            self._release(job)
            self._log_timing(job)
            job.events.put_nowait(JobDone(t_ns))

    def _release(self, job: Job) -> None:
        self._slots_busy.discard(job.slot)
        if job in self._active:
            self._active.remove(job)

    def _drop_cancelled(self) -> None:
        for job in [j for j in self._active if j.cancelled]:
            self._release(job)
        if any(j.cancelled for j in self._waiting):
            self._waiting = deque(j for j in self._waiting if not j.cancelled)
        if any(j.cancelled for j in self._ready):
            for job in [j for j in self._ready if j.cancelled]:
                self._release(job)
            self._ready = deque(j for j in self._ready if not j.cancelled)

    def _all_jobs(self) -> list[Job]:
        jobs = list(self._waiting) + list(self._active) + list(self._ready)
        for step in (self._step, self._prefilling, self._decoding):
            if step is not None:
                jobs.extend(step.jobs)
        return list({id(j): j for j in jobs}.values())

    def _log_timing(self, job: Job) -> None:
        t = job.timings()
        self._log(
            f"slot print_timing: id {job.slot:>2} | task {job.task_id} | "
            f"prompt eval time = {t.prompt_ms:10.2f} ms / {t.prompt_n:5d} tokens, "
            f"eval time = {t.predicted_ms:10.2f} ms / {t.predicted_n:5d} tokens "
            f"({t.predicted_per_second:8.2f} tokens per second)"
        )
        self._log(
            f"slot      release: id {job.slot:>2} | task {job.task_id} | stop processing: "
            f"n_tokens = {len(job.prompt_tokens) + job.produced}, truncated = 0"
        )
