"""`servecheck arms` rendering, JSON, exit codes, pooling and Ctrl-C, with the measurement scripted (no network)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from servecheck import exitcodes
from servecheck.cli import arms as cli_arms
from servecheck.cli import main as main_mod
from servecheck.wire.base import Target
from servecheck.load.fake import FakeDriver, FakeServer, flat
from servecheck.load.protocol import DriverFactory
from servecheck.model.records import GenRequest
from servecheck.report.lines import arms as lines_arms

from test_arms_experiment import factory

# A strictly serial server on a virtual clock: prefill 20 ms, then a token every 5 ms; a lane
# sends its next request 1 ms after its last one ended.
QUEUE = FakeServer(slots=1, ttft_s=flat(0.02), token_s=flat(0.005), gap_s=0.001)
HEATING = replace(QUEUE, heat=0.15)  # every batch 15% slower than the one before: steady drift
INTERRUPTED = replace(QUEUE, ctrl_c_at_call=4)  # the warm-up, two cells, then Ctrl-C during the third


def run_main(args: list[str], open_driver: DriverFactory | None = None) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args, open_driver=open_driver)
    return int(info.value.code or 0)


class Script:
    """Opens a fake driver for each run through the CLI's driver seam; a test may set `server`."""

    def __init__(self) -> None:
        self.server = QUEUE

    def open(self, target: Target) -> FakeDriver:
        return FakeDriver(self.server)


@pytest.fixture
def scripted() -> Script:
    return Script()


URL = "http://127.0.0.1:9"
SMALL = ["--reps", "3", "--tokens", "16", "--no-save"]


def test_report_and_json_to_stdout(scripted, capsys) -> None:
    assert run_main(["arms", URL, *SMALL, "--json", "-"], scripted.open) == exitcodes.OK
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["command"] == "arms" and doc["schema_version"] == 1 and doc["simulated"] is True
    assert doc["headline_refused"] is False and doc["complete"] is True
    assert [a["label"] for a in doc["arms"]] == ["none", "none", "none"]
    assert len(doc["cells"]) == 9 and doc["deviant_cells"] == []
    assert "4-way concurrency" in captured.err and "generation stage" in captured.err
    assert cli_arms.SIMULATED_BANNER in captured.err and "detected llamacpp API" in captured.err


def test_terminal_report_has_tables_and_checks(scripted, capsys) -> None:
    assert run_main(["arms", URL, *SMALL], scripted.open) == exitcodes.OK
    out = capsys.readouterr().out.splitlines()
    assert out[0] == cli_arms.SIMULATED_BANNER
    assert any(line.startswith("4-way concurrency buys the operator") for line in out)
    rows = [line.split() for line in out if line.split()[:1] == ["4"] and "requests" not in line]
    assert len(rows) == 2 and rows[1][-1] == "none" and rows[1][1].startswith("1.0")  # per-arm, decomposition
    assert any(line.startswith("position bias: widest spread") for line in out)
    assert any(line.startswith("drift: serial arm") for line in out)
    assert any(line.startswith("thermal: ") for line in out)


def test_fixed_order_under_drift_refuses_and_exits_3(scripted, capsys) -> None:
    scripted.server = HEATING
    assert run_main(["arms", URL, *SMALL, "--fixed-order"], scripted.open) == exitcodes.INVALID
    out = capsys.readouterr().out
    assert "REFUSED: headline withheld: the 4-way arm" in out
    assert "4-way concurrency buys" not in out


def test_bias_limit_flag_reaches_the_analysis(scripted, tmp_path: Path) -> None:
    scripted.server = HEATING
    out = tmp_path / "a.json"
    assert run_main(["arms", URL, *SMALL, "--fixed-order", "--bias-limit", "5", "--json", str(out)],
                    scripted.open) == exitcodes.OK
    doc = json.loads(out.read_text())
    assert doc["bias_limit"] == 5 and doc["headline_refused"] is False and doc["headline"]


