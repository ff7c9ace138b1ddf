"""A loopback proxy that takes a real server's witnesses off the wire, for tests and benchmarks.

    python -m servecheck.sim.proxy UPSTREAM_URL [--port 0] [--lie-gauges] [--no-cache-prompt] [--hold K:SECONDS]

It passes only the OpenAI routes (POST /v1/completions, POST /v1/chat/completions, GET /v1/models)
and answers 404 to everything else (/metrics, /slots, /props, /tokenize, /health), and it strips
the server's self-report from every body and stream event: llama.cpp's `timings`, the usage's
cached-token counts. What servecheck then sees is what the seed's engines give: tokens and a
stopwatch. A flag that ignores witnesses is no proof that the stopwatch suffices; this proxy is.

`--lie-gauges` serves a llama.cpp-style /metrics that counts every request in flight through the
proxy (a held one too) as processing and none as deferred: gauges that lie, injected in front of a real queue.
`--no-cache-prompt` sets `cache_prompt: false` in every completion request (a prefix cache forced
off from outside). `--hold K:SECONDS` keeps the K-th completion request through the proxy (counted from
1) waiting SECONDS before it is forwarded: one send made slow from outside, by a known amount (the
prefix cache's control send, for the test of the comparison that does without it).
`--burst LO-HI` holds a stream's events and passes them on in bursts, one every LO..HI ms (uniform,
`--burst-seed` for a repeatable draw): a gateway that coalesces a stream in transit, so that tokens
of several decode steps arrive together, as a speculative step's would. The proxy listens on
127.0.0.1 only, prints its URL as its first line, and exits when the process that started it is gone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import aiohttp
from aiohttp import web

PASSED_POST = ("/v1/completions", "/v1/chat/completions")
PASSED_GET = ("/v1/models",)
# Keys that carry the server's own account of a request: its timings and its prefix-cache counts.
STRIPPED_KEYS = ("timings", "prompt_tokens_details", "cached_tokens", "tokens_cached", "tokens_evaluated")
PARENT_POLL_S = 1.0
UPSTREAM_TIMEOUT_S = 900.0
HOP_HEADERS = {"content-length", "transfer-encoding", "connection", "content-encoding", "keep-alive"}


def strip(value: Any) -> Any:
    """`value` without the server's self-report, at any depth."""
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if k not in STRIPPED_KEYS}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


def strip_event_line(line: bytes) -> bytes:
    """One SSE line with its JSON payload stripped; other lines unchanged."""
    if not line.startswith(b"data:"):
        return line
    payload = line[5:].strip()
    if not payload or payload == b"[DONE]":
        return line
    try:
        doc = json.loads(payload)
    except ValueError:
        return line
    return b"data: " + json.dumps(strip(doc), separators=(",", ":")).encode()


