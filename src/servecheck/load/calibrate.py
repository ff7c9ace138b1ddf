"""Pre-flight: how faithful is this client, on this machine, now?

servecheck streams N requests from a loopback stamp server of its own (a child process, so that
the client's event loop does the work of one client and nothing else), every event carrying the
server's `perf_counter_ns` at the moment it was written. The same clock stamps the event on
arrival (CLOCK_MONOTONIC on Linux, machine-wide), so the difference is what the client adds to
every token time: its stamp delay. The same batch gives the dispatch skew of N requests released
together and the event loop's lag. When the stamp delay is a material part of the gap between
tokens, the client is the bottleneck and a run at that concurrency would measure the client.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

from servecheck.wire.base import RunClock, Target
from servecheck.errors import EngineError, UsageError
from servecheck.lifeline import pdeathsig_setup
from servecheck.load.driver import LoadDriver
from servecheck.load.lanes import LaneDriver
from servecheck.model.client import STAMP_DELAY_FRAC, Calibration
from servecheck.model.records import BatchResult, GenRequest

__all__ = ["STAMP_DELAY_FRAC", "Calibration", "calibrate", "check_design"]

MAX_STREAMS = 4096
# Events per stream: enough for a p99 over a few streams; the tally keeps 4000 characters of
# text and every stamp takes 20, so at most 150 fit.
DEFAULT_EVENTS = 100
MAX_EVENTS = 150
MIN_GAP_MS, MAX_GAP_MS = 0.1, 1000.0
STARTUP_TIMEOUT_S = 30.0

# A minimal llama.cpp-shaped server: /props, /health, and /completion streaming `n_predict` events
# `gap` ms apart (`gap_ms=G` in a request's prompt overrides it), each one's content the server's
# perf_counter_ns when it was written.
STAMP_SERVER = r"""
import asyncio, json, os, re, sys, time
from aiohttp import web

GAP_S = float(sys.argv[1]) / 1e3

async def props(_):
    return web.json_response({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 4096,
                              "build_info": "servecheck calibration stamp server"})

async def health(_):
    return web.json_response({"status": "ok"})

async def completion(request):
    body = await request.json()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    n = int(body["n_predict"])
    asked = re.search(r"gap_ms=([0-9.]+)", str(body.get("prompt", "")))
    gap_s = float(asked.group(1)) / 1e3 if asked else GAP_S
    next_s = time.perf_counter()
    for i in range(n):
        next_s += gap_s
        await asyncio.sleep(max(0.0, next_s - time.perf_counter()))
        event = json.dumps({"content": f"{time.perf_counter_ns()} ", "tokens": [i], "stop": False})
        await resp.write(f"data: {event}\n\n".encode())
    final = {"content": "", "stop": True, "stop_type": "limit", "tokens_predicted": n}
    await resp.write(f"data: {json.dumps(final)}\n\n".encode())
    return resp

async def orphaned():
    # the client that started this server was killed (SIGKILL leaves no one to stop it): exit too
    parent = os.getppid()
    while os.getppid() == parent:
        await asyncio.sleep(1.0)
    os._exit(0)