def test_evidence_flag_reaches_the_analysis_measured_and_pooled(scripted, tmp_path: Path, monkeypatch) -> None:
    """--evidence stopwatch is the analysis's `gauges_decide=False`, in a measured run and a pooled one."""
    from servecheck.analysis import arms as analysis_arms

    seen: list[bool] = []
    real = analysis_arms.analyse_arms

    def spy(*args, **kwargs):
        seen.append(kwargs.get("gauges_decide", True))
        return real(*args, **kwargs)

    monkeypatch.setattr("servecheck.experiments.arms.analyse_arms", spy)
    out, pooled = tmp_path / "a.json", tmp_path / "p.json"
    assert run_main(["arms", URL, *SMALL, "--evidence", "stopwatch", "--json", str(out)], scripted.open) == exitcodes.OK
    doc = json.loads(out.read_text())
    assert (doc["evidence_mode"], doc["params"]["evidence"]) == ("stopwatch", "stopwatch")
    assert seen and not any(seen)
    seen.clear()
    assert run_main(["arms", "--pool", str(out), "--json", str(pooled)], scripted.open) == exitcodes.OK
    assert json.loads(pooled.read_text())["evidence_mode"] == "all" and seen and all(seen)


def test_ctrl_c_saves_partial_result(scripted, tmp_path: Path) -> None:
    scripted.server = INTERRUPTED
    out, db = tmp_path / "partial.json", tmp_path / "history.db"
    assert run_main(["arms", URL, "--reps", "3", "--tokens", "16", "--db", str(db), "--json", str(out)],
                    scripted.open) == 130
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and len(doc["cells"]) == 2
    from servecheck.store.db import open_store

    store = open_store(db)
    try:
        saved = store.get_run(doc["run_id"])
    finally:
        store.close()
    assert saved["complete"] is False and len(saved["cells"]) == 2


