"""`servecheck simulate` as a user runs it: URL on line 1, simulated said out loud, clean exit on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from servecheck.cli.main import cli

START_TIMEOUT_S = 30


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "servecheck", "simulate", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def read_url(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()  # blocks until the first line; bounded by pytest-timeout
    assert line.startswith("http://127.0.0.1:"), line
    return line


@pytest.mark.timeout(60)
def test_cli_stops_cleanly_on_ctrl_c() -> None:
    proc = start()
    try:
        read_url(proc)
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=START_TIMEOUT_S)
    assert proc.returncode == 0, err
    assert "stopped" in err and "Traceback" not in err


@pytest.mark.timeout(60)
def test_cli_prints_url_first_and_stops_cleanly(tmp_path: Path) -> None:
    log = tmp_path / "sim.log"
    proc = start("--mode", "slots", "--slots", "2", "--refusal", "--serialize-on", "seed", "--log", str(log))
    try:
        url = read_url(proc)
        assert proc.stdout is not None
        said = proc.stdout.readline()
        assert "SIMULATED" in said and "serialize_on=seed (a request carrying it is served alone)" in said
        with urllib.request.urlopen(url + "/health", timeout=10) as r:
            assert r.headers["X-Servecheck-Simulated"] == "1"
            assert json.loads(r.read()) == {"status": "ok"}
        with urllib.request.urlopen(url + "/props", timeout=10) as r:
            props = json.loads(r.read())
            assert props["total_slots"] == 2 and props["servecheck_sim"]["serialize_on"] == ["seed"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=START_TIMEOUT_S)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    text = log.read_text()
    assert "no usable GPU found, --gpu-layers option will be ignored" in text
    assert "cache_reuse is not supported by this context, it will be disabled" in text
    assert "no usable GPU found" in err  # echoed to stderr too, as a real server logs


@pytest.mark.parametrize(
    "args, message",
    [
        (["--mode", "serial", "--slots", "2"], "--slots applies to --mode slots"),
        (["--log", "/nonexistent-dir/sim.log"], "cannot write the simulator log"),
        (["--mode", "nope"], "Invalid value for '--mode'"),
    ],
)
def test_cli_bad_input_one_line_error(args: list[str], message: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "servecheck", "simulate", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
    )
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_cli_help_says_simulated() -> None:
    result = CliRunner().invoke(cli, ["simulate", "--help"])
    assert result.exit_code == 0 and "SIMULATED" in result.output
