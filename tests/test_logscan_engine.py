"""Every llama.cpp rule the local build can show, checked against the real engine: start
llama-server with the flags that make it print the line, stop it, scan its log.

Plus the issue's end-to-end checks: `-ngl 99` on this CPU build is a refused GPU offload (with the
line), `--parallel 4` is confirmed from the log and from /props. No request is sent; a server
start with the tiny model takes a second or two.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.engine.local import LocalEngine, provision_local
from servecheck.engine.process import LOCALHOST, ManagedServer, free_port
from servecheck.errors import EngineError
from servecheck.logscan import load_rules, scan_log
from servecheck.logscan.live import live_evidence

pytestmark = [pytest.mark.engine, pytest.mark.timeout(300)]

RULES = {r.id: r for r in load_rules()}


@pytest.fixture(scope="module")
def engine() -> LocalEngine:
    return provision_local(None, "tiny", progress=lambda m: print(m, file=sys.stderr))


def command(engine: LocalEngine, port: int, *extra: str) -> list[str]:
    return [str(engine.binary.path), "-m", str(engine.model_path), "--host", LOCALHOST, "--port", str(port),
            "-t", "2", *extra]


def run_server(engine: LocalEngine, log: Path, *extra: str, expect_start: bool = True) -> list[str]:
    """Start llama-server with `extra` flags, stop it, return its command line; the log is at `log`."""
    port = free_port()
    cmd = command(engine, port, *extra)
    server = ManagedServer(cmd, url=f"http://{LOCALHOST}:{port}", log_path=log, startup_timeout_s=120)
    try:
        with server:
            pass
    except EngineError:
        if expect_start:
            raise
    return cmd


# (flags, rules that must fire). The tiny model has a 64-wide head (so quantized K caches work)
# and an 8192-token training context; the 16-wide-head lines live in tests/fixtures/logs.
CASES = [
    (["-ngl", "99"], ["llamacpp.gpu_layers_ignored"]),
    (["-np", "4", "-c", "2048"], ["llamacpp.n_slots"]),
    (["-lv", "4", "-c", "2048"],
     ["llamacpp.n_parallel_auto", "llamacpp.new_slot_ctx", "llamacpp.prompt_cache_enabled"]),
    (["-lv", "4", "-fa", "auto", "-c", "2048"], ["llamacpp.fa_enabled"]),
    (["--swa-full", "-c", "2048"], ["llamacpp.swa_full_unsupported"]),
    (["-c", "12288", "-np", "1"], ["llamacpp.slot_ctx_capped", "llamacpp.n_ctx_seq_overflow"]),
    (["-c", "1024", "-np", "2", "-lv", "4"], ["llamacpp.n_ctx_seq_below_train"]),
    (["--cache-ram", "0", "-lv", "4", "-c", "2048"], ["llamacpp.prompt_cache_disabled",
                                                     "llamacpp.cache_idle_slots_disabled"]),
    (["-md", "{model}", "-lv", "4", "-c", "2048"], ["llamacpp.spec_no_implementation"]),
    (["-md", "{model}", "--spec-type", "draft-simple", "-lv", "4", "-c", "2048"],
     ["llamacpp.spec_implementation", "llamacpp.spec_initialized"]),
]


@pytest.mark.parametrize(("extra", "rule_ids"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_rule_fires_on_the_real_engine(engine, tmp_path, extra, rule_ids):
    log = tmp_path / "server.log"
    args = [str(engine.model_path) if a == "{model}" else a for a in extra]
    run_server(engine, log, *args)
    fired = {e.rule_id for e in scan_log(log, "llamacpp").evidence}
    missing = set(rule_ids) - fired
    assert not missing, f"{missing} did not fire; log tail:\n" + "\n".join(log.read_text().splitlines()[-15:])


def test_quantized_v_cache_without_flash_attention_is_refused(engine, tmp_path):
    """The server refuses to start; the log still says why, and the audit finds it."""
    log = tmp_path / "server.log"
    cmd = run_server(engine, log, "-ctv", "q8_0", "-fa", "off", "-c", "2048", expect_start=False)
    result = scan_log(log, "llamacpp", " ".join(cmd))
    statuses = {f.feature: f.status for f in result.findings}
    assert statuses["kv_cache_quant"] == "refused"
    assert result.errors >= 1


def test_gpu_layers_on_a_cpu_build_is_refused_with_the_line(engine, tmp_path, capsys):
    log = tmp_path / "server.log"
    cmd = run_server(engine, log, "-ngl", "99", "-np", "2", "-c", "2048")
    result = scan_log(log, "llamacpp", " ".join(cmd[1:]))
    [refused] = result.refused
    assert refused.feature == "gpu_offload" and refused.asked == "-ngl 99"
    assert "no usable GPU found, --gpu-layers option will be ignored" in (refused.line or "")
    out = tmp_path / "log.json"
    code = main_mod_run(["log", str(log), "--flags", " ".join(cmd[1:]), "--json", str(out)])
    assert code == exitcodes.INVALID
    findings = {f["feature"]: f for f in json.loads(out.read_text())["findings"]}
    assert findings["gpu_offload"]["status"] == "refused"
    assert "--gpu-layers option will be ignored" in findings["gpu_offload"]["line"]


def test_parallel_4_is_confirmed_from_the_log_and_from_props(engine, tmp_path):
    log = tmp_path / "server.log"
    port = free_port()
    cmd = command(engine, port, "--parallel", "4", "-c", "4096")
    with ManagedServer(cmd, url=f"http://{LOCALHOST}:{port}", log_path=log, startup_timeout_s=120) as url:
        live = live_evidence(url, "llamacpp")
        out = tmp_path / "log.json"
        code = main_mod_run(["log", str(log), "--flags", " ".join(cmd[1:]), "--url", url, "--json", str(out)])
    assert code == exitcodes.OK
    by_rule = {e.rule_id: e for e in live}
    assert by_rule["live.llamacpp.props_total_slots"].value == 4.0
    assert by_rule["live.llamacpp.props_total_slots"].status == "confirmed"
    from_log = scan_log(log, "llamacpp", " ".join(cmd[1:]))
    [finding] = [f for f in from_log.findings if f.feature == "parallel_slots"]
    assert finding.status == "confirmed" and finding.asked == "--parallel 4" and "n_slots = 4" in (finding.line or "")
    doc = json.loads(out.read_text())
    evidence = [e for e in doc["evidence"] if e["feature"] == "parallel_slots"]
    assert {e["source"] for e in evidence} == {"log", "live"}
    assert all(e["status"] == "confirmed" for e in evidence if e["source"] == "live" and e["value"] == 4.0)
    assert [f["status"] for f in doc["findings"] if f["feature"] == "parallel_slots"] == ["confirmed"]


def main_mod_run(args: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args)
    return int(info.value.code or 0)
