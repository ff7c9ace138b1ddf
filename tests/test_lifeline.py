"""Nothing servecheck starts outlives it: SIGKILL to servecheck ends the whole tree it started
(the server, what the server forked, the client workers, the watchdog), and a server left
running by a servecheck that could not stop it is named, never stopped silently, on the next start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servecheck import lifeline
from servecheck.engine import proctree
from servecheck.engine.process import ManagedServer, free_port
from servecheck.engine.running import RunningRecords
from servecheck.engine.vllm import _VllmProcess
from servecheck.lifeline import Watchdog

pytestmark = pytest.mark.timeout(180)

SERVECHECK = [sys.executable, "-m", "servecheck"]
# Done-when of issue 24: no process of the tree alive within this long after the SIGKILL.
GONE_WITHIN_S = 5.0

# A --serve command that forks, as wrappers (shell scripts, `uv run`, vLLM itself) do: it starts
# the simulator and a helper that ignores SIGTERM, all in one process group; PDEATHSIG alone
# would reach only this wrapper.
WRAPPER = textwrap.dedent(
    """
    import subprocess, sys
    port = sys.argv[sys.argv.index("--port") + 1]
    helper = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    sim = subprocess.Popen([sys.executable, "-m", "servecheck", "simulate", "--port", port, "--mode", "serial",
                            "--token-ms", "20"])
    sim.wait()
    """
)

# /health answers 200: a stand-in for a server (no llama.cpp needed).
STUB = textwrap.dedent(
    """
    import http.server, sys
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
    """
)


def tree(pid: int) -> list[proctree.ProcId]:
    me = proctree.read_proc(pid)
    return ([me] if me else []) + proctree.descendants(pid)


def wait_gone(procs: list[proctree.ProcId], within_s: float) -> list[proctree.ProcId]:
    """The processes still alive (same pid and start time) after `within_s`; [] as soon as none is."""
    deadline = time.monotonic() + within_s
    while True:
        alive = [p for p in procs if proctree.is_alive(p)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_for_line(proc: subprocess.Popen[str], prefix: str, timeout_s: float = 90) -> list[str]:
    assert proc.stderr is not None
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    for line in proc.stderr:
        seen.append(line)
        if line.startswith(prefix):
            return seen
        assert time.monotonic() < deadline, "".join(seen)
    raise AssertionError("servecheck ended before " + prefix + ":\n" + "".join(seen))


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture()
def cache_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    yield {**os.environ, "SERVECHECK_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "300"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigkill_of_staircase_serve_ends_the_whole_tree(tmp_path: Path, cache_env: dict[str, str]) -> None:
    """SIGKILL to `staircase --serve WRAPPER --workers 2` mid-run: the wrapper, the simulator, the
    helper that ignores SIGTERM, the client workers and the watchdog are all gone within 5 s."""
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(WRAPPER)
    port = free_port()
    command = f"{sys.executable} {wrapper} --port {port}"
    proc = subprocess.Popen(
        [*SERVECHECK, "staircase", "--serve", command, "--serve-log", str(tmp_path / "s.log"), "--n", "1,2,4,8,16",
         "--tokens", "64", "--prompt-tokens", "8", "--workers", "2", "--no-save"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=cache_env)
    procs: list[proctree.ProcId] = []
    try:
        wait_for_line(proc, "N=1 rep")
        procs = [p for p in tree(proc.pid) if p.pid != proc.pid]
        lines = {p.pid: cmdline(p.pid) for p in procs}
        assert any(str(wrapper) in c for c in lines.values()), lines
        assert any("servecheck simulate" in c for c in lines.values()), lines
        assert any("SIG_IGN" in c for c in lines.values()), lines
        assert any("lifeline.py" in c for c in lines.values()), lines  # the watchdog
        assert any("multiprocessing" in c for c in lines.values()), lines  # a client worker
        records = RunningRecords(tmp_path / "cache" / "running").read()
        assert [r.command[1] for _, r in records] == [str(wrapper)]  # what --serve started, recorded
        proc.kill()
        proc.wait(timeout=10)
        left = wait_gone(procs, GONE_WITHIN_S)
        assert left == [], [(p.pid, lines.get(p.pid)) for p in left]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in procs:
            if proctree.is_alive(p):
                kill_group(p.pgid)
    # The record of the killed run is stale now (nothing it named is alive): dropped without a word.
    shown = subprocess.run([*SERVECHECK, "cache", "show"], capture_output=True, text=True, env=cache_env, timeout=60,
                           check=False)
    assert shown.returncode == 0 and "running pid" not in shown.stdout, shown.stdout
    assert list((tmp_path / "cache" / "running").glob("*.json")) == []


def _stub_server(tmp_path: Path, records: RunningRecords | None = None) -> ManagedServer:
    port = free_port()
    return ManagedServer([sys.executable, "-c", STUB, str(port)], url=f"http://127.0.0.1:{port}",
                         log_path=tmp_path / "stub.log", records=records)


def test_a_clean_stop_dismisses_the_watchdog_and_drops_the_record(tmp_path: Path) -> None:
    records = RunningRecords(tmp_path / "running")
    server = _stub_server(tmp_path, records)
    server.start()
    watchdog = server.watchdog
    assert watchdog is not None and watchdog.proc.poll() is None
    group = proctree.group_members(server.pid or 0)
    assert {p.pid for p in group} == {server.pid, watchdog.pid}  # the watchdog joined the server's group
    [(path, record)] = records.read()
    assert (record.pid, record.owner_pid, record.state()) == (server.pid, os.getpid(), "running")
    assert record.start_ticks == proctree.read_proc(server.pid or 0).start_ticks  # type: ignore[union-attr]
    server.stop()
    assert watchdog.proc.returncode == 0  # it stood down: not killed with the group, nothing ended by it
    assert server.watchdog is None and not path.exists()


def test_a_watchdog_whose_parent_changed_ends_its_group_though_the_pipe_is_open(tmp_path: Path) -> None:
    """The second route: a process forked from servecheck may hold the pipe open after servecheck
    died; the watchdog then notices that its parent pid is no longer servecheck's."""
    group = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], process_group=0)
    read_fd, write_fd = os.pipe()
    try:
        # told that its parent is a pid it does not have: as if servecheck died and it was reparented
        watchdog = subprocess.Popen([sys.executable, "-I", lifeline.__file__, str(group.pid), str(group.pid), "0.5"],
                                    stdin=read_fd, process_group=group.pid)
        assert group.wait(timeout=lifeline.WATCH_POLL_S + GONE_WITHIN_S) == -signal.SIGTERM
        assert watchdog.wait(timeout=GONE_WITHIN_S) == -signal.SIGKILL  # itself last, with its group
    finally:
        os.close(read_fd)
        os.close(write_fd)
        kill_group(group.pid)
        group.wait()