def test_pool_files_and_run_ids(scripted, tmp_path: Path, capsys) -> None:
    db = tmp_path / "history.db"
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert run_main(["arms", URL, "--reps", "3", "--tokens", "16", "--db", str(db), "--json", str(a)],
                    scripted.open) == 0
    assert run_main(["arms", URL, "--reps", "3", "--tokens", "16", "--seed", "1", "--no-save", "--json", str(b)],
                    scripted.open) == 0
    run_id = json.loads(a.read_text())["run_id"]
    pooled = tmp_path / "pooled.json"
    assert run_main(["arms", "--pool", str(run_id), "--pool", str(b), "--db", str(db), "--json", str(pooled)],
                    scripted.open) == 0
    doc = json.loads(pooled.read_text())
    assert len(doc["cells"]) == 18 and {c["run"] for c in doc["cells"]} == {1, 2}
    assert doc["pooled_from"] == [str(run_id), str(b)]
    assert next(x for x in doc["arms"] if x["concurrency"] == 4)["aggregate_speedup_interval"] is not None
    assert "pooled with:" in capsys.readouterr().out
    # pooling into a new measured run: its cells join the pooled ones
    both = tmp_path / "both.json"
    assert run_main(["arms", URL, *SMALL, "--pool", str(b), "--json", str(both)], scripted.open) == 0
    assert len(json.loads(both.read_text())["cells"]) == 18


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["arms", URL, "--arms", "2,4"], "--arms must include 1"),
        (["arms", URL, "--arms", "1,x"], "not a comma-separated list"),
        (["arms", URL, "--arms", "1,8"], "below the largest arm"),
        (["arms", URL, "--reps", "0"], "--reps"),
        (["arms"], "give the server URL"),
        (["arms", "--pool", "/nonexistent/run.json"], "no such file"),
        (["arms", "not-a-url"], "is not an http(s) URL"),
    ],
)
def test_bad_input_is_one_line_usage_error(args: list[str], message: str, capsys) -> None:
    assert run_main([*args, "--no-save"]) == exitcodes.USAGE
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("content", ['{"command": "staircase", "points": []}', "not json", "[1, 2]"])
def test_pool_rejects_other_files(tmp_path: Path, content: str, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert run_main(["arms", "--pool", str(bad)]) == exitcodes.USAGE
    err = capsys.readouterr().err
    assert err.startswith("Error: ") and "Traceback" not in err


def test_gen_request_factory_gives_distinct_nonces() -> None:
    import random

    reqs: list[GenRequest] = factory(None, 4, 8, 8, random.Random(0))
    assert len({r.nonce for r in reqs}) == 4


def _nonces(doc: dict[str, Any]) -> set[str]:
    return {r["nonce"] for c in doc["cells"] for r in c["requests"]}


def test_runs_never_repeat_prompts_unless_seeded(scripted, tmp_path: Path) -> None:
    """A long-running server's prefix cache may still hold the previous run's prompts."""
    docs = []
    for name, extra in (("a", []), ("b", []), ("c", ["--seed", "7"]), ("d", ["--seed", "7"])):
        out = tmp_path / f"{name}.json"
        assert run_main(["arms", URL, *SMALL, "--json", str(out), *extra], scripted.open) == 0
        docs.append(json.loads(out.read_text()))
    a, b, c, d = docs
    assert a["params"]["seed"] != b["params"]["seed"] and not (_nonces(a) & _nonces(b))
    assert c["params"]["seed"] == 7 and _nonces(c) == _nonces(d)


def test_arms_serve_owns_the_simulator_and_audits_its_log(tmp_path) -> None:
    """--serve on arms: the server is started, measured, stopped, and its refusal exits 3."""
    import sys

    from servecheck.engine.process import ensure_port_free, free_port, live_pids

    port = free_port()
    out = tmp_path / "arms.json"
    command = f"{sys.executable} -m servecheck simulate --port {port} --mode batched --token-ms 4 --refusal"
    argv = ["arms", "--serve", command, "--serve-log", str(tmp_path / "s.log"), "--arms", "1,2", "--reps", "2",
            "--max-reps", "2", "--requests", "2", "--tokens", "16", "--prompt-tokens", "16", "--json", str(out),
            "--no-save"]
    with pytest.raises(SystemExit) as info:
        main_mod.main(argv)
    doc = json.loads(out.read_text())
    assert doc["simulated"] is True and len(doc["cells"]) == 4
    assert "gpu_offload" in doc["log_audit"]["refused"]
    assert info.value.code == exitcodes.INVALID
    ensure_port_free("127.0.0.1", port)
    assert live_pids() == []


def test_pooling_a_simulated_run_marks_the_result_simulated(scripted, tmp_path: Path, capsys) -> None:
    """A simulated run pooled alone or into a measurement must never come back looking real."""
    saved = tmp_path / "sim.json"
    assert run_main(["arms", URL, *SMALL, "--json", str(saved)], scripted.open) == exitcodes.OK
    assert json.loads(saved.read_text())["simulated"] is True
    capsys.readouterr()
    pooled = tmp_path / "pooled.json"
    assert run_main(["arms", "--pool", str(saved), "--no-save", "--json", str(pooled)], scripted.open) == exitcodes.OK
    assert json.loads(pooled.read_text())["simulated"] is True
    assert capsys.readouterr().out.splitlines()[0] == cli_arms.SIMULATED_BANNER


def test_pooled_simulated_flag_survives_a_real_measurement() -> None:
    from servecheck.experiments.arms import ArmsDesign, ArmsRun, any_simulated

    assert any_simulated([{"simulated": False}, {"simulated": True}])
    assert not any_simulated([{"simulated": False}, {}])
    assert ArmsRun(ArmsDesign(), pooled_simulated=True).document().simulated is True
    assert ArmsRun(ArmsDesign()).document().simulated is False


@pytest.mark.parametrize(("x", "text"), [(-0.002, "+0%"), (0.004, "+0%"), (-0.65, "-65%"), (0.39, "+39%"), (None, "-")])
def test_change_never_reads_minus_zero(x: float | None, text: str) -> None:
    assert lines_arms._pct(x) == text


@pytest.mark.parametrize(("loss", "words"), [(0.082, "loss 8.2%"), (-0.0001, "no loss"), (-0.03, "gain 3.0%")])
def test_drift_words(loss: float, words: str) -> None:
    assert lines_arms._drift_words(loss) == words


def test_interval_note_says_how_sure_three_reps_are(scripted, capsys) -> None:
    assert run_main(["arms", URL, *SMALL], scripted.open) == exitcodes.OK
    out = capsys.readouterr().out
    assert "speedup [interval]" in out and "95%]" not in out
    assert "covering the median with 75% confidence (fewer reps than the 95% level needs: six or more)" in out
