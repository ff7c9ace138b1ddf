"""The simulated server's HTTP side: aiohttp routes for the three dialects and the discovery
endpoints, the simulated-marker header, and start/stop (in the caller's loop or a thread)."""

from __future__ import annotations

import asyncio
import json
import queue
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from servecheck.errors import UsageError
from servecheck.sim import wire
from servecheck.sim.config import SimConfig
from servecheck.sim.log import SimLog, listening_lines, startup_lines
from servecheck.sim.scheduler import Job, JobAborted, JobDone, Scheduler, TokenEvent
from servecheck.sim.text import output_piece, piece_token_id, target_tokens, tokenize

SIMULATED_HEADER = "X-Servecheck-Simulated"
SIM_VERSION = "0.0.0-servecheck-sim"
# Seconds in-flight streams get to notice a shutdown before their connections are dropped.
SHUTDOWN_GRACE_S = 0.5

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Sim:
    """Everything a handler needs: the config, the scheduler, the log."""

    def __init__(self, config: SimConfig, log: SimLog) -> None:
        self.config = config
        self.log = log
        self.scheduler = Scheduler(config, log=log)
        self.created = int(time.time())

    @property
    def models(self) -> tuple[str, ...]:
        return (self.config.model_name,)

    def knows(self, model: str | None) -> bool:
        if model is None:
            return True
        name = model.removesuffix(":latest")
        return name in self.models


_STATE = web.AppKey("servecheck_sim_state", _Sim)


def _state(request: web.Request) -> _Sim:
    return request.app[_STATE]


# ---------------------------------------------------------------- responses
def _error(dialect: str, status: int, message: str, kind: str, code: str | int | None = None) -> web.Response:
    body = wire.ollama_error(message) if dialect == "ollama" else wire.openai_error(status, message, kind, code)
    return web.json_response(body, status=status)


def _model_not_found(dialect: str, model: str, sim: _Sim) -> web.Response:
    offered = ", ".join(sim.models)
    if dialect == "ollama":
        return _error(dialect, 404, f"model '{model}' not found (this server offers: {offered})", "not_found")
    return _error(
        dialect,
        404,
        f"The model `{model}` does not exist (this server offers: {offered})",
        "invalid_request_error",
        "model_not_found",
    )


