"""The staircase experiment's sequence and document, driven by a fake driver with scripted times."""

from __future__ import annotations

import random

import pytest

from servecheck.errors import ServerError, UsageError
from servecheck.experiments.staircase import StaircaseResult, plan_ns, run_staircase
from servecheck.model.records import NS_PER_S, BatchResult, GenRequest, RequestRecord, ServerInfo
from written import fields_of

SINGLE_S = 2.0


def fake_requests(driver, n, prompt_tokens, max_tokens, rng):
    driver.nonce_counter += n
    return [
        GenRequest(index=i, prompt=f"nonce-{driver.nonce_counter - i} ...", nonce=f"{driver.nonce_counter - i}",
                   max_tokens=max_tokens)
        for i in range(n)
    ]


class SerialFakeDriver:
    """Answers like a queue: the k-th request of a batch ends k single times after release."""

    def __init__(self, *, warmup_ok: bool = True) -> None:
        self.nonce_counter = 0
        self.calls: list[tuple[str, int]] = []
        self.nonces: list[str] = []
        self.warmup_ok = warmup_ok
        self.now_ns = 0
        self.queue_waits: list[float] = []

    async def detect(self) -> ServerInfo:
        self.calls.append(("detect", 0))
        return ServerInfo(url="http://fake", dialect="llamacpp", model="m", simulated=True)

    def _record(self, req: GenRequest, end_s: float) -> RequestRecord:
        self.nonces.append(req.nonce)
        return RequestRecord(
            index=req.index,
            nonce=req.nonce,
            status="ok",
            tokens_requested=req.max_tokens,
            send_ns=self.now_ns,
            end_ns=self.now_ns + int(end_s * NS_PER_S),
            tokens=req.max_tokens,
            tokens_source="usage",
        )

    async def generate(self, req: GenRequest) -> RequestRecord:
        self.calls.append(("generate", 1))
        if not self.warmup_ok:
            return RequestRecord(index=0, nonce=req.nonce, status="error", tokens_requested=1, send_ns=0,
                                 error="HTTP 404")
        return self._record(req, SINGLE_S)

    async def run_batch(self, reqs, in_flight=None, queue_wait_s=0.0) -> BatchResult:
        self.calls.append(("batch", len(reqs)))
        self.queue_waits.append(queue_wait_s)
        records = tuple(self._record(r, SINGLE_S * (r.index + 1)) for r in reqs)
        batch = BatchResult(release_ns=self.now_ns, in_flight=len(reqs), records=records, dispatch_skew_ns=1000)
        self.now_ns += int(SINGLE_S * len(reqs) * NS_PER_S)
        return batch


async def test_sequence_partials_and_document():
    driver = SerialFakeDriver()
    partials: list[StaircaseResult] = []
    result = await run_staircase(
        driver,  # type: ignore[arg-type]  # a fake: only what a staircase run calls
        ns=[4, 2],
        tokens=100,
        prompt_tokens=16,
        reps=2,
        rng=random.Random(1),
        on_point=partials.append,
        requests_factory=fake_requests,
    )
    # N=1 is added, N sorted, every N repeated, one warm-up first, and N=1 measured again after the
    # batches (the single-request reference is never one measurement); nothing undecided, no extra rep.
    assert driver.calls == [("detect", 0), ("generate", 1)] + [("batch", n) for n in (1, 1, 2, 2, 4, 4, 1)]
    assert len(set(driver.nonces)) == len(driver.nonces) == 1 + 2 * (1 + 2 + 4) + 1
    assert [len(p.batches) for p in partials] == [1, 2, 3, 4, 5, 6, 7]
    assert not any(p.complete for p in partials) and result.complete
    assert result.notes  # says N=1 was added

    doc = fields_of(result.document())
    assert doc["command"] == "staircase"
    assert doc["simulated"] is True and doc["valid"] is True and doc["complete"] is True
    assert doc["verdict"] == "staircase" and doc["trend"] == "flat"
    assert [p["n"] for p in doc["points"]] == [1, 2, 4]
    top = doc["points"][2]
    assert top["finish_s"] == pytest.approx([2.0, 4.0, 6.0, 8.0])
    assert top["tokens"] == [100] * 4
    assert top["aggregate_tok_s"] == pytest.approx(400 / 8.0)
    assert top["verdict"] == "staircase"
    assert [b["rep"] for b in top["batches"]] == [0, 1]
    bar = top["batches"][1]["requests"][3]
    assert bar["end_s"] - top["batches"][1]["release_s"] == pytest.approx(8.0)


async def test_partial_document_is_marked_incomplete():
    driver = SerialFakeDriver()
    partials: list[StaircaseResult] = []
    await run_staircase(
        driver,  # type: ignore[arg-type]  # a fake: only what a staircase run calls
        ns=[1, 2], tokens=10, prompt_tokens=8, reps=1, rng=random.Random(0),
        on_point=partials.append, requests_factory=fake_requests,
    )
    first = fields_of(partials[0].document())
    assert first["complete"] is False
    assert first["verdict"] == "inconclusive"  # only N=1 so far


async def test_failed_warmup_is_an_error():
    with pytest.raises(ServerError, match="warm-up"):
        await run_staircase(
            SerialFakeDriver(warmup_ok=False),  # type: ignore[arg-type]  # a fake: only what a staircase run calls
            ns=[1, 2], tokens=10, prompt_tokens=8, reps=1,
            rng=random.Random(0), requests_factory=fake_requests,
        )


@pytest.mark.parametrize("ns", [[0], [2, -1], []])
def test_plan_rejects_bad_n(ns):
    with pytest.raises(UsageError):
        plan_ns(ns)


def test_plan_adds_baseline():
    assert plan_ns([8, 2, 2]) == ((1, 2, 8), ("added N=1: every verdict is judged against the single-request time",))
    assert plan_ns([1, 4]) == ((1, 4), ())


@pytest.mark.parametrize(
    ("status", "http_status", "hint"),
    [("timeout", None, "took too long"), ("error", 400, "refused the request"), ("error", None, "check the URL")],
)
def test_warm_up_failure_hint_fits_the_failure(status, http_status, hint):
    from servecheck.experiments.staircase import _warm_up_hint

    record = RequestRecord(index=0, nonce="n", status=status, tokens_requested=8, send_ns=0, http_status=http_status)
    assert hint in _warm_up_hint(record)


async def test_queued_requests_get_the_queue_ahead_added_to_their_wait():
    """The last of N requests on a serial server waits N - 1 single times for its first token."""
    driver = SerialFakeDriver()
    await run_staircase(
        driver,  # type: ignore[arg-type]  # a fake: only what a staircase run calls
        ns=[1, 2, 4], tokens=10, prompt_tokens=8, reps=1, rng=random.Random(0), requests_factory=fake_requests,
    )
    # The warm-up took SINGLE_S; each request ahead is allowed 1.5 times that.
    assert driver.queue_waits == pytest.approx([0.0, 1.5 * SINGLE_S, 3 * 1.5 * SINGLE_S, 0.0])  # N=1 again last
