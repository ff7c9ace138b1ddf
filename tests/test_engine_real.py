"""The real llama.cpp engine: staircase and cluster from one binary, teardown on every exit path,
and the errors a user sees for a refused model or a taken port. Provisioned once per session
(built into the cache on first use: minutes; `servecheck cache build` does it ahead of time)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servecheck.cli.common import MAX_WORKERS, make_target
from servecheck.engine.local import LocalEngine, provision_local
from servecheck.engine.process import LlamaServer, ctx_per_slot_for
from servecheck.errors import EngineError
from written import fields_of

pytestmark = pytest.mark.engine

# 256 output tokens (about 4 s per request with one thread here), the demo's length.
TOKENS = 256
PROMPT_TOKENS = 32
NS = (1, 2, 4)
SERVECHECK = [sys.executable, "-m", "servecheck"]


@pytest.fixture(scope="session")
def local_engine() -> LocalEngine:
    return provision_local(None, "tiny", progress=lambda m: print(m, file=sys.stderr))


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def llama_children(parent: int) -> list[int]:
    """llama-server processes whose parent is `parent`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if name == "llama-server" and int(rest[1]) == parent:
            found.append(int(entry.name))
    return found


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


async def _staircase(url: str, on_point: Callable[[Any], None] | None = None, seed: int = 0) -> Any:
    """A staircase run through the driver every user gets: the client checks itself (the pre-flight)
    before each N, as `servecheck staircase` does."""
    from servecheck.experiments.staircase import run_staircase
    from servecheck.load.preflight import CheckedDriver

    async with CheckedDriver(make_target(url, api="llamacpp", first_token_timeout_s=120), workers=MAX_WORKERS,
                             auto=True) as driver:
        return await run_staircase(
            driver, ns=NS, tokens=TOKENS, prompt_tokens=PROMPT_TOKENS, reps=1, max_reps=3, rng=random.Random(seed),
            on_point=on_point,
        )


def assert_decided_by_the_stopwatch(doc: dict[str, Any]) -> None:
    """A user's run: valid, and every definite verdict names the completion times in its evidence."""
    assert doc["valid"], doc["invalid"]
    assert doc["calibration"] == "on"
    for point in doc["points"]:
        if point["verdict"] not in ("baseline", "inconclusive"):
            assert "completion_times" in point["evidence"], (point["n"], point["verdict"], point["evidence"])
    if doc["verdict"] != "inconclusive":
        assert "completion_times" in doc["evidence"], doc["evidence"]


def _server(engine: LocalEngine, parallel: int, tmp_path: Path, **kw: Any) -> LlamaServer:
    return LlamaServer(
        engine.binary, engine.model_path, parallel=parallel, ctx_per_slot=ctx_per_slot_for(PROMPT_TOKENS, TOKENS),
        log_path=tmp_path / f"np{parallel}.log", **kw,
    )


# (slots, the verdict at N=4, the trend that would be wrong): the ground truth is --parallel.
TRUTH = [(1, "staircase", "rising"), (2, "partial", None), (4, "cluster", "flat")]


@pytest.mark.parametrize(("parallel", "expected", "wrong_trend"), TRUTH)
def test_staircase_verdict_on_the_real_engine(
    local_engine: LocalEngine, tmp_path: Path, parallel: int, expected: str, wrong_trend: str | None,
    test_seed: int, first_try: Any, request: pytest.FixtureRequest,
) -> None:
    """One slot queues (staircase), two slots pair up (partial), four slots batch (cluster);
    `inconclusive` earns one retry (seed + 1), never more, the first try is recorded, and only the
    right verdict passes."""
    with _server(local_engine, parallel, tmp_path) as url:
        def attempt(i: int) -> dict[str, Any]:
            doc = fields_of(asyncio.run(_staircase(url, seed=test_seed + i)).document())
            print(f"attempt {i + 1} (seed {test_seed + i}): {doc['verdict']}/{doc['trend']} "
                  f"evidence {doc['evidence']}", [(p["n"], p["finish_s"], p["reps_taken"]) for p in doc["points"]])
            return doc

        doc = first_try.record_tries(request.node.nodeid, expected, attempt, lambda d: d["verdict"], tries=2,
                                     seed=test_seed)
    assert doc["verdict"] == expected, doc["verdict_reason"]
    assert doc["trend"] != wrong_trend, doc["trend_reason"]
    assert_decided_by_the_stopwatch(doc)
    assert [p["n"] for p in doc["points"]] == list(NS)
    assert all(t == TOKENS for p in doc["points"] for t in p["tokens"])
    assert len(doc["single_times_s"]) >= 2  # the reference is measured before and after the batches
    assert f"n_slots = {parallel}" in (tmp_path / f"np{parallel}.log").read_text()
    # The server's own witness, checked against what its scheduler was told: at N=4, at most
    # `parallel` requests ran at once, and the rest waited (llama.cpp's /metrics, --metrics on).
    top = doc["points"][-1]["batches"][-1]
    gauges = top["gauges"]
    assert gauges is not None and gauges["source"] == "llama.cpp /metrics", gauges
    assert gauges["peak_running"] == min(parallel, 4)
    assert gauges["peak_waiting"] == 4 - min(parallel, 4)
    assert top["noise"]["cpus"] >= 1


