"""Lanes on Ray actors (`--ray`): a batch's streams read from several machines, on the driver's clock.

When one machine cannot send and read hundreds of streams without its own lag showing, the lanes
go to Ray actors spread over the cluster's nodes (`scheduling_strategy="SPREAD"`), each with its
own event loop and connections, as `load.lanes` spreads them over processes on one machine. Ray
is the distributed engine; servecheck only places lanes on it. It is an optional extra
(`pip install 'servecheck[ray]'`); nothing imports it until `--ray` is given.

Clocks. A node's CLOCK_MONOTONIC has nothing to do with the driver's, so before every batch each
actor's offset is bounded by round trips (`load.clocks`: the fastest ones set the bound) and the
actor stamps on its own clock minus that offset: its records read on the run's clock to within
the offset's uncertainty. Two finishes read by two actors can then be off against each other by
both uncertainties together (`model.client.gap_uncertainty_ns`); the batch carries that figure
and the staircase classifier never splits groups at a gap the clocks cannot resolve.

Pre-flight. Each actor calibrates its share of the streams on its own node, against a stamp
server of its own there (`load.calibrate`); the check adds the clock uncertainty to the worst
node's stamp delay and skew.

`--ray auto` joins the cluster this machine belongs to (Ray's `address="auto"`), `--ray local`
starts a private one-machine cluster for this run (to try it out), and anything else is the
address of a cluster's head (`HOST:PORT`, or `ray://HOST:PORT` for Ray Client). servecheck must
be installed in every node's Python.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from servecheck.wire.base import RunClock, Target
from servecheck.errors import ServecheckError, UsageError
from servecheck.load.clocks import estimate_offset
from servecheck.load.driver import LoadDriver
from servecheck.load.lanes import READY_TIMEOUT_S, START_TIMEOUT_S, WorkerError, _Share
from servecheck.load.witness import NoiseMeter
from servecheck.model.client import Calibration, ClockOffset, gap_uncertainty_ns
from servecheck.model.records import BatchResult, ServerInfo

INSTALL_HINT = "install the extra: pip install 'servecheck[ray]' (or run without --ray)"
CONNECT_TIMEOUT_S = 120.0  # a local cluster takes ~6 s to start on 2 busy cores; joining one, less
CALIBRATE_TIMEOUT_S = 120.0
# The most actors an automatic --workers tries (each needs a CPU of the cluster, and the pre-flight
# stops at the first count that passes, or at the cluster's CPUs).
RAY_MAX_WORKERS = 64


def require_ray() -> Any:
    """The `ray` module, or a usage error that says how to install it (exit 2)."""
    try:
        import ray
    except ImportError:
        raise UsageError("--ray needs Ray, which is not installed in this Python", INSTALL_HINT) from None
    return ray


def check_address(address: str) -> str:
    """`--ray`'s value, or a usage error naming the forms it takes."""
    if address in ("auto", "local") or (":" in address and address.rsplit(":", 1)[1].isdigit()):
        return address
    raise UsageError(f"--ray {address!r} is not a cluster address",
                     "give auto (the cluster this machine is in), local (a private one here) or HOST:PORT of the head")


