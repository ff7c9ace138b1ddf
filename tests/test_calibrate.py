"""Pre-flight calibration: the stamp arithmetic on records the test builds, the client-bound rule,
and the real loopback stamp server, with client overhead the test itself injects as ground truth."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from servecheck.cli import main as main_mod
from servecheck.wire.base import RunClock
from servecheck.errors import EngineError, UsageError
from servecheck.load import calibrate as C
from servecheck.model.records import RequestRecord
from factories import batch_result, request_ns


def _record(i: int, written: list[int], seen: list[int]) -> RequestRecord:
    """A stamp request: the server wrote the stamps `written` (its perf_counter_ns) into the text, one a
    token, and the client saw its events at `seen` (run-clock ns)."""
    return request_ns(i, nonce=f"{i}", token_ns=tuple(seen), tokens=len(written),
                      text="".join(f"{w} " for w in written))


def _calibration(p99_ms: float, gap_ms: float = 32.0) -> C.Calibration:
    return C.Calibration(streams=64, gap_ms=gap_ms, events=6400, stamp_delay_p50_ms=p99_ms / 2,
                         stamp_delay_p99_ms=p99_ms, stamp_delay_max_ms=p99_ms * 2, dispatch_skew_ms=3.0,
                         loop_lag_p99_ms=1.0, loop_lag_max_ms=2.0)


def test_stamp_delay_is_the_client_stamp_less_the_server_write() -> None:
    clock = RunClock(start_ns=1_000_000_000, wall_anchor_s=0.0)
    # the server wrote at 1.010 s and 1.020 s (its perf_counter_ns); the client saw them 0.5 and 2 ms later
    rec = _record(0, [1_010_000_000, 1_020_000_000], [10_500_000, 22_000_000])
    batch = batch_result([rec], dispatch_skew_ns=0)
    assert C.stamp_delays_ms(batch, clock) == pytest.approx([0.5, 2.0])
    cal = C.calibration_from(batch, clock, streams=1, gap_ms=10.0)
    assert cal.events == 2 and cal.stamp_delay_max_ms == pytest.approx(2.0)
    assert cal.stamp_delay_frac == pytest.approx(0.2)


def test_events_and_stamps_that_do_not_pair_are_an_error_not_a_figure() -> None:
    clock = RunClock(start_ns=0, wall_anchor_s=0.0)
    batch = batch_result([_record(0, [5, 6, 7], [10, 20])], dispatch_skew_ns=0)
    with pytest.raises(EngineError, match="2 events, 3 stamps"):
        C.stamp_delays_ms(batch, clock)


@pytest.mark.parametrize(("p99_ms", "bound"), [(1.5, False), (1.6, False), (1.7, True), (20.0, True)])
def test_the_client_is_the_bottleneck_above_five_percent_of_the_gap(p99_ms: float, bound: bool) -> None:
    reason = _calibration(p99_ms).client_bound()
    assert (reason is not None) == bound
    if bound:
        assert reason is not None and "64 streams" in reason and "fewer streams" in reason
    assert _calibration(p99_ms).to_dict()["client_bound"] == reason


@pytest.mark.parametrize(("streams", "gap", "events", "message"), [
    (0, 32.0, 100, "--streams 0"), (5000, 32.0, 100, "--streams 5000"),
    (4, 0.0, 100, "--gap-ms 0"), (4, 32.0, 151, "--events 151"), (4, 32.0, 5, "--events 5"),
])
def test_bad_designs_are_usage_errors(streams: int, gap: float, events: int, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        C.check_design(streams, gap, events)


def test_the_real_stamp_server_pairs_every_event_and_time_runs_forward() -> None:
    cal = asyncio.run(C.calibrate(streams=4, gap_ms=5.0, events=20))
    assert cal.streams == 4 and cal.events == 80
    # One clock on both sides: a client stamp before the server's write would mean they are not shared.
    assert 0.0 <= cal.stamp_delay_p50_ms <= cal.stamp_delay_p99_ms <= cal.stamp_delay_max_ms
    assert cal.dispatch_skew_ms >= 0.0


def test_a_client_that_stalls_is_found_client_bound() -> None:
    """Ground truth: the test blocks the client's event loop for 30 ms in every 60 while 4 streams
    arrive every 5 ms; events that land in a block wait for it, so the p99 delay is most of 30 ms."""

    async def run() -> C.Calibration:
        done = asyncio.Event()

        async def blocker() -> None:
            while not done.is_set():
                time.sleep(0.03)  # noqa: ASYNC251 - the client overhead under test
                await asyncio.sleep(0.03)

        task = asyncio.create_task(blocker())
        try:
            return await C.calibrate(streams=4, gap_ms=5.0, events=60)
        finally:
            done.set()
            await task

    cal = asyncio.run(run())
    assert cal.stamp_delay_p99_ms >= 15.0, cal
    assert cal.client_bound() is not None


def _cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args)
    return int(info.value.code or 0)


def test_cli_writes_the_figures_and_says_it_measured_no_server(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cal.json"
    code = _cli(["calibrate", "--streams", "2", "--gap-ms", "50", "--events", "10", "--json", str(out)])
    doc = json.loads(out.read_text())
    cal = doc["calibration"]
    assert doc["command"] == "calibrate" and cal["streams"] == 2 and cal["events"] == 20
    assert code == (3 if cal["client_bound"] else 0)
    text = capsys.readouterr().out
    assert "this measures the client, no server" in text and "stamp delay" in text


def test_cli_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(["calibrate", "--streams", "0"]) == 2
    err = capsys.readouterr().err
    assert "--streams 0 is out of range" in err and "Traceback" not in err
