"""The witnesses beside the stopwatch: gauge parsing per engine, the sampler against a real socket,
the noise meter, and control calls that survive a server closing its connections."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from aiohttp import web

from servecheck.wire.base import Target
from servecheck.load import witness as W
from servecheck.load.driver import LoadDriver
from servecheck.model.records import GaugeSample, ServerGauges

VLLM_METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 3.0
"""
LLAMA_METRICS = """\
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
"""
SGLANG_METRICS = """\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 4
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 0
"""


@pytest.mark.parametrize(
    ("text", "engine", "reading"),
    [(VLLM_METRICS, "vllm", (1, 3)), (LLAMA_METRICS, "llama.cpp", (2, 2)), (SGLANG_METRICS, "sglang", (4, 0))],
)
def test_metrics_gauges_per_engine(text: str, engine: str, reading: tuple[int, int]) -> None:
    source = W.metrics_source(None, text)
    assert source is not None and source.engine == engine and source.path == "/metrics"
    assert source.read(text.encode()) == reading


@pytest.mark.parametrize(
    "text",
    ["", "not prometheus {{{", "vllm:num_requests_running NaN\n", "vllm:num_requests_running -3\n",
     "vllm:num_requests_running 1e300\n", "other_metric 1\n"],
)
def test_implausible_or_absent_gauges_are_no_reading(text: str) -> None:
    got = W.read_metrics(text, "vllm:num_requests_running", "vllm:num_requests_waiting")
    assert got is None or got[0] is None


def test_slots_count_the_processing_ones() -> None:
    slots = [{"id": 0, "is_processing": True}, {"id": 1, "is_processing": False}, {"id": 2, "is_processing": True}]
    assert W.read_slots(json.dumps(slots)) == (2, None)
    assert W.read_slots("[]") is None and W.read_slots("{}") is None and W.read_slots("oops") is None


def test_peaks_of_the_samples() -> None:
    g = ServerGauges("x", 0.2, (GaugeSample(1, 1, 3), GaugeSample(2, 2, None), GaugeSample(3, None, 1)))
    assert (g.peak_running, g.peak_waiting) == (2, 3)
    assert ServerGauges("x", 0.2).peak_running is None


def _gauge_app(state: dict[str, int], *, metrics: bool = True) -> web.Application:
    async def metrics_route(_: web.Request) -> web.Response:
        state["reads"] += 1
        if not metrics:
            return web.Response(status=501, text="metrics disabled")
        running = min(state["reads"], 4)
        return web.Response(text=f"llamacpp:requests_processing {running}\nllamacpp:requests_deferred {4 - running}\n")

    async def slots_route(_: web.Request) -> web.Response:
        return web.json_response([{"id": 0, "is_processing": True}])

    app = web.Application()
    app.router.add_get("/metrics", metrics_route)
    app.router.add_get("/slots", slots_route)
    return app


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def test_the_sampler_reads_a_real_server_until_stopped() -> None:
    state = {"reads": 0}
    runner, url = await _serve(_gauge_app(state))
    try:
        async with LoadDriver(Target(url=url, api="llamacpp")) as driver:
            source = await driver.gauge_source()
            assert source is not None and source.label == "llama.cpp /metrics"
            sampler = W.GaugeSampler(source, driver.fetch_raw, driver.clock.now_ns, interval_s=0.02)
            sampler.start()
            await asyncio.sleep(0.3)
            gauges = await sampler.stop()
    finally:
        await runner.cleanup()
    assert len(gauges.samples) >= 3
    # looking for the source read /metrics once (running 1); the sampler's readings start at 2
    assert gauges.peak_running == 4 and gauges.peak_waiting == 2
    assert [s.t_ns for s in gauges.samples] == sorted(s.t_ns for s in gauges.samples)


