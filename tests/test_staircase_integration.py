"""`servecheck staircase` end to end against the simulated server on 127.0.0.1, port 0.

The simulator's schedule is the ground truth: serial must read as a staircase, continuous batching as
a cluster, K slots as groups of K. 64 tokens at ~12 ms make one request take ~0.8 s, so the gaps the
verdicts rely on (0 vs ~1 single time) stay far apart even on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from ctrl_c import sigint_raises
from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.sim import SimConfig, sim_in_thread
from servecheck.store.db import open_store

pytestmark = [pytest.mark.timeout(120), pytest.mark.timing]

TOKENS = 64
TIMING: dict[str, Any] = {"token_s": 0.012, "per_seq_s": 0.001, "prompt_token_s": 0.0001}


def staircase(config: SimConfig, tmp_path: Path, *args: str, db: Path | None = None) -> tuple[int, dict]:
    """Run the command against a fresh simulator; returns the exit code and the JSON document."""
    json_path = tmp_path / "staircase.json"
    code = run_cli(config, "--json", str(json_path), *args, db=db)
    return code, json.loads(json_path.read_text())


def run_cli(config: SimConfig, *args: str, db: Path | None = None) -> int:
    save = ["--no-save"] if db is None else ["--db", str(db)]
    with sim_in_thread(config) as sim:
        argv = ["staircase", sim.url, "--tokens", str(TOKENS), "--prompt-tokens", "32", *save, "--timeout", "60"]
        with pytest.raises(SystemExit) as info:
            main_mod.main([*argv, *args])
    return int(info.value.code or 0)


def verdicts(doc: dict) -> dict[int, str]:
    return {p["n"]: p["verdict"] for p in doc["points"]}


def test_serial_is_a_staircase(tmp_path, capsys):
    db = tmp_path / "history.sqlite3"
    code, doc = staircase(SimConfig(mode="serial", **TIMING), tmp_path, "--n", "1,2,4", "--expect", "staircase", db=db)
    assert code == exitcodes.OK, doc["verdict_reason"]
    with open_store(db) as store:
        (row,) = store.list_runs()
        assert (row.command, row.verdict, row.simulated, row.complete) == ("staircase", "staircase", True, True)
        assert store.get_run(row.id)["points"] == doc["points"]
    assert verdicts(doc) == {1: "baseline", 2: "staircase", 4: "staircase"}
    assert doc["verdict"] == "staircase" and doc["valid"] and doc["complete"] and doc["simulated"]
    assert doc["trend"] == "flat"
    top = doc["points"][-1]
    assert top["tokens"] == [TOKENS] * 4
    # The queue witness: the server's own timings say the k-th request waited about k-1 single times.
    queue = top["batches"][0]["queue_s"]
    assert queue[0] < 0.5 * doc["single_s"] < queue[1] < queue[2] < queue[3]
    # The 350-versus-91 trap: the self-reported rates sum to about N times the true aggregate.
    claimed = top["batches"][0]["self_reported_sum_tok_s"]
    assert claimed > 3 * top["aggregate_tok_s"]
    out = capsys.readouterr().out
    assert "SIMULATED SERVER" in out
    assert "MISLEADING" in out
    assert any(line.startswith("N=4   finish at") and line.endswith("staircase") for line in out.splitlines())


def test_batched_is_a_cluster_and_json_to_stdout(capsys):
    code = run_cli(SimConfig(mode="batched", **TIMING), "--n", "1,2,4", "--json", "-")
    captured = capsys.readouterr()
    doc = json.loads(captured.out)  # stdout holds nothing but the document
    assert code == exitcodes.OK, doc["verdict_reason"]
    assert doc["command"] == "staircase" and doc["simulated"] is True
    assert verdicts(doc) == {1: "baseline", 2: "cluster", 4: "cluster"}
    assert doc["trend"] == "rising"
    for point in doc["points"]:
        assert set(point) >= {"n", "finish_s", "tokens", "aggregate_tok_s", "verdict", "batches"}
        assert len(point["finish_s"]) == len(point["tokens"]) == point["n"]
    assert "detected llamacpp API" in captured.err and "SIMULATED SERVER" in captured.err


def test_two_slots_give_pairs(tmp_path):
    code, doc = staircase(SimConfig(mode="slots", slots=2, **TIMING), tmp_path, "--n", "1,4", "--expect", "partial")
    assert code == exitcodes.OK, doc["verdict_reason"]
    assert verdicts(doc) == {1: "baseline", 4: "partial"}
    assert doc["points"][-1]["batches"][0]["verdict"]["group_sizes"] == [2, 2]


def test_four_slots_with_eight_requests_give_two_groups_of_four(tmp_path):
    code, doc = staircase(SimConfig(mode="slots", slots=4, **TIMING), tmp_path, "--n", "1,8")
    assert code == exitcodes.OK, doc["verdict_reason"]
    assert verdicts(doc) == {1: "baseline", 8: "partial"}
    assert doc["points"][-1]["batches"][0]["verdict"]["group_sizes"] == [4, 4]


def test_eos_ceiling_names_short_requests_and_invalidates(tmp_path, capsys):
    config = SimConfig(mode="batched", eos_ceiling=True, **TIMING)
    # The simulator draws which prompts stop early from their nonces; seed 0 gives several short ones.
    code, doc = staircase(config, tmp_path, "--n", "1,2,4", "--seed", "0")
    assert code == exitcodes.INVALID
    assert doc["valid"] is False and doc["complete"] is True
    requests = [
        (p["n"], b["rep"], r["index"], r["tokens"]) for p in doc["points"] for b in p["batches"] for r in b["requests"]
    ]
    short = {(n, rep, i) for n, rep, i, tokens in requests if tokens < 0.95 * TOKENS}
    assert short, "the simulator stopped no request early; the test proves nothing"
    (finding,) = [f for f in doc["invalid"] if f["code"] == "output_length"]
    assert {(r["n"], r["rep"], r["index"]) for r in finding["requests"]} == short
    out = capsys.readouterr().out
    assert "INVALID" in out
    for r in finding["requests"]:
        assert r["nonce"] in out  # each short request is named in the terminal output


def test_expect_mismatch_exits_4(tmp_path):
    code, doc = staircase(SimConfig(mode="serial", **TIMING), tmp_path, "--n", "1,2", "--expect", "cluster")
    assert doc["verdict"] == "staircase"
    assert code == exitcodes.EXPECT_MISMATCH


@pytest.mark.alone  # a real signal, timed against the run's progress (docs/testing.md)
def test_ctrl_c_saves_the_partial_run(tmp_path, capsys):
    """A real SIGINT mid-run: exit 130, and the JSON holds what was measured, marked incomplete."""
    json_path = tmp_path / "partial.json"
    timer = threading.Timer(2.5, os.kill, (os.getpid(), signal.SIGINT))
    with sigint_raises():  # even where the suite was started with SIGINT ignored (tests/ctrl_c.py)
        timer.start()
        try:
            code = run_cli(SimConfig(mode="serial", **TIMING), "--n", "1,2,4,8", "--json", str(json_path))
        finally:
            timer.cancel()
    assert code == 130
    doc = json.loads(json_path.read_text())
    assert doc["complete"] is False
    assert len(doc["points"]) < 4  # N=8 alone takes longer than the 2.5 s before the interrupt
    assert "Interrupted" in capsys.readouterr().err


def test_prefix_cache_contamination_is_named(tmp_path):
    """Repeating a run's exact prompts (same --seed) on a caching server: every measured request is named."""
    fast = SimConfig(mode="batched", prefix_cache="on", token_s=0.004, per_seq_s=0.0005)

    def run(sim_url: str, seed: str, name: str) -> dict:
        path = tmp_path / name
        argv = ["staircase", sim_url, "--tokens", "16", "--n", "1,2", "--seed", seed, "--no-save", "--json", str(path)]
        with pytest.raises(SystemExit):
            main_mod.main(argv)
        return json.loads(path.read_text())

    with sim_in_thread(fast) as sim:
        first = run(sim.url, "7", "first.json")
        fresh = run(sim.url, "8", "fresh.json")  # control: new nonces, nothing to reuse
        repeat = run(sim.url, "7", "repeat.json")
    assert not [w for w in first["warnings"] + fresh["warnings"] if w["code"] == "prefix_cache_contamination"]
    (warning,) = [w for w in repeat["warnings"] if w["code"] == "prefix_cache_contamination"]
    def measured(doc: dict) -> set[tuple[int, int, int]]:
        return {(p["n"], b["rep"], r["index"]) for p in doc["points"] for b in p["batches"] for r in b["requests"]}

    # The same seed gives the same prompt to the same (n, rep, index); a run that repeats an undecided
    # point takes more reps than the first run did, and those extra prompts were never sent before.
    repeated = measured(repeat) & measured(first)
    assert {(1, 0, 0), (2, 0, 0), (2, 0, 1)} <= repeated
    assert {(r["n"], r["rep"], r["index"]) for r in warning["requests"]} == repeated