class _LaneActor:
    """One Ray actor's lanes: a `LoadDriver` on its node, stamping on its clock minus its offset."""

    def __init__(self, target: Target, info: ServerInfo, clock_offset_ns: int = 0) -> None:
        # `clock_offset_ns` moves this actor's clock by that much: a test's ground truth for the
        # offset estimate, on a cluster whose "nodes" share one machine's clock
        self.clock_offset_ns = clock_offset_ns
        self.target = target
        self.info = info
        self.driver: LoadDriver | None = None
        self._task: asyncio.Task[BatchResult] | None = None
        self._go: asyncio.Future[int] | None = None

    def _now(self) -> int:
        return time.perf_counter_ns() + self.clock_offset_ns

    def clock_ns(self) -> int:
        return self._now()

    async def up(self) -> str:
        import ray

        self.driver = LoadDriver(self.target, clock=RunClock(start_ns=0, wall_anchor_s=time.time(), source=self._now))
        await self.driver.__aenter__()
        self.driver.info = self.info
        self.driver.witnesses = False  # the driver samples the server's gauges; each actor meters its loop
        return str(ray.util.get_node_ip_address())

    async def prepare(self, share: _Share, start_ns: int) -> None:
        """Warm the share's connections, stamping from `start_ns` on this actor's clock (the run's
        start, mapped here); return once the gate is all that holds them."""
        assert self.driver is not None
        self.driver.clock = RunClock(start_ns=start_ns, wall_anchor_s=time.time(), source=self._now)
        self.driver.lateness.rebase(self.driver.clock.now_ns)  # the ticker's windows on the run's clock too
        loop = asyncio.get_running_loop()
        go: asyncio.Future[int] = loop.create_future()
        ready = asyncio.Event()
        noise = NoiseMeter(self.driver.clock.now_ns)
        driver = self.driver

        async def release_at() -> int:
            ready.set()
            at = await go
            noise.start()
            return at

        async def run() -> BatchResult:
            batch = await driver.run_timed_batch(share.reqs, share.in_flight, share.queue_wait_s, release_at)
            return replace(batch, noise=await noise.stop())

        self._go, self._task = go, asyncio.create_task(run())
        waiter = asyncio.create_task(ready.wait())
        done, _ = await asyncio.wait({self._task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if self._task in done and not waiter.done():
            waiter.cancel()
            self._task.result()  # the share failed before its gate: its error goes back to the driver

    async def go(self, release_ns: int) -> BatchResult:
        assert self._go is not None and self._task is not None
        self._go.set_result(release_ns)
        return await self._task

    async def calibrate(self, streams: int, gap_ms: float, events: int) -> Calibration:
        from servecheck.load.calibrate import calibrate

        return await calibrate(streams, gap_ms, events, 1)

    async def close(self) -> None:
        if self.driver is not None:
            await self.driver.__aexit__(None, None, None)


def _failure(exc: BaseException) -> WorkerError:
    cause = getattr(exc, "cause", None)
    if isinstance(cause, ServecheckError):
        return WorkerError(f"a Ray client actor failed: {cause.message}", cause.hint)
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return WorkerError(f"a Ray client actor failed: {first}", "run with --debug, or without --ray, to see more")


async def _bounded(what: str, awaitables: Sequence[Awaitable[Any]], timeout_s: float, hint: str) -> list[Any]:
    ray = require_ray()
    try:
        async with asyncio.timeout(timeout_s):
            return list(await asyncio.gather(*awaitables))
    except TimeoutError:
        raise WorkerError(f"the Ray client actors did not {what} within {timeout_s:.0f} s", hint) from None
    except ray.exceptions.RayError as exc:
        raise _failure(exc) from None


class RayPool:
    """A `WorkerPool` of Ray actors, created as a batch first needs them and kept for the run.
    `clock_offsets_ns`: for tests, how far each actor's clock is moved from the machine's."""

    local = False

    def __init__(self, address: str, *, clock_offsets_ns: Sequence[int] = ()) -> None:
        self.address = check_address(address)
        self.clock_offsets_ns = tuple(clock_offsets_ns)
        self.offsets: tuple[ClockOffset, ...] = ()  # the latest estimate, one per actor in use
        self._ray: Any = None
        self._owned = False  # this pool started the cluster (`local`), so it shuts it down
        self._clock: RunClock | None = None
        self._actors: list[Any] = []
        self._nodes: list[str] = []
        self._active: list[Any] = []
        self._pending: list[Any] = []

    def _connect(self) -> Any:
        if self._ray is not None:
            return self._ray
        ray = require_ray()
        if not ray.is_initialized():
            # Ray reports usage to its makers' server unless told not to: servecheck talks to no one
            # it was not pointed at (a user may still opt in by setting it to 1)
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
            quiet = {"log_to_driver": False, "include_dashboard": False, "configure_logging": False}
            try:
                if self.address == "local":
                    ray.init(**quiet)
                    self._owned = True
                else:
                    ray.init(address=self.address, **quiet)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise UsageError(f"could not reach the Ray cluster at {self.address!r}: {str(exc).splitlines()[0]}",
                                 "start one with `ray start --head`, give its address, or use --ray local") from None
        self._ray = ray
        return ray

    def capacity(self) -> int:
        """How many actors the cluster has CPUs for (each takes one)."""
        ray = self._connect()
        return max(1, int(ray.cluster_resources().get("CPU", 1)))

    async def start(self, target: Target, info: ServerInfo, workers: int, clock: RunClock) -> None:
        ray = self._connect()
        self._clock = clock
        if len(self._actors) >= workers:
            return
        actor_class = ray.remote(num_cpus=1, scheduling_strategy="SPREAD")(_LaneActor)
        worker_target = replace(target, api=info.dialect, model=info.model)
        fresh = []
        for k in range(len(self._actors), workers):
            moved = self.clock_offsets_ns[k] if k < len(self.clock_offsets_ns) else 0
            fresh.append(actor_class.remote(worker_target, info, moved))
        # an actor the cluster has no free CPU for waits forever: the bound says so
        nodes = await _bounded("start", [a.up.remote() for a in fresh], START_TIMEOUT_S + CONNECT_TIMEOUT_S,
                               f"the cluster needs a free CPU per client actor ({workers} asked for); "
                               "use fewer --workers")
        self._actors += fresh
        self._nodes += nodes

    async def _estimate(self, count: int) -> tuple[ClockOffset, ...]:
        """Every actor in use bounded against this process's clock, one after another (a round trip
        must not wait behind another actor's)."""
        found = []
        for k, actor in enumerate(self._actors[:count]):
            found.append(await estimate_offset(partial(_clock_of, actor), worker=k, node=self._nodes[k]))
        self.offsets = tuple(found)
        return self.offsets

    async def prepare(self, shares: Sequence[_Share]) -> int:
        assert self._clock is not None
        offsets = await self._estimate(len(shares))
        self._active = self._actors[: len(shares)]
        start = self._clock.start_ns
        await _bounded("warm their connections",
                       [a.prepare.remote(share, start + o.offset_ns)
                        for a, share, o in zip(self._active, shares, offsets)],
                       READY_TIMEOUT_S, "check that every node can reach the server's address")
        return gap_uncertainty_ns(offsets)

    def release(self, release_ns: int) -> None:
        self._pending = [a.go.remote(release_ns) for a in self._active]

    async def collect(self, limit_s: float) -> list[BatchResult]:
        pending, self._pending = self._pending, []
        return await _bounded("finish the batch", pending, limit_s, "run with a longer --timeout, or fewer streams")

    async def calibrate(self, streams: int, gap_ms: float, events: int, workers: int, target: Target,
                        info: ServerInfo, clock: RunClock) -> Calibration:
        """The pre-flight on `workers` actors, each its share of the streams on its own node."""
        await self.start(target, info, workers, clock)
        offsets = await self._estimate(workers)
        counts = [len(range(w, streams, workers)) for w in range(workers)]
        used = [(a, c) for a, c in zip(self._actors, counts) if c]
        parts: list[Calibration] = await _bounded("calibrate", [a.calibrate.remote(c, gap_ms, events) for a, c in used],
                                                  CALIBRATE_TIMEOUT_S, "run with --no-calibrate to skip the pre-flight")

        def worst(values: list[float | None]) -> float | None:
            known = [v for v in values if v is not None]
            return max(known) if known else None

        return Calibration(
            streams=streams,
            gap_ms=gap_ms,
            events=sum(p.events for p in parts),
            stamp_delay_p50_ms=max(p.stamp_delay_p50_ms for p in parts),
            stamp_delay_p99_ms=max(p.stamp_delay_p99_ms for p in parts),
            stamp_delay_max_ms=max(p.stamp_delay_max_ms for p in parts),
            dispatch_skew_ms=max(p.dispatch_skew_ms for p in parts),
            loop_lag_p99_ms=worst([p.loop_lag_p99_ms for p in parts]),
            loop_lag_max_ms=worst([p.loop_lag_max_ms for p in parts]),
            workers=workers,
            clock_uncertainty_ms=gap_uncertainty_ns(offsets[: len(used)]) / 1e6,
            clock_offsets=offsets,
        )

    async def stop(self) -> None:
        if self._ray is None:
            return
        ray = self._ray
        for actor in self._actors:
            try:
                await asyncio.wait_for(actor.close.remote(), 5.0)
            except (TimeoutError, ray.exceptions.RayError):
                pass
            ray.kill(actor)
        self._actors, self._nodes, self._active = [], [], []
        if self._owned:
            ray.shutdown()
            self._owned = False
        self._ray = None


def _clock_of(actor: Any) -> Awaitable[int]:
    """One read of an actor's monotonic clock (a Ray object ref, awaited)."""
    return actor.clock_ns.remote()
