"""`servecheck demo --engine vllm` end to end on the real vLLM: --max-num-seqs 1 queues (staircase),
--max-num-seqs 4 batches (cluster), both logs audited, no vLLM process left."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from servecheck.engine.vllm import provision_vllm_local

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1500)]

EXPECTED = {"parallel_1": "staircase", "parallel_4": "cluster"}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _vllm_pids() -> list[int]:
    """Processes whose command line runs vLLM from servecheck's cache (API server, engine core, workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "vllm" in cmd.lower() and ("api_server" in cmd or "VLLM::" in cmd or "multiprocessing" in cmd) and _alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory, first_try: Any,
             request: pytest.FixtureRequest) -> tuple[subprocess.CompletedProcess[str], dict]:
    provision_vllm_local("tiny")  # install or find vLLM first, outside the demo's own timing
    before = set(_vllm_pids())
    out = tmp_path_factory.mktemp("demo") / "demo.json"
    # One run, as a user's: no retry. Its verdicts are recorded as first tries (tests/conftest.py).
    proc = subprocess.run(
        [sys.executable, "-m", "servecheck", "demo", "--engine", "vllm", "--json", str(out), "--no-save"],
        capture_output=True, text=True, timeout=1200,
    )
    assert proc.returncode in (0, 3), proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    for config, expected in EXPECTED.items():
        got = doc["verdicts"].get(config, "missing")
        first_try.record(f"{request.node.nodeid}[{config}]", expected, got, got)
    doc["_left"] = sorted(set(_vllm_pids()) - before)
    return proc, doc


def test_vllm_demo_shows_staircase_and_cluster(demo_run: tuple[subprocess.CompletedProcess[str], dict]) -> None:
    proc, doc = demo_run
    assert doc["verdicts"] == EXPECTED, doc["verdicts"]
    assert proc.returncode == 0 and doc["as_expected"] is True, proc.stdout
    assert doc["engine"]["name"] == "vllm" and doc["params"]["engine"] == "vllm"
    runs = {r["parallel"]: r for r in doc["runs"]}
    for parallel, run in runs.items():
        cmd = run["server_command"]
        assert cmd[0] == doc["engine"]["path"]  # the python of the vLLM environment in the cache
        assert cmd[cmd.index("--max-num-seqs") + 1] == str(parallel)
        assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
        assert run["staircase"]["server"]["engine"] == "vllm"
    # The log audit read vLLM's own lines: one sequence queued, four batched.
    audits = {p: {f["feature"]: f["status"] for f in r["log_audit"]["findings"]} for p, r in runs.items()}
    assert audits[1]["continuous_batching"] == "refused", audits
    assert audits[4]["continuous_batching"] == "confirmed", audits


def test_vllm_demo_leaves_no_vllm_process(demo_run: tuple[subprocess.CompletedProcess[str], dict]) -> None:
    _, doc = demo_run
    assert all(isinstance(r["server_pid"], int) and not _alive(r["server_pid"]) for r in doc["runs"])
    assert doc["_left"] == [], "vLLM processes the demo started are still running"
