"""Start a server process, wait until it is healthy, and stop it on every exit path.

The child runs in its own process group (so a terminal's Ctrl-C reaches servecheck, which then
stops the whole group in order) with its output captured to a log file. A registry of live
servers, stopped from `atexit` and from a SIGTERM/SIGHUP handler, is the safety net for the exits
servecheck can catch; for the ones it cannot (SIGKILL, the OOM killer) the child gets SIGTERM from
the kernel (Linux) and a watchdog in its group ends the whole group (`servecheck.lifeline`). With
`records`, a record of the running server is kept in the cache until it stops (`engine.running`).

`LocalServer` is the base of the engines servecheck starts itself on a free port: llama.cpp's
(`llamacpp.server`), vLLM's (`vllm.server`) and MLX's (`mlx_engine.server`).
"""

from __future__ import annotations

import atexit
import errno
import os
import shlex
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from types import FrameType, TracebackType

from servecheck.engine.running import RunningRecords
from servecheck.errors import EngineError, UsageError
from servecheck.lifeline import Watchdog, pdeathsig_setup

LOCALHOST = "127.0.0.1"
# Loading a small model takes about a second; a big one on a slow disk can take minutes.
DEFAULT_STARTUP_TIMEOUT_S = 180.0
# llama-server finishes its in-flight work and exits within a second or two of SIGTERM.
STOP_GRACE_S = 5.0
HEALTH_POLL_S = 0.2
HEALTH_REQUEST_TIMEOUT_S = 2.0
# Lines of a server's log quoted when it fails to start or dies.
SERVER_LOG_TAIL_LINES = 12
# Paths tried, in order, to decide that an arbitrary server (--serve) is up. A path that answers
# anything but 404 decides (llama.cpp answers 503 on /health while loading); 404 tries the next.
GENERIC_HEALTH_PATHS = ("/health", "/v1/models", "/api/version", "/")
_BIND_FAILURE_MARKERS = ("couldn't bind", "address already in use", "failed to bind")

_LIVE: set[ManagedServer] = set()
_LIVE_LOCK = threading.Lock()
_SAFETY_NET_INSTALLED = False


def free_port(host: str = LOCALHOST) -> int:
    """A port the OS says is free right now (bind port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def ensure_port_free(host: str, port: int) -> None:
    """Raise a clear error when something already listens on host:port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # SO_REUSEADDR: a port in TIME_WAIT is usable; only a live listener makes bind fail.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise EngineError(
                    f"port {port} on {host} is already taken (another server is listening there)",
                    "choose another --port, or stop the other server",
                ) from exc
            raise EngineError(f"cannot use {host}:{port}: {exc.strerror}", "choose another host or port") from exc


