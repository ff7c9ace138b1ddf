"""ManagedServer and LlamaServer plumbing against small stand-in servers (no llama.cpp needed)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from servecheck.engine import managed, process
from servecheck.engine.process import (
    LlamaServer,
    ManagedServer,
    ctx_per_slot_for,
    ensure_port_free,
    free_port,
    infer_host_port,
)
from servecheck.errors import EngineError, UsageError

# A minimal HTTP server: /health answers 200 after READY_DELAY_S (503 before), like llama-server.
STUB = textwrap.dedent(
    """
    import http.server, sys, time
    port, delay = int(sys.argv[1]), float(sys.argv[2])
    started = time.monotonic()
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            ready = time.monotonic() - started >= delay
            self.send_response(200 if (ready and self.path == "/health") else 503 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    print("stub listening on", port, flush=True)
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


@pytest.fixture()
def stub(tmp_path: Path) -> Path:
    path = tmp_path / "stub_server.py"
    path.write_text(STUB)
    return path


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _stub_server(stub: Path, tmp_path: Path, delay_s: float = 0.3, **kw: object) -> ManagedServer:
    port = free_port()
    cmd = [sys.executable, str(stub), str(port), str(delay_s)]
    return ManagedServer(cmd, url=f"http://127.0.0.1:{port}", log_path=tmp_path / "server.log", **kw)  # type: ignore[arg-type]


def test_start_waits_for_health_and_stop_kills_the_group(stub: Path, tmp_path: Path) -> None:
    server = _stub_server(stub, tmp_path, delay_s=0.5)
    with server as url:
        assert url == server.url
        assert urllib.request.urlopen(url + "/health", timeout=5).status == 200
        pid = server.pid
        assert pid is not None and _alive(pid)
        assert os.getpgid(pid) == pid  # its own process group
        assert os.getsid(pid) == os.getsid(0)  # in our session: one autogroup, so it cannot starve us
        assert pid in process.live_pids()
    assert not _alive(pid)
    assert pid not in process.live_pids()
    assert "stub listening" in (tmp_path / "server.log").read_text()


def test_exception_inside_the_block_still_stops_the_server(stub: Path, tmp_path: Path) -> None:
    server = _stub_server(stub, tmp_path)
    with pytest.raises(RuntimeError, match="boom"):
        with server:
            pid = server.pid
            raise RuntimeError("boom")
    assert pid is not None and not _alive(pid)


def test_process_that_exits_before_ready_is_quoted(tmp_path: Path) -> None:
    script = "import sys; print('error: model file refused: bad magic'); sys.exit(3)"
    port = free_port()
    server = ManagedServer([sys.executable, "-c", script], url=f"http://127.0.0.1:{port}", log_path=tmp_path / "l.log")
    with pytest.raises(EngineError) as err:
        server.start()
    assert "exited with code 3" in err.value.message
    assert "model file refused: bad magic" in err.value.message
    assert str(tmp_path / "l.log") in (err.value.hint or "")


def test_startup_timeout_stops_the_process(stub: Path, tmp_path: Path) -> None:
    server = _stub_server(stub, tmp_path, delay_s=3600, startup_timeout_s=1.0)
    with pytest.raises(EngineError, match="not ready after 1 s"):
        server.start()
    assert server.pid is not None and not _alive(server.pid)


def test_sigterm_ignoring_child_is_killed_after_grace(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import signal, time, http.server, sys
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200); self.end_headers()
        http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
        """
    )
    port = free_port()
    server = ManagedServer(
        [sys.executable, "-c", script, str(port)], url=f"http://127.0.0.1:{port}", stop_grace_s=0.5,
        log_path=tmp_path / "l.log",
    )
    server.start()
    pid = server.pid
    assert server.stop() == -signal.SIGKILL
    assert pid is not None and not _alive(pid)


def test_port_already_taken_is_a_clear_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(EngineError, match=f"port {port} on 127.0.0.1 is already taken"):
            ensure_port_free("127.0.0.1", port)
        cmd = f"{sys.executable} -m http.server --bind 127.0.0.1 --port {port}"
        with pytest.raises(EngineError, match="already taken"):
            ManagedServer.from_command_string(cmd).start()


def test_missing_program_is_a_clear_error(tmp_path: Path) -> None:
    server = ManagedServer([str(tmp_path / "nope")], url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(EngineError, match="no such program"):
        server.start()


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("llama-server -m m.gguf --port 8081", ("127.0.0.1", 8081)),
        ("llama-server -m m.gguf --host 0.0.0.0 --port 9000", ("127.0.0.1", 9000)),
        ("vllm serve model --host=127.0.0.2 --port=8000", ("127.0.0.2", 8000)),
        ("python -m sglang.launch_server --port 30000 --host localhost", ("127.0.0.1", 30000)),
    ],
)
def test_url_is_inferred_from_the_command(command: str, expected: tuple[str, int]) -> None:
    import shlex

    assert infer_host_port(shlex.split(command)) == expected
    server = ManagedServer.from_command_string(command)
    assert server.url == f"http://{expected[0]}:{expected[1]}"


@pytest.mark.parametrize("command", ["llama-server -m m.gguf", "x --port abc", "x --port 70000", "", "x 'unclosed"])
def test_bad_serve_commands_are_usage_errors(command: str) -> None:
    with pytest.raises(UsageError):
        ManagedServer.from_command_string(command)


def test_serve_command_string_runs_and_stops(tmp_path: Path) -> None:
    """A server without /health (404) is ready when `/` answers 200; the port comes from --port."""
    script = tmp_path / "plain_server.py"
    script.write_text(
        textwrap.dedent(
            """
            import argparse, http.server
            p = argparse.ArgumentParser(); p.add_argument("--host"); p.add_argument("--port", type=int)
            a = p.parse_args()
            class H(http.server.BaseHTTPRequestHandler):
                def do_GET(self):
                    self.send_response(200 if self.path == "/" else 404); self.end_headers()
            http.server.HTTPServer((a.host, a.port), H).serve_forever()
            """
        )
    )
    port = free_port()
    server = ManagedServer.from_command_string(
        f"{sys.executable} {script} --host 127.0.0.1 --port {port}", log_path=tmp_path / "s.log", startup_timeout_s=60
    )
    with server as url:
        assert server.pid is not None and _alive(server.pid)
    assert url == f"http://127.0.0.1:{port}"
    assert not _alive(server.pid)


@pytest.mark.parametrize(
    ("prompt", "output", "expected"),
    [(32, 256, 512), (64, 512, 768), (0, 192, 256), (1000, 3000, 4096)],
)
def test_ctx_per_slot_holds_one_request(prompt: int, output: int, expected: int) -> None:
    assert ctx_per_slot_for(prompt, output) == expected


def test_llama_command_line(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\necho '--no-webui --parallel'\n")
    binary.chmod(0o755)
    model = tmp_path / "m.gguf"
    server = LlamaServer(binary, model, parallel=4, ctx_per_slot=512, threads=3, extra_args=["--metrics"])
    cmd = server.command(1234)
    assert cmd[:3] == [str(binary), "-m", str(model)]
    pairs = dict(zip(cmd[3::2], cmd[4::2], strict=False))
    assert pairs["--host"] == "127.0.0.1" and pairs["--port"] == "1234"
    assert pairs["-np"] == "4" and pairs["-c"] == "2048" and pairs["-t"] == "3"
    assert cmd[-2:] == ["--no-webui", "--metrics"]


def test_llama_server_rejects_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--parallel 0"):
        LlamaServer("llama-server", tmp_path / "m.gguf", parallel=0)
    with pytest.raises(UsageError, match="does not exist"):
        LlamaServer("llama-server", tmp_path / "missing.gguf").start()


def test_safety_net_stops_servers_when_the_parent_gets_sigterm(stub: Path, tmp_path: Path) -> None:
    """A parent that is terminated (not Ctrl-C, no `with` unwinding to rely on) leaves no server behind."""
    pid_file = tmp_path / "pid"
    parent = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from servecheck.engine.process import ManagedServer, free_port
        port = free_port()
        s = ManagedServer([sys.executable, {str(stub)!r}, str(port), "0"], url=f"http://127.0.0.1:{{port}}")
        s.start()
        Path({str(pid_file)!r}).write_text(str(s.pid))
        time.sleep(600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", parent])
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the parent never started its server"
            assert proc.poll() is None, "the parent died"
            time.sleep(0.1)
        child = int(pid_file.read_text())
        assert _alive(child)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(child)
    finally:
        proc.kill()
        proc.wait()


_IGNORES_SIGTERM = textwrap.dedent(
    """
    import signal, http.server, sys
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
    """
)


def test_a_second_ctrl_c_while_stopping_kills_the_server(tmp_path: Path) -> None:
    """Ctrl-C again during the grace period: the server is killed, not left running."""
    port = free_port()
    server = ManagedServer(
        [sys.executable, "-c", _IGNORES_SIGTERM, str(port)], url=f"http://127.0.0.1:{port}", stop_grace_s=60,
        log_path=tmp_path / "l.log",
    )
    server.start()
    assert server.proc is not None
    pid, wait = server.pid, server.proc.wait

    def impatient_wait(timeout: float | None = None) -> int:
        if timeout is not None:
            raise KeyboardInterrupt
        return wait()

    server.proc.wait = impatient_wait  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        server.stop()
    assert pid is not None and not _alive(pid)
    assert pid not in process.live_pids()


class _InterruptOnce:
    """A lock whose first acquisition raises KeyboardInterrupt: Ctrl-C just after Popen returned."""

    def __init__(self) -> None:
        self.fired = False

    def __enter__(self) -> None:
        if not self.fired:
            self.fired = True
            raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        return None


def test_ctrl_c_right_after_spawn_still_stops_the_server(stub: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(managed, "_LIVE_LOCK", _InterruptOnce())
    server = _stub_server(stub, tmp_path)
    with pytest.raises(KeyboardInterrupt):
        server.start()
    assert server.pid is not None
    deadline = time.monotonic() + 10
    while _alive(server.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(server.pid)


class _StubLocal(managed.LocalServer):
    """A LocalServer over the stub: what `launch` and `start` do around `_managed`."""

    def __init__(self, stub: Path, tmp_path: Path, name: str, delay_s: float = 0.3) -> None:
        self.stub, self.log_path, self.delay_s = stub, tmp_path / f"{name}.log", delay_s
        self.port, self.server = None, None
        self.spawned = 0

    def _managed(self, port: int) -> ManagedServer:
        self.spawned += 1
        cmd = [sys.executable, str(self.stub), str(port), str(self.delay_s)]
        return ManagedServer(cmd, url=f"http://127.0.0.1:{port}", log_path=self.log_path)


def test_launched_servers_start_side_by_side_and_start_waits_for_the_same_process(stub: Path, tmp_path: Path) -> None:
    first, second = _StubLocal(stub, tmp_path, "a", delay_s=1.0), _StubLocal(stub, tmp_path, "b", delay_s=1.0)
    first.launch()
    second.launch()
    pids = first.pid, second.pid
    assert all(p is not None and _alive(p) for p in pids)  # both running before either is waited for
    with first as url:
        assert urllib.request.urlopen(url + "/health", timeout=5).status == 200
        assert second.server is not None and second.server.running
    assert pids[0] is not None and not _alive(pids[0])
    with second as url:
        assert second.pid == pids[1] and second.spawned == 1  # the launched process, not a new one
        assert urllib.request.urlopen(url + "/health", timeout=5).status == 200
    assert pids[1] is not None and not _alive(pids[1])


def test_a_launched_server_never_started_is_stopped_by_its_launcher(stub: Path, tmp_path: Path) -> None:
    claimed, unclaimed = _StubLocal(stub, tmp_path, "a"), _StubLocal(stub, tmp_path, "b")
    claimed.launch()
    unclaimed.launch()
    pid = unclaimed.pid
    with claimed:
        claimed.stop_unclaimed()  # `start` took it over: the launcher's stop leaves it to the block
        assert claimed.server is not None and claimed.server.running
    unclaimed.stop_unclaimed()
    assert pid is not None and not _alive(pid)
    assert pid not in process.live_pids()


def test_a_launched_server_that_died_before_its_start_is_quoted(tmp_path: Path) -> None:
    script = tmp_path / "dies.py"
    script.write_text("import sys\nprint('model file is broken', flush=True)\nsys.exit(3)\n")

    class Dies(_StubLocal):
        def _managed(self, port: int) -> ManagedServer:
            self.spawned += 1
            return ManagedServer([sys.executable, str(script)], url=f"http://127.0.0.1:{port}",
                                 log_path=self.log_path)

    server = Dies(script, tmp_path, "dies")
    server.launch()
    pid = server.pid
    with pytest.raises(EngineError) as err:
        server.start()
    assert "model file is broken" in err.value.message and server.spawned == 1
    assert pid is not None and not _alive(pid)
