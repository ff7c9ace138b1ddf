"""`servecheck demo --engine vllm` end to end on the real vLLM: --max-num-seqs 1 queues (staircase,
flat), --max-num-seqs 4 batches (cluster, rising), both logs audited, no vLLM process left.

The demo's two staircases are the suite's vLLM staircase checks at one and four sequences: the same
measurement a user's `staircase` makes (`CheckedDriver` with its pre-flight, N = 1, 2, 4, 256 tokens,
an undecided point measured again up to 3 reps), so the tests below assert of them what a verdict test
asserts (valid, decided by the completion times, vLLM's gauges agreeing with what it was told), on the
one run a user gets: no retry, every verdict and trend recorded as a first try. The two-sequence
staircase, arms and the rest: tests/test_vllm_verdicts.py."""

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
TRENDS = {1: "flat", 4: "rising"}  # one sequence buys nothing; four share each step
PEAKS = {1: (1, 3), 4: (4, 0)}  # vLLM's peak running and waiting at N=4, told --max-num-seqs 1 or 4


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
        if ("vllm" in cmd.lower() and ("api_server" in cmd or "VLLM::" in cmd or "multiprocessing" in cmd)
                and _alive(int(entry.name))):
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory, first_try: Any,
             request: pytest.FixtureRequest) -> tuple[subprocess.CompletedProcess[str], dict]:
    provision_vllm_local("tiny")  # install or find vLLM first, outside the demo's own timing
    before = set(_vllm_pids())
    out = tmp_path_factory.mktemp("demo") / "demo.json"
    # One run, as a user's: no retry. Its verdicts and trends are recorded as first tries (tests/conftest.py).
    def attempt(_: int) -> tuple[subprocess.CompletedProcess[str], dict]:
        proc = subprocess.run(
            [sys.executable, "-m", "servecheck", "demo", "--engine", "vllm", "--json", str(out), "--no-save"],
            capture_output=True, text=True, timeout=1200,
        )
        assert proc.returncode in (0, 3), proc.stderr[-3000:]
        return proc, json.loads(out.read_text())

    def read(run: tuple[subprocess.CompletedProcess[str], dict]) -> dict[str, str]:
        doc = run[1]
        trends = {f"parallel_{r['parallel']} trend": r["staircase"]["trend"] for r in doc["runs"]}
        return {**doc["verdicts"], **trends}

    expected = {**EXPECTED, **{f"parallel_{p} trend": trend for p, trend in TRENDS.items()}}
    proc, doc = first_try.record_tries(request.node.nodeid, expected, attempt, read)
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
    # The log audit read vLLM's own lines: one sequence queued, four batched. --max-num-seqs 1 asks
    # for no batching, so its queue is `not asked`, never `refused` (issue 41).
    audits = {p: {f["feature"]: f["status"] for f in r["log_audit"]["findings"]} for p, r in runs.items()}
    assert audits[1]["continuous_batching"] == "not asked", audits
    assert audits[4]["continuous_batching"] == "confirmed", audits


@pytest.mark.parametrize("parallel", [1, 4])
def test_vllm_demo_staircase_is_decided_by_the_stopwatch(demo_run: tuple[subprocess.CompletedProcess[str], dict],
                                                         parallel: int) -> None:
    """Each run valid and calibrated, every definite point naming the completion times, every request
    the 256 tokens asked, the trend right, and vLLM's own gauges at N=4 showing what it was told."""
    _, doc = demo_run
    stair = {r["parallel"]: r for r in doc["runs"]}[parallel]["staircase"]
    print(parallel, stair["verdict"], stair["trend"], [(p["n"], p["finish_s"], p["reps_taken"], p["evidence"])
                                                       for p in stair["points"]])
    assert stair["valid"], stair["invalid"]
    assert stair["calibration"] == "on" and stair["simulated"] is False
    assert [p["n"] for p in stair["points"]] == [1, 2, 4]
    for point in stair["points"]:
        if point["verdict"] not in ("baseline", "inconclusive"):
            assert "completion_times" in point["evidence"], (point["n"], point["verdict"], point["evidence"])
    assert all(t == doc["params"]["tokens"] for p in stair["points"] for t in p["tokens"])
    assert stair["trend"] == TRENDS[parallel], stair["trend_reason"]
    top = stair["points"][-1]["batches"][-1]["gauges"]
    assert top is not None and top["source"] == "vllm /metrics", top
    assert (top["peak_running"], top["peak_waiting"]) == PEAKS[parallel], top


def test_vllm_demo_leaves_no_vllm_process(demo_run: tuple[subprocess.CompletedProcess[str], dict]) -> None:
    _, doc = demo_run
    assert all(isinstance(r["server_pid"], int) and not _alive(r["server_pid"]) for r in doc["runs"])
    assert doc["_left"] == [], "vLLM processes the demo started are still running"