async def test_without_metrics_the_slots_are_the_witness() -> None:
    runner, url = await _serve(_gauge_app({"reads": 0}, metrics=False))
    try:
        async with LoadDriver(Target(url=url, api="llamacpp")) as driver:
            source = await driver.gauge_source()
    finally:
        await runner.cleanup()
    assert source is not None and source.path == "/slots"


async def test_a_dead_witness_is_absent_not_an_error() -> None:
    runner, url = await _serve(web.Application())  # nothing but 404s
    try:
        async with LoadDriver(Target(url=url, api="llamacpp")) as driver:
            assert await driver.gauge_source() is None
    finally:
        await runner.cleanup()


async def test_the_noise_meter_measures_the_batch() -> None:
    meter = W.NoiseMeter()
    meter.start()
    await asyncio.sleep(0.1)
    noise = await meter.stop()
    assert noise.cpus >= 1
    assert noise.loop_lag_p99_ms is not None and noise.loop_lag_p99_ms >= 0
    assert noise.busy_frac is None or 0.0 <= noise.busy_frac <= 1.0


async def test_the_noise_meter_places_a_stall_in_time() -> None:
    """The loop blocked for 0.2 s (a synchronous sleep): the meter records a stall at least that
    long, in the clock it was given, covering the moment the block began."""
    clock = time.perf_counter_ns
    meter = W.NoiseMeter(clock)
    meter.start()
    await asyncio.sleep(0.05)
    blocked_at = clock()
    time.sleep(0.2)  # noqa: ASYNC251 - the stall under test
    await asyncio.sleep(0.05)
    noise = await meter.stop()
    long = noise.stalls_over(int(0.19 * 1e9))
    assert long, noise.stalls_ns
    a, b = long[0]
    assert a <= blocked_at + int(0.02 * 1e9) and b >= blocked_at + int(0.19 * 1e9)
    assert noise.loop_lag_max_ms is not None and noise.loop_lag_max_ms >= 190


def test_noise_keeps_the_longest_stalls_in_time_order() -> None:
    stalls = [(k * 1000, k * 1000 + 60_000_000 + k) for k in range(100)]
    noise = W.noise_from(None, None, None, [0.06] * 100, stalls)
    assert len(noise.stalls_ns) == W.MAX_STALLS
    assert list(noise.stalls_ns) == sorted(noise.stalls_ns)
    assert min(b - a for a, b in noise.stalls_ns) == 60_000_000 + 100 - W.MAX_STALLS


def test_noise_from_proc_stat_deltas() -> None:
    noise = W.noise_from((1000, 600, 0), (1100, 610, 5), 1.9, [0.001, 0.002, 0.030])
    assert noise.busy_frac == pytest.approx(0.9)
    assert noise.steal_frac == pytest.approx(0.05)
    assert noise.loop_lag_max_ms == pytest.approx(30.0)


async def test_control_calls_survive_a_server_that_closes_idle_connections() -> None:
    """A server that answers one request per connection and closes it without a word on the next
    (what llama-server does to a pooled keep-alive connection): every control call still lands."""
    served = {"requests": 0}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length")), 0)
        await reader.readexactly(length)
        served["requests"] += 1
        body = json.dumps({"tokens": [1, 2, 3]}).encode()
        # No "Connection: close": the client may keep the connection, which this server then drops.
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(body), body))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with LoadDriver(Target(url=f"http://127.0.0.1:{port}", api="llamacpp")) as driver:
            statuses = []
            for _ in range(5):
                status, _ = await driver.probe("POST", "/tokenize", {"content": "hello"})
                statuses.append(status)
                await asyncio.sleep(0.1)  # the server has closed the last connection by now
    finally:
        server.close()
        await server.wait_closed()
    assert statuses == [200] * 5 and served["requests"] == 5


