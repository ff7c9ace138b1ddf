"""`servecheck staircase` rendering, JSON, exit codes and Ctrl-C, with the measurement scripted (no network)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from servecheck import exitcodes
from servecheck.analysis.readings import read_run
from servecheck.cli import main as main_mod
from servecheck.cli import staircase as cli_sc
from servecheck.load.fake import FakeDriver, FakeServer, flat
from servecheck.load.protocol import DriverFactory
from servecheck.model.bodies.staircase import StaircaseBody
from servecheck.model.result import RunResult, from_doc, measured
from servecheck.report.lines import staircase as lines_sc

# A queue on a virtual clock: one request alone takes 20 ms to its first token and 20 ms per token
# after it, 2 s for 100 tokens; the k-th of a batch ends k single times after the release.
QUEUE = FakeServer(slots=1, ttft_s=flat(0.02), token_s=flat(0.02))


def run_main(args: list[str], open_driver: DriverFactory | None = None) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args, open_driver=open_driver)
    return int(info.value.code or 0)


@pytest.fixture
def scripted() -> DriverFactory:
    """The network replaced by the serial fake, through the CLI's driver seam."""
    return lambda target: FakeDriver(QUEUE)


def test_table_in_the_seed_shape(scripted, capsys):
    assert run_main(["staircase", "http://127.0.0.1:9", "--n", "1,2,4", "--tokens", "100", "--no-save"], scripted) == 0
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert "N=4   finish at 2.00 / 4.00 / 6.00 / 8.00 s  aggregate 50.0 tok/s  staircase" in out
    # N=1 is measured before and after the batches: its line shows both, with their range.
    assert "N=1   finish at 2.00 s                       aggregate 50.0 tok/s (50.0-50.0)  baseline  (2 reps)" in out
    assert any(line.startswith("verdict  staircase") for line in out)
    assert any(line.startswith("trend    flat  agg(N)/agg(1): N=2 1.00x  N=4 1.00x") for line in out)
    # the rule the trend was judged by is recorded with the run and shown (a saved run without it: the goldens)
    assert any(line.startswith("trend    flat") and line.endswith("; rising from 1.30x)") for line in out)
    assert any("steps 1.00, 1.00, 1.00, 1.00 x single" in line for line in out)
    # the queue's first finish is one request alone; its last, four
    assert any("x single · first 1.00 · last 4.00 x single · group sizes 1+1+1+1" in line for line in out)
    assert cli_sc.SIMULATED_BANNER in captured.out and cli_sc.SIMULATED_BANNER in captured.err
    assert "detected llamacpp API" in captured.err


@pytest.mark.parametrize(("expect", "code"), [("staircase", exitcodes.OK), ("cluster", exitcodes.EXPECT_MISMATCH)])
def test_expect(scripted, expect, code):
    assert run_main(["staircase", "http://127.0.0.1:9", "--n", "2", "--tokens", "10", "--expect", expect, "--no-save"],
                    scripted) == code


def test_json_to_stdout_is_clean(scripted, capsys):
    assert run_main(["staircase", "http://127.0.0.1:9", "--n", "1,2", "--tokens", "10", "--json", "-", "--no-save"],
                    scripted) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert doc["command"] == "staircase" and doc["schema_version"] == 1
    assert doc["simulated"] is True and doc["complete"] is True and doc["valid"] is True
    assert doc["verdict"] == "staircase" and doc["trend"] == "flat"
    assert [(p["n"], p["verdict"]) for p in doc["points"]] == [(1, "baseline"), (2, "staircase")]
    assert doc["params"]["tokens"] == 10
    assert "verdict  staircase" in captured.err  # the human report moved to stderr


def test_api_key_never_written(scripted, tmp_path):
    path = tmp_path / "r.json"
    args = ["staircase", "http://127.0.0.1:9", "--n", "2", "--tokens", "10", "--api-key", "sk-SECRET123"]
    assert run_main([*args, "--header", "X-Org:hidden-value", "--json", str(path), "--no-save"], scripted) == 0
    text = path.read_text()
    assert "sk-SECRET123" not in text and "hidden-value" not in text
    assert json.loads(text)["params"]["api_key_given"] is True


