"""A deterministic stand-in for `LoadDriver`: a scripted server on a virtual clock, no sockets.

Scripted tests hand `FakeDriver` to an experiment, or to the CLI through its driver seam
(`main(args, open_driver=...)`), and know every time to the nanosecond. The server it plays
decodes at most `slots` requests at once (the rest wait their turn, first come first served),
and its laws say how long the first token and each later one take with n requests in flight.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from servecheck.wire.base import Target
from servecheck.model.client import ClientLateness
from servecheck.model.records import NS_PER_S, BatchResult, GenRequest, RequestRecord, ServerInfo, ServerTimings

# Seconds as a function of the requests in flight (a batching server's step grows with its batch).
Law = Callable[[int], float]

# Virtual time between the previous call and a batch's barrier, and between two lanes' sends:
# small against any step, like the real driver's barrier and dispatch skew.
RELEASE_DELAY_NS = NS_PER_S // 100
LANE_SKEW_NS = 10_000


def flat(seconds: float) -> Law:
    """A law that does not depend on how many are in flight."""
    return lambda n: seconds


@dataclass(frozen=True)
class FakeServer:
    """What the scripted server says it is, and how it times its work."""

    slots: int | None = None  # decoded at once; None: every request sent (a batching server), 1: a queue
    ttft_s: Law = field(default=flat(0.02))  # send (or slot free) to first token, by requests in flight
    token_s: Law = field(default=flat(0.005))  # between one request's tokens, by requests in flight
    gap_s: float = 0.001  # a lane's pause between its requests in a closed loop
    heat: float = 0.0  # every batch this fraction slower than the one before (a warming machine)
    jitter: float = 0.0  # each request's step drawn within +-jitter of the law (seeded: repeatable)
    fails: Callable[[int], bool] = field(default=lambda n: False)  # HTTP 503 at n in flight
    fail_warmup: bool = False  # the first single request fails (HTTP 404)
    ctrl_c_at_call: int | None = None  # the k-th generate / run_batch call raises KeyboardInterrupt
    one_event: bool = False  # every token arrives in the final event (a server that buffers its stream)
    url: str = "http://fake"
    dialect: str = "llamacpp"
    model: str = "fake"
    engine: str | None = None
    simulated: bool = True  # like servecheck's simulator: results carry the SIMULATED banner
    n_ctx_per_request: int | None = None


class FakeDriver:
    """Satisfies `load.protocol.Driver`; also its own async context manager, so `lambda target: fake`
    is a driver factory. Keeps what it was asked, for tests: `batches` (in flight per batch)."""

    def __init__(self, server: FakeServer | None = None, *, seed: int = 1) -> None:
        self.server = server if server is not None else FakeServer()
        self.now_ns = 0
        self.calls = 0
        self.batches: list[int] = []
        self.requests: list[GenRequest] = []
        self._rng = random.Random(seed)

    def open(self, target: Target) -> FakeDriver:
        """A driver factory (`DriverFactory`) that always hands out this driver."""
        return self

    async def __aenter__(self) -> FakeDriver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def detect(self) -> ServerInfo:
        s = self.server
        return ServerInfo(url=s.url, dialect=s.dialect, model=s.model, models=(s.model,), engine=s.engine,
                          simulated=s.simulated, n_ctx_per_request=s.n_ctx_per_request, total_slots=s.slots)

    async def tokenize(self, text: str) -> int | None:
        return None  # no tokenizer endpoint: prompt lengths are the builder's estimate

    async def get_json(self, path: str) -> Any | None:
        return None

    async def get_text(self, path: str) -> str | None:
        return None

    async def probe(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return 404, None

    async def client_lateness(self, lo_ns: int, hi_ns: int) -> ClientLateness | None:
        """A scripted clock is never late: no windows, resolution 0, the whole stretch covered."""
        return ClientLateness(tick_ns=0, floor_ns=0, from_ns=lo_ns, to_ns=hi_ns)

    async def generate(self, req: GenRequest) -> RequestRecord:
        self._count_call()
        if self.server.fail_warmup and self.calls == 1:
            return RequestRecord(index=req.index, nonce=req.nonce, status="error", tokens_requested=req.max_tokens,
                                 send_ns=self.now_ns, http_status=404, error="HTTP 404")
        record = self._serve(req, self.now_ns, self.now_ns, in_flight=1, heat=1.0)
        self.now_ns = record.end_ns or self.now_ns
        return record

    async def run_batch(
        self, reqs: Sequence[GenRequest], in_flight: int | None = None, queue_wait_s: float = 0.0
    ) -> BatchResult:
        self._count_call()
        lanes = len(reqs) if in_flight is None else min(in_flight, len(reqs))
        self.batches.append(lanes)
        release = self.now_ns + RELEASE_DELAY_NS
        records = self._timeline(reqs, lanes, release)
        self.now_ns = max((r.end_ns or release) for r in records)
        return BatchResult(release, lanes, tuple(sorted(records, key=lambda r: r.index)), (lanes - 1) * LANE_SKEW_NS,
                           lateness=ClientLateness(tick_ns=0, floor_ns=0, from_ns=release, to_ns=self.now_ns))

    def _count_call(self) -> None:
        self.calls += 1
        if self.calls == self.server.ctrl_c_at_call:
            raise KeyboardInterrupt  # as a Ctrl-C arriving while the call runs

    def _timeline(self, reqs: Sequence[GenRequest], lanes: int, release: int) -> list[RequestRecord]:
        """Each lane sends its next request when its last one ends (plus the gap); a request starts
        once a slot is free. The laws read how many decode at once: the lanes, capped by the slots."""
        in_flight = lanes if self.server.slots is None else min(lanes, self.server.slots)
        heat = (1.0 + self.server.heat) ** len(self.batches)
        lane_free = [release + lane * LANE_SKEW_NS for lane in range(lanes)]
        slot_free = [release] * in_flight
        records = []
        for req in reqs:
            lane = min(range(lanes), key=lambda i: lane_free[i])
            slot = min(range(in_flight), key=lambda i: slot_free[i])
            send = lane_free[lane]
            record = self._serve(req, send, max(send, slot_free[slot]), in_flight, heat)
            end = record.end_ns or send
            slot_free[slot] = end
            lane_free[lane] = end + int(self.server.gap_s * NS_PER_S)
            records.append(record)
        return records

    def _serve(self, req: GenRequest, send: int, start: int, in_flight: int, heat: float) -> RequestRecord:
        self.requests.append(req)
        if self.server.fails(in_flight):
            return RequestRecord(index=req.index, nonce=req.nonce, status="error", tokens_requested=req.max_tokens,
                                 send_ns=send, end_ns=send + NS_PER_S // 1000, http_status=503,
                                 error="HTTP 503: server busy")
        jitter = self.server.jitter
        step_ns = self.server.token_s(in_flight) * heat * NS_PER_S / (1 + self._rng.uniform(-jitter, jitter))
        first = start + int(self.server.ttft_s(in_flight) * NS_PER_S)
        times = tuple(first + int(i * step_ns) for i in range(req.max_tokens))
        if self.server.one_event:
            first, times = times[-1], times[-1:]
        return RequestRecord(
            index=req.index, nonce=req.nonce, status="ok", tokens_requested=req.max_tokens, send_ns=send,
            first_token_ns=first, end_ns=times[-1], token_ns=times, tokens=req.max_tokens, tokens_source="usage",
            prompt_tokens=req.prompt_tokens, server=ServerTimings(prompt_tokens=req.prompt_tokens),
        )
