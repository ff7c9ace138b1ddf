"""The simulator's scheduler: one asyncio task that decides when every token is produced.

It keeps an ideal timeline in perf_counter nanoseconds and sleeps until each scheduled event
(never spins). Back-to-back steps are chained on the timeline, not on when the loop happened to
wake, so a late wake-up on a loaded machine does not slow the simulated server down; a stall longer
than MAX_CATCHUP_NS is lost time, as it would be on a real machine.

Modes (see SimConfig):
  serial / slots=K / batched   up to capacity (1, K, unlimited) requests admitted, the rest queue
                               FIFO; admitted requests decode together, one token each per step of
                               (token_s + per_seq_s x decoding + context_token_s x their context
                               tokens) x heat. The prefill law: by default new prompts are
                               prefilled in a step of their own that stalls decoding (blocking);
                               with prefill_chunk K a step carries at most K prompt tokens beside
                               the running streams' next tokens (chunked, as llama.cpp's n_batch);
                               with prefill_isolated prompts are prefilled on a track of their own
                               and decoding never waits (disaggregated).
                               A request carrying a field of serialize_on is
                               admitted only into an empty server, and nothing joins
                               it until it is done (mlx-lm and its seed).
  pipelined                    two stages that overlap: one request prefills while another
                               decodes; decode never batches (one sequence at a time).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from servecheck.sim.config import SimConfig
from servecheck.sim.text import common_prefix_len

# A wake-up later than this behind the timeline is not caught up: the gap is lost time. Long
# enough to absorb scheduling jitter on a loaded 2-core machine, short enough that a process
# paused for seconds does not come back and burst a backlog of "overdue" tokens.
MAX_CATCHUP_NS = 100_000_000
# Previous prompts the prefix cache remembers (llama.cpp keeps one per slot plus a RAM cache).
PREFIX_CACHE_ENTRIES = 64

LogFn = Callable[[str], None]
Clock = Callable[[], int]


@dataclass(frozen=True, slots=True)
class TokenEvent:
    index: int  # 0-based position of the generated token
    t_ns: int  # scheduled production time


@dataclass(frozen=True, slots=True)
class JobDone:
    t_ns: int


@dataclass(frozen=True, slots=True)
class JobAborted:
    reason: str


JobEvent = TokenEvent | JobDone | JobAborted


@dataclass(frozen=True, slots=True)
class JobTimings:
    """The server's own account of one request, in llama.cpp's terms."""

    cache_n: int
    prompt_n: int
    prompt_ms: float
    predicted_n: int
    predicted_ms: float
    queue_ms: float  # arrival to prefill start
    total_ms: float  # arrival to the last token
    draft_n: int = 0  # draft tokens tested (speculation law only)
    draft_n_accepted: int = 0

    @property
    def predicted_per_second(self) -> float:
        """The per-request rate a server self-reports: tokens over its own decode time only."""
        return self.predicted_n / (self.predicted_ms / 1e3) if self.predicted_ms > 0 else 0.0

    @property
    def prompt_per_second(self) -> float:
        return self.prompt_n / (self.prompt_ms / 1e3) if self.prompt_ms > 0 else 0.0


@dataclass(eq=False)
class Job:
    """One request inside the server. The HTTP handler reads `events`; the scheduler writes them."""

    task_id: int
    prompt_tokens: tuple[int, ...]
    target_tokens: int  # what the server will generate (may be below max_tokens: EOS ceiling)
    max_tokens: int
    cache_prompt: bool
    arrival_ns: int
    events: asyncio.Queue[JobEvent] = field(default_factory=asyncio.Queue)
    slot: int = -1
    cache_n: int = 0
    prefill_start_ns: int | None = None
    prefill_end_ns: int | None = None
    decode_start_ns: int | None = None
    token_ns: list[int] = field(default_factory=list)
    end_ns: int | None = None
    cancelled: bool = False
    draft_n: int = 0
    draft_accepted: int = 0
    prefilled: int = 0  # prompt tokens prefilled so far (chunked prefill)
    claimed_cache_n: int | None = None  # what the server reports as cached when it lies (lying_cache)
    alone: bool = False  # carries a field of SimConfig.serialize_on: served with nothing beside it

    @property
    def reported_cache_n(self) -> int:
        """The cached prompt tokens the server reports: the truth, unless its counters lie."""
        return self.cache_n if self.claimed_cache_n is None else self.claimed_cache_n

    @property
    def prompt_n(self) -> int:
        return len(self.prompt_tokens) - self.cache_n

    @property
    def produced(self) -> int:
        return len(self.token_ns)

    @property
    def finished(self) -> bool:
        return self.end_ns is not None

    @property
    def stopped_early(self) -> bool:
        return self.target_tokens < self.max_tokens

    def timings(self) -> JobTimings:
        ms = 1e-6
        prefill_start = self.prefill_start_ns if self.prefill_start_ns is not None else self.arrival_ns
        prefill_end = self.prefill_end_ns if self.prefill_end_ns is not None else prefill_start
        last = self.token_ns[-1] if self.token_ns else prefill_end
        decode_start = self.decode_start_ns if self.decode_start_ns is not None else last
        return JobTimings(
            cache_n=self.reported_cache_n,
            prompt_n=len(self.prompt_tokens) - self.reported_cache_n,
            prompt_ms=(prefill_end - prefill_start) * ms,
            predicted_n=self.produced,
            predicted_ms=(last - decode_start) * ms,
            queue_ms=(prefill_start - self.arrival_ns) * ms,
            total_ms=(last - self.arrival_ns) * ms,
            draft_n=self.draft_n,
            draft_n_accepted=self.draft_accepted,
        )


@dataclass
class SchedulerStats:
    """Lifetime counters, in the terms of llama.cpp's /metrics."""

    prompt_tokens: int = 0
    prompt_s: float = 0.0
    tokens_predicted: int = 0
    predicted_s: float = 0.0
    n_decode: int = 0
    n_busy_slots: int = 0  # summed over decode steps

    @property
    def busy_slots_per_decode(self) -> float:
        return self.n_busy_slots / self.n_decode if self.n_decode else 0.0


