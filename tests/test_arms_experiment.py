"""The arms experiment's orchestration against a fake driver on a virtual clock (no network, no sleeps)."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from servecheck.errors import ServerError, UsageError
from servecheck.experiments.arms import ArmsDesign, ArmsRun, pooled_cells, run_arms
from servecheck.model.records import NS_PER_S, BatchResult, GenRequest, RequestRecord, ServerInfo, ServerTimings
from servecheck.model.reason import Reason
from servecheck.probe.thermal import ThermalSummary
from written import fields_of
from servecheck.model.result import written_doc

MS = NS_PER_S // 1000


class QueueDriver:
    """A strictly serial server on a virtual clock: prefill then one token every `token_ms`.

    Records every batch it was given, so tests can check the design that was run.
    """

    def __init__(self, *, prefill_ms: int = 20, token_ms: int = 5, gap_ms: int = 1, cached: int | None = None,
                 fail_warmup: bool = False) -> None:
        self.prefill_ns, self.token_ns, self.gap_ns = prefill_ms * MS, token_ms * MS, gap_ms * MS
        self.now_ns = 0
        self.batches: list[tuple[list[GenRequest], int | None]] = []
        self.cached = cached
        self.fail_warmup = fail_warmup
        self.queue_waits: list[float] = []

    async def detect(self) -> ServerInfo:
        return ServerInfo(url="http://fake", dialect="llamacpp", model="fake", simulated=True)

    async def generate(self, req: GenRequest) -> RequestRecord:
        rec = self._serve(req, self.now_ns, self.now_ns)
        self.now_ns = rec.end_ns or self.now_ns
        if self.fail_warmup:
            return RequestRecord(index=req.index, nonce=req.nonce, status="error", tokens_requested=req.max_tokens,
                                 send_ns=0, error="boom")
        return rec

    async def run_batch(
        self, reqs: Sequence[GenRequest], in_flight: int | None = None, queue_wait_s: float = 0.0
    ) -> BatchResult:
        self.queue_waits.append(queue_wait_s)
        self.batches.append((list(reqs), in_flight))
        lanes = len(reqs) if in_flight is None else min(in_flight, len(reqs))
        release = self.now_ns + 10 * MS
        lane_free = [release] * lanes
        server_free = release
        records = []
        for req in reqs:
            lane = min(range(lanes), key=lambda i: lane_free[i])
            send = lane_free[lane]
            rec = self._serve(req, send, max(send, server_free))
            server_free = rec.end_ns or server_free
            lane_free[lane] = server_free + self.gap_ns
            records.append(rec)
        self.now_ns = server_free
        return BatchResult(release, lanes, tuple(records), 0)

    def _serve(self, req: GenRequest, send: int, start: int) -> RequestRecord:
        first = start + self.prefill_ns
        times = tuple(first + i * self.token_ns for i in range(req.max_tokens))
        return RequestRecord(
            index=req.index,
            nonce=req.nonce,
            status="ok",
            tokens_requested=req.max_tokens,
            send_ns=send,
            first_token_ns=first,
            end_ns=times[-1],
            token_ns=times,
            tokens=req.max_tokens,
            tokens_source="usage",
            prompt_tokens=req.prompt_tokens,
            server=ServerTimings(prompt_tokens=req.prompt_tokens, cached_prompt_tokens=self.cached),
        )


def factory(driver: object, n: int, prompt_tokens: int, max_tokens: int, rng: random.Random) -> list[GenRequest]:
    return [
        GenRequest(index=i, prompt=f"{rng.getrandbits(48):012x}: words", nonce=f"{rng.getrandbits(48):012x}",
                   max_tokens=max_tokens, prompt_tokens=prompt_tokens)
        for i in range(n)
    ]


async def run(driver: QueueDriver, design: ArmsDesign, **kw: object) -> ArmsRun:
    return await run_arms(driver, design, rng=random.Random(1), requests_factory=factory, **kw)  # type: ignore[arg-type]


async def test_runs_every_cell_in_rotated_order_with_fresh_nonces() -> None:
    driver = QueueDriver()
    seen: list[int] = []
    result = await run(driver, ArmsDesign(arms=(1, 2, 4), requests=4, reps=3, tokens=8),
                       on_cell=lambda r: seen.append(len(r.measured)))
    assert [k for _, k in driver.batches] == [1, 2, 4, 2, 4, 1, 4, 1, 2]
    assert seen == list(range(1, 10))
    nonces = [r.nonce for reqs, _ in driver.batches for r in reqs]
    assert len(set(nonces)) == len(nonces) == 36
    assert all(len(reqs) == 4 for reqs, _ in driver.batches)
    assert result.complete and result.warmup is not None


async def test_requests_in_flight_may_wait_in_a_server_queue() -> None:
    """k in flight on a one-slot server: the last waits for k - 1 others, each about one warm-up long."""
    driver = QueueDriver()
    result = await run(driver, ArmsDesign(arms=(1, 2, 4), requests=4, reps=3, tokens=8))
    assert result.warmup is not None and result.warmup.latency_ns is not None
    warm_s = result.warmup.latency_ns / 1e9
    expected = []
    for _, k in driver.batches:
        assert k is not None
        expected.append(1.5 * (k - 1) * warm_s)
    assert driver.queue_waits == pytest.approx(expected)


async def test_queue_server_speedups_are_about_one_and_labels_none() -> None:
    result = await run(QueueDriver(), ArmsDesign(arms=(1, 2, 4), requests=4, reps=3, tokens=16))
    a = result.analysis()
    assert a is not None
    for arm in a.arms:
        assert arm.label == "none"
        assert arm.aggregate_speedup is not None and arm.aggregate_speedup.median == pytest.approx(1.0, abs=0.03)
        assert arm.generation_gain is not None and arm.generation_gain.median == pytest.approx(1.0, abs=0.01)
    # in a queue each user still decodes at the solo rate, and waits longer for the first token
    assert a.arm(4).per_user_rate_change == pytest.approx(0.0, abs=0.01)
    ttft_multiple = a.arm(4).ttft_multiple
    assert ttft_multiple is not None and ttft_multiple.median > 2.0


async def test_fixed_order_keeps_positions() -> None:
    driver = QueueDriver()
    result = await run(driver, ArmsDesign(arms=(1, 2), requests=2, reps=3, tokens=4, fixed_order=True))
    assert [k for _, k in driver.batches] == [1, 2] * 3
    assert any("fixed-order" in n for n in result.notes)


async def test_document_shape_and_partial_thermal() -> None:
    summary = ThermalSummary(("linux thermal zones",), 7, 0)
    result = await run(QueueDriver(), ArmsDesign(arms=(1, 2), requests=2, reps=2, tokens=4), thermal=lambda: summary)
    doc = fields_of(result.document())
    assert doc["command"] == "arms" and doc["valid"] and doc["complete"] and doc["simulated"]
    assert doc["headline_refused"] is False
    assert {a["concurrency"] for a in doc["arms"]} == {1, 2}
    cell = doc["cells"][0]
    assert set(cell) >= {"rep", "position", "concurrency", "wall_s", "tokens", "aggregate_tok_s", "per_user_rate_tok_s",
                         "ttft_s", "deviant", "batch_wall_s"}
    assert doc["thermal"]["summary"] == "thermal pressure in zero of 7 samples (linux thermal zones)"
    json.dumps(doc, allow_nan=False)


async def test_cached_prompt_tokens_warn_and_name_requests() -> None:
    result = await run(QueueDriver(cached=60), ArmsDesign(arms=(1, 2), requests=2, reps=2, tokens=4, prompt_tokens=64))
    doc = fields_of(result.document())
    assert len(doc["cached_prompt_requests"]) == 8
    assert any("contaminated by the prefix cache" in w["message"] for w in doc["warnings"])
    clean = fields_of((await run(QueueDriver(cached=1),
                                 ArmsDesign(arms=(1, 2), requests=2, reps=2, tokens=4, prompt_tokens=64))).document())
    assert clean["cached_prompt_requests"] == []


async def test_failed_warmup_is_a_server_error() -> None:
    with pytest.raises(ServerError, match="warm-up"):
        await run(QueueDriver(fail_warmup=True), ArmsDesign(arms=(1, 2), requests=2, reps=1, tokens=4))


@pytest.mark.parametrize(
    ("design", "message"),
    [
        (ArmsDesign(arms=(2, 4)), "must include 1"),
        (ArmsDesign(arms=(1, 1, 2)), "distinct"),
        (ArmsDesign(arms=(1, 0)), "distinct integers >= 1"),
        (ArmsDesign(arms=(1, 8), requests=4), "below the largest arm"),
        (ArmsDesign(reps=0), "--reps"),
        (ArmsDesign(tokens=1), "--tokens"),
    ],
)
def test_bad_designs_are_usage_errors(design: ArmsDesign, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        design.check()


def test_unbalanced_reps_get_a_note() -> None:
    assert any("not a multiple" in n for n in ArmsDesign(reps=10).notes())
    assert ArmsDesign(reps=12).notes() == ()


async def test_pooling_two_saved_runs(tmp_path: Path) -> None:
    docs = []
    for seed in (1, 2):
        r = await run_arms(QueueDriver(),  # type: ignore[arg-type]  # a fake: only what an arms run calls
                           ArmsDesign(arms=(1, 2), requests=2, reps=2, tokens=8),
                           rng=random.Random(seed), requests_factory=factory)
        path = tmp_path / f"run{seed}.json"
        path.write_text(json.dumps(written_doc(r.document())))
        docs.append(json.loads(path.read_text()))
    cells = pooled_cells(docs)
    assert len(cells) == 8 and {c.run for c in cells} == {1, 2}
    pooled = ArmsRun(ArmsDesign(arms=(1, 2)), pooled=tuple(cells), complete=True).analysis()
    assert pooled is not None
    speedup = pooled.arm(2).aggregate_speedup
    assert speedup is not None
    assert speedup.n == 4
    # a pooled document pooled again keeps its runs apart
    again = fields_of(ArmsRun(ArmsDesign(arms=(1, 2)), pooled=tuple(cells), complete=True).document())
    assert {c.run for c in pooled_cells([again])} == {1, 2}


@pytest.mark.parametrize("doc",
                         [{"command": "staircase", "points": []}, {"command": "arms", "cells": [{"rep": 0}]}, [1, 2]])
def test_pooling_rejects_other_documents(doc: object) -> None:
    with pytest.raises(UsageError, match="pooled document 1"):
        pooled_cells([doc])


def _calibration(streams: int, error_ms: float):
    from servecheck.model.client import Calibration

    return Calibration(streams=streams, gap_ms=5.0, events=100, stamp_delay_p50_ms=error_ms / 2,
                       stamp_delay_p99_ms=error_ms, stamp_delay_max_ms=error_ms, dispatch_skew_ms=0.0,
                       loop_lag_p99_ms=None, loop_lag_max_ms=None)


async def test_a_ttft_the_client_cannot_resolve_leaves_the_headline_and_a_client_bound_arm_invalidates() -> None:
    """Ground truth: the checks the test hands the run. The queue's 4-way TTFT is several times the
    serial one; with a client error of 5 ms against a 20 ms warm-up TTFT (25%) the headline says
    nothing of TTFT and a warning says why. The rates stay valid: 5 ms is within 5% of a request."""
    from dataclasses import replace

    from servecheck.model.client import ClientCheck

    result = await run(QueueDriver(), ArmsDesign(arms=(1, 4), requests=4, reps=3, tokens=32))
    headline = result.document().body.headline
    assert isinstance(headline, Reason) and "arms.ttft" in set(headline.codes())
    ok = tuple(ClientCheck(streams=n, tolerance_ms=8.0, basis="5% of the test's request", tried=(_calibration(n, 5.0),))
               for n in (1, 4))
    doc = fields_of(replace(result, client_checks=ok).document())
    assert doc["valid"] is True and "time to first token" not in doc["headline"], doc["headline"]
    assert any(w["message"].startswith("TTFT unresolved at 1-way, 4-way") for w in doc["warnings"])
    # a client error beyond the request bound at 4-way: the run is invalid and says where
    bound = (ok[0],
             ClientCheck(streams=4, tolerance_ms=8.0, basis="5% of the test's request", tried=(_calibration(4, 30.0),)))
    doc = fields_of(replace(result, client_checks=bound).document())
    assert doc["valid"] is False
    assert any(w["message"].startswith("client-bound: the client is the bottleneck at N=4") for w in doc["warnings"])
