"""Lanes over processes: a batch's in-flight streams spread over K worker processes, each with its
own event loop and connections, all released at one instant and all stamping on the run's clock.

One Python event loop reads every stream of a batch; at hundreds of streams it reads them late and
releases them over milliseconds, and its lag becomes the server's TTFT. `--workers K` gives each
worker process its share of the lanes. The barrier is a time: once every worker has warmed its
connections, the driver picks an instant a little ahead on the machine-wide monotonic clock
(`time.perf_counter_ns` is CLOCK_MONOTONIC on Linux and macOS) and every worker opens its own gate
then. Every record is stamped on that clock from the run's start, so the merged batch reads as if
one client had sent it: finish times, TTFTs and the dispatch skew (first send to last first send,
over all workers) mean what they mean for one process.

The server's gauges are sampled by the driver process (one sampler, whatever K); each worker
meters its own event loop, and the batch's noise is the worst of them: a stall in any worker
delays the streams it reads.

Where the shares run is a `WorkerPool`: `ProcessPool` here, or `load.ray_lanes.RayPool`, whose
actors on other machines stamp on their own clocks mapped onto the run's.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

from servecheck.wire.base import RunClock, Target
from servecheck.errors import ServecheckError, UsageError
from servecheck.analysis.client_timing import merged as merged_lateness
from servecheck.load.driver import GAUGE_PROBE_TIMEOUT_S, LoadDriver
from servecheck.lifeline import die_with_parent
from servecheck.load.witness import GaugeSampler, NoiseMeter
from servecheck.model.client import ClientLateness
from servecheck.model.records import BatchResult, ClientNoise, GenRequest, RequestRecord, ServerGauges, ServerInfo

# How far ahead of "every worker is ready" the shared release instant lies: enough for the go
# message to reach every worker and for each to wake from its sleep, on a loaded machine too.
RELEASE_LEAD_NS = 50_000_000
START_TIMEOUT_S = 60.0  # a worker process that is not up by then will not come up
READY_TIMEOUT_S = 60.0  # warming a lane's connection has the connect timeout; this bounds all of them


class WorkerError(ServecheckError):
    pass


@dataclass(frozen=True, slots=True)
class _Share:
    """One worker's part of a batch: its lanes' requests and how many of them run at once."""

    reqs: tuple[GenRequest, ...]
    in_flight: int
    queue_wait_s: float


def split_lanes(reqs: Sequence[GenRequest], lanes: int, workers: int) -> list[tuple[tuple[GenRequest, ...], int]]:
    """Lane k takes requests k, k + lanes, ... (each lane sends its next when its last ends); worker w
    takes lanes w, w + workers, ...: (its requests in order, its lane count), for the workers with a lane."""
    shares = []
    for w in range(workers):
        mine = range(w, lanes, workers)
        if mine:
            # in batch order, so the worker's own lanes take their first requests first, as one client's would
            positions = sorted(p for k in mine for p in range(k, len(reqs), lanes))
            shares.append((tuple(reqs[p] for p in positions), len(mine)))
    return shares


def merge_noise(noises: Sequence[ClientNoise | None]) -> ClientNoise | None:
    """The batch's client noise over every worker: the worst lag, every stall."""
    found = [n for n in noises if n is not None]
    if not found:
        return None

    def worst(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    stalls = sorted({s for n in found for s in n.stalls_ns})
    return replace(
        found[0],
        load_avg_1m=worst([n.load_avg_1m for n in found]),
        busy_frac=worst([n.busy_frac for n in found]),
        steal_frac=worst([n.steal_frac for n in found]),
        loop_lag_p99_ms=worst([n.loop_lag_p99_ms for n in found]),
        loop_lag_max_ms=worst([n.loop_lag_max_ms for n in found]),
        stalls_ns=tuple(stalls),
    )


class WorkerPool(Protocol):
    """Where a batch's shares run: worker processes on this machine (`ProcessPool`), or Ray actors
    across a cluster (`load.ray_lanes.RayPool`). A batch goes `prepare` (each share's connections
    warm, its gate shut), `release` (every gate opens at one run-clock instant), `collect`."""

    local: bool  # a batch one client reads runs in the driver's own process

    async def start(self, target: Target, info: ServerInfo, workers: int, clock: RunClock) -> None: ...

    async def prepare(self, shares: Sequence[_Share]) -> int:
        """Hand each share to a worker; return once all are ready, with the clock uncertainty (ns) the
        batch's finish times carry against each other (0: one machine's clock)."""
        ...

    def release(self, release_ns: int) -> None: ...

    async def collect(self, limit_s: float) -> list[BatchResult]: ...

    async def stop(self) -> None: ...


class LaneDriver:
    """A `Driver` whose batches run on K workers (`WorkerPool`: processes here, or Ray actors);
    everything else (detection, tokenizing, single requests, gauges) goes through one `LoadDriver`
    in this process. Use as `async with LaneDriver(target, workers=K) as driver:`."""

    def __init__(self, target: Target, workers: int, clock: RunClock | None = None,
                 pool: WorkerPool | None = None) -> None:
        if workers < 1:
            raise UsageError(f"--workers must be >= 1, got {workers}",
                             "give the number of client processes, e.g. --workers 2")
        self.target = target
        self.workers = workers
        self.clock = clock if clock is not None else RunClock.start()
        self.local = LoadDriver(target, clock=self.clock)
        self.pool: WorkerPool = pool if pool is not None else ProcessPool()
        # batch size (lanes) -> the client processes that read it; a size not named takes `default_workers`
        self.plan: dict[int, int] = {}
        self.default_workers = workers

    @property
    def info(self) -> ServerInfo | None:
        return self.local.info

    @property
    def witnesses(self) -> bool:
        """Whether batches sample the server's gauges and meter the client's loop (one setting for the
        batches this process runs and the ones its workers run)."""
        return self.local.witnesses

    @witnesses.setter
    def witnesses(self, on: bool) -> None:
        self.local.witnesses = on

    async def __aenter__(self) -> LaneDriver:
        await self.local.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.pool.stop()
        finally:
            await self.local.__aexit__(*exc)

    # ---- everything but batches: this process ---------------------------------------------

    async def detect(self) -> ServerInfo:
        return await self.local.detect()

    async def tokenize(self, text: str) -> int | None:
        return await self.local.tokenize(text)

    async def generate(self, req: GenRequest) -> RequestRecord:
        return await self.local.generate(req)

    async def get_json(self, path: str) -> Any | None:
        return await self.local.get_json(path)

    async def get_text(self, path: str) -> str | None:
        return await self.local.get_text(path)

    async def probe(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return await self.local.probe(method, path, body)

    async def client_lateness(self, lo_ns: int, hi_ns: int) -> ClientLateness | None:
        return await self.local.client_lateness(lo_ns, hi_ns)

    # ---- batches: the workers ---------------------------------------------------------------

    def use(self, lanes: int, workers: int) -> None:
        """Batches of `lanes` in flight run on `workers` processes (1: this one), at most `self.workers`."""
        if not 1 <= workers <= self.workers:
            raise UsageError(f"{workers} client processes asked for, {self.workers} allowed")
        self.plan[lanes] = workers

    def workers_for(self, lanes: int) -> int:
        return self.plan.get(lanes, self.default_workers)

    async def run_batch(self, reqs: Sequence[GenRequest], in_flight: int | None = None,
                        queue_wait_s: float = 0.0) -> BatchResult:
        if not reqs:
            raise UsageError("a batch needs at least one request")
        if in_flight is not None and in_flight < 1:
            raise UsageError(f"in_flight must be >= 1, got {in_flight}")
        lanes = len(reqs) if in_flight is None else min(in_flight, len(reqs))
        workers = self.workers_for(lanes)
        if workers == 1 and self.pool.local:  # one client: this process, as a run without --workers reads it
            return await self.local.run_batch(reqs, in_flight, queue_wait_s)
        info = self.local.info or await self.local.detect()
        await self.pool.start(self.target, info, workers, self.clock)
        shares = [_Share(share_reqs, share_lanes, queue_wait_s)
                  for share_reqs, share_lanes in split_lanes(reqs, lanes, workers)]
        uncertainty_ns = await self.pool.prepare(shares)
        source = await self.local.gauge_source() if self.witnesses else None
        sampler = None if source is None else GaugeSampler(
            source, lambda path: self.local.fetch_raw(path, GAUGE_PROBE_TIMEOUT_S), self.clock.now_ns
        )
        release_ns = self.clock.now_ns() + RELEASE_LEAD_NS
        self.pool.release(release_ns)
        if sampler is not None:
            sampler.start()
        limit_s = self.local.ceiling_s(max(r.max_tokens for r in reqs), queue_wait_s) * len(reqs) + READY_TIMEOUT_S
        try:
            results = await self.pool.collect(limit_s)
        finally:
            gauges = None if sampler is None else await sampler.stop()
        return merge_batch(reqs, lanes, release_ns, results, gauges, uncertainty_ns)


def merge_batch(reqs: Sequence[GenRequest], lanes: int, release_ns: int, results: Sequence[BatchResult],
                gauges: ServerGauges | None, uncertainty_ns: int = 0) -> BatchResult:
    """The workers' parts of one batch as one client's batch."""
    records = tuple(sorted((r for b in results for r in b.records), key=lambda r: r.index))
    # every lane's first request is released at the barrier: the skew is their send spread, all workers together
    firsts = {r.index for r in reqs[:lanes]}
    first_sends = [r.send_ns for r in records if r.index in firsts]
    skew = max(first_sends) - min(first_sends) if first_sends else 0
    return BatchResult(release_ns, lanes, records, skew, gauges, merge_noise([b.noise for b in results]),
                       uncertainty_ns, lateness=merged_lateness([b.lateness for b in results]))


class ProcessPool:
    """Worker processes on this machine, spawned as a batch first needs them and kept for the run;
    every one stamps with the machine-wide monotonic clock, so their times need no mapping."""

    local = True

    def __init__(self) -> None:
        self._procs: list[Any] = []
        self._conns: list[Connection] = []
        self._active: list[Connection] = []

    async def start(self, target: Target, info: ServerInfo, workers: int, clock: RunClock) -> None:
        """At least `workers` worker processes up: the ones already running and as many new ones as lack."""
        if len(self._procs) >= workers:
            return
        context = multiprocessing.get_context("spawn")  # no fork of a process with a running loop
        worker_target = replace(target, api=info.dialect, model=info.model)
        started = []
        for _ in range(workers - len(self._procs)):
            ours, theirs = context.Pipe()
            proc = context.Process(target=_worker_main, args=(theirs, worker_target, clock.start_ns, info), daemon=True)
            proc.start()
            theirs.close()
            self._procs.append(proc)
            self._conns.append(ours)
            started.append(ours)
        await asyncio.gather(*(_expect(c, "up", START_TIMEOUT_S) for c in started))

    async def prepare(self, shares: Sequence[_Share]) -> int:
        self._active = self._conns[: len(shares)]
        for conn, share in zip(self._active, shares):
            conn.send(("batch", share))
        await asyncio.gather(*(_expect(c, "ready", READY_TIMEOUT_S) for c in self._active))
        return 0

    def release(self, release_ns: int) -> None:
        for conn in self._active:
            conn.send(("go", release_ns))

    async def collect(self, limit_s: float) -> list[BatchResult]:
        parts = await asyncio.gather(*(_expect(c, "done", limit_s) for c in self._active))
        return [p[1] for p in parts]

    async def stop(self) -> None:
        for conn in self._conns:
            try:
                conn.send(("stop",))
            except (OSError, ValueError):
                pass
        deadline = time.monotonic() + 5.0
        for proc in self._procs:
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5.0)
        for conn in self._conns:
            conn.close()
        self._procs, self._conns, self._active = [], [], []


def _wake(ready: asyncio.Future[None]) -> None:
    """The reader callback: the connection has data (called again until the reader is removed)."""
    if not ready.done():
        ready.set_result(None)


async def _expect(conn: Connection, word: str, timeout_s: float) -> tuple[Any, ...]:
    """The worker's next message, which must be `word` (an error message names what went wrong)."""
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(conn.fileno(), _wake, ready)
    try:
        async with asyncio.timeout(timeout_s):
            await ready
    except TimeoutError:
        raise WorkerError(f"a client worker sent no '{word}' within {timeout_s:.0f} s",
                          "run with fewer --workers, or without them") from None
    finally:
        loop.remove_reader(conn.fileno())
    try:
        message = conn.recv()
    except EOFError:
        raise WorkerError("a client worker process exited", "run without --workers to see the error") from None
    if message[0] == "error":
        raise WorkerError(f"a client worker failed: {message[1]}", message[2])
    if message[0] != word:
        raise WorkerError(f"a client worker sent '{message[0]}' where '{word}' was due", "run without --workers")
    return tuple(message)


# ---------------------------------------------------------------- the worker process


def _worker_main(conn: Connection, target: Target, start_ns: int, info: ServerInfo) -> None:
    _die_with_parent()
    try:
        asyncio.run(_serve(conn, target, start_ns, info))
    except KeyboardInterrupt:
        pass  # the driver process owns Ctrl-C; it stops the workers
    finally:
        conn.close()


def _die_with_parent() -> None:
    """A worker in the middle of a batch reads nothing from the driver for minutes: it watches its
    parent instead, and exits the moment the driver process is gone (even by SIGKILL)."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid is None:
        return
    die_with_parent(parent.pid)
    sentinel = parent.sentinel  # readable once the parent has exited (every platform)

    def watch() -> None:
        wait([sentinel])
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


async def _serve(conn: Connection, target: Target, start_ns: int, info: ServerInfo) -> None:
    clock = RunClock(start_ns=start_ns, wall_anchor_s=time.time())
    async with LoadDriver(target, clock=clock) as driver:
        driver.info = info
        driver.witnesses = False  # the driver process samples the server's gauges; the loop is metered here
        conn.send(("up",))
        while True:
            message = await _recv(conn)
            if message[0] != "batch":
                return
            share: _Share = message[1]
            try:
                conn.send(("done", await _run_share(driver, conn, share)))
            except ServecheckError as exc:
                conn.send(("error", exc.message, exc.hint))
                return


async def _run_share(driver: LoadDriver, conn: Connection, share: _Share) -> BatchResult:
    noise = NoiseMeter(driver.clock.now_ns)

    async def release_at() -> int:
        conn.send(("ready",))
        go = await _recv(conn)
        noise.start()
        return int(go[1])

    batch = await driver.run_timed_batch(share.reqs, share.in_flight, share.queue_wait_s, release_at)
    return replace(batch, noise=await noise.stop())


async def _recv(conn: Connection) -> tuple[Any, ...]:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()
    loop.add_reader(conn.fileno(), _wake, ready)
    try:
        await ready
    finally:
        loop.remove_reader(conn.fileno())
    try:
        return tuple(conn.recv())
    except EOFError:
        return ("stop",)