@dataclass
class _Step:
    kind: str  # "prefill" | "decode" | "mixed" (decode + a prefill chunk) | "wait" (isolated prefill elsewhere)
    start_ns: int
    end_ns: int
    jobs: list[Job]  # prefill: the jobs prefilled; decode / mixed: the jobs decoding
    chunk: list[tuple[Job, int]] = field(default_factory=list)  # mixed: prompt tokens of each job in this step
    prefill_ns: int = 0  # mixed: the chunk's share of the step


class PrefixCache:
    """Remembers prompts that finished prefill; a new prompt reuses its longest shared prefix."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._prompts: deque[tuple[int, ...]] = deque(maxlen=PREFIX_CACHE_ENTRIES)

    def lookup(self, tokens: tuple[int, ...], *, allowed: bool) -> int:
        """Cached tokens for this prompt. As llama.cpp, at least the last prompt token is re-evaluated."""
        return self.would_hit(tokens, allowed=allowed) if self.mode == "on" else 0

    def would_hit(self, tokens: tuple[int, ...], *, allowed: bool) -> int:
        """The tokens a working cache would serve this prompt, whatever the mode (what lying counters claim)."""
        if not allowed or not tokens:
            return 0
        best = max((common_prefix_len(tokens, p) for p in self._prompts), default=0)
        return min(best, len(tokens) - 1)

    def store(self, tokens: tuple[int, ...]) -> None:
        # every prompt is remembered, so lying counters can claim the hits a working cache would have had;
        # only mode "on" serves any (`lookup`)
        if tokens:
            self._prompts.append(tokens)


class Scheduler:
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

    def _look_up(self, job: Job) -> None:
        """The prefix cache's hit for `job`, and what lying counters claim instead (lying_cache)."""
        job.cache_n = self.cache.lookup(job.prompt_tokens, allowed=job.cache_prompt)
        if self.config.lying_cache:
            job.claimed_cache_n = self.cache.would_hit(job.prompt_tokens, allowed=job.cache_prompt)

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
            return self._advance_pipeline(now)
        return self._advance_batch(now)

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

    # ---------------------------------------------------- serial/slots/batched
    def _advance_batch(self, now: int) -> int | None:
        while True:
            if self._step is not None:
                if self._step.end_ns > now:
                    return self._step.end_ns
                self._complete(self._step)
                self._cursor_ns = self._step.end_ns
                self._step = None
            self._drop_cancelled()
            room = self.config.capacity - len(self._active)
            if self._cursor_ns is not None:  # busy: the next step follows the last one on the timeline
                start = self._start_at(self._cursor_ns, now)
                admitted = self._admit(room, by_ns=start)
            else:  # idle until now: start when the last admitted request arrived
                admitted = self._admit(room, by_ns=now)
                start = self._start_at(max((j.arrival_ns for j in admitted), default=now), now)
            self._active.extend(admitted)
            if self.config.prefill_isolated:
                self._prefill_elsewhere(admitted)
            if not self._active:
                if self._cursor_ns is not None and self._waiting:
                    self._cursor_ns = None  # requests arrived after the timeline went idle
                    continue
                self._cursor_ns = None
                return None
            self._step = self._next_batch_step(start)

    def _next_batch_step(self, start: int) -> _Step:
        if self.config.prefill_isolated:
            return self._isolated_step(start)
        pending = [j for j in self._active if j.prefill_end_ns is None]
        if pending and self.config.prefill_chunk:
            return self._begin_mixed([j for j in self._active if j.prefill_end_ns is not None], pending, start)
        if pending:
            return self._begin_prefill(pending, start)
        return self._begin_decode(list(self._active), start)

    def _begin_mixed(self, decoding: list[Job], pending: list[Job], start: int) -> _Step:
        """Chunked prefill: the running streams' next tokens plus at most prefill_chunk prompt tokens, FIFO."""
        room = self.config.prefill_chunk
        chunk: list[tuple[Job, int]] = []
        for job in pending:
            if room <= 0:
                break
            if job.prefill_start_ns is None:
                self._look_up(job)
                job.prefill_start_ns = start
            take = min(room, job.prompt_n - job.prefilled)
            chunk.append((job, take))
            room -= take
        prefill = round(sum(t for _, t in chunk) * self.config.prompt_token_s * self._heat(start) * 1e9)
        if decoding:
            step = self._begin_decode(decoding, start)
            return _Step("mixed", start, step.end_ns + prefill, decoding, chunk, prefill)
        return _Step("mixed", start, start + prefill, [], chunk, prefill)

    def _prefill_elsewhere(self, jobs: list[Job]) -> None:
        """Isolated prefill: each admitted prompt is prefilled in turn on a track of its own."""
        for job in jobs:
            self._look_up(job)
            begin = max(job.arrival_ns, self._prefill_free_ns)
            job.prefill_start_ns = begin
            job.prefill_end_ns = begin + self._prefill_ns([job], begin)
            self._prefill_free_ns = job.prefill_end_ns
            self.cache.store(job.prompt_tokens)
            self.stats.prompt_tokens += job.prompt_n
            self.stats.prompt_s += (job.prefill_end_ns - begin) / 1e9

    def _isolated_step(self, start: int) -> _Step:
        ready = [j for j in self._active if (j.prefill_end_ns or 0) <= start]
        if ready:
            return self._begin_decode(ready, start)
        wake = min(j.prefill_end_ns or start for j in self._active)
        return _Step("wait", start, max(wake, start + 1), [])

    # -------------------------------------------------------------- pipelined
    def _advance_pipeline(self, now: int) -> int | None:
        """Process the two stages' events in time order, starting new work at the event that allowed it."""
        t = self._cursor_ns
        while True:
            self._pipeline_start(t, now)
            due = [s for s in (self._prefilling, self._decoding) if s is not None and s.end_ns <= now]
            if not due:
                break
            step = min(due, key=lambda s: s.end_ns)
            t = step.end_ns
            self._complete(step)
            if step is self._prefilling:
                self._prefilling = None
                self._ready.extend(j for j in step.jobs if not j.cancelled)
            else:
                self._decoding = None
                job = step.jobs[0]
                if not job.finished and not job.cancelled:
                    self._decoding = self._begin_decode([job], self._start_at(step.end_ns, now))
        deadlines = [s.end_ns for s in (self._prefilling, self._decoding) if s is not None]
        self._cursor_ns = t if deadlines or self._ready else None
        return min(deadlines) if deadlines else None

    def _pipeline_start(self, t: int | None, now: int) -> None:
        floor = t if t is not None else 0
        self._drop_cancelled()
        if self._decoding is None and self._ready:
            job = self._ready.popleft()
            self._decoding = self._begin_decode([job], self._start_at(max(floor, job.prefill_end_ns or 0), now))
        in_flight = len(self._ready) + (self._prefilling is not None) + (self._decoding is not None)
        if self._prefilling is None and in_flight < self.config.capacity:
            admitted = self._admit(1, by_ns=now)
            if admitted:
                job = admitted[0]
                self._prefilling = self._begin_prefill([job], self._start_at(max(floor, job.arrival_ns), now))

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