def test_serve_owns_the_simulator_and_audits_its_log(tmp_path: Path) -> None:
    """--serve starts the server, tests it, stops it and audits its log: a refused feature exits 3."""
    import sys

    from servecheck.engine.process import ensure_port_free, free_port, live_pids

    port = free_port()
    log = tmp_path / "served.log"
    json_path = tmp_path / "staircase.json"
    command = f"{sys.executable} -m servecheck simulate --port {port} --mode batched --token-ms 12 --refusal"
    argv = ["staircase", "--serve", command, "--serve-log", str(log), "--n", "1,2", "--tokens", str(TOKENS),
            "--prompt-tokens", "32", "--json", str(json_path), "--no-save", "--timeout", "60"]
    with pytest.raises(SystemExit) as info:
        main_mod.main(argv)
    doc = json.loads(json_path.read_text())
    assert doc["verdict"] == "cluster" and doc["simulated"] is True
    assert "gpu_offload" in doc["log_audit"]["refused"]
    assert info.value.code == exitcodes.INVALID  # batched, but the server refused a feature at start-up
    ensure_port_free("127.0.0.1", port)
    assert live_pids() == []


@pytest.mark.parametrize(("tokens", "code"), [("240", exitcodes.USAGE), ("200", exitcodes.OK)])
def test_output_beyond_the_context_is_refused_before_any_request(tmp_path, capsys, tokens, code):
    """A 256-token context holds a 32-token prompt and 200 tokens, not 240: refused up front, one line."""
    config = SimConfig(mode="batched", n_ctx=256, token_s=0.002, per_seq_s=0.0, prompt_token_s=0.0)
    with sim_in_thread(config) as sim:
        argv = ["staircase", sim.url, "--n", "1,2", "--tokens", tokens, "--prompt-tokens", "32", "--no-save"]
        with pytest.raises(SystemExit) as info:
            main_mod.main(argv)
    assert info.value.code == code
    err = capsys.readouterr().err
    if code == exitcodes.USAGE:
        assert "exceed the server's context of 256 tokens per request" in err and "Traceback" not in err
        assert "detected" not in err  # refused before the warm-up and before any history row


