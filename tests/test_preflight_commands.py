"""The pre-flight in the commands whose streams this process reads itself: prefix-cache, context, interference
and speculative check their client before their first measured request at each concurrency, record the check,
and a client-bound one makes the run invalid (exit 3) with the fix named; --no-calibrate skips it and says so.

Ground truth is the driver's own pre-flight, which the tests set: a scripted server (`FakeDriver`, a virtual
clock) whose client reports a timing error the test chooses, far past any bound or none at all. The flag's
wiring runs the real `CheckedDriver` against the simulator."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from servecheck import exitcodes
from servecheck.cli import main as main_mod
from servecheck.experiments.common import NOT_CALIBRATED, token_gap_ms
from servecheck.experiments.context import run_context
from servecheck.experiments.interference import run_interference, victims_step_s
from servecheck.experiments.prefix_cache import run_prefix_cache
from servecheck.experiments.speculative import run_speculative
from servecheck.load.fake import FakeDriver, FakeServer
from servecheck.load.protocol import Driver, SelfChecking
from servecheck.model.client import Calibration, ClientCheck
from servecheck.model.result import RunResult
from servecheck.report.lines import context as context_report
from servecheck.report.lines import interference as interference_report
from servecheck.report.lines import prefix_cache as prefix_cache_report
from servecheck.report.lines import speculative as speculative_report
from servecheck.sim import SimConfig, sim_in_thread
from written import fields_of

pytestmark = pytest.mark.timeout(120)


class CheckedFake(FakeDriver):
    """A scripted server read by a client that checks itself: every pre-flight reports `error_ms` of timing
    error (p99 stamp delay, no skew) against the bound the command asks for, and is kept in `asked`."""

    def __init__(self, server: FakeServer | None = None, *, error_ms: float = 0.0, calibrate: bool = True) -> None:
        super().__init__(server or FakeServer(n_ctx_per_request=8192))
        self.error_ms = error_ms
        self.calibrate = calibrate
        self.asked: list[ClientCheck] = []

    async def preflight(self, streams: int, gap_ms: float, tolerance_ms: float, basis: str,
                        aim_ms: float | None = None) -> ClientCheck | None:
        if not self.calibrate:
            return None
        cal = Calibration(streams=streams, gap_ms=gap_ms, events=20 * streams, stamp_delay_p50_ms=self.error_ms / 2,
                          stamp_delay_p99_ms=self.error_ms, stamp_delay_max_ms=self.error_ms, dispatch_skew_ms=0.0,
                          loop_lag_p99_ms=None, loop_lag_max_ms=None)
        self.asked.append(ClientCheck(streams=streams, tolerance_ms=tolerance_ms, basis=basis, tried=(cal,),
                                      aim_ms=aim_ms))
        return self.asked[-1]


Run = Callable[[Driver], Awaitable[Any]]

# Each command as small as it runs: what it is called with, and the concurrencies it checks.
COMMANDS: dict[str, tuple[Run, list[int]]] = {
    "prefix-cache": (lambda d: run_prefix_cache(d, prompt_tokens=600, repeats=2, rng=random.Random(1)), [1]),
    "context": (lambda d: run_context(d, depths=(0, 512), tokens=16, reps=1, rng=random.Random(1)), [1]),
    # two victims and the intruder in flight together
    "interference": (lambda d: run_interference(d, sizes=(256, 1024), streams=2, tokens=32, reps=1,
                                                rng=random.Random(1)), [3]),
    "speculative": (lambda d: run_speculative(d, ns=(1, 2), tokens=16, reps=1, rng=random.Random(1)), [1, 2]),
}


def measured(command: str, driver: CheckedFake) -> tuple[Any, RunResult[Any]]:
    run, _ = COMMANDS[command]

    async def go() -> Any:
        async with driver:
            return await run(driver)

    result = asyncio.run(go())
    return result, result.document()


LINES: dict[str, Callable[[RunResult[Any]], list[str]]] = {
    "prefix-cache": prefix_cache_report.verdict_lines, "context": context_report.report_lines,
    "interference": interference_report.report_lines, "speculative": speculative_report.report_lines,
}


def mode_key(command: str) -> str:
    # interference's `calibration`: the victims' batch
    return "preflight" if command == "interference" else "calibration"


def test_a_fake_that_checks_itself_is_a_self_checking_driver() -> None:
    assert isinstance(CheckedFake(), SelfChecking) and not isinstance(FakeDriver(), SelfChecking)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_client_bound_pre_flight_makes_the_run_invalid_and_names_the_fix(command: str) -> None:
    driver = CheckedFake(error_ms=10_000.0)
    _, run = measured(command, driver)
    doc = fields_of(run)
    assert doc["valid"] is False and doc[mode_key(command)] == "on"
    assert [c["streams"] for c in doc["client_checks"]] == COMMANDS[command][1]
    assert all(c["client_bound"] and c["error_ms"] > c["tolerance_ms"] for c in doc["client_checks"])
    (finding,) = doc["invalid"]
    first = COMMANDS[command][1][0]
    assert finding["code"] == "client_bound" and "--workers" in finding["hint"]
    assert finding["message"].startswith(f"the client is the bottleneck at N={first}:")
    assert doc["verdict" if command != "context" else "effect"] is not None  # the verdict stands beside it
    lines = LINES[command](run)
    assert any(line.startswith("client   timing error before each N") and "CLIENT-BOUND" in line for line in lines)
    assert any(line.startswith("INVALID") for line in lines), lines


@pytest.mark.parametrize("command", COMMANDS)
def test_a_client_within_its_bound_leaves_the_run_as_it_was(command: str) -> None:
    _, run = measured(command, CheckedFake(error_ms=0.0))
    doc = fields_of(run)
    assert doc.get("valid") is not False and not any(f.get("code") == "client_bound" for f in doc.get("invalid") or [])
    assert [c["client_bound"] for c in doc["client_checks"]] == [False] * len(COMMANDS[command][1])
    assert NOT_CALIBRATED not in doc["notes"]


@pytest.mark.parametrize("command", COMMANDS)
def test_no_calibrate_records_off_and_says_so(command: str) -> None:
    driver = CheckedFake(error_ms=10_000.0, calibrate=False)
    _, run = measured(command, driver)
    doc = fields_of(run)
    assert doc[mode_key(command)] == "off" and doc["client_checks"] == [] and NOT_CALIBRATED in doc["notes"]
    assert doc.get("valid") is not False and driver.asked == []


def test_each_bound_is_a_share_of_what_its_command_judges() -> None:
    """The bounds the commands ask for, from their own records: prefix-cache 5% of the warm-up's TTFT (a fresh
    prefill of the prompt), context 5% of a --tokens stream at the warm-up's pace, interference half the
    victims' step, speculative half the warm-up's gap between tokens."""
    bounds = {}
    for command in COMMANDS:
        driver = CheckedFake()
        result, _ = measured(command, driver)
        bounds[command] = (driver.asked[0].tolerance_ms, result)
    tolerance, cache = bounds["prefix-cache"]
    assert tolerance == pytest.approx(0.05 * cache.warmup.ttft_ns / 1e6)
    tolerance, context = bounds["context"]
    warm = context.warmup
    context_gap_ms = token_gap_ms(warm)
    assert context_gap_ms is not None
    assert tolerance == pytest.approx(0.05 * (warm.ttft_ns / 1e6 + 15 * context_gap_ms))
    tolerance, interference = bounds["interference"]
    assert tolerance == pytest.approx(0.5 * victims_step_s(interference.calibration) * 1e3)
    tolerance, speculative = bounds["speculative"]
    speculative_gap_ms = token_gap_ms(speculative.warmup)
    assert speculative_gap_ms is not None
    assert tolerance == pytest.approx(0.5 * speculative_gap_ms)


# ---------------------------------------------------------------- through the CLI

ARGS = {
    "prefix-cache": ["--prompt-tokens", "600", "--repeats", "2"],
    "context": ["--depths", "0,512", "--tokens", "16"],
    "interference": ["--prompt-sizes", "256,1024", "--streams", "2", "--tokens", "32", "--reps", "1"],
    "speculative": ["--n", "1,2", "--tokens", "16", "--reps", "1"],
}


def run_main(args: list[str], open_driver: Any = None) -> int:
    with pytest.raises(SystemExit) as info:
        main_mod.main(args, open_driver=open_driver)
    return int(info.value.code or 0)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_client_bound_run_exits_3(command: str, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    code = run_main([command, "http://fake", *ARGS[command], "--no-save", "--json", str(out)],
                    open_driver=lambda target: CheckedFake(error_ms=10_000.0))
    doc = json.loads(out.read_text())
    assert code == exitcodes.INVALID and doc["valid"] is False, doc.get("invalid")


# The simulator's step: long enough that a loaded test machine stays within half of it.
SIM: dict[str, Any] = {"mode": "batched", "token_s": 0.02, "per_seq_s": 0.001, "prompt_token_s": 1e-5, "n_ctx": 8192}


@pytest.mark.timing
@pytest.mark.parametrize("command", COMMANDS)
def test_no_calibrate_is_taken_by_every_command(command: str, tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    with sim_in_thread(SimConfig(**SIM)) as sim:
        run_main([command, sim.url, *ARGS[command], "--no-calibrate", "--no-save", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert doc["params"]["calibrate"] is False and doc[mode_key(command)] == "off" and doc["client_checks"] == []


@pytest.mark.timing
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_checks_its_own_process_before_it_measures(command: str, tmp_path: Path) -> None:
    """The real pre-flight: one client process (this one reads every stream), at each concurrency the command
    puts in flight."""
    out = tmp_path / "run.json"
    with sim_in_thread(SimConfig(**SIM)) as sim:
        run_main([command, sim.url, *ARGS[command], "--no-save", "--json", str(out)])
    doc = json.loads(out.read_text())
    assert doc["params"]["calibrate"] is True and doc[mode_key(command)] == "on"
    checks = doc["client_checks"]
    assert [c["streams"] for c in checks] == COMMANDS[command][1] and all(c["workers"] == 1 for c in checks)
    assert all(len({t["workers"] for t in c["tried"]}) == 1 for c in checks)
