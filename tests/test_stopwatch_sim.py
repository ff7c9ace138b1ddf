"""The stopwatch judges, end to end against the simulator on 127.0.0.1 (its schedule is the ground
truth): gauges that lie do not hide a queue, honest ones change nothing, the stripping proxy leaves
the stopwatch alone to decide, and a point shows what one measured batch produced."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.sim import SimConfig, sim_in_thread
from servecheck.sim.proxy import running_proxy as proxy

pytestmark = [pytest.mark.timeout(180), pytest.mark.timing]

TOKENS = 64
TIMING: dict[str, Any] = {"token_s": 0.012, "per_seq_s": 0.001, "prompt_token_s": 0.0001}


def staircase(url: str, tmp_path: Path, *args: str) -> tuple[int, dict]:
    out = tmp_path / "staircase.json"
    argv = ["staircase", url, "--tokens", str(TOKENS), "--prompt-tokens", "32", "--n", "1,2,4", "--no-save",
            "--timeout", "60", "--json", str(out), *args]
    with pytest.raises(SystemExit) as info:
        main_mod.main(argv)
    return int(info.value.code or 0), json.loads(out.read_text())


def codes(doc: dict) -> set[str]:
    return {f["code"] for f in doc["warnings"]}


def test_a_queue_behind_lying_gauges_is_a_staircase_and_the_lie_is_named(tmp_path) -> None:
    with sim_in_thread(SimConfig(mode="serial", lying_gauges=True, **TIMING)) as sim:
        code, doc = staircase(sim.url, tmp_path, "--expect", "staircase")
    assert code == exitcodes.OK, doc["verdict_reason"]
    assert (doc["verdict"], doc["trend"]) == ("staircase", "flat")
    assert "witness_contradicts" in codes(doc)
    top = doc["points"][-1]
    assert "completion_times" in top["evidence"] and "server_gauges" not in top["evidence"]
    said = [w["schedule"] for b in top["batches"] for w in b["verdict"]["contradicted_by"]]
    assert said and set(said) == {"cluster"}


def test_honest_gauges_leave_the_verdicts_as_they_were(tmp_path) -> None:
    with sim_in_thread(SimConfig(mode="serial", **TIMING)) as sim:
        code, doc = staircase(sim.url, tmp_path)
    assert code == exitcodes.OK
    assert (doc["verdict"], doc["trend"]) == ("staircase", "flat")
    assert "witness_contradicts" not in codes(doc)
    assert "server_gauges" in doc["points"][-1]["evidence"]


@pytest.mark.parametrize(("mode", "verdict", "trend"),
                         [("serial", "staircase", "flat"), ("batched", "cluster", "rising")])
def test_behind_the_stripping_proxy_the_stopwatch_decides_alone(tmp_path, mode, verdict, trend) -> None:
    with sim_in_thread(SimConfig(mode=mode, **TIMING)) as sim, proxy(sim.url) as url:
        code, doc = staircase(url, tmp_path, "--api", "openai-chat", "--evidence", "stopwatch")
    assert code == exitcodes.OK, doc["verdict_reason"]
    assert (doc["verdict"], doc["trend"]) == (verdict, trend)
    assert doc["evidence_mode"] == "stopwatch" and doc["decided_by_witness"] is False
    for point in doc["points"][1:]:
        assert "completion_times" in point["evidence"]
        for b in point["batches"]:
            assert b["gauges"] is None  # /metrics and /slots answered 404
            assert all(r["server"] is None or r["server"].get("prompt_s") is None for r in b["requests"])


def test_gauges_the_proxy_injects_are_named_as_lies(tmp_path) -> None:
    with sim_in_thread(SimConfig(mode="serial", **TIMING)) as sim, proxy(sim.url, "--lie-gauges") as url:
        code, doc = staircase(url, tmp_path, "--api", "openai-chat")
    assert code == exitcodes.OK, doc["verdict_reason"]
    assert (doc["verdict"], doc["trend"]) == ("staircase", "flat")
    assert "witness_contradicts" in codes(doc)


@pytest.mark.timing(seconds=15)
def test_gauges_that_decided_another_n_do_not_withhold_the_clean_staircase(tmp_path) -> None:
    """Ground truth: a serial simulator behind the proxy's lying gauges, two output tokens (too few events
    for generation windows: the finishes alone speak), and the N=2 batch's second request held 1 s by the
    proxy (the 4th completion: the warm-up, N=1, then the batch). Its finishes are 1.0 and 2.5 single
    times after the release, which no schedule names, and the gauges, counting the held request as running,
    decide `cluster`; the queue at N=4 is a clean staircase. Before, the run read `the points disagree`."""
    config = SimConfig(mode="serial", token_s=0.012, per_seq_s=0.001, prompt_token_s=0.02)
    out = tmp_path / "staircase.json"
    with sim_in_thread(config) as sim, proxy(sim.url, "--lie-gauges", "--hold", "4:1.0") as url:
        with pytest.raises(SystemExit) as info:
            main_mod.main(["staircase", url, "--api", "openai-chat", "--tokens", "2", "--prompt-tokens", "32",
                           "--n", "1,2,4", "--no-save", "--no-calibrate", "--timeout", "60", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert info.value.code == exitcodes.OK, doc["verdict_reason"]
    assert doc["verdict"] == "staircase" and doc["decided_by_witness"] is False
    two = next(p for p in doc["points"] if p["n"] == 2)
    held = two["batches"][0]["verdict"]
    assert held["verdict"] == "inconclusive" and "N=4 rep 1 staircase" in held["overruled_by"], held["reason"]
    assert held["times_verdict"] == "inconclusive" and held["decided_by_witness"] is False
    assert two["verdict"] == "staircase", two["reason"]  # the re-measured rep (no hold) is a clean queue
    assert [w["schedule"] for w in held["contradicted_by"]] == ["cluster"]
    warning = next(f["message"] for f in doc["warnings"] if f["code"] == "witness_contradicts")
    assert "N=2 rep 1" in warning and "set aside" in warning


@pytest.mark.timing(seconds=10)
def test_an_eos_stopping_servers_points_show_one_measured_batch(tmp_path) -> None:
    config = SimConfig(mode="batched", eos_ceiling=True, eos_short_fraction=0.5, **TIMING)
    with sim_in_thread(config) as sim:
        _, doc = staircase(sim.url, tmp_path, "--reps", "3", "--max-reps", "3")
    for point in doc["points"]:
        measured = [(b["finish_s"], b["tokens"]) for b in point["batches"]]
        assert (point["finish_s"], point["tokens"]) in measured
        shown = next(b for b in point["batches"] if b["rep"] == point["shown_rep"])
        assert point["tokens"] == shown["tokens"] == [r["tokens"] for r in sorted(
            (r for r in shown["requests"] if r["status"] == "ok"), key=lambda r: r["end_s"])]


def test_a_witness_with_an_impossible_duration_is_discarded_not_the_measurement(tmp_path) -> None:
    """llama.cpp timings with predicted_ms Infinity and prompt_ms -5: every token arrived, so the
    requests stand and only the server's timings are read as not reported."""
    import math
    import sys as _sys
    _sys.path.insert(0, str(Path(__file__).parent))
    from hostile import hostile
    from test_fault_matrix import TOKENS as N_TOKENS
    from test_fault_matrix import _final, _once_good, send

    timings = {"predicted_n": N_TOKENS, "predicted_ms": math.inf, "prompt_n": 8, "prompt_ms": -5.0}
    out = tmp_path / "run.json"
    with hostile(_once_good(send(_final(timings=timings)))) as server, pytest.raises(SystemExit):
        main_mod.main(["staircase", server.url, "--n", "1", "--tokens", str(N_TOKENS), "--prompt-tokens", "8",
                       "--no-save", "--no-calibrate", "--json", str(out)])
    doc = json.loads(out.read_text())
    requests = [r for p in doc["points"] for b in p["batches"] for r in b["requests"]]
    assert requests and all(r["status"] == "ok" for r in requests)
    assert all(r["server"]["decode_s"] is None and r["server"]["prompt_s"] is None for r in requests)
    assert not any(f["code"] == "failed_requests" for f in doc["invalid"])


