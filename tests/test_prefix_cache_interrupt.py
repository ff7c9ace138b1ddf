"""Ctrl-C during `servecheck prefix-cache`: exit 130, the sends measured so far are saved (JSON and
history, marked incomplete) and shown, so a long prefill is never measured for nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ctrl_c import default_sigint
from servecheck.sim import SimConfig, sim_in_thread

pytestmark = pytest.mark.timeout(120)

# 2,000 prompt tokens at 1 ms each: the control's 2 s prefill leaves time to interrupt it.
SLOW: dict[str, Any] = {"mode": "slots", "token_s": 0.002, "per_seq_s": 0.0, "prompt_token_s": 0.001}


@pytest.mark.alone  # a real signal, timed against the run's progress (docs/testing.md)
def test_ctrl_c_keeps_and_shows_the_sends_measured(tmp_path: Path) -> None:
    out, db = tmp_path / "pc.json", tmp_path / "history.db"
    with sim_in_thread(SimConfig(prefix_cache="on", **SLOW)) as sim:
        proc = subprocess.Popen(
            [sys.executable, "-m", "servecheck", "prefix-cache", sim.url, "--prompt-tokens", "2000",
             "--json", str(out), "--db", str(db)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"},
            preexec_fn=default_sigint,  # a Ctrl-C that arrives however the suite was started (tests/ctrl_c.py)
        )
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # wait until the third send (the last repeat) is in
            seen.append(line)
            if line.startswith("send 3 "):
                break
        time.sleep(0.3)  # the control's prefill is under way
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, "".join(seen) + stderr
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and len(doc["ttft_s"]) == 3 and doc["control_ttft_s"] is None
    assert "INCOMPLETE" in stdout and "repeat" in stdout  # the table of what was measured
    from servecheck.store.db import open_store

    store = open_store(str(db))
    try:
        assert store.get_run(doc["run_id"])["complete"] is False
    finally:
        store.close()
