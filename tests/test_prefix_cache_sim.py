"""`servecheck prefix-cache` and `--serve` against the simulated server on 127.0.0.1, port 0.

The simulator's cache mode is the ground truth: "on" must read working, "inert" (accepts the flag,
never hits) and "off" must read inert, and its refusal mode must show up in the log audit.
Prefill is 0.3 ms a token, so a 1,000-token prompt takes ~0.3 s uncached: a few seconds per test.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.wire.base import Target
from servecheck.engine.process import free_port
from servecheck.errors import UsageError
from servecheck.experiments.prefix_cache import (
    CTX_MARGIN_TOKENS,
    DEFAULT_MAX_TOKENS,
    MIN_PROMPT_TOKENS,
    fit_prompt,
    run_prefix_cache,
)
from servecheck.load.driver import LoadDriver
from servecheck.load.witness import metric_totals
from servecheck.logscan import scan_log
from servecheck.sim import REFUSAL_LINES, SimConfig, sim_in_thread
from written import fields_of

pytestmark = [pytest.mark.timeout(120), pytest.mark.timing]

TIMING: dict[str, Any] = {"mode": "slots", "token_s": 0.002, "per_seq_s": 0.0, "prompt_token_s": 0.0003}
PROMPT = 1000


def run_main(args: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args)
    return int(info.value.code or 0)


async def measure(config: SimConfig, **kw):
    with sim_in_thread(config) as sim:
        async with LoadDriver(Target(sim.url, first_token_timeout_s=60)) as driver:
            return await run_prefix_cache(driver, prompt_tokens=PROMPT, rng=random.Random(1), **kw)


@pytest.mark.parametrize(("cache", "verdict"), [("on", "working"), ("inert", "inert"), ("off", "inert")])
async def test_simulated_cache_modes(cache, verdict):
    result = await measure(SimConfig(prefix_cache=cache, **TIMING))
    doc = fields_of(result.document())
    assert doc["verdict"] == verdict, doc["verdict_reason"]
    assert [s["kind"] for s in doc["sends"]] == ["repeat", "repeat", "repeat", "control", "floor"]
    assert doc["sends"][0]["cached_tokens"] == 0 and doc["control_cached_tokens"] == 0
    cached = doc["cached_tokens"][1:]
    if cache == "on":
        assert all(c is not None and c >= PROMPT - 1 for c in cached)
    else:
        assert cached == [0, 0]
    assert doc["prompt_tokens"] == PROMPT and not doc["capped"] and doc["simulated"]


async def test_lying_cache_counters_are_read_from_the_timing_and_the_contradiction_named():
    """Ground truth: the simulator's cache is off, yet its counters claim every hit a working cache would
    have had (cache_n on each repeat). The timing decides (inert); the counters are named as a lie."""
    result = await measure(SimConfig(prefix_cache="off", lying_cache=True, **TIMING))
    doc = fields_of(result.document())
    assert all(c is not None and c >= PROMPT - 1 for c in doc["cached_tokens"][1:])  # the lie was read
    assert doc["sends"][0]["cached_tokens"] == 0 and doc["control_cached_tokens"] == 0
    analysis = doc["analysis"]
    assert (doc["verdict"], analysis["signal"], analysis["decided_by_witness"]) == ("inert", "timing", False), \
        doc["verdict_reason"]
    assert analysis["witness_contradicts"].startswith("every warm repeat had at least")
    assert [w["code"] for w in doc["warnings"]] == ["witness_contradicts"]
    assert "contradict the timing" in doc["verdict_reason"]


async def test_honest_counters_beside_the_same_timing_raise_no_finding():
    doc = fields_of((await measure(SimConfig(prefix_cache="on", lying_cache=True, **TIMING))).document())
    assert ((doc["verdict"], doc["analysis"]["signal"], doc["analysis"]["witness_contradicts"])
            == ("working", "timing", None))
    assert "warnings" not in doc and "the cache counters agree" in doc["verdict_reason"]


async def test_cache_prompt_false_per_request_makes_a_working_cache_inert():
    result = await measure(SimConfig(prefix_cache="on", **TIMING), cache_prompt=False)
    assert result.document().body.verdict == "inert"
    assert result.cache_prompt is False


async def test_prompt_capped_to_the_per_request_context():
    n_ctx = 800
    result = await measure(SimConfig(prefix_cache="on", n_ctx=n_ctx, **TIMING))
    doc = fields_of(result.document())
    assert doc["capped"] and doc["prompt_tokens"] == n_ctx - DEFAULT_MAX_TOKENS - CTX_MARGIN_TOKENS
    assert doc["n_ctx_per_request"] == n_ctx and "/props" in doc["n_ctx_source"]
    assert any("prompt capped to" in n for n in doc["notes"])
    assert doc["verdict"] == "working"


async def test_refused_when_fewer_than_512_tokens_fit():
    with pytest.raises(UsageError, match=f"needs at least {MIN_PROMPT_TOKENS}"):
        await measure(SimConfig(prefix_cache="on", n_ctx=400, **TIMING))


FIT = [
    # (asked, n_ctx, prompt tokens sent, capped)
    (6000, None, 6000, False),
    (6000, 8192, 6000, False),
    (6000, 4096, 4096 - DEFAULT_MAX_TOKENS - CTX_MARGIN_TOKENS, True),
    (100, 4096, 100, False),
    (6000, MIN_PROMPT_TOKENS + DEFAULT_MAX_TOKENS + CTX_MARGIN_TOKENS, MIN_PROMPT_TOKENS, True),
]


@pytest.mark.parametrize(("asked", "n_ctx", "sent", "capped"), FIT)
def test_fit_prompt(asked, n_ctx, sent, capped):
    fit = fit_prompt(asked, DEFAULT_MAX_TOKENS, n_ctx, "/props")
    assert fit.prompt_tokens == sent and (fit.note is not None) == capped


def test_vllm_counters_summed_over_labels():
    text = (
        "# TYPE vllm:prefix_cache_hits counter\n"
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 96.0\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 32.0\n'
        "# TYPE vllm:prefix_cache_queries counter\n"
        'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 200.0\n'
    )
    names = {"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"}
    assert metric_totals(text, names) == {"vllm:prefix_cache_hits_total": 128.0,
                                          "vllm:prefix_cache_queries_total": 200.0}
    assert metric_totals("garbage {", names) == {}


# ---------------------------------------------------------------- the CLI


def test_cli_json_contract_and_table(tmp_path, capsys):
    out = tmp_path / "pc.json"
    with sim_in_thread(SimConfig(prefix_cache="on", **TIMING)) as sim:
        code = run_main(["prefix-cache", sim.url, "--prompt-tokens", str(PROMPT), "--json", str(out), "--no-save"])
    assert code == exitcodes.OK
    doc = json.loads(out.read_text())
    assert doc["command"] == "prefix-cache" and doc["verdict"] == "working"
    assert len(doc["ttft_s"]) == 3 and all(isinstance(t, float) for t in doc["ttft_s"])
    assert len(doc["cached_tokens"]) == 3 and isinstance(doc["control_ttft_s"], float)
    assert [s["kind"] for s in doc["sends"]] == ["repeat", "repeat", "repeat", "control", "floor"]
    printed = capsys.readouterr().out
    assert "verdict  working" in printed and "control" in printed and "cached tokens" in printed


@pytest.mark.parametrize(("expect", "code"), [(None, exitcodes.INVALID), ("inert", exitcodes.OK),
                                              ("working", exitcodes.EXPECT_MISMATCH)])
def test_cli_inert_exit_codes(expect, code):
    extra = [] if expect is None else ["--expect", expect]
    with sim_in_thread(SimConfig(prefix_cache="inert", **TIMING)) as sim:
        assert run_main(["prefix-cache", sim.url, "--prompt-tokens", str(PROMPT), "--no-save", *extra]) == code


def test_cli_evidence_stopwatch_with_lying_counters(tmp_path, capsys):
    out = tmp_path / "pc.json"
    with sim_in_thread(SimConfig(prefix_cache="inert", lying_cache=True, **TIMING)) as sim:
        code = run_main(["prefix-cache", sim.url, "--prompt-tokens", str(PROMPT), "--evidence", "stopwatch",
                         "--expect", "inert", "--json", str(out), "--no-save"])
    doc = json.loads(out.read_text())
    assert code == exitcodes.OK, doc["verdict_reason"]
    assert (doc["evidence_mode"], doc["params"]["evidence"]) == ("stopwatch", "stopwatch")
    assert doc["verdict"] == "inert" and [w["code"] for w in doc["warnings"]] == ["witness_contradicts"]
    assert "warning: the server's own cache counters contradict the timing" in capsys.readouterr().out


def test_cli_no_cache_prompt(tmp_path):
    out = tmp_path / "pc.json"
    with sim_in_thread(SimConfig(prefix_cache="on", **TIMING)) as sim:
        run_main(["prefix-cache", sim.url, "--prompt-tokens", str(PROMPT), "--no-cache-prompt", "--json", str(out),
                  "--no-save"])
    doc = json.loads(out.read_text())
    assert doc["verdict"] == "inert" and doc["cache_prompt"] is False and doc["params"]["cache_prompt"] is False


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["prefix-cache"], exitcodes.USAGE, "give the server's URL"),
        (["prefix-cache", "http://127.0.0.1:9", "--repeats", "1"], exitcodes.USAGE, "--repeats must be >= 2"),
        (["prefix-cache", "http://127.0.0.1:9", "--prompt-tokens", "0"], exitcodes.USAGE, "--prompt-tokens"),
        (["prefix-cache", "nota-url"], exitcodes.USAGE, "not an http(s) URL"),
        (["prefix-cache", "--serve", "/nonexistent/llama-server --port 1"], exitcodes.ERROR, "no such program"),
    ],
)
def test_cli_bad_input(args, code, message, capsys):
    assert run_main([*args, "--no-save"]) == code
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


# ---------------------------------------------------------------- refusal mode and --serve


def test_simulator_refusal_log_is_refused(tmp_path, capsys):
    log = tmp_path / "sim.log"
    with sim_in_thread(SimConfig(refusal=True, log_path=str(log), **TIMING)):
        pass
    result = scan_log(log, "llamacpp", "-ngl 99 --cache-reuse 256 -np 4")
    statuses = {f.feature: f.status for f in result.findings}
    assert {k: statuses[k] for k in ("gpu_offload", "cache_reuse", "parallel_slots")} == {
        "gpu_offload": "refused", "cache_reuse": "refused", "parallel_slots": "confirmed"}
    assert {f.line for f in result.refused} == {line.strip() for line in REFUSAL_LINES}
    assert run_main(["log", str(log), "--flags", "-ngl 99 --cache-reuse 256"]) == exitcodes.INVALID
    assert "REFUSED: gpu_offload, cache_reuse" in capsys.readouterr().out


def test_serve_starts_audits_and_stops_the_server(tmp_path, capsys):
    port = free_port()
    out = tmp_path / "pc.json"
    log = tmp_path / "served.log"
    command = (f"{sys.executable} -m servecheck simulate --port {port} --refusal --prefix-cache on "
               f"--mode slots --token-ms 2 --per-seq-ms 0 --prompt-token-ms 0.3")
    code = run_main(["prefix-cache", "--serve", command, "--serve-log", str(log), "--prompt-tokens", str(PROMPT),
                     "--json", str(out), "--no-save"])
    doc = json.loads(out.read_text())
    assert doc["verdict"] == "working"
    audit = doc["log_audit"]
    assert set(audit["refused"]) == {"gpu_offload", "cache_reuse"} and audit["log_path"] == str(log)
    assert code == exitcodes.INVALID  # the cache works, but the server refused features it was asked for
    assert "REFUSED: gpu_offload, cache_reuse" in capsys.readouterr().out
    from servecheck.engine.process import ensure_port_free, live_pids

    ensure_port_free("127.0.0.1", port)  # stopped: nothing listens any more
    assert live_pids() == []


def test_serve_stops_the_server_when_the_run_fails(tmp_path, capsys):
    port = free_port()
    log = tmp_path / "served.log"
    command = f"{sys.executable} -m servecheck simulate --port {port} --n-ctx 300"
    code = run_main(["prefix-cache", "--serve", command, "--serve-log", str(log), "--no-save"])
    assert code == exitcodes.USAGE and "needs at least 512" in capsys.readouterr().err
    from servecheck.engine.process import ensure_port_free, live_pids

    ensure_port_free("127.0.0.1", port)
    assert live_pids() == []
