"""`servecheck interference`: the JSON contract, the terminal lines, history and show, HTML, diff, --expect and
the exit codes, the log witness with --serve, and bad input (one line, the right code), end to end against the
simulated server on 127.0.0.1, port 0."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.model.result import from_doc, to_doc
from servecheck.sim import SimConfig, sim_in_thread

pytestmark = [pytest.mark.timeout(300), pytest.mark.timing]

FAST: dict[str, Any] = {"mode": "batched", "token_s": 0.005, "per_seq_s": 0.001, "prompt_token_s": 0.00005,
                         "n_ctx": 16384}
CONTRACT = {"command", "verdict", "chunk_tokens", "baseline_interval_s", "points"}
POINT_CONTRACT = {"prompt_tokens", "victim_max_gap_s", "victim_p99_gap_s", "victim_lost_s", "intruder_ttft_s"}
ARGS = ["--prompt-sizes", "512,4096", "--tokens", "80", "--reps", "1"]


def run_main(args: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args)
    return int(info.value.code or 0)


def interference_run(tmp_path: Path, config: dict, *extra: str, name: str = "i.json") -> tuple[int, dict]:
    out = tmp_path / name
    with sim_in_thread(SimConfig(**config)) as sim:
        code = run_main(["interference", sim.url, *ARGS, "--json", str(out), *extra])
    return code, json.loads(out.read_text()) if out.exists() else {}


def test_json_contract_terminal_history_html_and_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    html = tmp_path / "i.html"
    code, doc = interference_run(tmp_path, {**FAST, "prefill_chunk": 256}, "--html", str(html), "--expect", "chunked")
    assert code == exitcodes.OK
    assert CONTRACT <= set(doc) and doc["command"] == "interference" and doc["verdict"] == "chunked"
    assert isinstance(doc["chunk_tokens"], float) and isinstance(doc["baseline_interval_s"], float)
    assert [p["prompt_tokens"] for p in doc["points"]] == [512, 4096]
    for p in doc["points"]:
        assert POINT_CONTRACT <= set(p)
        assert (isinstance(p["prompt_tokens"], int)
                and all(isinstance(p[k], float) for k in POINT_CONTRACT - {"prompt_tokens"}))
        assert len(p["reps"]) == 1 and len(p["reps"][0]["victims"]) == 2  # the reps kept beside the pooled point
    assert doc["decided_by"] == "victim gaps" and doc["evidence"]["cover_hi"] <= 0.4
    assert to_doc(from_doc(doc))["points"][0]["victim_max_gap_s"] == doc["points"][0]["victim_max_gap_s"]
    out = capsys.readouterr().out
    assert "SIMULATED" in out and "a 4,096-token prompt took" in out and "(chunked, about" in out
    assert "verdict  chunked  (decided by victim gaps:" in out
    page = html.read_text()
    assert "a victim&#x27;s inter-token interval" in page and 'class="band prefill"' in page and "<svg" in page
    # saved to history: show prints the same report; diff lays two runs side by side by size
    code, _ = interference_run(tmp_path, FAST, name="j.json")
    assert code == exitcodes.OK
    assert run_main(["history"]) == 0
    listing = capsys.readouterr().out
    assert "interference" in listing
    assert run_main(["show", "last"]) == 0
    assert "froze both other streams" in capsys.readouterr().out
    assert run_main(["diff", str(tmp_path / "i.json"), str(tmp_path / "j.json")]) == 0
    table = capsys.readouterr().out
    assert "4096" in table and "max gap" in table and ": chunked, chunks of about" in table and ": blocking (" in table


def test_expect_another_verdict_exits_4(tmp_path: Path) -> None:
    code, doc = interference_run(tmp_path, FAST, "--expect", "chunked", "--no-save")
    assert doc["verdict"] == "blocking"
    assert code == exitcodes.EXPECT_MISMATCH


def test_serve_audits_the_log_and_the_witness_corroborates(tmp_path: Path) -> None:
    from servecheck.engine.process import free_port

    out = tmp_path / "w.json"
    command = (f"{sys.executable} -m servecheck simulate --port {free_port()} --mode batched --token-ms 5 --per-seq-ms "
               "1 --prompt-token-ms 0.05 --n-ctx 16384 --prefill-chunk 256")
    code = run_main(["interference", "--serve", command, "--serve-log", str(tmp_path / "s.log"), *ARGS,
                     "--json", str(out), "--no-save"])
    doc = json.loads(out.read_text())
    assert code == exitcodes.OK and doc["verdict"] == "chunked"
    w = doc["witness"]
    assert w["configured_tokens"] == 256 and w["agrees"] is True, w


def test_sizes_beyond_the_context_are_skipped_and_named(tmp_path: Path) -> None:
    code, doc = interference_run(tmp_path, {**FAST, "n_ctx": 4096}, "--prompt-sizes", "256,2048,8192", "--no-save")
    assert [p["prompt_tokens"] for p in doc["points"]] == [256, 2048]
    assert (doc["skipped"][0]["prompt_tokens"] == 8192
            and "exceeds the server's context of 4096" in doc["skipped"][0]["reason"])
    assert code in (exitcodes.OK, exitcodes.INVALID)


def test_fewer_than_two_sizes_left_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, doc = interference_run(tmp_path, {**FAST, "n_ctx": 1024}, "--prompt-sizes", "512,2048,8192", "--no-save")
    assert code == exitcodes.USAGE and not doc
    err = capsys.readouterr().err
    assert "only [512] of [512, 2048, 8192] fits the server's context of 1024" in err and "Traceback" not in err


@pytest.mark.parametrize(("args", "words"), [
    (["--prompt-sizes", "512"], "give at least two prompt sizes"),
    (["--prompt-sizes", "512,x"], "comma-separated integers"),
    (["--streams", "0"], "--streams must be >= 1"),
    (["--tokens", "8"], "--tokens must be >= 32"),
    (["--reps", "0"], "--reps must be >= 1"),
    (["--expect", "maybe"], "--expect"),
])
def test_bad_flags_are_one_line_usage_errors(args: list[str], words: str, capsys: pytest.CaptureFixture[str]) -> None:
    with sim_in_thread(SimConfig(**FAST)) as sim:
        code = run_main(["interference", sim.url, *args, "--no-save"])
    assert code == exitcodes.USAGE
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
