"""`roofline MODEL --url` against the real llama-server serving the MoE demo model: a utilization figure."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from servecheck.analysis.roofline import DEFAULT_GATE
from servecheck.cli import main as main_mod
from servecheck.engine.local import LocalEngine, provision_local
from servecheck.engine.process import LOCALHOST, ManagedServer, free_port, live_pids

pytestmark = [pytest.mark.engine, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def engine() -> LocalEngine:
    return provision_local(None, "moe", progress=lambda m: print(m, file=sys.stderr))


def test_roofline_url_on_local_engine(engine: LocalEngine, tmp_path: Path, first_try: Any,
                                      request: pytest.FixtureRequest) -> None:
    port = free_port()
    cmd = [str(engine.binary.path), "-m", str(engine.model_path), "--host", LOCALHOST, "--port", str(port),
           "-np", "1", "-c", "1024", "-t", "2"]
    out = tmp_path / "r.json"

    def attempt(_: int) -> tuple[int, dict]:
        # A given bandwidth well above this machine's keeps the test about the arithmetic on a real
        # measured rate (utilization wholly above 100% would be an invalid input and exit 3).
        with ManagedServer(cmd, url=f"http://{LOCALHOST}:{port}", log_path=tmp_path / "server.log") as url:
            with pytest.raises(SystemExit) as info:
                main_mod.main(["roofline", str(engine.model_path), "--url", url, "--tokens", "64", "--bandwidth",
                               "200-400", "--no-save", "--json", str(out), "--timeout", "120"])
        return int(info.value.code or 0), json.loads(out.read_text())

    # One run, as a user's: no retry; the gate it read is recorded as a first try (tests/conftest.py).
    code, doc = first_try.record_tries(request.node.nodeid, "open", attempt, lambda got: got[1]["gate"])
    assert code == 0
    assert doc["measurement"]["tokens"] == 64
    assert doc["tok_s"] > 0
    assert doc["kind"] == "moe" and doc["audit"]["experts"]["used"] == 2
    lo, hi = doc["utilization"]
    assert lo == pytest.approx(doc["tok_s"] * doc["bytes_per_token"] / 1e9 / 400)
    assert hi == pytest.approx(2 * lo)
    # The known numbers imply the gate: a tiny model on this CPU reads far less than 200 GB/s, so
    # the whole utilization range sits below the 0.55 gate, and the gate is open.
    assert hi < DEFAULT_GATE, doc["utilization"]
    assert doc["gate"] == "open", doc["gate"]
    assert live_pids() == []