def test_a_queue_slower_than_the_first_token_timeout_still_reads_as_a_staircase(tmp_path):
    """--timeout 1 with requests of ~0.8 s: the fourth request of N=4 waits ~2.4 s in the queue
    before its first token. That wait is the staircase, not a stuck server."""
    json_path = tmp_path / "slow-queue.json"
    with sim_in_thread(SimConfig(mode="serial", **TIMING)) as sim:
        argv = ["staircase", sim.url, "--n", "1,4", "--tokens", str(TOKENS), "--prompt-tokens", "32", "--timeout", "1",
                "--no-save", "--json", str(json_path)]
        with pytest.raises(SystemExit) as info:
            main_mod.main(argv)
    doc = json.loads(json_path.read_text())
    assert not doc["invalid"], doc["invalid"]
    assert info.value.code == exitcodes.OK and doc["verdict"] == "staircase", doc["verdict_reason"]


@pytest.mark.timing(seconds=8)
def test_a_seed_in_every_request_serializes_a_server_that_serves_seeded_requests_alone(tmp_path, capsys):
    """mlx-lm's seed, with the simulator as the truth (--serialize-on seed): the same batching server reads
    cluster for plain requests and staircase once every request carries seed=7 (--request-param), both
    decided by the finish times: one group of four against four groups of one."""
    config = SimConfig(mode="batched", serialize_on=("seed",), **TIMING)
    # openai-chat: the llama.cpp dialect sends a seed of its own in every request
    args = ("--n", "1,2,4", "--api", "openai-chat", "--tokens", "32", "--no-calibrate")
    plain_code, plain = staircase(config, tmp_path, *args)
    seeded_code, seeded = staircase(config, tmp_path, *args, "--request-param", "seed=7")
    assert (plain_code, plain["verdict"]) == (exitcodes.OK, "cluster"), plain["verdict_reason"]
    assert (seeded_code, seeded["verdict"]) == (exitcodes.OK, "staircase"), seeded["verdict_reason"]
    for doc, groups in ((plain, [4]), (seeded, [1, 1, 1, 1])):
        top = doc["points"][-1]
        assert doc["evidence"][0] == "completion_times" and top["evidence"][0] == "completion_times"
        assert top["batches"][-1]["verdict"]["group_sizes"] == groups
    assert (plain["params"]["request_params"], seeded["params"]["request_params"]) == ({}, {"seed": 7})
    out = capsys.readouterr().out
    assert out.count("requests carried: seed=7") == 1
    assert "verdict  staircase" in out.split("requests carried: seed=7")[0].splitlines()[-1]