@pytest.mark.parametrize("api", ["llamacpp", "openai"])
def test_a_nan_cache_counter_leaves_the_request_measured(tmp_path, api) -> None:
    """A cache counter is the server's witness of its cache: NaN in llama.cpp's timings.cache_n or in
    usage.prompt_tokens_details.cached_tokens drops the counter (null), and the request whose every
    token arrived is measured and ok, as with the Infinity duration above."""
    import sys as _sys
    _sys.path.insert(0, str(Path(__file__).parent))
    from hostile import hostile
    from test_fault_matrix import TOKENS as N_TOKENS
    from test_fault_matrix import _final, _once_good, openai_stream, send

    if api == "llamacpp":
        payload = _final(timings={"cache_n": float("nan"), "prompt_n": 8, "predicted_n": N_TOKENS})
    else:
        payload = openai_stream(N_TOKENS, json.dumps({
            "completion_tokens": N_TOKENS, "prompt_tokens": 8,
            "prompt_tokens_details": {"cached_tokens": float("nan")}}).encode())
    assert b"NaN" in payload
    out = tmp_path / "run.json"
    with hostile(_once_good(send(payload))) as server, pytest.raises(SystemExit):
        main_mod.main(["staircase", server.url, "--api", api, "--n", "1", "--tokens", str(N_TOKENS),
                       "--prompt-tokens", "8", "--no-save", "--no-calibrate", "--json", str(out)])
    doc = json.loads(out.read_text())
    requests = [r for p in doc["points"] for b in p["batches"] for r in b["requests"]]
    assert requests and all(r["status"] == "ok" and r["tokens"] == N_TOKENS for r in requests)
    assert all(r["server"]["cached_prompt_tokens"] is None and r["server"]["prompt_tokens"] == 8 for r in requests)
    assert not any(f["code"] == "failed_requests" for f in doc["invalid"])


