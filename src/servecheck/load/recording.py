"""One measured request: its body sent on a lane's connection, its stream read chunk by chunk into a
`StreamTally` (each chunk stamped on the run clock as it arrives) and the tally made a `RequestRecord`.

A request that fails is a `RequestRecord` with a status, never an exception through a batch. The
stamps are the measurement: nothing but the HTTP write lies between the send stamp and the wire,
and nothing but the optional late reader (`load.inject`) between a chunk's arrival and its stamp.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from servecheck.wire.base import RunClock, StreamParseError, shorten
from servecheck.wire.dialects import Dialect, EventReading
from servecheck.wire.ndjson import NdjsonParser
from servecheck.wire.request_params import with_request_params
from servecheck.wire.sse import SseParser
from servecheck.wire.tally import StreamTally, cutoff_tokens, plausibility_problem
from servecheck.load.eos import with_eos_bias
from servecheck.load.inject import StallInjector
from servecheck.load.transport import REDIRECT_STATUSES, Transport, _message
from servecheck.model.records import GenRequest, RequestRecord, RequestStatus, ServerInfo

# The slowest decoding a request is given time for, on top of the first-token wait: a request is cut
# off after `first_token_timeout_s + max_tokens * CEILING_S_PER_TOKEN` (plus any queue allowance)
# however steadily it streams, so a stream that never ends cannot hold a run for the request timeout.
CEILING_S_PER_TOKEN = 2.0
# Bytes of an HTTP error body worth reading for its message.
ERROR_BODY_BYTES = 4096
_JSON = {"Content-Type": "application/json"}


class StreamRecording(Transport):
    """Sends one request and records its stream: `LoadDriver`'s measured path. The driver sets what
    is read here besides its transport: the run clock, the stall injector and the detected server."""

    clock: RunClock
    stalls: StallInjector | None
    info: ServerInfo | None
    _dialect: Dialect | None

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


def _server_prompt_len(tally: StreamTally, dialect: Dialect | None) -> int | None:
    server = tally.server
    if server is None or server.prompt_tokens is None:
        return None
    if dialect is not None and dialect.name == "llamacpp":
        return server.prompt_tokens + (server.cached_prompt_tokens or 0)  # prompt_n excludes cached tokens
    return server.prompt_tokens
