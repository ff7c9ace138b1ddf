"""Scheduling modes over real HTTP: completion times have the shape each mode promises.

Timing assertions compare ratios with wide margins (a loaded 2-core machine); the exact
timeline is tested deterministically, with a fake clock, in test_sim_scheduler.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp

from servecheck.sim import SimConfig, sim_in_thread, start_sim

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
            final = json.loads([b for b in text.split("\n\n") if b.strip()][-1].removeprefix("data: "))
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