def test_a_gauge_probe_that_got_no_answer_is_asked_again_at_the_next_batch():
    """Ground truth: a /metrics that times out once (a busy vLLM), then answers with gauges. The
    first batch has none, the second finds them; a server that answers "no gauges" is asked once."""
    import asyncio

    from servecheck.wire.base import Target
    from servecheck.load.driver import GAUGE_PROBE_TRIES, LoadDriver
    from servecheck.model.records import ServerInfo

    metrics = ("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 1.0\n"
               "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 0.0\n").encode()

    def driver(answers: list) -> tuple[LoadDriver, list[str]]:
        d = LoadDriver(Target(url="http://127.0.0.1:9"))
        d.info = ServerInfo(url="http://127.0.0.1:9", dialect="openai", model="m", engine="vllm")
        asked: list[str] = []

        async def fetch_raw(path: str, timeout_s: float = 0.0):
            asked.append(path)
            return answers.pop(0) if answers else None

        d.fetch_raw = fetch_raw  # type: ignore[method-assign]
        return d, asked

    late, asked = driver([None, (200, metrics)])
    assert asyncio.run(late.gauge_source()) is None
    found = asyncio.run(late.gauge_source())
    assert found is not None and found.path == "/metrics" and asked == ["/metrics", "/metrics"]
    assert asyncio.run(late.gauge_source()) is found and len(asked) == 2  # found once, kept

    none, asked = driver([(404, b"")])
    assert asyncio.run(none.gauge_source()) is None and asyncio.run(none.gauge_source()) is None
    assert asked == ["/metrics"]  # an answer, even "no", is final

    mute, asked = driver([])
    for _ in range(GAUGE_PROBE_TRIES + 2):
        assert asyncio.run(mute.gauge_source()) is None
    assert len(asked) == GAUGE_PROBE_TRIES  # bounded: a server that never answers is not asked forever


# ---------------------------------------------------------------- what analysis.witness reads off the witnesses


def _gauges(running: list[int], waiting: list[int | None]) -> ServerGauges:
    samples = tuple(GaugeSample(k * 200_000_000, r, w) for k, (r, w) in enumerate(zip(running, waiting)))
    return ServerGauges("vllm /metrics", 0.2, samples)


def test_the_gauges_read_as_a_schedule() -> None:
    from servecheck.analysis.witness import gauge_reading

    partial = gauge_reading(_gauges([1, 2, 2], [3, 2, 2]), 4)
    assert partial is not None and (partial.schedule, partial.slots) == ("partial", 2)
    assert partial.description.code == "witness.gauges_partial" and partial.description["slots"] == 2
    seen = partial.description["seen"]
    assert (seen.code, seen["running"], seen["waiting"], seen["readings"]) == ("witness.gauges_seen", 2, 3, 3)
    assert str(partial.description) == ("vllm /metrics: at most 2 running, up to 3 waiting over 3 readings: 2 at once, "
                                        "the rest waited")
    queue = gauge_reading(_gauges([1, 1, 1], [1, 0, 0]), 2)
    assert queue is not None and queue.description.code == "witness.gauges_staircase"
    batch = gauge_reading(_gauges([1, 2, 2], [1, 0, 0]), 2)
    assert batch is not None and batch.description.code == "witness.gauges_cluster" and batch.description["admitted"]


def test_a_busy_client_machine_is_said_with_its_numbers() -> None:
    from servecheck.analysis.witness import busy_words
    from servecheck.model.records import ClientNoise

    assert busy_words([None, ClientNoise(cpus=4, load_avg_1m=1.0, steal_frac=0.01, loop_lag_p99_ms=1.0)]) is None
    busy = busy_words([ClientNoise(cpus=2, load_avg_1m=1.9, steal_frac=0.12, loop_lag_p99_ms=2.0)])
    assert busy is not None and busy.code == "witness.busy"
    assert [p.code for p in busy["parts"]] == ["witness.busy_load", "witness.busy_steal"]
    assert busy["parts"][1]["steal"] == 0.12
    assert str(busy) == ("the machine was busy: load 1.9 on 2 cores, 12% of CPU time stolen (a server on this machine "
                         "counts in the load too)")
