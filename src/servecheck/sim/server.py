"""The simulated server's app and lifecycle: routes, the simulated-marker header, and start/stop
(in the caller's event loop, or in a background thread for sync callers)."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from aiohttp import web

from servecheck.errors import UsageError
from servecheck.sim import info, wire
from servecheck.sim.config import SimConfig
from servecheck.sim.generate import generate_route
from servecheck.sim.log import SimLog, listening_lines, startup_lines
from servecheck.sim.state import STATE, Handler, SimState

SIMULATED_HEADER = "X-Servecheck-Simulated"
# Seconds in-flight streams get to notice a shutdown before their connections are dropped.
SHUTDOWN_GRACE_S = 0.5


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


def build_app(sim: SimState) -> web.Application:
    app = web.Application(middlewares=[_json_errors], client_max_size=64 * 1024 * 1024)
    app[STATE] = sim
    app.on_response_prepare.append(_mark_simulated)
    app.router.add_post("/v1/completions", generate_route("openai"))
    app.router.add_post("/v1/chat/completions", generate_route("openai-chat"))
    app.router.add_post("/completion", generate_route("llamacpp"))
    app.router.add_post("/completions", generate_route("llamacpp"))
    app.router.add_post("/api/generate", generate_route("ollama"))
    app.router.add_get("/health", info.health)
    app.router.add_get("/props", info.props)
    app.router.add_get("/slots", info.slots)
    app.router.add_get("/metrics", info.metrics)
    app.router.add_post("/tokenize", info.tokenize_route)
    app.router.add_get("/v1/models", info.v1_models)
    app.router.add_get("/models", info.v1_models)
    app.router.add_get("/api/tags", info.api_tags)
    app.router.add_get("/api/version", info.api_version)
    app.router.add_post("/api/show", info.api_show)
    return app


class RunningSim:
    """A simulated server listening on a real socket. `await stop()` when done."""

    def __init__(self, sim: SimState, runner: web.AppRunner, host: str, port: int) -> None:
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
    sim = SimState(config, log)
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
