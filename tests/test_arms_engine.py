"""`arms` on the real llama.cpp engine: four slots batch at 4-way; one slot buys nothing at any arm.

The ground truth is the server's own configuration (`--parallel`), which this test sets."""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from servecheck.cli.common import make_target
from servecheck.engine.local import LocalEngine, provision_local
from servecheck.engine.process import LlamaServer, ctx_per_slot_for
from servecheck.experiments.arms import ArmsDesign, run_arms
from servecheck.load.driver import LoadDriver
from written import fields_of

pytestmark = [pytest.mark.engine, pytest.mark.timeout(600)]

# 6 reps rotate the three arms through every position twice; 64 tokens keep a serial cell near four seconds.
# Up to 12 reps when the headline is withheld or a label is undecided.
DESIGN = ArmsDesign(arms=(1, 2, 4), requests=4, reps=6, tokens=64, prompt_tokens=32, max_reps=12)


@pytest.fixture(scope="module")
def local_engine() -> LocalEngine:
    return provision_local(None, "tiny", progress=lambda m: print(m, file=sys.stderr))


async def _arms(url: str, seed: int) -> dict:
    async with LoadDriver(make_target(url, api="llamacpp", first_token_timeout_s=120)) as driver:
        run = await run_arms(driver, DESIGN, rng=random.Random(seed))
    return fields_of(run.document())


def _labels(engine: LocalEngine, parallel: int, tmp_path: Path, seed: int, first_try: Any, test_id: str,
            expected: dict[int, str]) -> dict[int, str]:
    """The arm labels on a server with `parallel` slots; a run whose `expected` arms are not yet
    decided (an inconclusive label) earns one retry (seed + 1), never more, and the first try of each
    is recorded (tests/conftest.py `first_try`)."""
    server = LlamaServer(
        engine.binary, engine.model_path, parallel=parallel,
        ctx_per_slot=ctx_per_slot_for(DESIGN.prompt_tokens, DESIGN.tokens), log_path=tmp_path / f"np{parallel}.log",
    )
    with server as url:
        def attempt(i: int) -> dict[int, str]:
            doc = asyncio.run(_arms(url, seed + i))
            assert doc["valid"], doc.get("warnings")
            assert doc["simulated"] is False
            arms = {a["concurrency"]: a for a in doc["arms"]}
            print(f"attempt {i + 1}, {doc['reps_taken']} reps:",
                  {c: (a["label"], a["aggregate_speedup_interval"], a["generation_gain_interval"])
                   for c, a in arms.items()})
            return {c: a["label"] for c, a in arms.items()}

        return first_try.record_tries(test_id, {f"arm {c}": label for c, label in expected.items()}, attempt,
                                      lambda got: {f"arm {c}": got[c] for c in expected}, tries=2, seed=seed)


def test_four_slots_batch_at_four_way(local_engine: LocalEngine, tmp_path: Path, test_seed: int, first_try: Any,
                                      request: pytest.FixtureRequest) -> None:
    labels = _labels(local_engine, 4, tmp_path, test_seed, first_try, request.node.nodeid, {4: "batching"})
    assert labels[4] == "batching"


def test_one_slot_buys_nothing_at_any_arm(local_engine: LocalEngine, tmp_path: Path, test_seed: int, first_try: Any,
                                          request: pytest.FixtureRequest) -> None:
    # recorded at the arms where batching could show; arm 1 is the reference, `none` by definition
    labels = _labels(local_engine, 1, tmp_path, test_seed, first_try, request.node.nodeid, {2: "none", 4: "none"})
    assert set(labels.values()) == {"none"}
