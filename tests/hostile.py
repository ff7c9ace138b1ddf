"""Hostile HTTP servers for the fault matrix: a raw socket server in a thread on 127.0.0.1, port 0.

Each server speaks just enough llama.cpp (`/props`, `/health`, `/tokenize`) for detection to pass,
then misbehaves in one way on `POST /completion` (or everywhere, for the silent and TLS cases).
Raw sockets, not aiohttp, because the faults live below HTTP: silence, resets, endless streams.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

Writer = Callable[[socket.socket, "Request"], None]

PROPS = {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 4, "build_info": "hostile"}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()  # as sent, names lower-cased

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k == name.lower()), None)

    def json(self) -> dict:
        return json.loads(self.body or b"{}")


def http(conn: socket.socket, body: bytes | str, status: int = 200, ctype: str = "application/json",
         extra: str = "") -> None:
    raw = body.encode() if isinstance(body, str) else body
    head = (f"HTTP/1.1 {status} X\r\nContent-Type: {ctype}\r\nContent-Length: {len(raw)}\r\n"
            f"{extra}Connection: close\r\n\r\n")
    conn.sendall(head.encode() + raw)


def stream_head(conn: socket.socket, ctype: str = "text/event-stream") -> None:
    conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nConnection: close\r\n\r\n".encode())


def event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def tokens_stream(n: int, final: dict | None = None) -> bytes:
    """n one-token events and llama.cpp's final event (with `final` merged into it)."""
    body = b"".join(event({"content": "x", "stop": False}) for _ in range(n))
    return body + event({"content": "", "stop": True, "stop_type": "limit", **(final or {})})


def default_route(conn: socket.socket, req: Request) -> bool:
    """The detection side of a well-behaved llama.cpp; False when the path is the hostile one's."""
    if req.method == "GET" and req.path == "/props":
        http(conn, json.dumps(PROPS))
    elif req.method == "GET" and req.path in ("/health", "/v1/models"):
        http(conn, json.dumps({"status": "ok", "data": [{"id": "hostile"}]}))
    elif req.method == "POST" and req.path == "/tokenize":
        words = len(req.json().get("content", "").split())
        http(conn, json.dumps({"tokens": list(range(words + 1))}))
    else:
        return False
    return True


def _read_request(conn: socket.socket) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = tuple((k.strip().lower(), v.strip()) for k, _, v in (ln.partition(":") for ln in lines[1:]))
    length = next((int(v) for k, v in headers if k == "content-length"), 0)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return Request(method, path, body, headers)


class HostileServer:
    def __init__(self, completion: Writer | None, *, accept: bool = True, routes: Writer | None = None) -> None:
        self.completion = completion
        self.routes = routes
        self.accept = accept
        self.sock = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.closed = threading.Event()
        self.conns: list[socket.socket] = []

    def serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self.closed.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            while not self.closed.is_set():
                req = _read_request(conn)
                if req is None:
                    return
                if self.routes is not None:
                    self.routes(conn, req)
                elif default_route(conn, req):
                    pass
                elif self.completion is not None:
                    self.completion(conn, req)
                else:
                    http(conn, b"{}", status=404)
                return
        except OSError:
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def stopped(self) -> bool:
        return self.closed.is_set()

    def close(self) -> None:
        self.closed.set()
        self.sock.close()
        for conn in self.conns:
            try:
                conn.close()
            except OSError:
                pass


@contextmanager
def hostile(completion: Writer | None = None, *, accept: bool = True,
            routes: Writer | None = None) -> Iterator[HostileServer]:
    """A running hostile server; `accept=False` never accepts (the kernel still completes TCP handshakes)."""
    server = HostileServer(completion, accept=accept, routes=routes)
    thread = threading.Thread(target=server.serve, daemon=True) if accept else None
    if thread is not None:
        thread.start()
    try:
        yield server
    finally:
        server.close()
        if thread is not None:
            thread.join(timeout=5)


def endless(conn: socket.socket, req: Request, pause_s: float = 0.0, payload: bytes | None = None) -> None:
    """A stream that never ends (until the client goes away or the server closes)."""
    stream_head(conn)
    chunk = payload if payload is not None else event({"content": "x", "stop": False})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        conn.sendall(chunk)
        if pause_s:
            time.sleep(pause_s)