class Proxy:
    def __init__(self, upstream: str, *, lie_gauges: bool, no_cache_prompt: bool,
                 hold: tuple[int, float] | None = None, burst: tuple[float, float] | None = None,
                 burst_seed: int | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.burst = burst
        self.rng = random.Random(burst_seed)
        self.lie_gauges = lie_gauges
        self.no_cache_prompt = no_cache_prompt
        self.hold = hold
        self.in_flight = 0
        self.completions = 0
        self.session: aiohttp.ClientSession | None = None

    async def start(self, app: web.Application) -> None:
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=UPSTREAM_TIMEOUT_S),
                                             connector=aiohttp.TCPConnector(limit=0))

    async def close(self, app: web.Application) -> None:
        if self.session is not None:
            await self.session.close()

    async def completion(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if self.no_cache_prompt:
            try:
                doc = json.loads(body)
                if isinstance(doc, dict):
                    doc["cache_prompt"] = False
                    body = json.dumps(doc).encode()
            except ValueError:
                pass
        self.completions += 1
        self.in_flight += 1  # a held request is in flight through the proxy too: lying gauges count it
        try:
            if self.hold is not None and self.completions == self.hold[0]:
                await asyncio.sleep(self.hold[1])
            return await self._forward(request, "POST", body)
        finally:
            self.in_flight -= 1

    async def models(self, request: web.Request) -> web.StreamResponse:
        return await self._forward(request, "GET", None)

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        if not self.lie_gauges:
            raise web.HTTPNotFound()
        lines = [
            "# HELP llamacpp:requests_processing Number of requests processing.",
            "# TYPE llamacpp:requests_processing gauge",
            f"llamacpp:requests_processing {self.in_flight}",
            "# HELP llamacpp:requests_deferred Number of requests deferred.",
            "# TYPE llamacpp:requests_deferred gauge",
            "llamacpp:requests_deferred 0",
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def _forward(self, request: web.Request, method: str, body: bytes | None) -> web.StreamResponse:
        assert self.session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS | {"host"}}
        async with self.session.request(method, self.upstream + request.path_qs, data=body, headers=headers,
                                        allow_redirects=False) as up:
            out_headers = {k: v for k, v in up.headers.items() if k.lower() not in HOP_HEADERS}
            if "text/event-stream" not in up.headers.get("Content-Type", ""):
                raw = await up.read()
                try:
                    raw = json.dumps(strip(json.loads(raw))).encode()
                except ValueError:
                    pass
                return web.Response(body=raw, status=up.status, headers=out_headers)
            response = web.StreamResponse(status=up.status, headers=out_headers)
            await response.prepare(request)
            try:
                if self.burst is None:
                    await _relay(up, response)
                else:
                    await _relay_in_bursts(up, response, self.burst, self.rng)
            except ConnectionResetError:
                pass  # the client closed its stream (it had read what it needed): nothing to relay to
            return response


async def _relay(up: aiohttp.ClientResponse, response: web.StreamResponse) -> None:
    """The upstream's event stream, line by line as it arrives, each data line stripped."""
    pending = b""
    async for chunk in up.content.iter_any():
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if lines:
            await response.write(b"".join(strip_event_line(line) + b"\n" for line in lines))
    if pending:
        await response.write(strip_event_line(pending))
    await response.write_eof()


async def _relay_in_bursts(up: aiohttp.ClientResponse, response: web.StreamResponse, burst: tuple[float, float],
                           rng: random.Random) -> None:
    """The upstream's event stream held and written out in bursts, one every burst[0]..burst[1] ms."""
    held: list[bytes] = []
    pending = b""
    done = asyncio.Event()

    async def read() -> None:
        nonlocal pending
        try:
            async for chunk in up.content.iter_any():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                held.extend(strip_event_line(line) + b"\n" for line in lines)
        finally:
            done.set()

    reader = asyncio.create_task(read())
    try:
        while not done.is_set():
            try:
                await asyncio.wait_for(done.wait(), rng.uniform(*burst) / 1e3)
            except TimeoutError:
                pass
            if held and not done.is_set():
                out, held[:] = b"".join(held), []
                await response.write(out)
        await reader
    finally:
        reader.cancel()
    await response.write(b"".join(held) + (strip_event_line(pending) if pending else b""))
    await response.write_eof()


def build_app(proxy: Proxy) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    for path in PASSED_POST:
        app.router.add_post(path, proxy.completion)
    for path in PASSED_GET:
        app.router.add_get(path, proxy.models)
    app.router.add_get("/metrics", proxy.metrics)
    app.on_startup.append(proxy.start)
    app.on_cleanup.append(proxy.close)
    return app


async def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        await asyncio.sleep(PARENT_POLL_S)


async def serve(upstream: str, port: int, *, lie_gauges: bool, no_cache_prompt: bool,
                hold: tuple[int, float] | None = None, burst: tuple[float, float] | None = None,
                burst_seed: int | None = None) -> None:
    parent = os.getppid()
    runner = web.AppRunner(build_app(Proxy(upstream, lie_gauges=lie_gauges, no_cache_prompt=no_cache_prompt, hold=hold,
                                           burst=burst, burst_seed=burst_seed)))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = runner.addresses[0][1]
    print(f"http://127.0.0.1:{bound}", flush=True)
    try:
        await _watch_parent(parent)
    finally:
        await runner.cleanup()


@contextmanager
def running_proxy(upstream: str, *flags: str) -> Iterator[str]:
    """The proxy in front of `upstream` as a child process (for tests and benchmarks); yields its URL."""
    proc = subprocess.Popen([sys.executable, "-m", "servecheck.sim.proxy", upstream, *flags],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"the stripping proxy did not start (it printed {url!r})")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def parse_hold(text: str) -> tuple[int, float]:
    """`K:SECONDS` -> (K, SECONDS): the K-th completion (from 1), held 0 < SECONDS <= 60."""
    k, sep, seconds = text.partition(":")
    try:
        held = (int(k), float(seconds))
    except ValueError:
        held = (0, 0.0)
    if not sep or held[0] < 1 or not 0 < held[1] <= 60:
        raise argparse.ArgumentTypeError(f"--hold takes K:SECONDS (K >= 1, 0 < SECONDS <= 60), not {text!r}")
    return held


def parse_burst(text: str) -> tuple[float, float]:
    """`LO-HI` (ms) -> (LO, HI): bursts every LO..HI ms, 0 < LO <= HI <= 10000."""
    lo, sep, hi = text.partition("-")
    try:
        span = (float(lo), float(hi or lo))
    except ValueError:
        span = (0.0, 0.0)
    if not 0 < span[0] <= span[1] <= 10_000:
        raise argparse.ArgumentTypeError(f"--burst takes LO-HI in ms (0 < LO <= HI <= 10000), not {text!r}")
    return span


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m servecheck.sim.proxy", description=__doc__.splitlines()[0])
    parser.add_argument("upstream", help="the real server, http://127.0.0.1:PORT")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--lie-gauges", action="store_true")
    parser.add_argument("--no-cache-prompt", action="store_true")
    parser.add_argument("--hold", type=parse_hold, default=None, metavar="K:SECONDS",
                        help="keep the K-th completion request waiting SECONDS before forwarding it")
    parser.add_argument("--burst", type=parse_burst, default=None, metavar="LO-HI",
                        help="pass stream events on in bursts, one every LO..HI ms (a gateway that buffers)")
    parser.add_argument("--burst-seed", type=int, default=None, help="seed of the burst intervals")
    args = parser.parse_args(argv)
    host = args.upstream.split("//", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"error: the proxy forwards only to a loopback server, not {host}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(args.upstream, args.port, lie_gauges=args.lie_gauges, no_cache_prompt=args.no_cache_prompt,
                          hold=args.hold, burst=args.burst, burst_seed=args.burst_seed))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
