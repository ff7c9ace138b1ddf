"""SIGKILL to `servecheck serve-local` with llama-server: no process of the tree servecheck started is
alive 5 s later. The same with vLLM (its API server, engine core and helpers) is in tests/test_vllm_real.py,
its start beside that module's other two."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_lifeline import GONE_WITHIN_S, SERVECHECK, cmdline, kill_group, wait_gone

from servecheck.engine import proctree
from servecheck.engine.local import LocalEngine, provision_local

STARTUP_S = 600


def read_url(proc: subprocess.Popen[str], timeout_s: float) -> str:
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout_s)
    assert box and box[0].startswith("http://127.0.0.1:"), "serve-local printed no URL"
    return box[0].strip()


def launch_serve_local(args: list[str], env: dict[str, str], stderr: int = subprocess.DEVNULL) -> subprocess.Popen[str]:
    return subprocess.Popen([*SERVECHECK, "serve-local", *args], stdout=subprocess.PIPE, stderr=stderr, text=True,
                            env=env)


def sigkill_leaves_nothing(proc: subprocess.Popen[str], least: int) -> list[str]:
    """SIGKILL a launched `serve-local` once it printed its URL; the command lines of its tree."""
    procs: list[proctree.ProcId] = []
    try:
        read_url(proc, STARTUP_S)
        procs = proctree.descendants(proc.pid)
        lines = [cmdline(p.pid) for p in procs]
        assert len(procs) >= least, lines
        assert any("lifeline.py" in line for line in lines), lines  # the watchdog
        proc.kill()
        proc.wait(timeout=10)
        left = wait_gone(procs, GONE_WITHIN_S)
        assert left == [], [(p.pid, p.name, cmdline(p.pid)) for p in left]
        return lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in procs:
            if proctree.is_alive(p):
                kill_group(p.pgid)


@pytest.mark.engine
def test_sigkill_of_serve_local_ends_llama_server(tmp_path: Path) -> None:
    engine: LocalEngine = provision_local(None, "tiny", progress=lambda m: print(m, file=sys.stderr))
    env = {**os.environ, "SERVECHECK_CACHE_DIR": str(tmp_path / "cache")}
    args = ["--llama-server", str(engine.binary.path), "--model", str(engine.model_path), "--parallel", "1",
            "--log", str(tmp_path / "serve.log")]
    lines = sigkill_leaves_nothing(launch_serve_local(args, env), least=2)
    assert any(str(engine.binary.path) in line for line in lines), lines