def test_a_dismissed_watchdog_leaves_its_group_alone(tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], process_group=0)
    try:
        watchdog = Watchdog.start(sleeper.pid)
        assert watchdog is not None
        watchdog.dismiss()
        assert watchdog.proc.returncode == 0
        time.sleep(0.3)
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_vllm_stop_does_not_wait_on_the_watchdog(tmp_path: Path) -> None:
    """vLLM's stop ends every member of its group left after the API server; the watchdog, a member
    too, ignores SIGTERM: counted among them, it cost a 5 s grace on every stop."""
    port = free_port()
    server = _VllmProcess([sys.executable, "-c", STUB, str(port)], url=f"http://127.0.0.1:{port}",
                          log_path=tmp_path / "v.log")
    server.start()
    server.ready = False  # a start interrupted: the group gets SIGTERM, then the stragglers' grace
    watchdog = server.watchdog
    assert watchdog is not None
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 4.0
    assert watchdog.proc.returncode == 0  # dismissed after the stop, not counted among the stragglers


# -- leftovers --------------------------------------------------------------------------------

# A servecheck that starts a server it does not tie to itself, records it, and then is killed.
FAKE_SERVECHECK = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from servecheck.engine.process import ManagedServer, free_port
    from servecheck.engine.running import RunningRecords
    port = free_port()
    s = ManagedServer([sys.executable, "-c", sys.argv[2], str(port)], url=f"http://127.0.0.1:{port}",
                      records=RunningRecords(Path(sys.argv[1])), die_with_servecheck=False)
    s.start()
    print(s.pid, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_leftover_of_a_killed_servecheck_is_named_with_its_stop_command(tmp_path: Path,
                                                                         cache_env: dict[str, str]) -> None:
    running = tmp_path / "cache" / "running"
    parent = subprocess.Popen([sys.executable, "-c", FAKE_SERVECHECK, str(running), STUB], stdout=subprocess.PIPE,
                              text=True)
    leftover: int | None = None
    try:
        assert parent.stdout is not None
        leftover = int(parent.stdout.readline())
        parent.kill()
        parent.wait(timeout=10)
        time.sleep(0.5)
        assert proctree.read_proc(leftover) is not None, "the server should outlive its parent here"
        # serve-local names it before anything else (and then fails on the missing binary)
        again = subprocess.run([*SERVECHECK, "serve-local", "--llama-server", str(tmp_path / "no-such-llama-server")],
                               capture_output=True, text=True, env=cache_env, timeout=60, check=False)
        assert again.returncode != 0
        warnings = [line for line in again.stderr.splitlines() if line.startswith("warning:")]
        assert len(warnings) == 1, again.stderr
        assert f"pid {leftover}," in warnings[0] and f"servecheck pid {parent.pid}" in warnings[0]
        assert f"stop it with: kill -TERM -{leftover}" in warnings[0] and STUB.strip()[:20] in warnings[0]
        assert proctree.read_proc(leftover) is not None, "never stopped silently"
        # the demo and --serve name it too, before they start anything
        for argv in (["demo", "--llama-server", str(tmp_path / "no-such-llama-server"), "--no-save"],
                     ["staircase", "--serve", f"{tmp_path / 'no-such-server'} --port 9", "--no-save"]):
            other = subprocess.run([*SERVECHECK, *argv], capture_output=True, text=True, env=cache_env, timeout=60,
                                   check=False)
            assert other.returncode != 0
            assert f"pid {leftover}," in other.stderr and f"kill -TERM -{leftover}" in other.stderr, other.stderr
        shown = subprocess.run([*SERVECHECK, "cache", "show"], capture_output=True, text=True, env=cache_env,
                               timeout=60, check=False)
        assert (f"running pid {leftover:>7}" in shown.stdout
                and f"LEFTOVER: servecheck pid {parent.pid} is gone" in shown.stdout)
        assert f"kill -TERM -{leftover}" in shown.stdout
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if leftover is not None:
            kill_group(leftover)
    # Stopped now: the next start says nothing, and the record is gone.
    deadline = time.monotonic() + 10
    while proctree.read_proc(leftover) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    after = subprocess.run([*SERVECHECK, "serve-local", "--llama-server", str(tmp_path / "no-such-llama-server")],
                           capture_output=True, text=True, env=cache_env, timeout=60, check=False)
    assert "warning:" not in after.stderr, after.stderr
    assert list(running.glob("*.json")) == []


def test_a_record_of_a_live_servecheck_is_not_a_leftover(tmp_path: Path) -> None:
    """Another servecheck's server, still running it: listed, never warned about."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], process_group=0)
    try:
        records = RunningRecords(tmp_path / "running")
        path = records.add(sleeper.pid, ["sleeper"], "http://127.0.0.1:1", None)
        assert path is not None and records.warnings() == []
        assert [state for _, state in records.sweep()] == ["running"]
        doc = json.loads(path.read_text())
        doc["owner_start_ticks"] = (doc["owner_start_ticks"] or 0) + 1
        path.write_text(json.dumps(doc))  # the same pid, another start time: that servecheck is gone
        [line] = records.warnings()
        assert f"pid {sleeper.pid}," in line and f"kill -TERM -{sleeper.pid}" in line
    finally:
        sleeper.kill()
        sleeper.wait()
    assert records.warnings() == [] and records.read() == []  # stale now: removed quietly
