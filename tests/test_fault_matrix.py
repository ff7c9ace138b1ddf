"""The fault matrix: hostile servers, absurd numbers, special files, bad flags and signals.

Every case asserts the exit code, one `Error:` line without a traceback (never the "unexpected"
catch-all), a generous upper time bound (it does not hang), and, where a run had started, that its
partial result survived. Servers are in-process on 127.0.0.1 with OS-chosen ports (tests/hostile.py).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from ctrl_c import default_sigint
from hostile import Request, default_route, event, hostile, http, stream_head, tokens_stream
from servecheck import exitcodes
from servecheck.cli import main as main_mod

pytestmark = pytest.mark.timeout(120)

TOKENS = 8


@dataclass
class Outcome:
    code: int
    out: str
    err: str
    elapsed_s: float


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> Outcome:
    start = time.monotonic()
    with pytest.raises(SystemExit) as info:
        main_mod.main(args)
    captured = capsys.readouterr()
    return Outcome(int(info.value.code or 0), captured.out, captured.err, time.monotonic() - start)


def assert_clean(result: Outcome) -> None:
    """No traceback, no catch-all; an error is one `Error:` line."""
    text = result.out + result.err
    assert "Traceback" not in text and "unexpected" not in text, text
    errors = [line for line in result.err.splitlines() if line.startswith("Error:")]
    if result.code in (exitcodes.ERROR, exitcodes.USAGE):
        assert len(errors) == 1, result.err
        following = result.err.split(errors[0], 1)[1].strip()
        assert following == "", f"more after the error line: {following!r}"


# ---------------------------------------------------------------- hostile completions


def _once_good(bad: Callable[[socket.socket, Request], None]) -> Callable[[socket.socket, Request], None]:
    """Well-behaved for the first completion (the warm-up), hostile for every later one: a server
    that lies under load, so the run starts, records a failed request and keeps its partial."""
    calls = {"n": 0}
    lock = threading.Lock()

    def writer(conn: socket.socket, req: Request) -> None:
        with lock:
            calls["n"] += 1
            first = calls["n"] == 1
        if first:
            stream_head(conn)
            conn.sendall(openai_stream(TOKENS) if req.path.startswith("/v1/") else tokens_stream(TOKENS))
        else:
            bad(conn, req)

    return writer


def openai_stream(n: int, usage: bytes | None = None) -> bytes:
    body = b"".join(event({"choices": [{"text": "x", "finish_reason": None}]}) for _ in range(n))
    body += event({"choices": [{"text": "", "finish_reason": "length"}]})
    raw_usage = usage if usage is not None else json.dumps({"completion_tokens": n, "prompt_tokens": 8}).encode()
    body += b'data: {"choices": [], "usage": ' + raw_usage + b"}\n\n"
    return body + b"data: [DONE]\n\n"


def send(payload: bytes) -> Callable[[socket.socket, Request], None]:
    def writer(conn: socket.socket, req: Request) -> None:
        stream_head(conn)
        conn.sendall(payload)

    return writer


def endless_tokens(conn: socket.socket, req: Request) -> None:
    stream_head(conn)
    chunk = event({"content": "x", "stop": False})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        conn.sendall(chunk * 4)
        time.sleep(0.001)


def one_token_then_pings(conn: socket.socket, req: Request) -> None:
    """One token, then a comment line every 50 ms forever: the stall timer never fires."""
    stream_head(conn)
    conn.sendall(event({"content": "x", "stop": False}))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        conn.sendall(b": ping\n\n")
        time.sleep(0.05)


def ignores_stream(conn: socket.socket, req: Request) -> None:
    http(conn, json.dumps({"content": "x" * TOKENS, "stop": True, "tokens_predicted": TOKENS}))


def chunked_then_reset(conn: socket.socket, req: Request) -> None:
    """A chunked stream cut off mid-chunk: aiohttp raises its payload error."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    data = event({"content": "x", "stop": False})
    conn.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n" + b"ff\r\n" + b"data: {")
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    conn.close()


def _final(**fields: object) -> bytes:
    return tokens_stream(TOKENS, dict(fields))


@dataclass(frozen=True)
class ServerCase:
    id: str
    completion: Callable[[socket.socket, Request], None]
    code: int
    says: str  # in the output (the error line, or the invalid request's reason)
    args: tuple[str, ...] = ()
    bound_s: float = 30.0
    partial: bool = True  # the run started: its JSON and history row must survive


SERVER_CASES = [
    # It can hang: a stream that never ends.
    ServerCase("endless-stream", _once_good(endless_tokens), exitcodes.INVALID, "stream cut off after"),
    ServerCase("pings-forever", one_token_then_pings, exitcodes.ERROR, "request cut off after",
               args=("--timeout", "1", "--tokens", "4"), bound_s=40, partial=False),
    # It can report a lie as a valid run.
    ServerCase("absurd-count", _once_good(send(_final(tokens_predicted=10**12))), exitcodes.INVALID,
               "tokens_predicted = 1e+12 is not a plausible token count"),
    ServerCase("negative-count", _once_good(send(_final(timings={"predicted_n": -5, "predicted_ms": 10.0}))),
               exitcodes.INVALID, "timings.predicted_n = -5 is not a plausible token count"),
    ServerCase("nan-count",
               _once_good(send(_final().replace(b'"stop_type": "limit"',
                                                b'"stop_type": "limit", "tokens_predicted": NaN'))),
               exitcodes.INVALID, "tokens_predicted = nan is not a plausible token count"),
    ServerCase("infinite-usage", _once_good(send(openai_stream(TOKENS, b'{"completion_tokens": Infinity}'))),
               exitcodes.INVALID, "usage.completion_tokens = inf is not a plausible token count",
               args=("--api", "openai")),
    ServerCase("usage-1e12", _once_good(send(openai_stream(TOKENS, b'{"completion_tokens": 1000000000000}'))),
               exitcodes.INVALID, "usage.completion_tokens = 1e+12", args=("--api", "openai")),
    ServerCase("negative-usage", _once_good(send(openai_stream(TOKENS, b'{"completion_tokens": -5}'))),
               exitcodes.INVALID, "usage.completion_tokens = -5 is not a plausible token count",
               args=("--api", "openai")),
    ServerCase("twice-the-tokens", _once_good(send(tokens_stream(2 * TOKENS))), exitcodes.INVALID,
               "token events = 16 is longer than requested"),
    ServerCase("count-below-stream", _once_good(send(_final(tokens_predicted=2))), exitcodes.INVALID,
               "tokens_predicted = 2 disagrees with the stream"),
    # Some messages mislead.
    ServerCase("ignores-stream-true", ignores_stream, exitcodes.ERROR, 'ignores "stream": true', partial=False),
    ServerCase("reset-mid-stream", _once_good(chunked_then_reset), exitcodes.INVALID,
               "connection reset by the server mid-stream"),
]


@pytest.mark.parametrize("case", SERVER_CASES, ids=lambda c: c.id)
def test_hostile_server(case: ServerCase, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, db = tmp_path / "run.json", tmp_path / "history.db"
    with hostile(case.completion) as server:
        args = ["staircase", server.url, "--n", "1", "--tokens", str(TOKENS), "--prompt-tokens", "8",
                "--json", str(out), "--db", str(db), *case.args]
        result = run_cli(args, capsys)
    assert result.code == case.code, result.err + result.out
    assert_clean(result)
    assert result.elapsed_s < case.bound_s
    assert "aiohttp" not in result.err + result.out and "ContentLengthError" not in result.err + result.out
    if case.partial:
        doc = json.loads(out.read_text())
        assert doc["valid"] is False and case.says in json.dumps(doc), json.dumps(doc["invalid"])
        assert case.says in result.out
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    else:
        assert case.says in result.err, result.err


def test_a_lie_on_the_warm_up_is_an_error_naming_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    with hostile(send(_final(tokens_predicted=-(10**12)))) as server:
        result = run_cli(["staircase", server.url, "--n", "1", "--tokens", str(TOKENS), "--no-save"], capsys)
    assert result.code == exitcodes.ERROR and "tokens_predicted = -1e+12 is not a plausible token count" in result.err
    assert_clean(result)


def _silent_listener() -> socket.socket:
    """Listens and never accepts: the kernel completes the TCP handshake, nothing is ever said."""
    sock = socket.create_server(("127.0.0.1", 0), backlog=16)
    return sock


@pytest.mark.parametrize(
    ("scheme", "says"),
    [
        ("http", "accepted the connection but sent no answer within 1 s"),
        ("https", "TLS handshake with https://127.0.0.1:"),
    ],
    ids=["silence", "tls-silence"],
)
def test_silent_port_is_named_for_what_was_seen(scheme: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Detection honours --timeout, and the message says whether TLS or the answer stalled."""
    with _silent_listener() as sock:
        url = f"{scheme}://127.0.0.1:{sock.getsockname()[1]}"
        result = run_cli(["staircase", url, "--n", "1", "--timeout", "1", "--no-save"], capsys)
    assert result.code == exitcodes.ERROR and says in result.err, result.err
    assert "30 s" not in result.err
    assert result.elapsed_s < 15
    assert_clean(result)


def test_refused_port(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        result = run_cli(["staircase", f"http://127.0.0.1:{port}", "--n", "1", "--no-save"], capsys)
    assert result.code == exitcodes.ERROR and "cannot connect" in result.err
    assert_clean(result)


def test_tokenizer_count_out_of_range_is_refused_not_allocated(capsys: pytest.CaptureFixture[str]) -> None:
    """A /tokenize count of -10^12 once grew a prompt list until memory ran out."""

    def routes(conn: socket.socket, req: Request) -> None:
        if req.path == "/tokenize":
            http(conn, json.dumps({"count": -(10**12)}))
        elif req.path == "/props":
            http(conn, json.dumps({"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}))
        else:
            http(conn, json.dumps({"status": "ok"}))

    with hostile(None, routes=routes) as server:
        result = run_cli(["staircase", server.url, "--n", "1", "--no-save"], capsys)
    assert result.code == exitcodes.ERROR and "/tokenize count = -1e+12 is not a plausible token count" in result.err
    assert result.elapsed_s < 30
    assert_clean(result)


def test_ollama_ps_with_null_models_is_an_empty_list() -> None:
    """`{"models": null}` from /api/ps was an AttributeError; now it just means no context length there."""
    import asyncio

    from servecheck.wire.base import Target
    from servecheck.load.driver import LoadDriver

    def routes(conn: socket.socket, req: Request) -> None:
        answers = {
            "/api/version": {"version": "0.5.0"},
            "/api/tags": {"models": [{"name": "m:latest"}]},
            "/api/ps": {"models": None},
            "/api/show": {"parameters": None},
        }
        http(conn, json.dumps(answers[req.path]) if req.path in answers else b"{}", 200 if req.path in answers else 404)

    async def detect(url: str) -> object:
        async with LoadDriver(Target(url, first_token_timeout_s=5)) as driver:
            return await driver.detect()

    with hostile(None, routes=routes) as server:
        info = asyncio.run(asyncio.wait_for(detect(server.url), 30))
    assert info.engine == "ollama" and info.n_ctx_per_request is None  # type: ignore[attr-defined]


# ---------------------------------------------------------------- redirects

KEY, HEADER_VALUE = "sk-redirect-secret-4711", "team-secret-0815"
SECRET_ARGS = ("--api-key", KEY, "--header", f"X-Team: {HEADER_VALUE}")


def _redirect(status: int, location: str) -> Callable[[socket.socket, Request], None]:
    def writer(conn: socket.socket, req: Request) -> None:
        http(conn, b"", status=status, extra=f"Location: {location}{req.path}\r\n")

    return writer


def _recording(seen: list[Request]) -> Callable[[socket.socket, Request], None]:
    """A well-behaved llama.cpp that keeps every request it got, headers and all."""

    def routes(conn: socket.socket, req: Request) -> None:
        seen.append(req)
        if not default_route(conn, req):
            http(conn, tokens_stream(TOKENS))

    return routes


def _carried_secrets(seen: list[Request]) -> list[str]:
    return [f"{r.method} {r.path}: {k}" for r in seen for k, v in r.headers if KEY in v or HEADER_VALUE in v]


def test_a_redirect_loop_is_named_with_the_url_it_ended_on(capsys: pytest.CaptureFixture[str]) -> None:
    """Every path redirects to itself: aiohttp said `0, message='', url=...`; now one line says redirect."""
    with hostile(None,
                 routes=lambda conn, req: http(conn, b"", status=302, extra=f"Location: {req.path}\r\n")) as server:
        result = run_cli(["staircase", server.url, "--n", "1", "--no-save"], capsys)
    assert result.code == exitcodes.ERROR, result.err
    assert_clean(result)
    error = next(line for line in result.err.splitlines() if line.startswith("Error:"))
    assert "redirected /" in error and "10 times" in error and f"last URL {server.url}/" in error, error
    assert "message=''" not in result.err
    assert result.elapsed_s < 30


def test_a_redirect_to_another_port_never_carries_the_key_or_headers(capsys: pytest.CaptureFixture[str]) -> None:
    """The first server sends everything to a second one (another port): servecheck stops and says
    so, and the second one never sees the API key or the --header value."""
    seen: list[Request] = []
    with hostile(None, routes=_recording(seen)) as second, hostile(None, routes=_redirect(307, second.url)) as first:
        result = run_cli(["staircase", first.url, "--n", "1", "--no-save", *SECRET_ARGS], capsys)
    assert result.code == exitcodes.ERROR, result.err
    assert_clean(result)
    assert f"to {second.url}/" in result.err and "redirected" in result.err, result.err
    assert _carried_secrets(seen) == []
    assert KEY not in result.err + result.out and HEADER_VALUE not in result.err + result.out


def test_a_measured_request_redirected_elsewhere_fails_without_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    """Detection is answered; the completion is redirected to another port: the request fails,
    naming the redirect, and the other server sees no key and no header."""
    seen: list[Request] = []
    with hostile(None, routes=_recording(seen)) as second, hostile(_redirect(308, second.url)) as first:
        result = run_cli(["staircase", first.url, "--n", "1", "--tokens", str(TOKENS), "--no-save", *SECRET_ARGS],
                         capsys)
    assert result.code == exitcodes.ERROR, result.err
    assert_clean(result)
    assert f"redirected /completion to {second.url}/completion" in result.err, result.err
    assert _carried_secrets(seen) == [] and seen == []


def test_log_live_names_a_redirect_loop() -> None:
    """`log --url`'s live evidence (no key, no headers sent) names a loop too."""
    from servecheck.errors import ConnectError
    from servecheck.logscan.live import live_evidence

    def loop(conn, req):
        return http(conn, b"", status=302, extra=f"Location: {req.path}\r\n")

    with hostile(None, routes=loop) as server, pytest.raises(ConnectError) as info:
        live_evidence(server.url, "llamacpp", timeout_s=20)
    assert f"the server redirected /props 10 times; last URL {server.url}/props" in info.value.message


def test_a_redirect_on_the_same_server_is_followed_with_the_key() -> None:
    """A redirect that stays on the server the user named is followed, and the key goes along."""
    import asyncio

    from servecheck.wire.base import Target
    from servecheck.load.driver import LoadDriver

    seen: list[Request] = []

    def routes(conn: socket.socket, req: Request) -> None:
        seen.append(req)
        if req.path == "/props":
            http(conn, b"", status=301, extra="Location: /moved/props\r\n")
        elif req.path == "/moved/props":
            http(conn, json.dumps({"total_slots": 3}))
        else:
            http(conn, b"{}", status=404)

    async def props(url: str) -> object:
        async with LoadDriver(Target(url, api_key=KEY, first_token_timeout_s=5)) as driver:
            return await driver.get_json("/props")

    with hostile(None, routes=routes) as server:
        assert asyncio.run(asyncio.wait_for(props(server.url), 30)) == {"total_slots": 3}
    assert [r.path for r in seen] == ["/props", "/moved/props"]
    assert seen[1].header("Authorization") == f"Bearer {KEY}"


# ---------------------------------------------------------------- bad flags, bad URLs, bad files


def _fifo(tmp_path: Path, name: str = "pipe") -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


def _lying_safetensors(tmp_path: Path) -> Path:
    """Shapes of a million elements over an empty byte range: once audited to 0 bytes per token."""
    import struct

    header = json.dumps({"w": {"dtype": "F16", "shape": [1000, 1000], "data_offsets": [0, 0]}}).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


INPUT_CASES: list[tuple[str, Callable[[Path], list[str]], int, str]] = [
    ("timeout-nan", lambda p: ["staircase", "http://127.0.0.1:9", "--timeout", "nan"], exitcodes.USAGE,
     "not a finite number"),
    ("timeout-inf", lambda p: ["staircase", "http://127.0.0.1:9", "--timeout", "inf"], exitcodes.USAGE,
     "not a finite number"),
    ("n-huge", lambda p: ["staircase", "http://127.0.0.1:9", "--n", "100000"], exitcodes.USAGE,
     "above the ceiling of 4096"),
    ("endpoint-url", lambda p: ["staircase", "http://127.0.0.1:9/v1/chat/completions"], exitcodes.USAGE,
     "drop the path: give the base URL http://127.0.0.1:9"),
    ("port-out-of-range", lambda p: ["staircase", "http://127.0.0.1:99999"], exitcodes.USAGE,
     "the port is not a number in 1..65535"),
    ("header-crlf", lambda p: ["staircase", "http://127.0.0.1:9", "--header", "X-A:b\r\nEvil: 1"], exitcodes.USAGE,
     "holds a control character"),
    ("header-bad-name", lambda p: ["staircase", "http://127.0.0.1:9", "--header", "X A:b"], exitcodes.USAGE,
     "holds characters a header name cannot"),
    ("kv-type-audit", lambda p: ["audit", str(p / "missing.gguf"), "--kv-type", "q99"], exitcodes.USAGE,
     "unknown KV cache type 'q99'"),
    ("kv-type-compare", lambda p: ["compare", "a=1GB@10", "b=2GB@20", "--kv-type", "q99"], exitcodes.USAGE,
     "unknown KV cache type"),
    ("compare-overflow", lambda p: ["compare", "a=1e300GB@10", "b=2GB@20"], exitcodes.USAGE, "too large a byte figure"),
    ("compare-absurd-rate", lambda p: ["compare", "a=1GB@1e-300", "b=2GB@1e300"], exitcodes.USAGE, "tok/s is outside"),
    ("roofline-overflow",
     lambda p: ["roofline", "--bytes-per-token", "1e300GB", "--tok-s", "10", "--bandwidth", "100", "--no-save"],
     exitcodes.USAGE, "too large a byte figure"),
    ("run-id-too-large", lambda p: ["show", "99999999999999999999999", "--db", str(p / "h.db")], exitcodes.ERROR,
     "no history database"),
    ("safetensors-shape-vs-offsets", lambda p: ["audit", str(_lying_safetensors(p))], exitcodes.ERROR,
     "declares shape [1000, 1000] of F16 (2000000 bytes) but its data_offsets span 0 bytes"),
    ("audit-fifo", lambda p: ["audit", str(_fifo(p))], exitcodes.ERROR, "is a FIFO (named pipe), not a regular file"),
    ("roofline-model-fifo", lambda p: ["roofline", str(_fifo(p)), "--tok-s", "10", "--bandwidth", "100", "--no-save"],
     exitcodes.ERROR, "is a FIFO"),
    ("roofline-run-fifo", lambda p: ["roofline", "--run", str(_fifo(p)), "--bytes-per-token", "1GB", "--tok-s", "10",
                                            "--bandwidth", "100", "--no-save"],
     exitcodes.ERROR, "is a FIFO"),
    ("compare-fifo", lambda p: ["compare", f"a={_fifo(p)}@10", "b=2GB@20"], exitcodes.ERROR, "is a FIFO"),
    ("show-fifo", lambda p: ["show", str(_fifo(p, "run.json"))], exitcodes.USAGE, "is not a regular file"),
    ("db-fifo", lambda p: ["history", "--db", str(_fifo(p, "h.db"))], exitcodes.ERROR, "is not a regular file"),
    ("log-rules-fifo", lambda p: ["log", "/dev/null", "--rules", str(_fifo(p))], exitcodes.ERROR, "is a FIFO"),
    ("log-unreadable-special", lambda p: ["log", "/proc/self/mem"], exitcodes.ERROR,
     "cannot read log file /proc/self/mem"),
    ("serve-log-uncreatable", lambda p: ["staircase", "--serve", "false --port 9", "--serve-log", "/proc/nope/x.log"],
     exitcodes.USAGE, "cannot create folder /proc/nope"),
    ("serve-log-fifo", lambda p: ["staircase", "--serve", "false --port 9", "--serve-log", str(_fifo(p))],
     exitcodes.USAGE, "is not a regular file"),
]


@pytest.mark.parametrize(("case", "argv", "code", "says"), INPUT_CASES, ids=[c[0] for c in INPUT_CASES])
def test_bad_input(case: str, argv: Callable[[Path], list[str]], code: int, says: str, tmp_path: Path,
                   capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(argv(tmp_path), capsys)
    assert result.code == code, result.err
    assert says in result.err, result.err
    assert result.elapsed_s < 10  # at once: nothing opened a FIFO, nothing waited on a server
    assert_clean(result)


def test_run_id_beyond_sqlite_is_unknown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from servecheck.store.db import open_store

    db = tmp_path / "h.db"
    open_store(str(db)).close()
    result = run_cli(["show", "99999999999999999999999", "--db", str(db)], capsys)
    assert result.code == exitcodes.USAGE and "out of range" in result.err
    assert_clean(result)
    store = open_store(str(db))
    try:
        with pytest.raises(Exception, match="no run"):
            store.get_run(2**70)
    finally:
        store.close()


def test_compare_prints_only_finite_figures(capsys: pytest.CaptureFixture[str]) -> None:
    """At the edges of the accepted ranges every ratio and share is still a number."""
    result = run_cli(["compare", "a=1B@1e-6", "b=1e15B@1e9"], capsys)
    assert result.code == exitcodes.OK
    assert "inf" not in result.out and "nan" not in result.out, result.out


def test_serve_false_ends_with_what_the_log_said(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    result = run_cli(["staircase", "--serve", "false --port 9", "--serve-log", str(tmp_path / "s.log"), "--no-save"],
                     capsys)
    assert result.code == exitcodes.ERROR
    assert "exited with code 1 before it was ready" in result.err and "(the log is empty)" in result.err
    assert "Traceback" not in result.err and "unexpected" not in result.err


def test_prefix_cache_progress_never_prints_none() -> None:
    from rich.console import Console

    from servecheck.cli import prefix_cache as pc
    from servecheck.cli.context import AppContext
    from servecheck.cli.measure import Progress

    class Send:
        kind, ttft_s, cached_tokens = "repeat", 0.25, None

    class Result:
        sends = [Send()]

    console = Console(record=True, width=200)
    watch = Progress(AppContext(out=console, err=console), "prefix-cache: sends", pc.progress_line)
    watch.point(Result())  # type: ignore[arg-type]
    text = console.export_text()
    assert "None" not in text and "cached tokens not reported" in text


# ---------------------------------------------------------------- signals


def _spawn(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    # preexec_fn: the tests' SIGINT arrives however the suite was started (tests/ctrl_c.py)
    return subprocess.Popen([sys.executable, "-m", "servecheck", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "COLUMNS": "200", **(env or {})}, preexec_fn=default_sigint)


def _wait_for_line(proc: subprocess.Popen[str], prefix: str, timeout_s: float = 60) -> list[str]:
    assert proc.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    for line in proc.stderr:
        seen.append(line)
        if line.startswith(prefix) or time.monotonic() > deadline:
            break
    return seen


def _history_complete(db: Path) -> list[int]:
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT complete FROM runs")]


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, exitcodes.TERMINATED), (signal.SIGHUP, exitcodes.HANGUP)],
                         ids=["SIGTERM", "SIGHUP"])
def test_signal_during_staircase_saves_the_partial_and_stops_the_server(sig: int, code: int, tmp_path: Path) -> None:
    """kill -TERM during `staircase --serve ... --json F`: F says complete false, the history row is
    incomplete, the server servecheck started is gone, exit 143 (129 for SIGHUP)."""
    from servecheck.engine.process import free_port

    port = free_port()
    out, db = tmp_path / "run.json", tmp_path / "history.db"
    command = f"{sys.executable} -m servecheck simulate --port {port} --mode serial --token-ms 20"
    proc = _spawn(["staircase", "--serve", command, "--serve-log", str(tmp_path / "s.log"), "--n", "1,2,4,8",
                   "--tokens", "32", "--prompt-tokens", "8", "--json", str(out), "--db", str(db)])
    seen = _wait_for_line(proc, "N=1 rep")  # the first point is measured (and saved as a partial)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, "".join(seen) + stderr
    assert "Traceback" not in stderr and "unexpected" not in stderr
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and doc["points"], doc.get("points")
    assert _history_complete(db) == [0]
    assert "INCOMPLETE" in stdout
    with socket.socket() as probe:  # the simulator servecheck started is stopped: nothing listens
        probe.settimeout(2)
        assert probe.connect_ex(("127.0.0.1", port)) != 0


def test_sigkill_during_staircase_leaves_a_readable_partial_json(tmp_path: Path) -> None:
    """SIGKILL cannot be caught: the JSON file must already hold every point measured, marked
    incomplete, because it is rewritten (atomically) after each one, like the history row."""
    from servecheck.engine.process import free_port

    port = free_port()
    out, db, html = tmp_path / "run.json", tmp_path / "history.db", tmp_path / "run.html"
    command = f"{sys.executable} -m servecheck simulate --port {port} --mode serial --token-ms 20"
    # its record of the server it started stays behind (stale): in a cache of the test's own
    proc = _spawn(["staircase", "--serve", command, "--serve-log", str(tmp_path / "s.log"), "--n", "1,2,4,8",
                   "--tokens", "32", "--prompt-tokens", "8", "--json", str(out), "--html", str(html), "--db", str(db)],
                  env={"SERVECHECK_CACHE_DIR": str(tmp_path / "cache")})
    _wait_for_line(proc, "N=2 rep")  # N=1 and N=2 are measured
    proc.kill()
    proc.communicate(timeout=60)
    doc = json.loads(out.read_text())
    assert doc["complete"] is False
    assert [p["n"] for p in doc["points"]][:2] == [1, 2] and doc["points"][1]["batches"]
    assert _history_complete(db) == [0]
    assert "<html" in html.read_text().lower()
    # The server servecheck started dies with it (parent-death signal): nothing listens soon after.
    deadline = time.monotonic() + 10
    while True:
        with socket.socket() as probe:
            probe.settimeout(1)
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                break
        assert time.monotonic() < deadline, "the simulator outlived the killed servecheck"
        time.sleep(0.2)


@pytest.mark.alone  # a real signal, timed against the run's progress (docs/testing.md)
def test_sigint_during_detection_does_not_claim_a_partial(tmp_path: Path) -> None:
    with _silent_listener() as sock:
        proc = _spawn(["staircase", f"http://127.0.0.1:{sock.getsockname()[1]}", "--n", "1", "--timeout", "20",
                       "--db", str(tmp_path / "h.db")])
        # Ctrl-C once servecheck is waiting on the server (its first connection arrived), not after a
        # fixed sleep: on a loaded machine the start-up alone once took longer than 2 s.
        sock.settimeout(60)
        conn, _ = sock.accept()
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        conn.close()
    assert proc.returncode == exitcodes.INTERRUPTED, stderr
    assert "nothing was measured, nothing saved" in stderr and "saving the partial" not in stderr
    assert "Traceback" not in stderr


def test_exit_codes_are_documented_beside_130() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "| 143 |" in readme and "| 129 |" in readme and "| 130 |" in readme


def test_the_trap_maps_only_interrupted_exits() -> None:
    trap = main_mod.SignalTrap()
    assert trap.exit_code(exitcodes.INTERRUPTED) == exitcodes.INTERRUPTED  # Ctrl-C stays 130
    with pytest.raises(KeyboardInterrupt):
        trap(signal.SIGTERM, None)
    trap(signal.SIGTERM, None)  # a second signal while saving is ignored
    assert trap.exit_code(exitcodes.INTERRUPTED) == exitcodes.TERMINATED
    assert trap.exit_code(exitcodes.INVALID) == exitcodes.INVALID


# ---------------------------------------------------------------- the gates, by hand


def _tally(events: int, server: int | None = None, where: str = "usage.completion_tokens",
           implausible: str | None = None):
    from servecheck.wire.tally import StreamTally

    tally = StreamTally(events=events, server_tokens=server, server_tokens_field=where if server is not None else None,
                        server_tokens_source="usage" if server is not None else "none", implausible=implausible)
    return tally


@pytest.mark.parametrize(
    ("tally_args", "requested", "says"),
    [
        ((512, 512), 512, None),
        ((512, 538), 512, None),  # within 5% (rounded up)
        ((512, 539), 512, "usage.completion_tokens = 539 is longer than requested"),
        ((1024,), 512, "token events = 1024 is longer than requested"),
        ((511, 3), 512, "usage.completion_tokens = 3 disagrees with the stream"),
        ((511, None, "x", "usage.completion_tokens = 1e+12 is not a plausible token count"), 512,
         "usage.completion_tokens = 1e+12 is not a plausible token count: 512 were requested and 511 events streamed"),
        ((3, 3), 1, None),  # a one-token request may come back with its stop token: the slack of 2
        ((4,), 1, "token events = 4 is longer than requested"),
    ],
)
def test_plausibility_gate(tally_args: tuple, requested: int, says: str | None) -> None:
    from servecheck.wire.tally import plausibility_problem

    problem = plausibility_problem(_tally(*tally_args), requested)
    assert problem == says if says is None else (problem is not None and problem.startswith(says)), problem


@pytest.mark.parametrize(
    ("value", "problem"),
    [(12, None), (12.0, None), (0, None), (-5, "-5"), (float("nan"), "nan"), (float("inf"), "inf"), (10**12, "1e+12"),
     (2.5, "2.5"), ("12", None), (True, None)],
)
def test_count_problem_names_the_value(value: object, problem: str | None) -> None:
    from servecheck.wire.dialects import count_problem

    found = count_problem("usage.completion_tokens", value)
    assert (found is None if problem is None
            else found == f"usage.completion_tokens = {problem} is not a plausible token count")
