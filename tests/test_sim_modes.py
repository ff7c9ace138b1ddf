"""Scheduling modes over real HTTP: completion times have the shape each mode promises.

Timing assertions compare ratios with wide margins (a loaded 2-core machine); the exact
timeline is tested deterministically, with a fake clock, in test_sim_scheduler.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from servecheck.sim import REFUSAL_LINES, RunningSim, SimConfig, sim_in_thread, start_sim

pytestmark = pytest.mark.timing

TIMEOUT = aiohttp.ClientTimeout(total=60)
TOKENS = 20


async def finish_times(url: str, bodies: list[dict[str, Any]], path: str = "/completion") -> list[tuple[float, Any]]:
    """Fire every body at once; return (seconds from release to the end of its stream, final event)."""
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(timeout=TIMEOUT, connector=connector) as s:
        t0 = time.perf_counter()

        async def one(body: dict[str, Any]) -> tuple[float, Any]:
            async with s.post(url + path, json=body) as r:
                assert r.status == 200, await r.text()
                text = await r.text()
            final = json.loads(text.strip().split("\n")[-1].removeprefix("data: "))  # SSE or NDJSON
            return time.perf_counter() - t0, final

        return await asyncio.gather(*(one(b) for b in bodies))


def bodies(n: int, tokens: int = TOKENS, words: int = 8) -> list[dict[str, Any]]:
    return [
        {"prompt": f"nonce{i} " + " ".join(["word"] * words), "n_predict": tokens, "stream": True, "ignore_eos": True}
        for i in range(n)
    ]


async def run_mode(config: SimConfig, n: int) -> tuple[list[float], list[Any], int]:
    running = await start_sim(config)
    try:
        results = await finish_times(running.url, bodies(n))
        return sorted(t for t, _ in results), [f for _, f in results], running.peak_decoding
    finally:
        await running.stop()


async def test_serial_finishes_one_request_time_apart() -> None:
    ends, finals, peak = await run_mode(SimConfig(mode="serial", token_s=0.010, per_seq_s=0.0), 3)
    assert peak == 1
    single = ends[0]
    for gap in (ends[1] - ends[0], ends[2] - ends[1]):
        assert 0.5 * single < gap < 2.0 * single, ends
    # Each request self-reports the solo rate, however long it queued: the seed-000 trap.
    rates = [f["timings"]["predicted_per_second"] for f in finals]
    assert min(rates) > 0.5 * TOKENS / single


async def test_batched_finishes_together() -> None:
    ends, _, peak = await run_mode(SimConfig(mode="batched", token_s=0.010, per_seq_s=0.001), 3)
    assert peak == 3
    assert ends[-1] - ends[0] < 0.3 * ends[0], ends


async def test_slots_two_with_four_requests_finish_in_two_pairs() -> None:
    ends, _, peak = await run_mode(SimConfig(mode="slots", slots=2, token_s=0.010, per_seq_s=0.001), 4)
    assert peak == 2
    step = ends[2] - ends[1]
    assert step > 0.5 * ends[0], ends
    assert ends[1] - ends[0] < 0.3 * step and ends[3] - ends[2] < 0.3 * step, ends


def test_sim_in_thread_serves_sync_callers() -> None:
    import urllib.request

    with sim_in_thread(SimConfig(token_s=0.001, per_seq_s=0.0)) as sim:
        assert sim.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(sim.url + "/health", timeout=10) as r:
            assert r.headers["X-Servecheck-Simulated"] == "1"
            assert json.loads(r.read()) == {"status": "ok"}
        assert "mode=serial" in sim.describe()


async def test_pipelined_overlaps_prefill_with_decode_but_never_batches() -> None:
    # prefill 50 words x 2 ms = 100 ms, decode 10 x 10 ms = 100 ms: serial would finish at
    # 200/400/600 ms, pipelined finishes at 200/300/400 (each later prefill hides under a decode).
    config = SimConfig(mode="pipelined", token_s=0.010, per_seq_s=0.0, prompt_token_s=0.002)
    running = await start_sim(config)
    try:
        results = await finish_times(running.url, [{**b, "n_predict": 10} for b in bodies(3, words=49)])
        peak = running.peak_decoding
    finally:
        await running.stop()
    ends = sorted(t for t, _ in results)
    assert peak == 1
    first = ends[0]
    for gap in (ends[1] - ends[0], ends[2] - ends[1]):
        assert 0.25 * first < gap < 0.8 * first, ends  # serial would be ~1.0 x first
    assert all(f["timings"]["prompt_ms"] >= 90 for _, f in results)


async def test_heat_makes_later_requests_slower() -> None:
    running = await start_sim(SimConfig(mode="serial", token_s=0.010, per_seq_s=0.0, heat_per_s=3.0))
    try:
        latencies = []
        for body in bodies(3, tokens=10):  # one after another
            t0 = time.perf_counter()
            await finish_times(running.url, [body])
            latencies.append(time.perf_counter() - t0)
    finally:
        await running.stop()
    assert latencies[2] > 1.3 * latencies[0], latencies


async def test_eos_ceiling_returns_short_outputs_despite_ignore_eos() -> None:
    config = SimConfig(mode="batched", token_s=0.002, per_seq_s=0.0, eos_ceiling=True, eos_short_fraction=0.5)
    running = await start_sim(config)
    try:
        results = await finish_times(running.url, bodies(16, tokens=40))
        ollama = await finish_times(
            running.url,
            [{"model": "servecheck-sim", "prompt": b["prompt"], "options": {"num_predict": 40}} for b in bodies(16)],
            path="/api/generate",
        )
    finally:
        await running.stop()
    finals = [f for _, f in results]
    short = [f for f in finals if f["tokens_predicted"] < 40]
    assert 0 < len(short) < 16  # some short, some full (drawn per prompt)
    assert all(10 <= f["tokens_predicted"] <= 30 and f["stop_type"] == "eos" for f in short)
    assert all(f["stop_type"] == "limit" for f in finals if f not in short)
    # the same prompts stop at the same lengths whatever the dialect: the draw is per prompt
    assert [f["tokens_predicted"] for f in finals] == [f["eval_count"] for _, f in ollama]
    assert all((f["done_reason"] == "stop") == (f["eval_count"] < 40) for _, f in ollama)


async def ttft_and_cache(url: str, prompt: str, cache_prompt: bool = True) -> tuple[float, int, float]:
    """Time to the first token event, cache_n and prompt_ms of one streamed request."""
    body = {"prompt": prompt, "n_predict": 2, "stream": True, "cache_prompt": cache_prompt}
    async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
        t0 = time.perf_counter()
        async with s.post(url + "/completion", json=body) as r:
            first = await r.content.readline()
            ttft = time.perf_counter() - t0
            assert first.startswith(b"data: ")
            text = first.decode() + await r.text()
    final = json.loads([b for b in text.split("\n\n") if b.strip()][-1].removeprefix("data: "))
    return ttft, final["timings"]["cache_n"], final["timings"]["prompt_ms"]


PROMPT = "nonce " + " ".join(f"w{i}" for i in range(199))  # 200 tokens x 1 ms = 200 ms uncached


async def cache_run(mode: str, *, cache_prompt: bool = True) -> tuple[list[tuple[float, int, float]], RunningSim]:
    running = await start_sim(
        SimConfig(mode="serial", token_s=0.005, per_seq_s=0.0, prompt_token_s=0.001, prefix_cache=mode)  # type: ignore[arg-type]
    )
    try:
        sends = [await ttft_and_cache(running.url, PROMPT, cache_prompt) for _ in range(3)]
        return sends, running
    finally:
        await running.stop()


async def test_prefix_cache_on_skips_prefill_of_a_repeated_prompt() -> None:
    sends, _ = await cache_run("on")
    (ttft0, cache0, _), *repeats = sends
    assert cache0 == 0
    assert all(cache_n == 199 and prompt_ms < 10 for _, cache_n, prompt_ms in repeats)
    assert all(ttft < 0.5 * ttft0 for ttft, _, _ in repeats), sends


async def test_prefix_cache_disabled_per_request_with_cache_prompt_false() -> None:
    sends, _ = await cache_run("on", cache_prompt=False)
    assert [c for _, c, _ in sends] == [0, 0, 0]
    assert all(prompt_ms >= 190 for _, _, prompt_ms in sends)


async def test_prefix_cache_off_and_inert_look_the_same_but_inert_claims_on() -> None:
    for mode in ("off", "inert"):
        sends, running = await cache_run(mode)
        assert [c for _, c, _ in sends] == [0, 0, 0], mode
        assert all(prompt_ms >= 190 for _, _, prompt_ms in sends), mode
        claims = "prompt cache is enabled" in "\n".join(running.log_lines)
        assert claims == (mode == "inert")


async def test_inert_cache_props_claim_cache_prompt() -> None:
    for mode, claimed in (("inert", True), ("off", False), ("on", True)):
        running = await start_sim(SimConfig(prefix_cache=mode))  # type: ignore[arg-type]
        try:
            async with aiohttp.ClientSession(timeout=TIMEOUT) as s, s.get(running.url + "/props") as r:
                props = await r.json()
        finally:
            await running.stop()
        assert props["default_generation_settings"]["params"]["cache_prompt"] is claimed


async def test_refusal_mode_logs_refusal_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    running = await start_sim(SimConfig(refusal=True, log_path=str(log)))
    await running.stop()
    quiet = await start_sim(SimConfig())
    await quiet.stop()
    text = log.read_text()
    for line in REFUSAL_LINES:
        assert line in text
        assert line not in quiet.log_lines
    assert "initializing slots, n_slots = 1" in text


async def test_a_client_that_goes_away_frees_its_slot() -> None:
    running = await start_sim(SimConfig(mode="serial", token_s=0.005, per_seq_s=0.0))
    try:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
            async with s.post(running.url + "/completion",
                              json={"prompt": "a", "n_predict": 2000, "stream": True}) as r:
                await r.content.readline()  # one event, then hang up on a 10 s request
            t0 = time.perf_counter()
            await finish_times(running.url, bodies(1, tokens=5))
            assert time.perf_counter() - t0 < 5.0  # not queued behind the abandoned request
    finally:
        await running.stop()


async def test_stop_ends_in_flight_requests_quickly() -> None:
    running = await start_sim(SimConfig(mode="batched", token_s=0.010))

    async def long_request(stream: bool) -> int:
        async with aiohttp.ClientSession(timeout=TIMEOUT) as s:
            body = {"prompt": "a", "n_predict": 2000, "stream": stream}
            async with s.post(running.url + "/completion", json=body) as r:
                await r.read()
                return r.status

    tasks = [asyncio.create_task(long_request(stream)) for stream in (True, False)]
    await asyncio.sleep(0.2)
    t0 = time.perf_counter()
    await running.stop()
    await running.stop()  # idempotent
    statuses = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
    assert time.perf_counter() - t0 < 5.0
    assert statuses[1] == 503  # the non-streamed request is told the server went away


async def test_metrics_count_tokens_and_busy_slots() -> None:
    running = await start_sim(SimConfig(mode="slots", slots=2, token_s=0.002, per_seq_s=0.0, prompt_token_s=0.0))
    try:
        await finish_times(running.url, bodies(4, tokens=10, words=4))
        async with aiohttp.ClientSession(timeout=TIMEOUT) as s, s.get(running.url + "/metrics") as r:
            assert r.headers["X-Servecheck-Simulated"] == "1"
            text = await r.text()
    finally:
        await running.stop()
    values = {
        line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line and not line.startswith("#")
    }
    assert values["llamacpp:tokens_predicted_total"] == 40
    assert values["llamacpp:prompt_tokens_total"] == 4 * 5
    assert values["llamacpp:requests_processing"] == 0 and values["llamacpp:requests_deferred"] == 0
    assert 1.0 <= values["llamacpp:n_busy_slots_per_decode"] <= 2.0
