"""vLLM/SGLang cache counters read from /metrics around each send: the hit delta is the send's cached
tokens, and every counter's delta (hits and queries) is kept in the JSON."""

from __future__ import annotations

import asyncio

from servecheck.model.codec import encode
from servecheck.experiments.prefix_cache import _send
from servecheck.model.records import GenRequest, RequestRecord, ServerInfo


class MetricsDriver:
    """A vLLM-like server whose counters move by `hits` and `queries` on every request."""

    def __init__(self, hits: int, queries: int) -> None:
        self.hits_step, self.queries_step = hits, queries
        self.hits = self.queries = 0.0

    async def get_text(self, path: str) -> str:
        assert path == "/metrics"
        return (
            "# TYPE vllm:prefix_cache_hits counter\n"
            f'vllm:prefix_cache_hits_total{{engine="0"}} {self.hits}\n'
            "# TYPE vllm:prefix_cache_queries counter\n"
            f'vllm:prefix_cache_queries_total{{engine="0"}} {self.queries}\n'
        )

    async def generate(self, req: GenRequest) -> RequestRecord:
        self.hits += self.hits_step
        self.queries += self.queries_step
        return RequestRecord(req.index, req.nonce, "ok", req.max_tokens, 0, 1_000_000, 2_000_000, (1_000_000,),
                             tokens=1)


def send_with(driver: MetricsDriver):
    info = ServerInfo(url="http://127.0.0.1:9", dialect="openai", model="m", engine="vllm")
    req = GenRequest(index=0, prompt="p", nonce="n", max_tokens=4, prompt_tokens=2000)
    return asyncio.run(_send(driver, info, "repeat", req))  # type: ignore[arg-type]  # a fake: /metrics and a send


def test_hit_delta_is_the_cached_tokens_and_both_deltas_are_kept() -> None:
    send = send_with(MetricsDriver(hits=1984, queries=2000))
    assert send.cached_tokens == 1984 and "vllm:prefix_cache_hits_total" in (send.cached_source or "")
    assert encode(send.body(), nulls=True)["counter_deltas"] == {
        "vllm:prefix_cache_hits_total": 1984.0,
        "vllm:prefix_cache_queries_total": 2000.0,
    }


def test_flat_counters_read_zero_cached() -> None:
    send = send_with(MetricsDriver(hits=0, queries=2000))
    assert (send.cached_tokens == 0
            and encode(send.body(), nulls=True)["counter_deltas"]["vllm:prefix_cache_queries_total"] == 2000.0)


class NanAfterTheSend(MetricsDriver):
    """A counter that reads NaN once the send is done: a witness with nothing to say."""

    async def generate(self, req: GenRequest) -> RequestRecord:
        record = await super().generate(req)
        self.hits = float("nan")
        return record


class Reset(MetricsDriver):
    """The hits counter went back to zero during the send (an engine restart): a negative delta is no count."""

    async def generate(self, req: GenRequest) -> RequestRecord:
        record = await super().generate(req)
        self.hits = 0.0
        return record


def test_a_nan_or_reset_counter_drops_the_witness_not_the_send() -> None:
    nan = send_with(NanAfterTheSend(hits=1984, queries=2000))
    assert nan.record.ok and nan.cached_tokens is None and nan.cached_source is None
    assert encode(nan.body(), nulls=True)["counter_deltas"] == {"vllm:prefix_cache_queries_total": 2000.0}
    driver = Reset(hits=1984, queries=2000)
    driver.hits = 5000.0
    reset = send_with(driver)
    assert reset.record.ok and reset.cached_tokens is None
    assert encode(reset.body(), nulls=True)["counter_deltas"]["vllm:prefix_cache_hits_total"] == -5000.0