def test_the_proxy_takes_the_servers_self_report_off_each_event() -> None:
    from servecheck.sim.proxy import strip_event_line

    line = json.dumps({"choices": [{"delta": {"content": "x"}}], "timings": {"predicted_ms": 12.0},
                       "usage": {"completion_tokens": 8, "prompt_tokens_details": {"cached_tokens": 1999}}})
    got = json.loads(strip_event_line(b"data: " + line.encode())[6:])
    assert got == {"choices": [{"delta": {"content": "x"}}], "usage": {"completion_tokens": 8}}
    assert strip_event_line(b"data: [DONE]") == b"data: [DONE]"
    assert strip_event_line(b": ping") == b": ping"


def test_a_control_held_by_the_proxy_leaves_inert_to_the_first_send(tmp_path) -> None:
    """Ground truth: the simulator's cache is off, and the proxy holds the fifth completion (the
    control send, after the warm-up and three repeats) 1 s. The control is then no reference (the
    repeats took a fraction of it), and `inert` is decided against the first send of the same prompt,
    the comparison its reason names."""
    out = tmp_path / "pc.json"
    with sim_in_thread(SimConfig(prefix_cache="off", mode="slots", token_s=0.002, per_seq_s=0.0,
                                 prompt_token_s=0.0003)) as sim, proxy(sim.url, "--hold", "5:1.0") as url:
        with pytest.raises(SystemExit):
            main_mod.main(["prefix-cache", url, "--api", "openai-chat", "--prompt-tokens", "1000", "--json", str(out),
                           "--no-save"])
    doc = json.loads(out.read_text())
    sends = {s["kind"]: s["ttft_s"] for s in doc["sends"] if s["kind"] != "repeat"}
    repeats = [s["ttft_s"] for s in doc["sends"] if s["kind"] == "repeat"]
    assert sends["control"] > 1.0 > 2 * max(repeats)  # the held send, and repeats well under it
    assert doc["verdict"] == "inert", doc["verdict_reason"]
    assert "the first send of the same prompt" in doc["verdict_reason"]
    assert "the one control send took" in doc["verdict_reason"]


def test_the_proxy_refuses_a_hold_it_cannot_read() -> None:
    from servecheck.sim.proxy import parse_hold

    assert parse_hold("4:2.5") == (4, 2.5)
    for bad in ("4", "0:1", "4:0", "4:61", "x:1", "4:y"):
        with pytest.raises(Exception, match="K:SECONDS"):
            parse_hold(bad)
