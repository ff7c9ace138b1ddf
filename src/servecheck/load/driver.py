"""The streaming load driver: detection, single requests, and batches released from a start barrier.

`LoadDriver` is one object over three modules: `load.transport` (the aiohttp session, control
requests, probes and JSON gets; why aiohttp, and how redirects are handled), `load.recording` (one
measured request: its stream read, stamped and made a `RequestRecord`) and `load.release` (a batch's
lanes released together from a start barrier). Here: the driver's life (`async with`), detection
and tokenizing, the gauge probe, and the single request and the batch that put the three together.

Honest concurrency: each batch opens fresh connections (one per lane, warmed with a cheap
GET) before the barrier, releases them together, never retries, and measures dispatch skew.
A request that fails is a `RequestRecord` with a status, never an exception through a batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from servecheck.wire.base import RunClock, Target
from servecheck.wire.dialects import MAX_PLAUSIBLE_TOKENS, Dialect, count_problem, get_dialect
from servecheck.wire.request_params import check_eos_bias
from servecheck.errors import ProtocolError, UsageError
from servecheck.load.detect import MLX_LM, identify, list_models, pick_model, server_info
from servecheck.load.eos import local_model_eos_ids
from servecheck.load.inject import StallInjector
from servecheck.load.lateness import LatenessMeter
from servecheck.load.recording import StreamRecording
from servecheck.load.release import ReleaseAt, release
from servecheck.load.witness import GaugeSampler, GaugeSource, NoiseMeter, probe_source
from servecheck.model.client import ClientLateness
from servecheck.model.records import BatchResult, GenRequest, RequestRecord, ServerInfo

# Re-exported: the names this module offered before the transport, the release and the recording moved out.
from servecheck.load.recording import (
    _JSON as _JSON,
    CEILING_S_PER_TOKEN as CEILING_S_PER_TOKEN,
    ERROR_BODY_BYTES as ERROR_BODY_BYTES,
    _apply as _apply,
    _CutOff as _CutOff,
    _lost_message as _lost_message,
    _Outcome as _Outcome,
    _server_prompt_len as _server_prompt_len,
)
from servecheck.load.release import SPIN_NS as SPIN_NS
from servecheck.load.release import sleep_until as sleep_until
from servecheck.load.transport import (
    CONTROL_TIMEOUT_S as CONTROL_TIMEOUT_S,
    MAX_REDIRECTS as MAX_REDIRECTS,
    REDIRECT_STATUSES as REDIRECT_STATUSES,
    SIMULATED_HEADER as SIMULATED_HEADER,
    _message as _message,
    base_url as base_url,
)

# Looking for gauges, and reading them, is best effort: a slow answer means no witness.
GAUGE_PROBE_TIMEOUT_S = 2.0
GAUGE_PROBE_TRIES = 3  # looks for a gauge source that got no answer, before the run does without


class LoadDriver(StreamRecording):
    """Talks to one server. Use as `async with LoadDriver(target) as driver:`."""

    def __init__(self, target: Target, clock: RunClock | None = None) -> None:
        self.clock = clock if clock is not None else RunClock.start()
        self.info: ServerInfo | None = None
        self._dialect: Dialect | None = None if target.api == "auto" else get_dialect(target.api)
        self._can_tokenize: bool | None = None
        self._gauge_source: GaugeSource | None | bool = False  # False: not looked for yet (or not answered)
        self._gauge_probes = 0
        self.witnesses = True  # sample the server's gauges and the client's noise during batches
        # The client's own lateness, metered all run long whatever the witnesses (analysis.client_timing),
        # and a late client on purpose where SERVECHECK_CLIENT_STALLS asks for one (load.inject).
        self.lateness = LatenessMeter(self.clock.now_ns)
        self.stalls = StallInjector.from_env()
        super().__init__(target)  # load.transport: the target, URL, session and TLS context

    def __repr__(self) -> str:
        return f"LoadDriver(url={self.url!r}, api={self.target.api!r})"

    async def __aenter__(self) -> LoadDriver:
        # Control calls (detection, /tokenize, gauges) each get a fresh connection: a keep-alive
        # connection left idle between calls may have been closed by the server, and writing a
        # request into it fails ("Can not write request body") instead of reaching the server.
        self._session = self._new_session(limit=0, force_close=True)
        self.lateness.start()
        if self.stalls is not None:
            self.stalls.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.stalls is not None:
            await self.stalls.stop()
        await self.lateness.stop()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def client_lateness(self, lo_ns: int, hi_ns: int) -> ClientLateness | None:
        """How late this client was over [lo_ns, hi_ns] of the run clock (None: not metered)."""
        return self.lateness.record(lo_ns, hi_ns)

    async def gauge_source(self) -> GaugeSource | None:
        """The server's running/waiting gauges, looked for once per driver; None when it has none.
        A look that got no answer (vLLM on two busy cores once took over the probe's 2 s to serve
        /metrics, and the whole run lost its gauges) is repeated before later batches, at most
        GAUGE_PROBE_TRIES times in all."""
        if self._gauge_source is False:
            engine = self.info.engine if self.info else None
            found, final = await probe_source(engine, lambda path: self.fetch_raw(path, GAUGE_PROBE_TIMEOUT_S))
            self._gauge_probes += 1
            if found is not None or final or self._gauge_probes >= GAUGE_PROBE_TRIES:
                self._gauge_source = found
            return found
        return self._gauge_source if isinstance(self._gauge_source, GaugeSource) else None

    # ---- detection and tokenizing --------------------------------------------------------

    async def detect(self) -> ServerInfo:
        """Identify the engine and dialect, list the models and fill `ServerInfo`."""
        found = await identify(self)
        if found is None and self.target.api == "auto":
            raise ProtocolError(
                f"no LLM API found at {self.url}: tried {', '.join(_TRIED)}",
                "is this the inference server's URL and port? force a dialect with --api",
            )
        dialect = self.target.api if self.target.api != "auto" else found.dialect  # type: ignore[union-attr]
        self._dialect = get_dialect(dialect)
        models = await list_models(self, found)
        model = pick_model(self.url, self.target.model, models, found)
        eos_ids = self.target.eos_token_ids
        if not eos_ids and found is not None and found.engine == MLX_LM:
            eos_ids = local_model_eos_ids(self.url, model)
        check_eos_bias(self.target.request_params, eos_ids)
        self.info = await server_info(self, found, dialect, model, models, self._saw_simulated, eos_ids)
        return self.info

    async def _ready(self) -> Dialect:
        if self.info is None:
            await self.detect()
        assert self._dialect is not None
        return self._dialect

    async def tokenize(self, text: str) -> int | None:
        """The prompt's length in the server's tokens, or None when the server has no tokenizer endpoint."""
        if self._can_tokenize is False:
            return None
        await self._ready()
        status, data = await self.probe("POST", "/tokenize", self._tokenize_body(text))
        count = self._checked_count(_token_count(data)) if status == 200 else None
        self._can_tokenize = count is not None
        return count

    def _checked_count(self, count: int | float | None) -> int | None:
        # A count sizes the prompt built from it: -10^12 once grew a list until memory ran out.
        if count is None:
            return None
        if (problem := count_problem(f"{self.url}/tokenize count", count)) is not None:
            raise ProtocolError(problem,
                                f"the server's tokenizer is broken; counts must lie in 0..{MAX_PLAUSIBLE_TOKENS}")
        return int(count)

    def _tokenize_body(self, text: str) -> dict[str, Any]:
        engine = self.info.engine if self.info else None
        if engine == "llama.cpp":
            return {"content": text, "add_special": True}  # count BOS as the server will
        body: dict[str, Any] = {"prompt": text, "content": text}
        if self.info and self.info.model:
            body["model"] = self.info.model
        return body

    # ---- generation ----------------------------------------------------------------------

    async def generate(self, req: GenRequest) -> RequestRecord:
        """One streamed request, no barrier; like a batch lane, on a fresh connection opened first
        (a keep-alive connection left idle since detection may have been closed by the server)."""
        dialect = await self._ready()
        session = self._new_session(limit=1)
        try:
            await self._warm(session, dialect)
            return await self._send(session, dialect, req)
        finally:
            await session.close()

    async def run_batch(
        self, reqs: Sequence[GenRequest], in_flight: int | None = None, queue_wait_s: float = 0.0
    ) -> BatchResult:
        """Release `reqs` together from a start barrier (at most `in_flight` at once).

        `queue_wait_s` extends the first-token and request timeouts of this batch: a server that
        queues requests legitimately holds the last one that long before its first token.
        """
        return await self.run_timed_batch(reqs, in_flight, queue_wait_s, None)

    async def run_timed_batch(
        self,
        reqs: Sequence[GenRequest],
        in_flight: int | None,
        queue_wait_s: float,
        release_at: ReleaseAt | None,
    ) -> BatchResult:
        """`run_batch`, with the barrier opened when `release_at` says: it is awaited once every lane's
        connection is warm and returns the run-clock instant at which to open. How worker processes
        (`load.lanes`) open theirs together with every other worker's."""
        if not reqs:
            raise UsageError("a batch needs at least one request")
        if in_flight is not None and in_flight < 1:
            raise UsageError(f"in_flight must be >= 1, got {in_flight}")
        dialect = await self._ready()
        lanes = len(reqs) if in_flight is None else min(in_flight, len(reqs))
        source = await self.gauge_source() if self.witnesses else None
        sessions = [self._new_session(limit=1, queue_wait_s=queue_wait_s) for _ in range(lanes)]
        sampler = None if source is None else GaugeSampler(
            source, lambda path: self.fetch_raw(path, GAUGE_PROBE_TIMEOUT_S), self.clock.now_ns
        )
        noise = NoiseMeter(self.clock.now_ns) if self.witnesses else None
        try:
            await asyncio.gather(*(self._warm(s, dialect) for s in sessions))
            release_ns, records, first_sends = await release(self.clock, self._send, self._send_fresh, sessions,
                                                             dialect, reqs, queue_wait_s, sampler, noise, release_at)
        finally:
            gauges = None if sampler is None else await sampler.stop()
            measured_noise = None if noise is None else await noise.stop()
            await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
        ordered = tuple(sorted(records, key=lambda r: r.index))
        ends = [r.end_ns for r in ordered if r.end_ns is not None]
        late = self.lateness.record(release_ns, max(ends, default=self.clock.now_ns()))
        return BatchResult(release_ns, lanes, ordered, max(first_sends) - min(first_sends), gauges, measured_noise,
                           lateness=late)


_TRIED = ("/props", "/api/version", "/version", "/v1/models", "/health + /completion")


def _token_count(data: Any) -> int | float | None:
    if not isinstance(data, dict):
        return None
    count = data.get("count")
    if isinstance(count, (int, float)) and not isinstance(count, bool):
        return count
    tokens = data.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None
