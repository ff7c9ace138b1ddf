"""The streaming load driver: detection, single requests, and batches released from a start barrier.

aiohttp, not httpx: `content.readany()` hands us each raw chunk as it arrives, so every event
is stamped on arrival, and the simulated server is built on aiohttp too: one HTTP library
shared by both sides of every test.

Redirects are never followed by aiohttp (it would carry the API key and --header values to
wherever a server points): control requests follow them by hand, on the same origin only and at
most MAX_REDIRECTS times; a measured request that is redirected fails, naming where to.

Honest concurrency: each batch opens fresh connections (one per lane, warmed with a cheap
GET) before the barrier, releases them together, never retries, and measures dispatch skew.
A request that fails is a `RequestRecord` with a status, never an exception through a batch.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from servecheck.client.base import RunClock, StreamParseError, Target, shorten
from servecheck.client.dialects import MAX_PLAUSIBLE_TOKENS, Dialect, EventReading, count_problem, get_dialect
from servecheck.client.request_params import check_eos_bias, with_request_params
from servecheck.client.ndjson import NdjsonParser
from servecheck.client.sse import SseParser, loads_object
from servecheck.client.tally import StreamTally, cutoff_tokens, plausibility_problem
from servecheck.errors import ConnectError, ProtocolError, RequestTimeout, ServerError, UsageError
from servecheck.load.detect import MLX_LM, identify, list_models, pick_model, server_info
from servecheck.load.eos import local_model_eos_ids, with_eos_bias
from servecheck.load.inject import StallInjector
from servecheck.load.lateness import LatenessMeter
from servecheck.load.witness import GaugeSampler, GaugeSource, NoiseMeter, probe_source
from servecheck.model.client import ClientLateness
from servecheck.model.records import BatchResult, GenRequest, RequestRecord, RequestStatus, ServerInfo

SIMULATED_HEADER = "X-Servecheck-Simulated"
# Detection and tokenize calls are cheap; a server that takes longer than this (or than --timeout,
# whichever is shorter) is not answering.
CONTROL_TIMEOUT_S = 30.0
# The slowest decoding a request is given time for, on top of the first-token wait: a request is cut
# off after `first_token_timeout_s + max_tokens * CEILING_S_PER_TOKEN` (plus any queue allowance)
# however steadily it streams, so a stream that never ends cannot hold a run for the request timeout.
CEILING_S_PER_TOKEN = 2.0
# Looking for gauges, and reading them, is best effort: a slow answer means no witness.
GAUGE_PROBE_TIMEOUT_S = 2.0
GAUGE_PROBE_TRIES = 3  # looks for a gauge source that got no answer, before the run does without
# Bytes of an HTTP error body worth reading for its message.
ERROR_BODY_BYTES = 4096
# Redirects a control request follows (on the server's own origin) before it is called a loop:
# aiohttp's and browsers' own limit.
MAX_REDIRECTS = 10
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


def base_url(url: str) -> str:
    """The server root: an OpenAI-style base URL ending in /v1 is accepted and trimmed."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class LoadDriver:
    """Talks to one server. Use as `async with LoadDriver(target) as driver:`."""

    def __init__(self, target: Target, clock: RunClock | None = None) -> None:
        self.target = target
        self.clock = clock if clock is not None else RunClock.start()
        self.url = base_url(target.url)
        self.info: ServerInfo | None = None
        self._dialect: Dialect | None = None if target.api == "auto" else get_dialect(target.api)
        self._session: aiohttp.ClientSession | None = None
        self._saw_simulated = False
        self.server_header: str | None = None  # the `Server` header of the latest control answer (detection reads it)
        self._can_tokenize: bool | None = None
        self._gauge_source: GaugeSource | None | bool = False  # False: not looked for yet (or not answered)
        self._gauge_probes = 0
        self.witnesses = True  # sample the server's gauges and the client's noise during batches
        # The client's own lateness, metered all run long whatever the witnesses (analysis.client_timing),
        # and a late client on purpose where SERVECHECK_CLIENT_STALLS asks for one (load.inject).
        self.lateness = LatenessMeter(self.clock.now_ns)
        self.stalls = StallInjector.from_env()
        # Built once per driver (not per lane: loading CA certificates costs milliseconds), and at
        # run time so SSL_CERT_FILE / SSL_CERT_DIR name a private CA for https servers.
        self._ssl = ssl.create_default_context() if self.url.startswith("https:") else None

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

    # ---- sessions, headers, errors -------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = dict(self.target.headers)
        if self.target.api_key:
            headers["Authorization"] = f"Bearer {self.target.api_key}"
        return headers

    def _new_session(self, limit: int, queue_wait_s: float = 0.0, force_close: bool = False) -> aiohttp.ClientSession:
        # No total timeout on streams (a 5-minute default would kill long runs); the first-token
        # and stall limits are enforced while reading, the request limit here.
        timeout = aiohttp.ClientTimeout(
            total=self.target.request_timeout_s + queue_wait_s,
            connect=self.target.connect_timeout_s,
            sock_connect=self.target.connect_timeout_s,
        )
        connector = aiohttp.TCPConnector(
            limit=limit, limit_per_host=0, ssl=self._ssl if self._ssl else True, force_close=force_close
        )
        return aiohttp.ClientSession(connector=connector, headers=self._headers(), timeout=timeout)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use LoadDriver as `async with LoadDriver(target) as driver:`")
        return self._session

    def scrub(self, text: str) -> str:
        """Remove the API key and header values from anything that may be shown or saved."""
        secrets = [self.target.api_key or ""] + [v for _, v in self.target.headers]
        for secret in secrets:
            if len(secret) >= 4:
                text = text.replace(secret, "***")
        return text

    def _note_headers(self, resp: aiohttp.ClientResponse) -> None:
        self.server_header = resp.headers.get("Server")
        if resp.headers.get(SIMULATED_HEADER, "").strip() == "1":
            self._saw_simulated = True

    def _connect_error(self, exc: BaseException) -> ConnectError:
        if isinstance(exc, aiohttp.ClientConnectorCertificateError):
            return ConnectError(
                f"TLS certificate of {self.url} was refused: {shorten(str(exc.certificate_error))}",
                "check the https URL's certificate",
            )
        reason = getattr(exc, "os_error", None) or exc
        return ConnectError(
            self.scrub(f"cannot connect to {self.url}: {shorten(str(reason))}"),
            "check the host and port; is the server running?",
        )

    # ---- control requests ----------------------------------------------------------------

    async def _call(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        """One short request, redirects followed by hand (same origin only, MAX_REDIRECTS at most)."""
        url = self.url + path
        for _ in range(MAX_REDIRECTS):
            status, raw, location = await self._call_once(method, url, body)
            if location is None:
                return status, raw
            url = self._redirect_target(path, url, location)
            if status == 303 or (status in (301, 302) and method == "POST"):
                method, body = "GET", None  # what every HTTP client does with these
        status, raw, location = await self._call_once(method, url, body)
        if location is None:
            return status, raw
        raise ProtocolError(
            self.scrub(f"the server redirected {path} {MAX_REDIRECTS} times and asked for more; last URL {url}, "
                       f"which redirects to {location}"),
            "a redirect loop: check the server's URL, or its proxy's redirect rules",
        )

    def _redirect_target(self, path: str, url: str, location: str) -> str:
        """Where a redirect points, when that is the server's own origin; otherwise an error: the
        API key and the headers go to the host and port the user named, nowhere else."""
        try:
            target = URL(url).join(URL(location))
        except ValueError:
            raise ProtocolError(self.scrub(f"the server redirected {path} to an unreadable URL {location!r}")) from None
        if target.origin() != URL(self.url).origin():
            raise ProtocolError(
                self.scrub(f"the server redirected {path} to {target}, away from {URL(self.url).origin()}: "
                           "servecheck sends the API key and headers only to the server it was given, and stopped"),
                f"if {target.origin()} is the server to test, give servecheck that URL",
            )
        return str(target)

    async def _call_once(self, method: str, url: str, body: Any) -> tuple[int, bytes, str | None]:
        """One short request, with network errors translated into servecheck errors; the Location
        of a redirect (None for any other answer)."""
        limit_s = self.control_timeout_s
        connect_s = min(self.target.connect_timeout_s, limit_s)
        # Connecting (TCP and TLS) and answering are bounded apart, so the error can say which one stalled.
        timeout = aiohttp.ClientTimeout(total=connect_s + limit_s, connect=connect_s, sock_connect=connect_s,
                                        sock_read=limit_s)
        try:
            async with self.session.request(method, url, json=body, timeout=timeout, allow_redirects=False) as resp:
                self._note_headers(resp)
                location = resp.headers.get("Location") if resp.status in REDIRECT_STATUSES else None
                return resp.status, await resp.content.read(1 << 22), location
        except aiohttp.ClientConnectorError as exc:
            raise self._connect_error(exc) from exc
        except aiohttp.ConnectionTimeoutError as exc:
            raise self._connect_timeout(connect_s) from exc
        except TimeoutError as exc:
            raise RequestTimeout(
                f"{url} accepted the connection but sent no answer within {limit_s:g} s",
                "is the server overloaded or stuck? raise --timeout to wait longer",
            ) from exc
        except aiohttp.ServerDisconnectedError as exc:
            raise ConnectError(f"{url}: the server closed the connection without answering",
                               "is this an HTTP server?") from exc
        except aiohttp.ClientOSError as exc:
            raise ConnectError(self.scrub(f"{url}: connection reset ({shorten(str(exc.strerror or exc))})"),
                               None) from exc
        except aiohttp.ClientError as exc:
            raise ConnectError(self.scrub(f"{url}: {shorten(str(exc))}"), "is this an HTTP server?") from exc

    @property
    def control_timeout_s(self) -> float:
        """Detection and tokenize calls honour --timeout when it is shorter than the usual limit."""
        return min(CONTROL_TIMEOUT_S, self.target.first_token_timeout_s)

    def _connect_timeout(self, limit_s: float) -> ConnectError:
        if self._ssl is not None:
            return ConnectError(
                f"TLS handshake with {self.url} did not complete within {limit_s:g} s: the port accepted the "
                "connection but never answered the handshake",
                "is this port serving plain http? try an http:// URL",
            )
        return ConnectError(f"connecting to {self.url} timed out after {limit_s:g} s", "check the host and port")

    async def probe(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """(status, decoded JSON or None). HTTP errors are returned, not raised; 401/403 are raised."""
        status, raw = await self._call(method, path, body)
        if status in (401, 403):
            raise ServerError(
                f"{self.url}{path} refused the request (HTTP {status}): {self.scrub(_message(raw))}",
                "pass --api-key or --header 'Authorization: Bearer ...'",
                status=status,
            )
        try:
            return status, loads_object(raw.decode("utf-8", errors="replace")) if raw.strip()[:1] == b"{" else None
        except StreamParseError:
            return status, None

    async def get_json(self, path: str) -> Any | None:
        """GET a JSON document; None on 404. Other HTTP errors raise ServerError."""
        status, raw = await self._call("GET", path)
        if status == 404:
            return None
        self._raise_for(status, path, raw)
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ProtocolError(f"{self.url}{path} did not return JSON: "
                                f"{shorten(raw.decode(errors='replace'))!r}") from exc

    async def fetch_raw(self, path: str, timeout_s: float = CONTROL_TIMEOUT_S) -> tuple[int, bytes] | None:
        """(status, body) of a GET, or None on any network failure: for best-effort witnesses."""
        timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=self.target.connect_timeout_s)
        try:
            async with self.session.get(self.url + path, timeout=timeout, allow_redirects=False) as resp:
                return resp.status, await resp.content.read(1 << 20)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            return None

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

    async def get_text(self, path: str) -> str | None:
        """GET a text document (e.g. /metrics); None on 404."""
        status, raw = await self._call("GET", path)
        if status == 404:
            return None
        self._raise_for(status, path, raw)
        return raw.decode("utf-8", errors="replace")

    def _raise_for(self, status: int, path: str, raw: bytes) -> None:
        if status >= 400:
            raise ServerError(f"{self.url}{path}: HTTP {status}: {self.scrub(_message(raw))}", status=status)

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
            release_ns, records, first_sends = await self._release(sessions, dialect, reqs, queue_wait_s, sampler,
                                                                   noise, release_at)
        finally:
            gauges = None if sampler is None else await sampler.stop()
            measured_noise = None if noise is None else await noise.stop()
            await asyncio.gather(*(s.close() for s in sessions), return_exceptions=True)
        ordered = tuple(sorted(records, key=lambda r: r.index))
        ends = [r.end_ns for r in ordered if r.end_ns is not None]
        late = self.lateness.record(release_ns, max(ends, default=self.clock.now_ns()))
        return BatchResult(release_ns, lanes, ordered, max(first_sends) - min(first_sends), gauges, measured_noise,
                           lateness=late)

    async def _warm(self, session: aiohttp.ClientSession, dialect: Dialect) -> None:
        """Open this lane's connection before the barrier, so TCP/TLS setup is not timed."""
        try:
            async with session.get(self.url + dialect.warm_path, allow_redirects=False) as resp:
                await resp.read()
        except (aiohttp.ClientError, TimeoutError):
            pass  # the request itself will record the failure

    async def _release(
        self,
        sessions: list[aiohttp.ClientSession],
        dialect: Dialect,
        reqs: Sequence[GenRequest],
        queue_wait_s: float,
        sampler: GaugeSampler | None = None,
        noise: NoiseMeter | None = None,
        release_at: ReleaseAt | None = None,
    ) -> tuple[int, list[RequestRecord], list[int]]:
        gate = asyncio.Event()
        queue = deque(reqs)
        records: list[RequestRecord] = []
        first_sends: list[int] = []

        async def lane(session: aiohttp.ClientSession) -> None:
            await gate.wait()
            if queue:  # only a lane's first request is released together, on its warmed connection
                records.append(await self._send(session, dialect, queue.popleft(), first_sends, queue_wait_s))
            while queue:
                records.append(await self._send_fresh(dialect, queue.popleft(), queue_wait_s))

        tasks = [asyncio.create_task(lane(s)) for s in sessions]
        await asyncio.sleep(0)  # every lane reaches the gate before it opens
        if release_at is None:
            release_ns = self.clock.now_ns()
        else:
            release_ns = await release_at()
            await sleep_until(self.clock, release_ns)
        gate.set()
        # The witnesses start after the gate, so they never delay a lane's first send.
        for witness in (sampler, noise):
            if witness is not None:
                witness.start()
        await asyncio.gather(*tasks)
        return release_ns, records, first_sends

    async def _send_fresh(self, dialect: Dialect, req: GenRequest, queue_wait_s: float) -> RequestRecord:
        """A lane's later request goes out on a new connection: servers close a connection after
        a streamed reply (llama-server does), and writing into one that is closing fails the
        request. Warming it in advance is no cure either: an idle connection is closed too."""
        session = self._new_session(limit=1, queue_wait_s=queue_wait_s)
        try:
            return await self._send(session, dialect, req, queue_wait_s=queue_wait_s)
        finally:
            await session.close()

    async def _send(
        self,
        session: aiohttp.ClientSession,
        dialect: Dialect,
        req: GenRequest,
        first_sends: list[int] | None = None,
        queue_wait_s: float = 0.0,
    ) -> RequestRecord:
        # Encoded before the send stamp: only the HTTP write itself lies between stamp and wire.
        model, eos_ids = ((self.info.model, self.info.eos_bias_ids) if self.info
                          else (self.target.model, self.target.eos_token_ids))
        pinned = with_eos_bias(dialect.body(req, model), dialect, req, eos_ids)
        body = json.dumps(with_request_params(pinned, (*self.target.request_params, *req.request_params))).encode()
        tally = StreamTally()
        send_ns = self.clock.now_ns()
        if first_sends is not None:
            first_sends.append(send_ns)
        if self.stalls is not None:
            self.stalls.on_send(req)
        outcome = await self._stream(session, dialect, body, tally, queue_wait_s, req.max_tokens)
        return self._record(req, send_ns, tally, outcome)

    async def _stream(
        self,
        session: aiohttp.ClientSession,
        dialect: Dialect,
        body: bytes,
        tally: StreamTally,
        queue_wait_s: float = 0.0,
        max_tokens: int = 0,
    ) -> _Outcome:
        wait_s = self.target.first_token_timeout_s + queue_wait_s
        http_status: int | None = None
        try:
            async with asyncio.timeout(self.ceiling_s(max_tokens, queue_wait_s)) as ceiling:
                async with asyncio.timeout(wait_s) as deadline:
                    async with session.post(self.url + dialect.path, data=body, headers=_JSON,
                                            allow_redirects=False) as resp:
                        http_status = resp.status
                        self._note_headers(resp)
                        if resp.status in REDIRECT_STATUSES:
                            return _Outcome("error", http_status, self._redirected(dialect.path, resp))
                        if resp.status >= 400:
                            return _Outcome("error", http_status, await self._http_error(resp))
                        await self._read(resp, dialect, tally, deadline, max_tokens)
        except TimeoutError:
            if ceiling.expired():
                return _Outcome("timeout", http_status, self._ceiling_message(tally, max_tokens, queue_wait_s))
            return _Outcome("timeout", http_status, self._timeout_message(tally, deadline.expired(), queue_wait_s))
        except _CutOff as exc:
            return _Outcome("error", http_status, str(exc))
        except StreamParseError as exc:
            return _Outcome("error", http_status, self.scrub(exc.message))
        except aiohttp.ClientConnectorError as exc:
            return _Outcome("error", http_status, self._connect_error(exc).message)
        except aiohttp.ClientError as exc:
            return _Outcome("error", http_status, self.scrub(_lost_message(exc, tally)))
        return _Outcome("ok", http_status, None)

    def ceiling_s(self, max_tokens: int, queue_wait_s: float = 0.0) -> float:
        """The hard wall-clock bound of one request, however it streams (see CEILING_S_PER_TOKEN)."""
        return self.target.first_token_timeout_s + queue_wait_s + max(max_tokens, 1) * CEILING_S_PER_TOKEN

    def _ceiling_message(self, tally: StreamTally, max_tokens: int, queue_wait_s: float) -> str:
        return (
            f"request cut off after {self.ceiling_s(max_tokens, queue_wait_s):.3g} s, the most a {max_tokens}-token "
            f"request is given (--timeout + {CEILING_S_PER_TOKEN:g} s per token), with {tally.events} token events "
            "and no final event"
        )

    async def _read(
        self,
        resp: aiohttp.ClientResponse,
        dialect: Dialect,
        tally: StreamTally,
        deadline: asyncio.Timeout,
        max_tokens: int = 0,
    ) -> None:
        parser: SseParser | NdjsonParser = SseParser() if dialect.framing == "sse" else NdjsonParser()
        loop = asyncio.get_running_loop()
        stall_s = self.target.first_token_timeout_s
        cutoff = cutoff_tokens(max_tokens)
        t_ns = self.clock.now_ns()
        while tally.final_ns is None:
            chunk = await resp.content.readany()
            if self.stalls is not None:
                self.stalls.after_read()  # a late reader on purpose: the stamp below is taken late
            t_ns = self.clock.now_ns()
            if not chunk:
                break
            _apply(parser.feed(chunk), dialect, tally, t_ns)
            if tally.streamed > cutoff:
                raise _CutOff(
                    f"stream cut off after {tally.streamed} tokens: more than {cutoff} "
                    f"(2x the {max_tokens} requested + {cutoff - 2 * max_tokens}) and no final event"
                )
            if tally.first_token_ns is not None:
                deadline.reschedule(loop.time() + stall_s)
        if tally.final_ns is None:
            _apply(parser.close(), dialect, tally, t_ns)

    def _timeout_message(self, tally: StreamTally, ours: bool, queue_wait_s: float = 0.0) -> str:
        if not ours:
            total_s = self.target.request_timeout_s + queue_wait_s
            return f"request did not finish within {total_s:g} s (request timeout)"
        if tally.first_token_ns is None:
            queued = f", {queue_wait_s:.3g} s of it allowed for the queue ahead" if queue_wait_s else ""
            return (
                f"no token within {self.target.first_token_timeout_s + queue_wait_s:.3g} s of sending{queued} "
                "(first-token timeout; raise --timeout)"
            )
        return f"stream stalled: no data for {self.target.first_token_timeout_s:g} s after {tally.events} token events"

    def _redirected(self, path: str, resp: aiohttp.ClientResponse) -> str:
        location = resp.headers.get("Location", "nowhere (no Location header)")
        return self.scrub(f"HTTP {resp.status}: the server redirected {path} to {location}; a measured request is "
                          "not redirected (the time would include the detour): give servecheck the URL it points to")

    async def _http_error(self, resp: aiohttp.ClientResponse) -> str:
        raw = await resp.content.read(ERROR_BODY_BYTES)
        message = f"HTTP {resp.status}: {_message(raw)}"
        models = self.info.models if self.info else ()
        if resp.status == 404 and models:
            message += f" (the server offers: {', '.join(models)})"
        return self.scrub(message)

    def _record(self, req: GenRequest, send_ns: int, tally: StreamTally, outcome: _Outcome) -> RequestRecord:
        status, error = outcome.status, outcome.error
        if status == "ok" and tally.error is not None:
            status, error = "error", self.scrub(f"server error in stream: {shorten(tally.error)}")
        if status == "ok" and tally.final_ns is None and tally.finish_reason is None:
            status, error = "error", (f"the server closed the stream after {tally.events} token events, "
                                      "before its final event")
        if status == "ok" and (problem := plausibility_problem(tally, req.max_tokens)) is not None:
            status, error = "error", problem
        count = tally.count()
        return RequestRecord(
            index=req.index,
            nonce=req.nonce,
            status=status,
            tokens_requested=req.max_tokens,
            send_ns=send_ns,
            first_token_ns=tally.first_token_ns,
            end_ns=(tally.final_ns or tally.last_event_ns) if status == "ok" else tally.last_event_ns,
            token_ns=tuple(tally.token_ns),
            event_tokens=tuple(tally.event_tokens),
            tokens=count.tokens,
            tokens_source=count.source,
            finish_reason=tally.finish_reason,
            http_status=outcome.http_status,
            error=error,
            prompt_tokens=(req.prompt_tokens if req.prompt_tokens is not None
                           else _server_prompt_len(tally, self._dialect)),
            server=tally.server,
            text=tally.text,
        )


# Awaited before a batch's barrier opens; returns the run-clock ns at which to open it.
ReleaseAt = Callable[[], Awaitable[int]]
SPIN_NS = 2_000_000  # the last stretch before a timed release is spun, not slept: a timer wakes late


async def sleep_until(clock: RunClock, at_ns: int) -> None:
    """Return at run-clock `at_ns` (or at once if it has passed): sleep most of the way, then spin."""
    ahead_ns = at_ns - clock.now_ns()
    if ahead_ns > SPIN_NS:
        await asyncio.sleep((ahead_ns - SPIN_NS) / 1e9)
    while clock.now_ns() < at_ns:
        pass


class _CutOff(Exception):
    """A stream that carried far more than requested: reading stops and the request fails."""


def _lost_message(exc: aiohttp.ClientError, tally: StreamTally) -> str:
    """What a dropped connection looked like, without aiohttp's internals."""
    where = f"after {tally.events} token events" if tally.events else "before any token"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return f"connection closed by the server {where}"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return f"connection reset by the server mid-stream {where} (the response was cut short)"
    if isinstance(exc, aiohttp.ClientOSError):
        return f"connection reset {where}: {shorten(exc.strerror or type(exc).__name__)}"
    return f"connection lost {where}: {shorten(str(exc) or type(exc).__name__)}"


@dataclass(frozen=True, slots=True)
class _Outcome:
    status: RequestStatus
    http_status: int | None
    error: str | None


_JSON = {"Content-Type": "application/json"}
_TRIED = ("/props", "/api/version", "/version", "/v1/models", "/health + /completion")


def _apply(events: list[Any], dialect: Dialect, tally: StreamTally, t_ns: int) -> None:
    for event in events:
        if isinstance(event, dict):
            tally.add(dialect.read(event), t_ns)
        elif event.done:
            tally.done(t_ns)
        elif event.event == "error":  # llama.cpp writes mid-stream failures as `error: {json}`
            tally.add(EventReading(error=_message(event.data.encode())), t_ns)
        else:
            tally.add(dialect.read(event.json()), t_ns)


def _message(raw: bytes) -> str:
    """The server's own error message from an error body, shortened to one line."""
    text = raw.decode("utf-8", errors="replace")
    try:
        data = loads_object(text)
    except StreamParseError:
        return shorten(text, 200) or "(empty body)"
    err = data.get("error", data)
    if isinstance(err, dict):
        err = err.get("message") or err.get("detail") or err
    return shorten(str(data.get("detail", err) if "error" not in data else err), 200)


def _token_count(data: Any) -> int | float | None:
    if not isinstance(data, dict):
        return None
    count = data.get("count")
    if isinstance(count, (int, float)) and not isinstance(count, bool):
        return count
    tokens = data.get("tokens")
    return len(tokens) if isinstance(tokens, list) else None


def _server_prompt_len(tally: StreamTally, dialect: Dialect | None) -> int | None:
    server = tally.server
    if server is None or server.prompt_tokens is None:
        return None
    if dialect is not None and dialect.name == "llamacpp":
        return server.prompt_tokens + (server.cached_prompt_tokens or 0)  # prompt_n excludes cached tokens
    return server.prompt_tokens
