"""`servecheck demo` end to end on the real engine: two verdicts, the JSON of both runs, no server left."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from servecheck.engine.local import provision_local

pytestmark = pytest.mark.engine

EXPECTED = {"parallel_1": "staircase", "parallel_4": "cluster"}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory, first_try: Any,
             request: pytest.FixtureRequest) -> tuple[subprocess.CompletedProcess[str], dict]:
    provision_local(None, "tiny")  # build or find the engine first, outside the demo's own timing
    out = tmp_path_factory.mktemp("demo") / "demo.json"
    # One run, as a user's: no retry. Its verdicts are recorded as first tries (tests/conftest.py).
    def attempt(_: int) -> tuple[subprocess.CompletedProcess[str], dict]:
        proc = subprocess.run(
            [sys.executable, "-m", "servecheck", "demo", "--json", str(out), "--no-save"],
            capture_output=True, text=True, timeout=600,
        )
        assert proc.returncode in (0, 3), proc.stderr
        return proc, json.loads(out.read_text())

    proc, doc = first_try.record_tries(request.node.nodeid, EXPECTED, attempt, lambda run: run[1]["verdicts"])
    return proc, doc


def test_demo_shows_staircase_and_cluster(demo_run: tuple[subprocess.CompletedProcess[str], dict]) -> None:
    proc, doc = demo_run
    # Only the right verdicts pass: a wrong one, or inconclusive twice, fails the test.
    assert doc["verdicts"] == EXPECTED, doc["verdicts"]
    assert proc.returncode == 0 and doc["as_expected"] is True, proc.stdout
    assert "lesson: the same binary and model queue requests" in proc.stdout


def test_demo_json_holds_both_runs(demo_run: tuple[subprocess.CompletedProcess[str], dict]) -> None:
    _, doc = demo_run
    assert doc["command"] == "demo" and doc["schema_version"] >= 1
    runs = {r["parallel"]: r for r in doc["runs"]}
    assert sorted(runs) == [1, 4]
    assert runs[1]["server_command"][0] == runs[4]["server_command"][0] == doc["engine"]["path"]  # same binary
    for parallel, run in runs.items():
        cmd = run["server_command"]
        assert cmd[cmd.index("-np") + 1] == str(parallel)
        assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
        assert [p["n"] for p in run["staircase"]["points"]] == [1, 2, 4]
        assert all(t == doc["params"]["tokens"] for p in run["staircase"]["points"] for t in p["tokens"])
        assert Path(run["log_path"]).is_file()


def test_demo_leaves_no_server_running(demo_run: tuple[subprocess.CompletedProcess[str], dict]) -> None:
    _, doc = demo_run
    pids = [r["server_pid"] for r in doc["runs"]]
    assert all(isinstance(pid, int) for pid in pids)
    assert not any(_alive(pid) for pid in pids)


def test_demo_prints_the_runs_side_by_side(demo_run: tuple[subprocess.CompletedProcess[str], dict]) -> None:
    proc, _ = demo_run
    header = next(line for line in proc.stdout.splitlines() if "--parallel 1" in line)
    assert "--parallel 4" in header  # one row, two columns
    assert "staircase test" in proc.stderr  # progress went to stderr
