"""The load driver against the simulated server, once per dialect: ground truth is the simulator's config."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import pytest

from servecheck.wire.base import Target
from servecheck.load.driver import LoadDriver
from servecheck.load.prompts import make_requests
from servecheck.model.records import DIALECTS
from servecheck.sim import MODEL_PREFIX, RunningSim, SimConfig, start_sim

pytestmark = pytest.mark.timeout(120)

N = 4
MAX_TOKENS = 12
PROMPT_TOKENS = 24


@pytest.fixture
async def sim() -> AsyncIterator[RunningSim]:
    running = await start_sim(SimConfig(mode="batched", token_s=0.002, per_seq_s=0.0, prompt_token_s=0.0))
    yield running
    await running.stop()


async def test_auto_detects_the_simulator(sim: RunningSim) -> None:
    async with LoadDriver(Target(url=sim.url)) as driver:
        info = await driver.detect()
    assert info.simulated is True and info.engine == "simulator"
    assert info.model is not None and info.model.startswith(MODEL_PREFIX)
    assert info.n_ctx_per_request == sim.config.n_ctx


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_batch_in_each_dialect(sim: RunningSim, dialect: str) -> None:
    async with LoadDriver(Target(url=sim.url, api=dialect)) as driver:
        info = await driver.detect()
        reqs = await make_requests(driver, N, PROMPT_TOKENS, MAX_TOKENS, random.Random(3))
        batch = await driver.run_batch(reqs)
    assert info.dialect == dialect and info.simulated
    assert all(r.prompt_tokens == PROMPT_TOKENS for r in reqs)  # the simulator's tokenizer agrees
    for rec in batch.records:
        assert rec.ok, rec.error
        assert rec.tokens == MAX_TOKENS and not rec.tokens_approximate
        assert rec.first_token_ns is not None and rec.send_ns >= batch.release_ns
        assert rec.send_ns < rec.first_token_ns <= rec.end_ns  # type: ignore[operator]
        assert len(rec.token_ns) >= 1 and rec.text
    assert sim.completed == N
    assert sim.peak_decoding == N  # released together: the server decoded all N at once
    if dialect in ("llamacpp", "ollama"):
        assert all(r.server and r.server.self_reported_tok_s for r in batch.records)
