"""A lane's later requests survive a server that closes its connection after a streamed reply.

llama-server does this without saying `Connection: close`; a request written into such a
connection fails. The raw server below behaves the same way, on 127.0.0.1 and an OS-picked port.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from servecheck.wire.base import Target
from servecheck.load.driver import LoadDriver
from servecheck.model.records import GenRequest

pytestmark = pytest.mark.timeout(60)


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, bytes] | None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    length = 0
    for line in lines[1:]:
        if line.lower().startswith("content-length:"):
            length = int(line.split(":", 1)[1])
    body = await reader.readexactly(length) if length else b""
    return lines[0], body


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            request_line, _ = await _read_request(reader)  # type: ignore[misc]
            method, path, _ = request_line.split(" ", 2)
            if method == "GET" and path == "/health":
                body = b'{"status":"ok"}'
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
                continue
            if method == "POST" and path == "/completion":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
                for i in range(3):
                    event = {"content": f" w{i}", "tokens": [i], "stop": False, "tokens_predicted": i + 1}
                    writer.write(_chunk(b"data: " + json.dumps(event).encode() + b"\n\n"))
                    await writer.drain()
                final = {"content": "", "stop": True, "tokens_predicted": 3, "stop_type": "limit",
                         "timings": {"predicted_n": 3, "prompt_n": 2}}
                writer.write(_chunk(b"data: " + json.dumps(final).encode() + b"\n\n") + b"0\r\n\r\n")
                await writer.drain()
                await asyncio.sleep(0.02)  # then close silently, as llama-server does
                break
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def test_later_requests_of_a_lane_use_a_connection_the_server_has_not_closed() -> None:
    server = await asyncio.start_server(_handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        target = Target(url=f"http://127.0.0.1:{port}", api="llamacpp", model="m")
        async with LoadDriver(target) as driver:
            reqs = [GenRequest(index=i, prompt="p q", nonce=f"n{i}", max_tokens=3) for i in range(4)]
            batch = await driver.run_batch(reqs, in_flight=1)
    finally:
        server.close()
        await server.wait_closed()
    assert [r.status for r in batch.records] == ["ok"] * 4, [r.error for r in batch.records]
    assert [r.tokens for r in batch.records] == [3] * 4
