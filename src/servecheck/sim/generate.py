"""Generation routes of the simulated server: one handler per dialect, streamed or whole, with each
stream written in its dialect's framing (SSE or NDJSON), one write per event."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from servecheck.sim import wire
from servecheck.sim.scheduler import Job, JobAborted, JobDone, TokenEvent
from servecheck.sim.state import Handler, SimState, error_response, model_not_found, read_json, state
from servecheck.sim.text import output_piece, piece_token_id, target_tokens


def generate_route(dialect: str) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        sim = state(request)
        try:
            req = wire.parse_request(dialect, await read_json(request), sim.config)
            if not sim.knows(req.model):
                return model_not_found(dialect, str(req.model), sim)
            req = wire.truncate(req, sim.config)
            wire.check_context(req, sim.config)
            held = wire.shared_context_need(req, sim.config, sim.ctx_in_use)
        except wire.HttpProblem as p:
            return error_response(dialect, p.status, p.message, p.kind)
        sim.ctx_in_use += held
        try:
            return await _serve(request, sim, dialect, req)
        finally:
            sim.ctx_in_use -= held

    return handler


async def _serve(request: web.Request, sim: SimState, dialect: str, req: wire.SimRequest) -> web.StreamResponse:
    """One admitted request: scheduled, then streamed or answered whole; cancelled if the client leaves."""
    job = Job(
        task_id=sim.scheduler.new_task_id(),
        prompt_tokens=req.prompt_tokens,
        target_tokens=target_tokens(req.prompt_text, req.max_tokens, sim.config),
        max_tokens=req.max_tokens,
        cache_prompt=req.cache_prompt,
        arrival_ns=sim.scheduler.now_ns(),
        alone=not req.fields.isdisjoint(sim.config.serialize_on),
    )
    sim.scheduler.submit(job)
    try:
        if req.stream:
            return await _stream(request, sim, dialect, req, job)
        return await _whole(sim, dialect, req, job)
    finally:
        if not job.finished:
            sim.scheduler.cancel(job)


@dataclass
class _Output:
    pieces: list[str]
    tokens: list[int]

    @property
    def text(self) -> str:
        return "".join(self.pieces)


async def _tokens(sim: SimState, req: wire.SimRequest, job: Job, out: _Output) -> Any:
    """Yields (index, piece, token id) per generated token; returns when the job is done."""
    while True:
        event = await job.events.get()
        if isinstance(event, TokenEvent):
            piece = output_piece(req.prompt_text, event.index, hostile=sim.config.hostile)
            token = piece_token_id(piece)
            out.pieces.append(piece)
            out.tokens.append(token)
            yield event.index, piece, token
        elif isinstance(event, JobDone):
            return
        elif isinstance(event, JobAborted):
            raise ConnectionAbortedError(event.reason)


async def _whole(sim: SimState, dialect: str, req: wire.SimRequest, job: Job) -> web.StreamResponse:
    out = _Output([], [])
    try:
        async for _ in _tokens(sim, req, job, out):
            pass
    except ConnectionAbortedError as exc:
        return error_response(dialect, 503, str(exc), "unavailable_error")
    model = sim.config.model_name
    cid = _completion_id(dialect)
    body = {
        "llamacpp": lambda: wire.native_final(job, req, model, out.text, out.tokens),
        "openai": lambda: wire.completion_json(cid, model, job, out.pieces, req.logprobs),
        "openai-chat": lambda: wire.chat_json(cid, model, job, out.pieces, req.logprobs),
        "ollama": lambda: wire.ollama_final(model, job, out.text),
    }[dialect]()
    return web.json_response(body)


def _completion_id(dialect: str) -> str:
    prefix = "chatcmpl" if dialect == "openai-chat" else "cmpl"
    return f"{prefix}-sim-{uuid.uuid4().hex[:16]}"


async def _stream(
    request: web.Request, sim: SimState, dialect: str, req: wire.SimRequest, job: Job
) -> web.StreamResponse:
    content_type = "application/x-ndjson" if dialect == "ollama" else "text/event-stream"
    resp = web.StreamResponse(headers={"Content-Type": content_type, "Cache-Control": "no-cache"})
    await resp.prepare(request)
    writer = _StreamWriter(sim, dialect, req, job, resp)
    try:
        await writer.run()
    except ConnectionError:
        pass  # the client went away, or the server is shutting down: nothing more to send
    return resp


class _StreamWriter:
    """Writes one request's stream in its dialect's framing, one write per event."""

    def __init__(
        self, sim: SimState, dialect: str, req: wire.SimRequest, job: Job, resp: web.StreamResponse
    ) -> None:
        self.sim = sim
        self.dialect = dialect
        self.req = req
        self.job = job
        self.resp = resp
        self.model = sim.config.model_name
        self.cid = _completion_id(dialect)
        self.out = _Output([], [])

    async def run(self) -> None:
        if self.dialect == "openai-chat":
            await self._send(wire.chat_chunk(self.cid, self.model, {"role": "assistant", "content": None}, None))
        async for index, piece, token in _tokens(self.sim, self.req, self.job, self.out):
            await self._send(self._token_event(index, piece, token))
        for event in self._final_events():
            await self._send(event)
        if self.dialect in ("openai", "openai-chat"):
            await self.resp.write(wire.SSE_DONE)
        await self.resp.write_eof()

    async def _send(self, obj: Any) -> None:
        frame = wire.ndjson(obj) if self.dialect == "ollama" else wire.sse(obj)
        await self.resp.write(frame)

    def _token_event(self, index: int, piece: str, token: int) -> dict[str, Any]:
        if self.dialect == "llamacpp":
            return wire.native_partial(self.job, index, piece, token)
        if self.dialect == "openai":
            lp = wire.completion_logprobs([piece]) if self.req.logprobs else None
            return wire.completion_chunk(self.cid, self.model, piece, None, lp)
        if self.dialect == "openai-chat":
            lp = wire.chat_logprobs([piece]) if self.req.logprobs else None
            return wire.chat_chunk(self.cid, self.model, {"content": piece}, None, lp)
        return wire.ollama_partial(self.model, piece)

    def _final_events(self) -> list[dict[str, Any]]:
        job, model, cid = self.job, self.model, self.cid
        if self.dialect == "llamacpp":
            return [wire.native_final(job, self.req, model, "", [])]
        if self.dialect == "ollama":
            return [wire.ollama_final(model, job, "")]
        if self.dialect == "openai":
            last = wire.completion_chunk(cid, model, "", wire.finish_reason(job))
            obj = "text_completion"
        else:
            last = wire.chat_chunk(cid, model, {}, wire.finish_reason(job))
            obj = "chat.completion.chunk"
        last["timings"] = wire.timings_json(job.timings())  # llama.cpp puts timings on the last chunk
        events = [last]
        if self.req.include_usage:
            events.append(wire.usage_chunk(cid, model, obj, job))
        return events
