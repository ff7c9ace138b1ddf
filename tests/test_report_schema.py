"""docs/schema.md names every field the commands really write: run each command (against the simulator,
or on inputs that need no files) and look every key up in the document."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from servecheck import sim
from servecheck.cli import main as main_mod

from test_audit_fixtures import write_gguf
from test_audit_gguf import MOE_KV, moe_tensors

SCHEMA = (Path(__file__).resolve().parents[1] / "docs" / "schema.md").read_text()
DOCUMENTED = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", SCHEMA))
# Request records, the server block and the environment are documented once, not per command.
SHARED = {"requests", "request", "warmup", "server", "environment", "params", "measurement", "audit", "probe"}


def keys(value: Any, path: str = "") -> set[str]:
    """Every key in the document, except inside the shared blocks and numeric-keyed maps (trend_ratios)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, inner in value.items():
            if key.isdigit():
                continue
            found.add(f"{path}{key}")
            if key not in SHARED:
                found |= keys(inner, f"{path}{key}.")
    elif isinstance(value, list):
        for inner in value[:3]:
            found |= keys(inner, path)
    return found


def run(args: list[str], out: Path) -> dict[str, Any]:
    with pytest.raises(SystemExit) as info:
        main_mod.main(["--quiet", *args, "--json", str(out)])
    assert info.value.code in (0, 3)
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def undocumented(doc: dict[str, Any]) -> list[str]:
    return sorted(k for k in keys(doc) if k.rsplit(".", 1)[-1] not in DOCUMENTED)


@pytest.mark.timing(seconds=14)
@pytest.mark.timeout(240)
def test_every_field_of_a_real_run_is_documented(tmp_path: Path) -> None:
    log = tmp_path / "sim.log"
    docs = []
    model = write_gguf(tmp_path / "moe.gguf", "qwen2moe", MOE_KV, moe_tensors())
    with sim.sim_in_thread(sim.SimConfig(mode="batched", refusal=True, log_path=str(log))) as server:
        common = ["--tokens", "8", "--prompt-tokens", "8", "--no-save"]
        docs.append(run(["staircase", server.url, "--n", "1,2", *common], tmp_path / "s.json"))
        docs.append(run(["arms", server.url, "--arms", "1,2", "--reps", "2", *common], tmp_path / "a.json"))
        docs.append(run(["capacity", server.url, "--min-user-rate", "1", "--max-ttft", "5", "--max-n", "2", *common],
                        tmp_path / "cap.json"))
        docs.append(run(["prefix-cache", server.url, "--prompt-tokens", "200", "--repeats", "2", "--no-save"],
                        tmp_path / "p.json"))
        docs.append(run(["context", server.url, "--depths", "0,64", "--tokens", "8", "--model", str(model),
                         "--bandwidth", "10", "--no-save"], tmp_path / "ctx.json"))
        docs.append(run(["interference", server.url, "--prompt-sizes", "64,512", "--tokens", "32", "--reps", "1",
                         "--no-save"],
                        tmp_path / "inf.json"))
    docs.append(run(["log", str(log), "--flags", "-np 4 --cont-batching", "--no-save"], tmp_path / "l.json"))
    docs.append(run(["roofline", "--bytes-per-token", "1.849GB", "--tok-s", "97.83", "--bandwidth", "265-315",
                     "--target", "125", "--no-save"], tmp_path / "r.json"))
    docs.append(run(["compare", "a=2.80GB@41.5", "b=1.849GB@97.83"], tmp_path / "c.json"))
    docs.append(run(["bandwidth", "--sizes", "16MiB", "--no-save"], tmp_path / "b.json"))
    docs.append(run(["audit", str(model), "--context", "512"], tmp_path / "au.json"))
    missing = {doc["command"]: undocumented(doc) for doc in docs}
    assert all(not names for names in missing.values()), json.dumps(missing)
