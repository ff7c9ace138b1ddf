"""Lanes over processes (`load.lanes`): a batch spread over K worker processes reads as one client's
batch. The simulator's schedule is the ground truth: serial requests finish one service time apart,
batched ones together, whichever worker read them; every record is on the run's one clock."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from servecheck.wire.base import Target
from servecheck.errors import UsageError
from servecheck.load.lanes import LaneDriver, merge_noise, split_lanes
from servecheck.load.prompts import make_requests
from servecheck.model.records import ClientNoise, GenRequest
from servecheck.sim import SimConfig, sim_in_thread

pytestmark = pytest.mark.timeout(120)

TOKENS = 32
TIMING: dict[str, Any] = {"token_s": 0.010, "per_seq_s": 0.0005, "prompt_token_s": 0.0001}


def reqs(n: int) -> list[GenRequest]:
    return [GenRequest(index=i, prompt=f"p{i}", nonce=f"n{i}", max_tokens=8) for i in range(n)]


def test_lanes_are_dealt_to_workers_and_each_lane_keeps_its_requests():
    shares = split_lanes(reqs(10), lanes=4, workers=2)
    # lane k takes requests k, k+4, k+8; worker 0 has lanes 0 and 2, worker 1 lanes 1 and 3
    assert [([r.index for r in rs], lanes) for rs, lanes in shares] == [([0, 2, 4, 6, 8], 2), ([1, 3, 5, 7, 9], 2)]
    # more workers than lanes: the spare workers get nothing
    assert [lanes for _, lanes in split_lanes(reqs(3), lanes=3, workers=8)] == [1, 1, 1]
    every = sorted(r.index for rs, _ in split_lanes(reqs(17), lanes=5, workers=3) for r in rs)
    assert every == list(range(17))


def test_noise_of_a_batch_is_the_worst_worker_and_every_stall():
    a = ClientNoise(cpus=2, loop_lag_p99_ms=1.0, loop_lag_max_ms=2.0, stalls_ns=((10, 90),))
    b = ClientNoise(cpus=2, loop_lag_p99_ms=5.0, loop_lag_max_ms=3.0, stalls_ns=((200, 400),))
    merged = merge_noise([a, None, b])
    assert merged is not None and merged.loop_lag_p99_ms == 5.0 and merged.loop_lag_max_ms == 3.0
    assert merged.stalls_ns == ((10, 90), (200, 400))
    assert merge_noise([None]) is None


def batch(config: SimConfig, n: int, workers: int):
    async def go():
        with sim_in_thread(config) as sim:
            async with LaneDriver(Target(url=sim.url, first_token_timeout_s=60), workers=workers) as driver:
                await driver.detect()
                warm, *requests = await make_requests(driver, n + 1, 16, TOKENS, random.Random(3))
                await driver.generate(warm)
                return await driver.run_batch(requests)

    return asyncio.run(go())


def test_a_serial_server_read_through_two_workers_is_a_staircase():
    result = batch(SimConfig(mode="serial", **TIMING), n=4, workers=2)
    assert all(r.ok and r.tokens == TOKENS for r in result.records)
    assert [r.index for r in result.records] == sorted(r.index for r in result.records)
    finishes = result.finish_s()
    service = finishes[0]
    steps = [b - a for a, b in zip(finishes, finishes[1:])]
    # one service time between finishes: the queue, though two processes read it
    assert all(0.6 * service < s < 1.6 * service for s in steps), (finishes, steps)
    # both workers' sends were released together, on one clock
    assert result.dispatch_skew_ns < 40_000_000 and result.in_flight == 4


def test_a_batching_server_read_through_two_workers_is_a_cluster():
    result = batch(SimConfig(mode="batched", **TIMING), n=4, workers=2)
    finishes = result.finish_s()
    assert finishes[-1] - finishes[0] < 0.25 * finishes[0], finishes
    assert all(r.send_ns >= result.release_ns for r in result.records)  # nobody sent before the barrier
    assert result.noise is not None


def test_workers_must_be_at_least_one():
    with pytest.raises(UsageError, match="--workers must be >= 1"):
        LaneDriver(Target(url="http://127.0.0.1:9"), workers=0)


def test_calibration_read_through_two_workers_pairs_every_stamp_on_one_clock():
    """The stamp server writes its clock into every event; read by two processes, every stamp still
    pairs and no delay is negative: the workers stamp on the run's own clock."""
    from servecheck.load.calibrate import calibrate  # raises when a stamp does not pair with its event

    result = asyncio.run(calibrate(streams=4, gap_ms=5.0, events=20, workers=2))
    assert result.workers == 2 and result.events == 4 * 20
    assert result.stamp_delay_p50_ms >= 0 and result.stamp_delay_max_ms >= result.stamp_delay_p99_ms
    assert result.to_dict()["workers"] == 2


@pytest.mark.parametrize(("mode", "expected"), [("serial", "staircase"), ("batched", "cluster")])
def test_staircase_with_two_workers_gives_the_verdict_of_one_client(mode, expected, tmp_path):
    """Ground truth: the simulator's schedule. Two client processes read the batch; the verdict and
    the recorded worker count are what one process would give."""
    from servecheck.cli import main as main_mod

    out = tmp_path / "s.json"
    with sim_in_thread(SimConfig(mode=mode, token_s=0.012, per_seq_s=0.001, prompt_token_s=0.0001)) as sim:
        with pytest.raises(SystemExit) as info:
            main_mod.main(["staircase", sim.url, "--n", "1,2,4", "--tokens", "48", "--prompt-tokens", "32",
                           "--workers", "2", "--no-save", "--timeout", "60", "--json", str(out)])
    doc = __import__("json").loads(out.read_text())
    assert info.value.code == 0, doc.get("verdict_reason")
    assert doc["verdict"] == expected and doc["params"]["workers"] == 2


def test_arms_with_two_workers_labels_a_batching_server_batching(tmp_path):
    """Ground truth: the simulator batches. Each cell's in-flight lanes are dealt to two client
    processes (one arm of one lane runs on one worker): the labels are one client's."""
    from servecheck.cli import main as main_mod

    out = tmp_path / "a.json"
    with sim_in_thread(SimConfig(mode="batched", token_s=0.010, per_seq_s=0.0005)) as sim:
        with pytest.raises(SystemExit):
            main_mod.main(["arms", sim.url, "--requests", "4", "--arms", "1,2,4", "--reps", "3", "--tokens", "32",
                           "--prompt-tokens", "32", "--workers", "2", "--no-save", "--json", str(out)])
    doc = __import__("json").loads(out.read_text())
    labels = {a["concurrency"]: a["label"] for a in doc["arms"]}
    assert labels[2] == "batching" and labels[4] == "batching" and doc["params"]["workers"] == 2
