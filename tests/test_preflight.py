"""The pre-flight (`load.preflight`): before each concurrency the client calibrates itself against a
stamp server of its own, picks the fewest client processes within the command's bound, and a
concurrency it cannot serve within that bound makes the run invalid.

Ground truth is what the tests control: the bound they set (a bound no client can meet, one any
client meets), and a client they starve (a thread in the driver's process that holds the GIL
50 ms at a time, so its event loop stamps events late while worker processes are untouched)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from servecheck.wire.base import Target
from servecheck.experiments.common import CALIBRATION_NONE, calibration_mode, token_gap_ms
from servecheck.load.fake import FakeDriver
from servecheck.load.preflight import MAX_EVENTS, MIN_EVENTS, CheckedDriver, preflight_events
from servecheck.model.client import Calibration, ClientCheck
from servecheck.model.records import RequestRecord

pytestmark = pytest.mark.timeout(180)


def cal(workers: int, p99: float, skew: float = 0.0) -> Calibration:
    return Calibration(streams=8, gap_ms=10.0, events=160, stamp_delay_p50_ms=p99 / 2, stamp_delay_p99_ms=p99,
                       stamp_delay_max_ms=p99 * 2, dispatch_skew_ms=skew, loop_lag_p99_ms=None, loop_lag_max_ms=None,
                       workers=workers)


def test_a_check_takes_the_fewest_processes_within_the_bound():
    check = ClientCheck(streams=8, tolerance_ms=5.0, basis="5% of the 100 ms warm-up request",
                        tried=(cal(1, 9.0, 1.0), cal(2, 3.0, 1.5), cal(3, 1.0)))
    assert check.workers == 2 and not check.client_bound and check.reason() is None
    assert check.chosen.error_ms == 4.5  # p99 stamp delay + dispatch skew


def test_a_check_with_an_aim_takes_the_fewest_within_it_else_the_fewest_within_the_bound():
    """Bound 5 ms (the verdicts), aim 2 ms (the figures): 1 process at 4 ms passes the bound only, 2 at
    1.5 ms reach the aim and are chosen; were no count within the aim, the fewest within the bound."""
    tried = (cal(1, 4.0), cal(1, 4.0), cal(2, 1.5))
    aimed = ClientCheck(streams=8, tolerance_ms=5.0, basis="b", tried=tried, aim_ms=2.0)
    assert aimed.workers == 2 and not aimed.client_bound and aimed.to_dict()["aim_ms"] == 2.0
    short = ClientCheck(streams=8, tolerance_ms=5.0, basis="b", tried=(cal(1, 4.0), cal(1, 4.0), cal(2, 3.0)),
                        aim_ms=2.0)
    assert short.workers == 1 and not short.client_bound
    assert "aim_ms" not in ClientCheck(streams=8, tolerance_ms=5.0, basis="b", tried=tried).to_dict()


def test_a_check_no_count_passes_is_client_bound_on_its_least_error_and_names_the_fix():
    check = ClientCheck(streams=256, tolerance_ms=5.0, basis="5% of the 100 ms warm-up request",
                        tried=(cal(1, 40.0, 30.0), cal(2, 20.0, 12.0)))
    assert check.client_bound and check.workers == 2
    reason = check.reason()
    assert reason is not None and "N=256" in reason and "32.0 ms" in reason and "5.0 ms allowed" in reason
    doc = check.to_dict()
    assert doc["client_bound"] is True and doc["workers"] == 2 and len(doc["tried"]) == 2


def test_events_per_calibration_scale_with_the_gap_and_stay_bounded():
    assert preflight_events(10.0) == 50  # about half a second of streaming
    assert preflight_events(0.1) == MAX_EVENTS and preflight_events(500.0) == MIN_EVENTS


def test_the_token_gap_comes_from_the_warm_up_token_times():
    record = RequestRecord(index=0, nonce="n", send_ns=0, status="ok", tokens_requested=3,
                           token_ns=(10_000_000, 20_000_000, 40_000_000))
    assert token_gap_ms(record) == 15.0
    one_event = RequestRecord(index=0, nonce="n", send_ns=0, status="ok", tokens_requested=3, token_ns=(1,),
                              end_ns=30_000_000, tokens=3)
    assert token_gap_ms(one_event) == 10.0  # no faster than its whole time over its tokens
    assert token_gap_ms(None) is None


def test_a_scripted_driver_has_no_client_to_calibrate():
    assert calibration_mode(FakeDriver()) == CALIBRATION_NONE


def check(driver: CheckedDriver, streams: int, tolerance_ms: float) -> ClientCheck | None:
    async def go() -> ClientCheck | None:
        async with driver:
            return await driver.preflight(streams, 5.0, tolerance_ms, "a bound the test sets")

    return asyncio.run(go())


UNUSED = Target(url="http://127.0.0.1:9")  # the pre-flight talks only to its own stamp server


def test_auto_stops_at_one_process_when_one_is_enough():
    driver = CheckedDriver(UNUSED, workers=2, auto=True)
    result = check(driver, 4, tolerance_ms=10_000.0)
    assert result is not None and [c.workers for c in result.tried] == [1]
    assert driver.workers_for(4) == 1 and driver.workers_for(64) == 1  # an unchecked size: this process


def test_auto_tries_every_count_when_none_is_enough_and_says_client_bound():
    driver = CheckedDriver(UNUSED, workers=2, auto=True)
    result = check(driver, 4, tolerance_ms=0.0)  # no client stamps with no delay at all
    # each count measured twice before it is judged too few
    assert result is not None and [c.workers for c in result.tried] == [1, 1, 2, 2] and result.client_bound
    assert all(c.events == 4 * preflight_events(5.0) for c in result.tried)


def test_auto_searches_past_the_bound_for_the_aim():
    """A bound no client misses and an aim none can reach: every count is tried (twice each), and the
    run stays within its bound on the fewest processes."""
    async def go() -> ClientCheck | None:
        driver = CheckedDriver(UNUSED, workers=2, auto=True)
        async with driver:  # as a CheckedDriver: `async with ... as` gives a LaneDriver's type
            return await driver.preflight(4, 5.0, 10_000.0, "a bound the test sets", aim_ms=0.0)

    result = asyncio.run(go())
    assert result is not None and [c.workers for c in result.tried] == [1, 1, 2, 2]
    assert result.workers == 1 and not result.client_bound and result.aim_ms == 0.0


def test_a_given_worker_count_is_checked_as_given():
    driver = CheckedDriver(UNUSED, workers=2, auto=False)
    result = check(driver, 4, tolerance_ms=10_000.0)
    assert result is not None and [c.workers for c in result.tried] == [2] and driver.workers_for(4) == 2


def test_no_calibrate_checks_nothing():
    assert check(CheckedDriver(UNUSED, workers=1, auto=False, calibrate=False), 4, tolerance_ms=1.0) is None


# ---------------------------------------------------------------- whole runs, through the CLI


@contextmanager
def simulator(*args: str) -> Iterator[str]:
    """`servecheck simulate` in its own process, so that a test starving this process's client does
    not starve the server too."""
    proc = subprocess.Popen([sys.executable, "-m", "servecheck", "simulate", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()  # bounded by pytest-timeout
        assert url.startswith("http://127.0.0.1:"), url
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def starved_client(hold_s: float = 0.05) -> Iterator[None]:
    """A thread of this process that holds the GIL `hold_s` at a time: this process's event loop
    runs in bursts and stamps late; a worker process has a loop of its own and is untouched."""
    stop = threading.Event()
    previous = sys.getswitchinterval()

    def hog() -> None:
        while not stop.is_set():
            sum(range(10_000))

    thread = threading.Thread(target=hog, daemon=True)
    sys.setswitchinterval(hold_s)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)
        sys.setswitchinterval(previous)


def staircase(url: str, out: Path, *extra: str) -> tuple[int, dict]:
    from servecheck.cli import main as main_mod

    with pytest.raises(SystemExit) as info:
        main_mod.main(["staircase", url, "--n", "1,4", "--tokens", "24", "--prompt-tokens", "16", "--max-reps", "1",
                       "--no-save", "--timeout", "60", "--json", str(out), *extra])
    return int(info.value.code or 0), json.loads(out.read_text())


def test_a_staircase_checks_its_client_before_each_n_and_records_it(tmp_path):
    with simulator("--mode", "batched", "--token-ms", "10", "--per-seq-ms", "1") as url:
        code, doc = staircase(url, tmp_path / "s.json")
    assert doc["calibration"] == "on" and doc["params"]["workers"] == "auto"
    assert [c["streams"] for c in doc["client_checks"]] == [1, 4]
    # the bound is 5% of the warm-up request, about 250 ms here
    warmup_s = doc["warmup"]["latency_s"]
    assert all(abs(c["tolerance_ms"] - 50 * warmup_s) < 1e-6 for c in doc["client_checks"])
    assert code == 0 and doc["valid"] and doc["verdict"] == "cluster", doc["invalid"]


def test_no_calibrate_is_said_in_the_result(tmp_path):
    with simulator("--mode", "serial", "--token-ms", "10") as url:
        code, doc = staircase(url, tmp_path / "s.json", "--no-calibrate")
    assert doc["calibration"] == "off" and doc["client_checks"] == [] and doc["params"]["calibrate"] is False
    assert any("not calibrated (--no-calibrate)" in note for note in doc["notes"])
    assert code == 0 and doc["verdict"] == "staircase"


def test_a_starved_client_makes_the_run_invalid_as_client_bound(tmp_path):
    """One client process, starved 50 ms at a time, against a bound of 5% of a ~250 ms request
    (about 12 ms): the pre-flight sees the starvation and the run is refused, naming the fix."""
    with simulator("--mode", "batched", "--token-ms", "10", "--per-seq-ms", "1") as url, starved_client():
        code, doc = staircase(url, tmp_path / "s.json", "--workers", "1")
    bound = [c for c in doc["client_checks"] if c["client_bound"]]
    assert bound and all(c["error_ms"] > c["tolerance_ms"] for c in bound)
    codes = [f["code"] for f in doc["invalid"]]
    assert code == 3 and not doc["valid"] and "client_bound" in codes
    finding = next(f for f in doc["invalid"] if f["code"] == "client_bound")
    assert "--workers" in finding["hint"]


def test_auto_workers_move_a_starved_client_to_a_worker_process(tmp_path):
    """The same starved driver process, with --workers left to the pre-flight: one process fails the
    check, a worker process (its own loop, no hog) passes, and the batches run there."""
    with simulator("--mode", "batched", "--token-ms", "10", "--per-seq-ms", "1") as url, starved_client():
        _, doc = staircase(url, tmp_path / "s.json")
    c4 = {c["streams"]: c for c in doc["client_checks"]}[4]
    one = [t for t in c4["tried"] if t["workers"] == 1]
    assert len(one) == 2 and all(t["error_ms"] > c4["tolerance_ms"] for t in one)  # the starvation, seen twice
    assert {t["workers"] for t in c4["tried"]} == {1, 2}
    if c4["client_bound"]:  # two processes on two busy cores may not pass either: then the run says so
        assert not doc["valid"]
        return
    assert c4["workers"] == 2
    if doc["valid"]:
        assert doc["verdict"] == "cluster"
    else:
        # the pre-flight passed, but the batch itself is still checked: on a busy machine (the hog holds
        # one of two cores) its own release can spread past 5% of the single time, and the run says that
        codes = {f["code"] for f in doc["invalid"]}
        assert codes and codes <= {"dispatch_skew", "client_bound"}, codes


def test_capacity_names_the_n_whose_ttft_the_client_cannot_resolve():
    """Ground truth: a 20 ms warm-up TTFT; 2% of it is 0.4 ms. A 0.3 ms client error resolves it, 4 ms does not."""
    from servecheck.experiments.capacity import ttft_unresolved_warning

    warmup = RequestRecord(index=0, nonce="n", send_ns=0, status="ok", tokens_requested=3, first_token_ns=20_000_000,
                           token_ns=(20_000_000, 30_000_000))
    checks = tuple(ClientCheck(streams=n, tolerance_ms=50.0, basis="b", tried=(cal(1, e),))
                   for n, e in ((1, 0.3), (8, 4.0)))
    warning = ttft_unresolved_warning(checks, warmup)
    assert warning is not None and isinstance(warning.message, str)
    assert warning.message.startswith("TTFT unresolved at N=8:")
    assert ttft_unresolved_warning(checks[:1], warmup) is None


def test_the_stamp_server_exits_when_its_client_is_killed():
    """SIGKILL leaves nobody to stop the stamp server (it runs in its own process group): it notices
    its parent is gone and exits, so a killed run leaves no server behind."""
    import signal
    import time

    script = ("import os, sys\nfrom servecheck.load.calibrate import stamp_server\n"
              "with stamp_server(5.0) as url:\n"
              "    print(url, flush=True)\n    import time; time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    url = parent.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), url
    port = url.rsplit(":", 1)[1]
    server_pids = subprocess.run(["pgrep", "-P", str(parent.pid)], capture_output=True, text=True).stdout.split()
    assert server_pids, "the stamp server is the client's child"
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() and
                                              "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
                                              for pid in server_pids):
        time.sleep(0.2)
    alive = [pid for pid in server_pids if Path(f"/proc/{pid}").exists()
             and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()]
    assert not alive, f"the stamp server on port {port} outlived its client"


def test_the_html_report_shows_each_n_of_the_pre_flight(tmp_path):
    """A saved run with one client-bound N: the report's pre-flight table names it."""
    from servecheck.analysis.readings import read_run
    from servecheck.model.result import from_doc
    from servecheck.report.html import render_doc

    bound = ClientCheck(streams=8, tolerance_ms=5.0, basis="5% of the 100 ms warm-up request",
                        tried=(cal(1, 9.0, 1.0),))
    fine = ClientCheck(streams=1, tolerance_ms=5.0, basis="5% of the 100 ms warm-up request", tried=(cal(1, 1.0),))
    doc = {"schema_version": 1, "command": "staircase", "valid": False, "complete": True, "simulated": True,
           "calibration": "on", "client_checks": [fine.to_dict(), bound.to_dict()], "points": []}
    run = from_doc(doc)
    html = render_doc(run, read_run(run))
    assert "Client pre-flight" in html and "5% of the 100 ms warm-up request" in html
    assert html.count("CLIENT-BOUND") == 1 and "10.0" in html


def test_rates_the_client_cannot_resolve_to_two_percent_are_named():
    """Ground truth: a 200 ms warm-up request; 2% of it is 4 ms. A 3 ms client error resolves a rate,
    6 ms moves it by up to 3%; a client-bound N (over its own bound) has its finding already."""
    from servecheck.experiments.common import rate_unresolved_message

    warmup = RequestRecord(index=0, nonce="n", send_ns=0, status="ok", tokens_requested=3, first_token_ns=20_000_000,
                           token_ns=(20_000_000, 200_000_000), end_ns=200_000_000)
    checks = tuple(ClientCheck(streams=n, tolerance_ms=t, basis="b", tried=(cal(1, e),))
                   for n, e, t in ((1, 3.0, 10.0), (8, 6.0, 10.0), (16, 12.0, 10.0)))
    message = rate_unresolved_message(checks, warmup, lambda n: f"N={n}")
    assert message is not None and message.startswith("rates known only to +-3.0% at N=8:"), message
    assert rate_unresolved_message(checks[:1], warmup, lambda n: f"N={n}") is None
