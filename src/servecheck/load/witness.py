"""Witnesses beside the stopwatch: the server's own running/waiting gauges and the client's noise.

While a batch runs, `GaugeSampler` polls what the engine offers (llama.cpp `/metrics` with
`--metrics`, else its `/slots`; vLLM and SGLang `/metrics`) and `NoiseMeter` measures how busy
the client machine was. Both are read-only and best effort: a witness that cannot be read is
absent, never an error that fails the batch.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from servecheck.model.records import ClientNoise, GaugeSample, ServerGauges

# Five readings a second resolve a queue hand-over of requests that take a second or more, and
# cost the server one cheap GET each (llama.cpp answers it between two decode steps).
GAUGE_INTERVAL_S = 0.2
# The first reading waits a little after the release, so it never competes with the dispatch.
FIRST_READING_DELAY_S = 0.05
# A gauge read that takes longer than this is dropped: a witness must not hold a batch up.
GAUGE_READ_TIMEOUT_S = 1.0
# The event-loop lag probe: a timer this long, re-armed all batch long.
LAG_TICK_S = 0.01
# A tick this late is a stall worth placing in time (the analysis asks whether a finish was read
# at the end of one); the longest MAX_STALLS of a batch are kept.
STALL_MIN_MS = 50.0
MAX_STALLS = 64

# (running gauge, waiting gauge) per engine, as their /metrics name them.
METRIC_GAUGES: dict[str, tuple[str, str]] = {
    "llama.cpp": ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
    "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting"),
    "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs"),
}

Fetch = Callable[[str], Awaitable[tuple[int, bytes] | None]]


@dataclass(frozen=True, slots=True)
class GaugeSource:
    """Where a server's gauges are read: a path and how to read it."""

    engine: str
    path: str  # "/metrics" or "/slots"
    running: str | None = None  # metric names, for /metrics
    waiting: str | None = None

    @property
    def label(self) -> str:
        return f"{self.engine} {self.path}"

    def read(self, raw: bytes) -> tuple[int | None, int | None] | None:
        """(running, waiting) from one response body; None when it holds no reading."""
        text = raw.decode("utf-8", errors="replace")
        if self.path == "/slots":
            return read_slots(text)
        return read_metrics(text, self.running or "", self.waiting or "")


def metric_totals(text: str, names: set[str]) -> dict[str, float]:
    """Sum of the named samples over their labels, from Prometheus text."""
    totals: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in names:
                    totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    except ValueError:
        return {}
    return totals


def read_metrics(text: str, running: str, waiting: str) -> tuple[int | None, int | None] | None:
    """Running and waiting gauges from Prometheus text, summed over labels (vLLM labels by model)."""
    totals: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in (running, waiting):
                    totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    except (ValueError, TypeError, KeyError, IndexError):
        return None
    if running not in totals:
        return None
    return _count(totals.get(running)), _count(totals.get(waiting))


def read_slots(text: str) -> tuple[int | None, int | None] | None:
    """llama.cpp `/slots`: the slots processing now; it has no waiting count."""
    try:
        slots = json.loads(text)
    except ValueError:
        return None
    if not isinstance(slots, list) or not slots:
        return None
    return sum(1 for s in slots if isinstance(s, dict) and s.get("is_processing") is True), None


def _count(value: float | None) -> int | None:
    """A gauge as a request count, or None when it is no plausible count."""
    if value is None or value != value or value < 0 or value > 1_000_000:
        return None
    return round(value)


def metrics_source(engine: str | None, text: str) -> GaugeSource | None:
    """The gauge source a /metrics text offers, if it carries one of the known running gauges."""
    for name, (running, waiting) in METRIC_GAUGES.items():
        if running in text and read_metrics(text, running, waiting) is not None:
            return GaugeSource(name, "/metrics", running, waiting)
    return None


async def probe_source(engine: str | None, fetch: Fetch) -> tuple[GaugeSource | None, bool]:
    """Which witness this server offers (gauges in /metrics first, then llama.cpp's /slots), and
    whether the answer is final: False when a probe got no HTTP answer at all (a timeout on a server
    busy decoding), so that "no gauges" is only a guess worth asking again."""
    answered = True
    got = await fetch("/metrics")
    answered &= got is not None
    if got is not None and got[0] == 200:
        source = metrics_source(engine, got[1].decode("utf-8", errors="replace"))
        if source is not None:
            return source, True
    if engine in ("llama.cpp", "simulator", None):
        got = await fetch("/slots")
        answered &= got is not None
        if got is not None and got[0] == 200 and read_slots(got[1].decode("utf-8", errors="replace")) is not None:
            return GaugeSource(engine or "llama.cpp", "/slots"), True
    return None, answered