async def _read_json(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise wire.HttpProblem(400, f"request body is not valid JSON: {exc}") from exc


# --------------------------------------------------------------- generation
def _generate_route(dialect: str) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        sim = _state(request)
        try:
            req = wire.parse_request(dialect, await _read_json(request), sim.config)
            if not sim.knows(req.model):
                return _model_not_found(dialect, str(req.model), sim)
            wire.check_context(req, sim.config)
        except wire.HttpProblem as p:
            return _error(dialect, p.status, p.message, p.kind)
        job = Job(
            task_id=sim.scheduler.new_task_id(),
            prompt_tokens=req.prompt_tokens,
            target_tokens=target_tokens(req.prompt_text, req.max_tokens, sim.config),
            max_tokens=req.max_tokens,
            cache_prompt=req.cache_prompt,
            arrival_ns=sim.scheduler.now_ns(),
        )
        sim.scheduler.submit(job)
        try:
            if req.stream:
                return await _stream(request, sim, dialect, req, job)
            return await _whole(sim, dialect, req, job)
        finally:
            if not job.finished:
                sim.scheduler.cancel(job)

    return handler


@dataclass
class _Output:
    pieces: list[str]
    tokens: list[int]

    @property
    def text(self) -> str:
        return "".join(self.pieces)


async def _tokens(sim: _Sim, req: wire.SimRequest, job: Job, out: _Output) -> Any:
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


async def _whole(sim: _Sim, dialect: str, req: wire.SimRequest, job: Job) -> web.StreamResponse:
    out = _Output([], [])
    try:
        async for _ in _tokens(sim, req, job, out):
            pass
    except ConnectionAbortedError as exc:
        return _error(dialect, 503, str(exc), "unavailable_error")
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
    request: web.Request, sim: _Sim, dialect: str, req: wire.SimRequest, job: Job
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
        self, sim: _Sim, dialect: str, req: wire.SimRequest, job: Job, resp: web.StreamResponse
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


# ------------------------------------------------------------ other routes
async def _health(request: web.Request) -> web.StreamResponse:
    return web.json_response({"status": "ok"})


async def _props(request: web.Request) -> web.StreamResponse:
    sim = _state(request)
    c = sim.config
    # "inert" claims the cache is on, exactly like "on": accepted is not enabled.
    cache_claimed = c.prefix_cache != "off"
    return web.json_response(
        {
            "default_generation_settings": {
                "id": 0,
                "id_task": -1,
                "n_ctx": c.n_ctx,
                "speculative": False,
                "is_processing": False,
                "params": {"n_predict": -1, "seed": -1, "ignore_eos": False, "cache_prompt": cache_claimed},
            },
            "total_slots": c.capacity,
            "model_path": c.model_name,
            "modalities": {"vision": False, "audio": False},
            "chat_template": "{{ messages }}",
            "build_info": f"b0-{SIM_VERSION}",
            "is_sleeping": False,
            "servecheck_simulated": True,
            "servecheck_sim": {"describe": c.describe(), **c.as_dict()},
        }
    )


async def _slots(request: web.Request) -> web.StreamResponse:
    sim = _state(request)
    return web.json_response([_slot_json(sim, i, job) for i, job in sim.scheduler.slot_view()])


def _slot_json(sim: _Sim, slot: int, job: Job | None) -> dict[str, Any]:
    busy = job is not None and not job.finished
    return {
        "id": slot,
        "id_task": job.task_id if job is not None else -1,
        "n_ctx": sim.config.n_ctx,
        "speculative": False,
        "is_processing": busy,
        "params": {"n_predict": job.max_tokens if job else -1, "cache_prompt": job.cache_prompt if job else True},
        "next_token": {
            "has_next_token": busy,
            "n_remain": (job.target_tokens - job.produced) if job else -1,
            "n_decoded": job.produced if job else 0,
        },
    }


def _metric_lines(name: str, kind: str, help_text: str, value: float) -> list[str]:
    return [f"# HELP llamacpp:{name} {help_text}", f"# TYPE llamacpp:{name} {kind}", f"llamacpp:{name} {value:g}"]


async def _metrics(request: web.Request) -> web.StreamResponse:
    """llama.cpp's Prometheus names (engine_apis.md 1.1), from the scheduler's own counters."""
    sched = _state(request).scheduler
    st = sched.stats
    rows = [
        ("prompt_tokens_total", "counter", "Number of prompt tokens processed.", st.prompt_tokens),
        ("prompt_seconds_total", "counter", "Prompt process time", st.prompt_s),
        ("tokens_predicted_total", "counter", "Number of generation tokens processed.", st.tokens_predicted),
        ("tokens_predicted_seconds_total", "counter", "Predict process time", st.predicted_s),
        ("n_decode_total", "counter", "Total number of decode steps.", st.n_decode),
        ("n_busy_slots_per_decode", "counter", "Average number of busy slots per decode.", st.busy_slots_per_decode),
        ("requests_processing", "gauge", "Number of requests processing.", sched.processing),
        ("requests_deferred", "gauge", "Number of requests deferred.", sched.deferred),
    ]
    lines = [ln for row in rows for ln in _metric_lines(*row)]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8")


async def _tokenize(request: web.Request) -> web.StreamResponse:
    try:
        body = await _read_json(request)
    except wire.HttpProblem as p:
        return _error("llamacpp", p.status, p.message, p.kind)
    content = body.get("content") if isinstance(body, dict) else None
    if not isinstance(content, str):
        return _error("llamacpp", 400, "'content' must be a string", "invalid_request_error")
    tokens = tokenize(content)
    if body.get("with_pieces"):
        return web.json_response({"tokens": [{"id": t, "piece": w} for t, w in zip(tokens, content.split())]})
    return web.json_response({"tokens": tokens})


async def _v1_models(request: web.Request) -> web.StreamResponse:
    sim = _state(request)
    meta = {"n_ctx": sim.config.n_ctx, "n_ctx_train": sim.config.n_ctx, "simulated": True}
    return web.json_response(
        {
            "object": "list",
            "data": [
                {"id": m, "object": "model", "created": sim.created, "owned_by": "servecheck-sim", "meta": meta}
                for m in sim.models
            ],
            "models": [{"name": m, "model": m, "type": "model", "capabilities": ["completion"]} for m in sim.models],
        }
    )


def _ollama_details() -> dict[str, Any]:
    return {
        "format": "servecheck-sim",
        "family": "servecheck-sim",
        "families": ["servecheck-sim"],
        "parameter_size": "0",
        "quantization_level": "none",
    }


async def _api_tags(request: web.Request) -> web.StreamResponse:
    sim = _state(request)
    models = [
        {
            "name": m,
            "model": m,
            "modified_at": "1970-01-01T00:00:00Z",
            "size": 0,
            "digest": "0" * 64,
            "details": _ollama_details(),
        }
        for m in sim.models
    ]
    return web.json_response({"models": models})


async def _api_version(request: web.Request) -> web.StreamResponse:
    return web.json_response({"version": SIM_VERSION})


async def _api_show(request: web.Request) -> web.StreamResponse:
    sim = _state(request)
    try:
        body = await _read_json(request)
    except wire.HttpProblem as p:
        return _error("ollama", p.status, p.message, p.kind)
    model = (body.get("model") or body.get("name")) if isinstance(body, dict) else None
    if not isinstance(model, str) or not model:
        return _error("ollama", 400, "model is required", "invalid_request_error")
    if not sim.knows(model):
        return _model_not_found("ollama", model, sim)
    n_ctx = sim.config.n_ctx
    return web.json_response(
        {
            "modelfile": "# simulated by servecheck: not a real model",
            "parameters": f"num_ctx {n_ctx}",
            "template": "{{ .Prompt }}",
            "details": _ollama_details(),
            "model_info": {
                "general.architecture": "servecheck-sim",
                "general.parameter_count": 0,
                "servecheck-sim.context_length": n_ctx,
            },
            "capabilities": ["completion"],
        }
    )


# ------------------------------------------------------------------- app
async def _mark_simulated(request: web.Request, response: web.StreamResponse) -> None:
    response.headers[SIMULATED_HEADER] = "1"


@web.middleware
async def _json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unknown routes and methods answer like llama.cpp: a JSON error, not an HTML page."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return web.json_response(wire.openai_error(exc.status, exc.reason, "not_found_error"), status=exc.status)


def build_app(sim: _Sim) -> web.Application:
    app = web.Application(middlewares=[_json_errors], client_max_size=64 * 1024 * 1024)
    app[_STATE] = sim
    app.on_response_prepare.append(_mark_simulated)
    app.router.add_post("/v1/completions", _generate_route("openai"))
    app.router.add_post("/v1/chat/completions", _generate_route("openai-chat"))
    app.router.add_post("/completion", _generate_route("llamacpp"))
    app.router.add_post("/completions", _generate_route("llamacpp"))
    app.router.add_post("/api/generate", _generate_route("ollama"))
    app.router.add_get("/health", _health)
    app.router.add_get("/props", _props)
    app.router.add_get("/slots", _slots)
    app.router.add_get("/metrics", _metrics)
    app.router.add_post("/tokenize", _tokenize)
    app.router.add_get("/v1/models", _v1_models)
    app.router.add_get("/models", _v1_models)
    app.router.add_get("/api/tags", _api_tags)
    app.router.add_get("/api/version", _api_version)
    app.router.add_post("/api/show", _api_show)
    return app


class RunningSim:
    """A simulated server listening on a real socket. `await stop()` when done."""

    def __init__(self, sim: _Sim, runner: web.AppRunner, host: str, port: int) -> None:
        self._sim = sim
        self._runner = runner
        self._stopped = False
        self.host = host
        self.port = port
        self.url = f"http://{host}:{port}" if ":" not in host else f"http://[{host}]:{port}"

    @property
    def config(self) -> SimConfig:
        return self._sim.config

    @property
    def log_lines(self) -> list[str]:
        return list(self._sim.log.lines)

    @property
    def completed(self) -> int:
        """Requests that ran to their last token."""
        return self._sim.scheduler.completed

    @property
    def peak_decoding(self) -> int:
        """The most sequences that ever decoded in one step."""
        return self._sim.scheduler.peak_decoding

    def describe(self) -> str:
        return self.config.describe()

    async def stop(self) -> None:
        """Abort in-flight requests, close the socket and the log. Safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        await self._sim.scheduler.stop()
        await self._runner.cleanup()
        self._sim.log.close()


async def start_sim(
    config: SimConfig | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    echo: Callable[[str], None] | None = None,
) -> RunningSim:
    """Start the simulated server in the running event loop; port 0 lets the OS pick a free port.

    `echo` receives every log line (the CLI passes a stderr writer), besides config.log_path.
    """
    config = config or SimConfig()
    log = SimLog(config.log_path, echo)
    for line in startup_lines(config):
        log(line)
    sim = _Sim(config, log)
    runner = web.AppRunner(build_app(sim), access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_GRACE_S)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, backlog=1024)
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        log.close()
        raise UsageError(
            f"the simulator cannot listen on {host}:{port}: {exc.strerror or exc}",
            "choose another --port, or 0 for a free one",
        ) from exc
    bound_port = _bound_port(runner, port)
    sim.scheduler.start()
    running = RunningSim(sim, runner, host, bound_port)
    for line in listening_lines(running.url):
        log(line)
    return running


def _bound_port(runner: web.AppRunner, asked: int) -> int:
    for addr in runner.addresses:
        if isinstance(addr, tuple) and len(addr) >= 2:
            return int(addr[1])
    return asked


# ------------------------------------------------------------ thread mode
class ThreadedSim:
    """A simulated server running its own event loop in a background thread (for sync callers)."""

    def __init__(self, running: RunningSim, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        self._running = running
        self._loop = loop
        self._stop = stop
        self.url = running.url
        self.host = running.host
        self.port = running.port
        self.config = running.config

    @property
    def log_lines(self) -> list[str]:
        return self._running.log_lines

    @property
    def completed(self) -> int:
        return self._running.completed

    @property
    def peak_decoding(self) -> int:
        return self._running.peak_decoding

    def describe(self) -> str:
        return self._running.describe()

    def _request_stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)


@contextmanager
def sim_in_thread(
    config: SimConfig | None = None, host: str = "127.0.0.1", port: int = 0, *, start_timeout_s: float = 30.0
) -> Iterator[ThreadedSim]:
    """Run a simulated server in a background thread for the duration of a `with` block."""
    ready: queue.Queue[ThreadedSim | BaseException] = queue.Queue()

    async def serve() -> None:
        try:
            running = await start_sim(config, host, port)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            ready.put(exc)
            return
        stop = asyncio.Event()
        ready.put(ThreadedSim(running, asyncio.get_running_loop(), stop))
        await stop.wait()
        await running.stop()

    thread = threading.Thread(target=lambda: asyncio.run(serve()), name="servecheck-sim", daemon=True)
    thread.start()
    try:
        handle = ready.get(timeout=start_timeout_s)
    except queue.Empty as exc:
        raise RuntimeError(f"the simulated server did not start within {start_timeout_s:g} s") from exc
    if isinstance(handle, BaseException):
        thread.join(timeout=5)
        raise handle
    try:
        yield handle
    finally:
        handle._request_stop()
        thread.join(timeout=10)