async def main():
    app = web.Application()
    app.router.add_get("/props", props)
    app.router.add_get("/health", health)
    app.router.add_post("/completion", completion)
    watch = asyncio.create_task(orphaned())
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    print(f"http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def check_design(streams: int, gap_ms: float, events: int) -> None:
    if not 1 <= streams <= MAX_STREAMS:
        raise UsageError(f"--streams {streams} is out of range", f"use 1 to {MAX_STREAMS}")
    if not MIN_GAP_MS <= gap_ms <= MAX_GAP_MS:
        raise UsageError(f"--gap-ms {gap_ms:g} is out of range",
                         f"use {MIN_GAP_MS:g} to {MAX_GAP_MS:g} ms, the time between one stream's tokens")
    if not 10 <= events <= MAX_EVENTS:
        raise UsageError(f"--events {events} is out of range", f"use 10 to {MAX_EVENTS} events per stream")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def stamp_delays_ms(batch: BatchResult, clock: RunClock) -> list[float]:
    """Per event, the client's stamp minus the server's write time, in ms; raises when they do not pair."""
    delays: list[float] = []
    for rec in batch.records:
        if not rec.ok:
            raise EngineError(f"the calibration stream {rec.index} failed: {rec.error}",
                              "run it again; --debug shows more")
        try:
            written = [int(w) for w in rec.text.split()]
        except ValueError:
            raise EngineError("the calibration server's events did not carry its clock", "run it again") from None
        if len(written) != len(rec.token_ns):
            raise EngineError(f"calibration stream {rec.index}: {len(rec.token_ns)} events, {len(written)} stamps",
                              "run it again with fewer --events")
        delays += [(clock.start_ns + t - w) / 1e6 for t, w in zip(rec.token_ns, written)]
    return delays


def calibration_from(batch: BatchResult, clock: RunClock, streams: int, gap_ms: float) -> Calibration:
    delays = stamp_delays_ms(batch, clock)
    if not delays:
        raise EngineError("the calibration streams carried no events", "run it again")
    noise = batch.noise
    return Calibration(
        streams=streams,
        gap_ms=gap_ms,
        events=len(delays),
        stamp_delay_p50_ms=percentile(delays, 50),
        stamp_delay_p99_ms=percentile(delays, 99),
        stamp_delay_max_ms=max(delays),
        dispatch_skew_ms=batch.dispatch_skew_ns / 1e6,
        loop_lag_p99_ms=None if noise is None else noise.loop_lag_p99_ms,
        loop_lag_max_ms=None if noise is None else noise.loop_lag_max_ms,
    )


@contextmanager
def stamp_server(gap_ms: float, startup_timeout_s: float = STARTUP_TIMEOUT_S) -> Iterator[str]:
    """Start the stamp server on 127.0.0.1 (a port the OS picks); yield its URL; stop it."""
    # It polls its parent pid as well (macOS); on Linux the kernel ends it at once.
    proc = subprocess.Popen([sys.executable, "-c", STAMP_SERVER, repr(gap_ms)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, process_group=0,
                            preexec_fn=pdeathsig_setup(signal.SIGKILL))  # noqa: PLW1509 - main thread only
    try:
        yield _read_url(proc, startup_timeout_s)
    finally:
        _stop(proc)


def _read_url(proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    line = b""
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            break
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if not ready:
            break
        chunk = os.read(proc.stdout.fileno(), 256)
        if not chunk:
            break
        line += chunk
    url = line.decode("ascii", errors="replace").strip()
    if not url.startswith("http://127.0.0.1:"):
        raise EngineError(f"the calibration stamp server did not start within {timeout_s:.0f} s",
                          "check that aiohttp imports in this Python; --debug shows more")
    return url


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=5)
        except (ProcessLookupError, PermissionError):
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)
    if proc.stdout is not None:
        proc.stdout.close()


async def calibrate(streams: int, gap_ms: float, events: int = DEFAULT_EVENTS, workers: int = 1,
                    url: str | None = None) -> Calibration:
    """Stream `streams` requests of `events` events, `gap_ms` apart, from the stamp server; measure.
    With `workers` > 1 the streams are read by that many client processes (`load.lanes`), as a run
    with `--workers` would read them. `url` is a stamp server already running (`stamp_server`);
    without it one is started for this calibration."""
    check_design(streams, gap_ms, events)
    if url is None:
        with stamp_server(gap_ms) as started:
            return await calibrate(streams, gap_ms, events, workers, started)
    reqs = [GenRequest(index=i, prompt=f"{i:04d} calibration gap_ms={gap_ms!r}", nonce=f"{i:04d}", max_tokens=events)
            for i in range(streams)]
    # Each stream's events take events x gap; a stalled client gets that much again before a timeout.
    timeout_s = 60.0 + 2 * events * gap_ms / 1e3
    clock = RunClock.start()
    target = Target(url=url, api="llamacpp", first_token_timeout_s=timeout_s, request_timeout_s=timeout_s)
    opened = LoadDriver(target, clock=clock) if workers == 1 else LaneDriver(target, workers=workers, clock=clock)
    async with opened as driver:
        await driver.detect()
        batch = await driver.run_batch(reqs)
    return replace(calibration_from(batch, clock, streams, gap_ms), workers=workers)