def test_ctrl_c_saves_partial(tmp_path, capsys):
    # Calls: the warm-up, N=1, N=2, then the user hits Ctrl-C while N=4 runs.
    interrupted = replace(QUEUE, ctrl_c_at_call=4)
    path = tmp_path / "partial.json"
    code = run_main(["staircase", "http://127.0.0.1:9", "--n", "1,2,4", "--tokens", "10", "--json", str(path),
                     "--no-save"],
                    lambda target: FakeDriver(interrupted))
    assert code == 130
    doc = json.loads(path.read_text())
    assert doc["complete"] is False
    assert [p["n"] for p in doc["points"]] == [1, 2]
    assert "INCOMPLETE" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args",
    [
        ["--n", "0"],
        ["--n", "1,x"],
        ["--n", ","],
        ["--tokens", "0"],
        ["--prompt-tokens", "-1"],
        ["--reps", "0"],
        ["--expect", "baseline"],
    ],
)
def test_bad_input_is_a_one_line_usage_error(args, capsys):
    assert run_main(["staircase", "http://127.0.0.1:9", *args, "--no-save"]) == exitcodes.USAGE
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err


def test_partial_result_exits_3_when_inconclusive():
    def run(valid: bool, verdict: str) -> RunResult[StaircaseBody]:
        return measured("staircase", StaircaseBody(verdict=verdict), valid=valid)  # type: ignore[arg-type]

    assert cli_sc.exit_code(run(True, "inconclusive"), None) == exitcodes.INVALID
    assert cli_sc.exit_code(run(False, "staircase"), "cluster") == exitcodes.INVALID
    assert cli_sc.exit_code(run(True, "partial"), "partial") == exitcodes.OK


def test_finish_format():
    assert lines_sc.fmt_finishes([5.5, 11.1, 16.8, 22.5]) == "5.5 / 11.1 / 16.8 / 22.5 s"
    assert lines_sc.fmt_finishes([0.61, 1.25]) == "0.61 / 1.25 s"
    assert cli_sc.parse_ns("1, 2,4,8") == [1, 2, 4, 8]


def test_trap_and_queue_lines_take_the_median_over_reps():
    """With reps, the misleading sum stands beside the aggregate of the same reps, not of another."""
    batches = [
        {"self_reported_sum_tok_s": 400.0, "aggregate_tok_s": 100.0, "queue_s": [0.0, 1.0]},
        {"self_reported_sum_tok_s": 420.0, "aggregate_tok_s": 104.0, "queue_s": [0.0, 1.2]},
        {"self_reported_sum_tok_s": 800.0, "aggregate_tok_s": 50.0, "queue_s": [0.0, None]},
    ]
    doc = {"command": "staircase", "points": [{"n": 2, "aggregate_tok_s": 999.0, "batches": batches}]}
    run = from_doc(doc)
    body, reading = run.body, read_run(run)
    (trap,) = lines_sc.trap_lines(body, reading)
    assert "sum of self-reported rates 420.0 tok/s (MISLEADING)  vs true aggregate 100.0 tok/s" in trap
    (queue,) = lines_sc.queue_lines(body, reading)
    assert queue.endswith("0.00 / 1.10 s")  # the third rep lacks server timings for one request


@pytest.mark.parametrize(("slots", "first", "last"), [(1, 1.0, 2.0), (2, 1.0, 1.0)], ids=["queue", "batch"])
def test_the_first_finish_over_the_single_time_is_recorded(capsys, slots, first, last):
    """A queue's first request ran alone (1x the single time, its last 2x at N=2); a batch's first
    finishes with its last."""
    server = FakeServer(slots=slots, ttft_s=flat(0.02), token_s=flat(0.02))
    assert run_main(["staircase", "http://127.0.0.1:9", "--n", "1,2", "--tokens", "50", "--json", "-", "--no-save"],
                    lambda target: FakeDriver(server)) == 0
    v = json.loads(capsys.readouterr().out)["points"][-1]["batches"][0]["verdict"]
    assert (v["first_over_single"], v["last_over_single"]) == (pytest.approx(first, rel=1e-3),
                                                               pytest.approx(last, rel=1e-3))
