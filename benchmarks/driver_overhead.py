"""The load driver's own overhead, measured from outside the server it talks to.

(a) Stamp delay: a minimal llama.cpp-shaped server in its own process writes its
    `time.perf_counter_ns()` into every event just before writing it; the driver stamps the
    event on arrival with the same clock (CLOCK_MONOTONIC, shared by processes on one machine).
    The difference is what the driver adds to every token time: p50 and p99.
(b) Dispatch skew: the spread of send times of N requests released together from the barrier,
    against the simulator's fastest mode (`servecheck simulate --mode batched`, zero step time
    and prefill), at N = 1, 2, 4, ..., 256.

Run:  .venv/bin/python benchmarks/driver_overhead.py   (about a minute; writes
benchmarks/results/driver_overhead.json). Numbers depend on the machine and its load.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Iterator

from servecheck.wire.base import RunClock, Target
from servecheck.load.calibrate import STAMP_SERVER
from servecheck.load.driver import LoadDriver
from servecheck.model.records import GenRequest

RESULTS = Path(__file__).parent / "results" / "driver_overhead.json"
SKEW_NS = [2**k for k in range(9)]  # 1 .. 256
SKEW_REPS = 5
STAMP_CONCURRENCY = (1, 16)
STAMP_TOKENS = 100  # events per request; every event's content is its write time
STAMP_GAP_MS = 2.0  # between events, so that each event is its own read

# The stamp server is servecheck's own (`servecheck calibrate` uses it): llama.cpp-shaped, every
# event's content the server's perf_counter_ns at the moment of writing.


@contextmanager
def server_process(argv: list[str]) -> Iterator[str]:
    """Start a server process and yield the URL it prints on its first line."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = (proc.stdout.readline() if proc.stdout else "").strip()
        if not url.startswith("http"):
            raise RuntimeError(f"server did not print its URL: {url!r}")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def requests(n: int, tokens: int) -> list[GenRequest]:
    return [GenRequest(index=i, prompt=f"{i:03d} bench", nonce=f"{i:03d}", max_tokens=tokens) for i in range(n)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


async def stamp_delays(url: str, concurrency: int) -> list[float]:
    """Microseconds from the server's write to the driver's stamp, for every event."""
    clock = RunClock.start()
    delays: list[float] = []
    async with LoadDriver(Target(url=url, api="llamacpp"), clock=clock) as driver:
        await driver.detect()
        batch = await driver.run_batch(requests(concurrency, STAMP_TOKENS))
    for rec in batch.records:
        written = [int(w) for w in rec.text.split()]
        if not rec.ok or len(written) != len(rec.token_ns):
            raise RuntimeError(f"request {rec.index}: {rec.error or 'events and stamps do not pair up'}")
        delays += [(clock.start_ns + t - w) / 1e3 for t, w in zip(rec.token_ns, written)]
    return delays


async def skews(url: str) -> dict[int, list[float]]:
    """Dispatch skew in microseconds per N, SKEW_REPS batches each."""
    out: dict[int, list[float]] = {}
    async with LoadDriver(Target(url=url, api="llamacpp")) as driver:
        await driver.detect()
        for n in SKEW_NS:
            out[n] = []
            for _ in range(SKEW_REPS):
                batch = await driver.run_batch(requests(n, 2))
                if not all(r.ok for r in batch.records):
                    raise RuntimeError(f"N={n}: {[r.error for r in batch.records if not r.ok][:1]}")
                out[n].append(batch.dispatch_skew_ns / 1e3)
    return out


def main() -> int:
    started = time.perf_counter()
    stamp: dict[int, dict[str, float]] = {}
    with server_process([sys.executable, "-c", STAMP_SERVER, str(STAMP_GAP_MS)]) as url:
        for c in STAMP_CONCURRENCY:
            d = asyncio.run(stamp_delays(url, c))
            stamp[c] = {"events": len(d), "p50_us": percentile(d, 50), "p99_us": percentile(d, 99), "max_us": max(d)}
    sim = [sys.executable, "-m", "servecheck", "simulate", "--mode", "batched", "--port", "0",
           "--token-ms", "0.001", "--per-seq-ms", "0", "--prompt-token-ms", "0"]
    with server_process(sim) as url:
        skew = asyncio.run(skews(url))

    print("(a) delay from the server writing an event to the driver stamping it")
    print(f"{'streams':>8} {'events':>7} {'p50 us':>9} {'p99 us':>9} {'max us':>9}")
    for c, s in stamp.items():
        print(f"{c:>8} {s['events']:>7} {s['p50_us']:>9.0f} {s['p99_us']:>9.0f} {s['max_us']:>9.0f}")
    print(f"\n(b) dispatch skew of N requests released together (median and max of {SKEW_REPS} batches)")
    print(f"{'N':>5} {'median us':>10} {'max us':>9}")
    for n, vals in skew.items():
        print(f"{n:>5} {statistics.median(vals):>10.0f} {max(vals):>9.0f}")

    doc = {
        "benchmark": "driver_overhead",
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
                    "loadavg_1m": os.getloadavg()[0]},
        "stamp_delay": {"tokens_per_request": STAMP_TOKENS, "gap_ms": STAMP_GAP_MS,
                        "by_concurrency": {str(c): s for c, s in stamp.items()}},
        "dispatch_skew_us": {str(n): {"median": statistics.median(v), "max": max(v), "reps": v}
                             for n, v in skew.items()},
        "elapsed_s": time.perf_counter() - started,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwritten to {RESULTS} in {doc['elapsed_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
