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
        return RequestRecord(req.index, req.nonce, "ok", req.max_tokens, 0, 1_000_000, 2_000_000, (1_000_000,), 1)


def send_with(driver: MetricsDriver):
    info = ServerInfo(url="http://127.0.0.1:9", dialect="openai", model="m", engine="vllm")
    req = GenRequest(index=0, prompt="p", nonce="n", max_tokens=4, prompt_tokens=2000)
    return asyncio.run(_send(driver, info, "repeat", req))


def test_hit_delta_is_the_cached_tokens_and_both_deltas_are_kept() -> None:
    send = send_with(MetricsDriver(hits=1984, queries=2000))
    assert send.cached_tokens == 1984 and "vllm:prefix_cache_hits_total" in (send.cached_source or "")
    assert encode(send.body(), nulls=True)["counter_deltas"] == {
        "vllm:prefix_cache_hits_total": 1984.0,
        "vllm:prefix_cache_queries_total": 2000.0,
    }


def test_flat_counters_read_zero_cached() -> None:
    send = send_with(MetricsDriver(hits=0, queries=2000))
    assert send.cached_tokens == 0 and encode(send.body(), nulls=True)["counter_deltas"]["vllm:prefix_cache_queries_total"] == 2000.0
