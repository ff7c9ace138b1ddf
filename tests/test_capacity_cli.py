"""`servecheck capacity` rendering, JSON, exit codes, Ctrl-C and bad input, with the server scripted:
a fake closed-loop driver whose per-user rate, TTFT and failures at each N the test sets."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.load.fake import FakeDriver, FakeServer
from servecheck.load.protocol import DriverFactory


def loop_driver(rate: Callable[[int], float], ttft_s: Callable[[int], float] = lambda n: 0.02,
                fails: Callable[[int], bool] = lambda n: False, jitter: float = 0.0,
                ctrl_c_at_call: int | None = None) -> FakeDriver:
    """A closed loop on a timeline: lane after lane takes the next request the moment its last ended.

    `rate(n)` is every user's generation rate at n in flight, `ttft_s(n)` its time to first token,
    `fails(n)` whether the server refuses requests at n (HTTP 503)."""
    server = FakeServer(ttft_s=ttft_s, token_s=lambda n: 1.0 / rate(n), fails=fails, jitter=jitter,
                        ctrl_c_at_call=ctrl_c_at_call, url="http://127.0.0.1:9", engine="llama.cpp", simulated=False)
    return FakeDriver(server)


def run_main(args: list[str], open_driver: DriverFactory | None = None) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args, open_driver=open_driver)
    return int(info.value.code or 0)


def step_law(n: int) -> float:
    """step = 4 ms + 1 ms x active: 200 tok/s alone, 111.1 at 5, 100 at 6."""
    return 1.0 / (0.004 + 0.001 * n)


def capacity(tmp_path: Path, driver: FakeDriver, *args: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / "cap.json"
    rc = run_main(["capacity", "http://127.0.0.1:9", "--tokens", "16", "--no-save", "--json", str(out), *args],
                  driver.open)
    return rc, json.loads(out.read_text())


def test_answer_table_json_and_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    driver = loop_driver(step_law)
    out, db = tmp_path / "cap.json", tmp_path / "h.sqlite3"
    rc = run_main(["capacity", "http://127.0.0.1:9", "--min-user-rate", "105", "--tokens", "16", "--db", str(db),
                   "--json", str(out), "--html", str(tmp_path / "cap.html")], driver.open)
    doc = json.loads(out.read_text())
    assert rc == exitcodes.OK
    assert doc["command"] == "capacity" and doc["schema_version"] == 1 and doc["complete"] is True
    assert (doc["max_concurrency"], doc["limit"]) == (5, "user_rate")
    assert [(p["n"], p["status"]) for p in doc["points"]] == [
        (1, "pass"), (2, "pass"), (4, "pass"), (5, "pass"), (6, "fail"), (8, "fail")]
    for p in doc["points"]:
        assert set(p) >= {"n", "per_user_tok_s", "ttft_s", "aggregate_tok_s", "status"}
        assert isinstance(p["n"], int) and p["status"] in ("pass", "fail", "uncertain")
        assert p["per_user_tok_s"] == pytest.approx(step_law(p["n"]), rel=0.01)
    assert driver.batches == [1, 2, 4, 8, 6, 5, 1]  # doubling, bisection, then the baseline again
    assert doc["drift"]["change"] == pytest.approx(0.0, abs=0.01)
    printed = capsys.readouterr().out
    assert "holds 5 users at >= 105 tok/s each (median); the 6th drops each to 100.0 tok/s" in printed
    assert "limit: user_rate" in printed
    assert "Per-user rate against N" in (tmp_path / "cap.html").read_text()
    assert run_main(["show", "last", "--db", str(db)]) == 0
    assert "holds 5 users" in capsys.readouterr().out


def test_floor_above_one_user_alone_is_zero_users_exit_0(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    driver = loop_driver(step_law)
    rc, doc = capacity(tmp_path, driver, "--min-user-rate", "500")
    assert rc == exitcodes.OK and (doc["max_concurrency"], doc["limit"]) == (0, "user_rate")
    assert driver.batches == [1]  # nothing else to probe, nothing for drift to pose as
    assert ("holds 0 users: one user alone gets 200.0 tok/s (median), below the 500 tok/s floor"
            in capsys.readouterr().out)


def test_a_server_failing_requests_fails_that_n_with_the_reason(tmp_path: Path) -> None:
    rc, doc = capacity(tmp_path, loop_driver(lambda n: 100.0, fails=lambda n: n >= 3), "--min-user-rate", "10")
    assert rc == exitcodes.OK and (doc["max_concurrency"], doc["limit"]) == (2, "user_rate")
    three = next(p for p in doc["points"] if p["n"] == 3)
    assert (three["status"] == "fail" and "requests failed" in three["reason"]
            and "HTTP 503: server busy" in three["reason"])
    assert doc["valid"] is True  # failures are the answer at that N, not an invalid run


def test_ttft_ceiling_binds(tmp_path: Path) -> None:
    # two slots: a third user waits a whole request (16 tokens at 100 tok/s)
    driver = loop_driver(lambda n: 100.0, ttft_s=lambda n: 0.02 if n <= 2 else 0.16)
    rc, doc = capacity(tmp_path, driver, "--min-user-rate", "10", "--max-ttft", "0.05")
    assert rc == exitcodes.OK and (doc["max_concurrency"], doc["limit"]) == (2, "ttft")


@pytest.mark.parametrize(("at_least", "code"), [(5, exitcodes.OK), (6, exitcodes.EXPECT_MISMATCH)])
def test_expect_at_least(tmp_path: Path, at_least: int, code: int) -> None:
    rc, _ = capacity(tmp_path, loop_driver(step_law), "--min-user-rate", "105", "--expect-at-least", str(at_least))
    assert rc == code


def test_noise_straddling_the_floor_is_undetermined_exit_3(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    driver = loop_driver(step_law, jitter=0.3)
    rc, doc = capacity(tmp_path, driver, "--min-user-rate", "150", "--max-n", "4")
    assert rc == exitcodes.INVALID and doc["limit"] == "undetermined"
    assert doc["max_concurrency"] in (None, 1)  # never an N not shown to pass
    uncertain = [p for p in doc["points"] if p["status"] == "uncertain"]
    assert uncertain and uncertain[0]["probes"] == 3  # measured, then re-measured twice
    assert "UNDETERMINED" in capsys.readouterr().out


def test_max_n_bounds_the_search(tmp_path: Path) -> None:
    driver = loop_driver(lambda n: 100.0)
    rc, doc = capacity(tmp_path, driver, "--min-user-rate", "10", "--max-n", "3")
    assert rc == exitcodes.OK and (doc["max_concurrency"], doc["limit"]) == (3, "max_n")
    assert driver.batches == [1, 2, 3, 1]


def test_ctrl_c_saves_partial(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    driver = loop_driver(step_law, ctrl_c_at_call=4)  # the warm-up, two probes, then Ctrl-C during the third
    out = tmp_path / "partial.json"
    rc = run_main(["capacity", "http://127.0.0.1:9", "--min-user-rate", "105", "--tokens", "16", "--no-save", "--json",
                   str(out)],
                  driver.open)
    assert rc == exitcodes.INTERRUPTED
    doc = json.loads(out.read_text())
    assert doc["complete"] is False and [p["n"] for p in doc["points"]] == [1, 2]
    assert doc["limit"] == "undetermined" and doc["max_concurrency"] == 2
    assert "INCOMPLETE" in capsys.readouterr().out


@pytest.mark.parametrize("args", [
    ["--min-user-rate", "10", "--max-n", "0"],
    ["--min-user-rate", "10", "--max-n", "-3"],
    ["--min-user-rate", "0"],
    ["--min-user-rate", "10", "--percentile", "100"],
    ["--min-user-rate", "10", "--max-ttft", "0"],
    ["--min-user-rate", "10", "--tokens", "1"],
    ["--min-user-rate", "10", "--expect-at-least", "-1"],
])
def test_bad_input_is_a_one_line_usage_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(["capacity", "http://127.0.0.1:9", *args, "--no-save"]) == exitcodes.USAGE
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("Error: ") and "Traceback" not in err


def test_max_n_below_one_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_main(["capacity", "http://127.0.0.1:9", "--min-user-rate", "10", "--max-n", "0"]) == exitcodes.USAGE
    assert capsys.readouterr().err.strip() == "Error: --max-n must be >= 1, got 0 (for example --max-n 64)"
