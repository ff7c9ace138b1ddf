"""SIGKILL to `servecheck serve-local` with the real engines: llama-server, and vLLM with its API
server, engine core and helpers; no process of the tree servecheck started is alive 5 s later.
One start of each engine (vLLM's takes 70-110 s on 2 cores)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_lifeline import GONE_WITHIN_S, SERVECHECK, cmdline, kill_group, wait_gone

from servecheck.engine import proctree
from servecheck.engine.cache import EngineCache
from servecheck.engine.local import LocalEngine, provision_local
from servecheck.engine.running import RunningRecords
from servecheck.engine.vllm import EAGER_ARGS, provision_vllm_local

STARTUP_S = 600


def read_url(proc: subprocess.Popen[str], timeout_s: float) -> str:
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout_s)
    assert box and box[0].startswith("http://127.0.0.1:"), "serve-local printed no URL"
    return box[0].strip()


def sigkill_leaves_nothing(args: list[str], env: dict[str, str], least: int) -> list[str]:
    """Start `serve-local ARGS`, SIGKILL it once it printed its URL; the command lines of its tree."""
    proc = subprocess.Popen([*SERVECHECK, "serve-local", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env)
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
    lines = sigkill_leaves_nothing(args, env, least=2)
    assert any(str(engine.binary.path) in line for line in lines), lines


@pytest.mark.vllm
def test_sigkill_of_serve_local_vllm_ends_every_vllm_process(tmp_path: Path) -> None:
    local = provision_vllm_local("tiny", progress=lambda m: print(m, file=sys.stderr))
    args = ["--engine", "vllm", "--parallel", "1", "--log", str(tmp_path / "serve.log"), "--engine-args",
            " ".join(EAGER_ARGS)]
    try:
        # the API server, its engine core, the watchdog
        lines = sigkill_leaves_nothing(args, dict(os.environ), least=3)
        assert any("vllm.entrypoints.openai.api_server" in line for line in lines), lines
        assert str(local.env.python) in " ".join(lines)
    finally:
        RunningRecords.in_cache(EngineCache.default()).sweep()  # the killed run's record, stale now