def test_error_in_the_middle_of_a_run_stops_the_server(local_engine: LocalEngine, tmp_path: Path) -> None:
    server = _server(local_engine, 2, tmp_path)

    def fail_after_first_batch(result: Any) -> None:
        raise RuntimeError("failure in the middle of the run")

    with pytest.raises(RuntimeError, match="in the middle"):
        with server as url:
            pid = server.pid
            asyncio.run(_staircase(url, on_point=fail_after_first_batch))  # the seed is irrelevant: it fails at N=1
    assert pid is not None and not alive(pid)


def test_model_file_refused_by_llama_server_is_quoted(local_engine: LocalEngine, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 256)  # the right magic, a nonsense header
    with pytest.raises(EngineError) as err:
        LlamaServer(local_engine.binary, bad, log_path=tmp_path / "bad.log").start()
    assert "llama-server exited with code" in err.value.message
    assert "failed to load model" in err.value.message  # llama-server's own words, quoted from its log
    assert str(tmp_path / "bad.log") in (err.value.hint or "")


def test_cli_reports_a_refused_model_in_one_error(local_engine: LocalEngine, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    proc = subprocess.run(
        [*SERVECHECK, "serve-local", "--model", str(bad), "--llama-server", str(local_engine.binary.path)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1
    assert proc.stderr.count("Error: ") == 1 and "Traceback" not in proc.stderr
    assert "llama-server exited with code" in proc.stderr and "failed to load model" in proc.stderr
    assert proc.stdout == ""


def test_port_already_taken(local_engine: LocalEngine, tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(EngineError, match=f"port {port} on 127.0.0.1 is already taken"):
            _server(local_engine, 1, tmp_path, port=port).start()
        proc = subprocess.run(
            [*SERVECHECK, "serve-local", "--port", str(port)], capture_output=True, text=True, timeout=120
        )
    assert proc.returncode == 1
    assert f"Error: port {port} on 127.0.0.1 is already taken" in proc.stderr


def _read_first_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    box: list[str] = []
    reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout_s)
    assert box, "serve-local printed no URL"
    return box[0].strip()


def test_sigint_to_serve_local_leaves_no_llama_server(local_engine: LocalEngine, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*SERVECHECK, "serve-local", "--parallel", "2", "--log", str(tmp_path / "serve.log")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        url = _read_first_line(proc, 120)
        assert url.startswith("http://127.0.0.1:")
        assert urllib.request.urlopen(url + "/health", timeout=10).status == 200
        children = llama_children(proc.pid)
        assert len(children) == 1
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
        wait_until(lambda: not alive(children[0]), 10, "llama-server to exit")
        assert "stopping llama-server" in proc.stderr.read()  # type: ignore[union-attr]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigint_during_the_demo_leaves_no_llama_server(local_engine: LocalEngine, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [*SERVECHECK, "demo"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    progress: list[str] = []
    threading.Thread(target=lambda: progress.extend(proc.stderr), daemon=True).start()  # type: ignore[arg-type]
    try:
        wait_until(
            lambda: any("running the staircase test" in line for line in progress) or proc.poll() is not None,
            120, "the demo's first staircase run",
        )
        children = llama_children(proc.pid)
        assert children, "the demo started no llama-server"
        time.sleep(1.0)  # in the middle of the staircase run
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
        wait_until(lambda: not any(alive(pid) for pid in children), 10, "llama-server to exit")
        assert llama_children(proc.pid) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