class ManagedServer:
    """A server process owned by servecheck: started, health-checked, always stopped.

    Use as a context manager (`with ManagedServer(cmd, url=...) as url:`), or call `start()` and
    `stop()` yourself; `stop()` is idempotent. `die_with_servecheck=False` leaves out the kernel's
    signal and the watchdog (a server meant to outlive this process, and the tests of leftovers).
    """

    def __init__(
        self,
        cmd: Sequence[str],
        *,
        url: str,
        log_path: Path | None = None,
        health_paths: Sequence[str] = ("/health",),
        startup_timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S,
        stop_grace_s: float = STOP_GRACE_S,
        check_port: tuple[str, int] | None = None,
        env: dict[str, str] | None = None,
        records: RunningRecords | None = None,
        die_with_servecheck: bool = True,
    ) -> None:
        if not cmd:
            raise UsageError("the server command is empty", "give the command that starts the server")
        self.cmd = [str(c) for c in cmd]
        self.url = url.rstrip("/")
        self.log_path = Path(log_path) if log_path is not None else _temp_log_path()
        self.health_paths = tuple(health_paths)
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.check_port = check_port
        self.env = env
        self.records = records
        self.die_with_servecheck = die_with_servecheck
        self.proc: subprocess.Popen[bytes] | None = None
        self.watchdog: Watchdog | None = None
        self.record_path: Path | None = None
        self.name = Path(self.cmd[0]).name

    @classmethod
    def from_command_string(cls, command: str, *, log_path: Path | None = None, **kwargs: object) -> ManagedServer:
        """`--serve "llama-server -m m.gguf --port 8081"`: split like a shell, URL from --host/--port."""
        try:
            args = shlex.split(command)
        except ValueError as exc:
            raise UsageError(f"cannot parse --serve command: {exc}", "check the quoting") from exc
        if not args:
            raise UsageError("--serve was given an empty command", "give the command that starts the server")
        host, port = infer_host_port(args)
        return cls(args, url=f"http://{host}:{port}", log_path=log_path, check_port=(host, port),
                   health_paths=GENERIC_HEALTH_PATHS, **kwargs)  # type: ignore[arg-type]

    # -- lifecycle --------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> str:
        """Start the process (unless `launch` did) and wait for health; on any failure the process is
        stopped first."""
        if self.proc is None:
            self.launch()
        try:
            self.wait_healthy()
        except BaseException:
            self.stop()
            raise
        return self.url

    def launch(self) -> None:
        """Start the process without waiting for it (`start` waits): servers launched one after the
        other come up side by side. From the main thread only (the parent-death signal follows the
        thread that spawned the child)."""
        if self.check_port is not None:
            ensure_port_free(*self.check_port)
        try:
            # The spawn is inside: a Ctrl-C between Popen and the return must not leave the child.
            self._spawn()
        except BaseException:
            self.stop()
            raise

    def _spawn(self) -> None:
        _install_safety_net()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            try:
                self.proc = subprocess.Popen(
                    self.cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    # Its own process group, so that we decide when it stops, but our session:
                    # with autogroup scheduling (most Linux desktops, this CI's VMs) a new session
                    # is a new CPU group, and on a busy machine a server's group starved this
                    # client for seconds at a time (every completion arrived at once).
                    process_group=0,
                    preexec_fn=pdeathsig_setup() if self.die_with_servecheck else None,  # noqa: PLW1509 - main thread only
                    env=None if self.env is None else {**os.environ, **self.env},
                )
            except FileNotFoundError as exc:
                raise EngineError(f"cannot start {self.cmd[0]}: no such program", "check the command") from exc
            except PermissionError as exc:
                raise EngineError(f"cannot start {self.cmd[0]}: not executable", f"chmod +x {self.cmd[0]}") from exc
            except OSError as exc:
                raise EngineError(f"cannot start {self.cmd[0]}: {exc.strerror}", "check the command") from exc
        with _LIVE_LOCK:
            _LIVE.add(self)
        if self.die_with_servecheck:
            self.watchdog = Watchdog.start(self.proc.pid)
        if self.records is not None:
            self.record_path = self.records.add(self.proc.pid, self.cmd, self.url, self.log_path)

    def wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            self._raise_if_exited()
            if self._healthy():
                return
            if time.monotonic() > deadline:
                raise EngineError(
                    f"{self.name} was not ready after {self.startup_timeout_s:.0f} s; last log lines:\n"
                    + self.log_tail_text(),
                    f"full log: {self.log_path}",
                )
            time.sleep(HEALTH_POLL_S)

    def _healthy(self) -> bool:
        for path in self.health_paths:
            status = _http_status(self.url + path)
            if status != 404:
                return status == 200
        return False

    def _raise_if_exited(self) -> None:
        assert self.proc is not None
        rc = self.proc.poll()
        if rc is None:
            return
        with _LIVE_LOCK:
            _LIVE.discard(self)
        raise EngineError(
            f"{self.name} exited with code {rc} before it was ready; last log lines:\n" + self.log_tail_text(),
            f"full log: {self.log_path}",
        )

    def check_alive(self) -> None:
        """Raise (quoting the log) if the server died after it was started."""
        if self.proc is not None and self.proc.poll() is not None:
            raise EngineError(
                f"{self.name} stopped unexpectedly (exit {self.proc.returncode}); last log lines:\n"
                + self.log_tail_text(),
                f"full log: {self.log_path}",
            )

    def stop(self) -> int | None:
        """Stop the process and its group, then dismiss the watchdog and drop the record; returns
        the exit code. The watchdog stays on duty until the group is stopped: a servecheck killed
        while stopping still leaves nothing behind."""
        if self.proc is None:
            return None
        try:
            return self._stop_group(self.proc)
        finally:
            self._released()

    def _released(self) -> None:
        watchdog, self.watchdog = self.watchdog, None
        if watchdog is not None:
            watchdog.dismiss()
        if self.records is not None:
            self.records.remove(self.record_path)
            self.record_path = None

    def _stop_group(self, proc: subprocess.Popen[bytes]) -> int | None:
        """SIGTERM to the process group, SIGKILL after the grace period; returns the exit code."""
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_grace_s)
            except subprocess.TimeoutExpired:
                self._kill(proc)
            except BaseException:
                # A second Ctrl-C while waiting means "now": kill rather than leave it running.
                self._kill(proc)
                raise
        else:
            _signal_group(proc.pid, signal.SIGKILL)  # children it may have left behind
        # Only a server known to be gone leaves the registry, so atexit still stops any other.
        with _LIVE_LOCK:
            _LIVE.discard(self)
        return proc.returncode

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- the log ------------------------------------------------------------------------------

    def log_tail(self, n: int = SERVER_LOG_TAIL_LINES) -> list[str]:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as fh:
                return [line.rstrip("\n") for line in deque(fh, maxlen=n)]
        except OSError:
            return []

    def log_tail_text(self, n: int = SERVER_LOG_TAIL_LINES) -> str:
        lines = self.log_tail(n)
        return "\n".join(f"  | {line}" for line in lines) if lines else "  | (the log is empty)"

    def log_mentions_bind_failure(self) -> bool:
        text = "\n".join(self.log_tail(40)).lower()
        return any(marker in text for marker in _BIND_FAILURE_MARKERS)