class GaugeSampler:
    """Polls one gauge source until stopped; `result()` is the batch's `ServerGauges`."""

    def __init__(self, source: GaugeSource, fetch: Fetch, now_ns: Callable[[], int],
                 interval_s: float = GAUGE_INTERVAL_S) -> None:
        self.source = source
        self.fetch = fetch
        self.now_ns = now_ns
        self.interval_s = interval_s
        self.samples: list[GaugeSample] = []
        self.failed = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> ServerGauges:
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        return ServerGauges(self.source.label, self.interval_s, tuple(self.samples), self.failed)

    async def _run(self) -> None:
        if await self._wait(FIRST_READING_DELAY_S):
            return
        while True:
            await self._read_once()
            if await self._wait(self.interval_s):
                return

    async def _wait(self, seconds: float) -> bool:
        """Sleep `seconds` or until stopped; True when stopped."""
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def _read_once(self) -> None:
        try:
            got = await asyncio.wait_for(self.fetch(self.source.path), GAUGE_READ_TIMEOUT_S)
        except (TimeoutError, OSError):
            got = None
        reading = self.source.read(got[1]) if got is not None and got[0] == 200 else None
        if reading is None:
            self.failed += 1
            return
        self.samples.append(GaugeSample(self.now_ns(), reading[0], reading[1]))


class NoiseMeter:
    """The client machine's load over one batch: CPU busy and steal from /proc/stat, the load
    average, and how late the event loop wakes for a short timer (the client's own lag)."""

    def __init__(self, now_ns: Callable[[], int] | None = None) -> None:
        self.now_ns = now_ns or time.perf_counter_ns
        self._lags: list[float] = []
        self._stalls: list[tuple[int, int]] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stat0: tuple[int, int, int] | None = None

    def start(self) -> None:
        self._stat0 = cpu_times()
        self._task = asyncio.create_task(self._tick())

    async def stop(self) -> ClientNoise:
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        return noise_from(self._stat0, cpu_times(), _loadavg(), self._lags, self._stalls)

    async def _tick(self) -> None:
        tick_ns = int(LAG_TICK_S * 1e9)
        while not self._stop.is_set():
            t0 = self.now_ns()
            await asyncio.sleep(LAG_TICK_S)
            woke = self.now_ns()
            lag_ns = max(0, woke - t0 - tick_ns)
            self._lags.append(lag_ns / 1e9)
            if lag_ns >= STALL_MIN_MS * 1e6:
                self._stalls.append((t0 + tick_ns, woke))


def cpu_times() -> tuple[int, int, int] | None:
    """(total, idle + iowait, steal) jiffies of all CPUs from /proc/stat; None where there is none."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    try:
        vals = [int(v) for v in fields[1:]]
    except ValueError:
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice, already inside user/nice]
    total = sum(vals[:8])
    return total, vals[3] + vals[4], vals[7]


def _loadavg() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def noise_from(
    before: tuple[int, int, int] | None,
    after: tuple[int, int, int] | None,
    load_1m: float | None,
    lags_s: list[float],
    stalls_ns: Sequence[tuple[int, int]] = (),
) -> ClientNoise:
    busy = steal = None
    if before is not None and after is not None and after[0] > before[0]:
        total = after[0] - before[0]
        busy = max(0.0, min(1.0, 1.0 - (after[1] - before[1]) / total))
        steal = max(0.0, min(1.0, (after[2] - before[2]) / total))
    lags = sorted(lags_s)
    p99 = lags[min(len(lags) - 1, int(0.99 * len(lags)))] * 1000 if lags else None
    return ClientNoise(
        cpus=os.cpu_count() or 1,
        load_avg_1m=load_1m,
        busy_frac=busy,
        steal_frac=steal,
        loop_lag_p99_ms=p99,
        loop_lag_max_ms=lags[-1] * 1000 if lags else None,
        stalls_ns=tuple(sorted(sorted(stalls_ns, key=lambda s: s[0] - s[1])[:MAX_STALLS])),
    )