def infer_host_port(args: Sequence[str]) -> tuple[str, int]:
    """The address a server command will listen on, from its --host and --port flags."""
    host, port = _flag_value(args, "--host") or LOCALHOST, _flag_value(args, "--port")
    if port is None:
        raise UsageError(
            f"cannot tell which port `{shlex.join(args)}` listens on",
            "add --port N to the server command",
        )
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--port {port!r} in the server command is not a port number", "use 1-65535")
    if host in ("0.0.0.0", "::", "[::]", "localhost"):
        host = LOCALHOST  # listening everywhere: talk to it over loopback
    return host, int(port)


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=HEALTH_REQUEST_TIMEOUT_S) as resp:  # noqa: S310 - loopback
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _signal_group(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _temp_log_path() -> Path:
    fd, name = tempfile.mkstemp(prefix="servecheck-server-", suffix=".log")
    os.close(fd)
    return Path(name)


# -- the safety net ---------------------------------------------------------------------------

def stop_all() -> None:
    """Stop every server this process started and has not stopped yet."""
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        server.stop()


def live_pids() -> list[int]:
    with _LIVE_LOCK:
        return [s.pid for s in _LIVE if s.pid is not None]


def _install_safety_net() -> None:
    global _SAFETY_NET_INSTALLED
    if _SAFETY_NET_INSTALLED:
        return
    _SAFETY_NET_INSTALLED = True
    atexit.register(stop_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _on_terminate)


def _on_terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM/SIGHUP: stop our servers, then exit as the signal would have (128 + signum)."""
    stop_all()
    raise SystemExit(128 + signum)


# -- engines servecheck starts ------------------------------------------------------------------

BIND_RETRIES = 3


class LocalServer:
    """An engine servecheck starts on 127.0.0.1: on a free port (unless `port` is given, then only
    that one), retried on a fresh port when another process took ours between the pick and the bind.

    Subclasses say what to check before starting (`check_inputs`) and how to run on a port
    (`_managed`); `with Server(...) as url:` starts it and stops it on the way out, whatever happens.
    """

    port: int | None
    server: ManagedServer | None
    bind_retries: int = BIND_RETRIES
    records: RunningRecords | None = None  # where the running server is recorded (serve-local, the demo)
    _launched: bool = False  # spawned by `launch`, not yet waited for

    def check_inputs(self) -> None:
        """Raise UsageError when the server cannot start as configured (a missing model file)."""

    def _managed(self, port: int) -> ManagedServer:
        raise NotImplementedError

    @property
    def url(self) -> str | None:
        return None if self.server is None else self.server.url

    @property
    def pid(self) -> int | None:
        return None if self.server is None else self.server.pid

    def launch(self) -> None:
        """Start the engine on a port without waiting for it; `start` (or `with`) then waits for its
        health. Launching a slow starter beside another (two vLLMs, the demo) overlaps their starts."""
        self.check_inputs()
        self.server = self._managed(self.port if self.port is not None else free_port())
        self.server.launch()
        self._launched = True

    def stop_unclaimed(self) -> None:
        """Stop a launched server that `start` never took over (from then on, `start` and `with` stop it)."""
        if self._launched:
            self._launched = False
            self.stop()

    def start(self) -> str:
        if self._launched and self.server is not None:
            self._launched = False
            try:
                return self.server.start()
            except EngineError:
                if self.port is not None or not self.server.log_mentions_bind_failure():
                    raise  # else the port was taken before the bind: the loop below tries fresh ones
        self.check_inputs()
        attempts = 1 if self.port is not None else self.bind_retries
        for attempt in range(attempts):
            port = self.port if self.port is not None else free_port()
            self.server = self._managed(port)
            try:
                return self.server.start()
            except EngineError:
                # Another process grabbed the port we picked between our check and its bind: retry.
                if attempt + 1 < attempts and self.server.log_mentions_bind_failure():
                    continue
                raise
        raise AssertionError("unreachable")

    def check_alive(self) -> None:
        if self.server is not None:
            self.server.check_alive()

    def stop(self) -> int | None:
        return None if self.server is None else self.server.stop()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
