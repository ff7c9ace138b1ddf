"""The client's own timing as one judge (analysis.client_timing): the record, the meter on a real loop, the
stall injector, and verdicts under injected stalls and a buffering hop on the simulator, where the server's
configuration is the truth and the client's lateness is made on purpose."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest

from servecheck.analysis import client_timing as ct
from servecheck.wire.base import Target
from servecheck.errors import UsageError
from servecheck.experiments.interference import run_interference
from servecheck.experiments.speculative import run_speculative
from servecheck.load.driver import LoadDriver
from servecheck.load.inject import ENV, StallPattern, parse_pattern
from servecheck.load.lateness import LatenessMeter
from servecheck.model.client import ClientLateness
from servecheck.model.reason import Reason
from servecheck.sim import SimConfig, sim_in_thread
from servecheck.sim.proxy import running_proxy
from factories import lateness_ms
from written import as_reason

MS = 1_000_000


def record(*windows_ms: tuple[int, int], **kw: Any) -> ClientLateness:
    """The meter's record over the first second (1 ms ticks, 0.5 ms floor), late in `windows_ms`."""
    return lateness_ms(*windows_ms, to_ms=1_000, **kw)


# ---------------------------------------------------------------- the judge, pure


@pytest.mark.parametrize(("lateness", "lo", "hi", "needed_ms", "code"), [
    (None, 0, 10, 5.0, "no_meter"),
    (record(), 0, 10, 1.0, "coarse"),  # the meter vouches to 1.5 ms only
    (record(), 0, 10, 5.0, "on_time"),
    (record((20, 40)), 0, 10, 5.0, "on_time"),  # the stall is elsewhere
    (record((5, 12)), 0, 10, 5.0, "late"),  # 7 ms inside the stretch
    (record((5, 9)), 0, 10, 5.0, "on_time"),  # 4 ms: below what the rule needs
    (record((0, 8)), 8.5, 20, 5.0, "late"),  # read in the drain right after it
    (record((0, 8)), 10.5, 20, 5.0, "on_time"),  # past the drain
    (record(), 0, 2_000, 5.0, "uncovered"),
    (record(dropped=1), 0, 10, 5.0, "dropped"),
])
def test_vouch_names_what_decided(lateness: ClientLateness | None, lo: float, hi: int, needed_ms: float,
                                  code: str) -> None:
    word = ct.vouch(lateness, round(lo * MS), hi * MS, needed_ms * MS)
    assert word.code == code and word.ok == (code == "on_time")
    if code == "late":
        said = word.words()
        assert word.late_ms >= needed_ms
        assert (said.code, said["code"], said["late_ms"]) == ("run.vouch", "late", word.late_ms)


def test_late_reads_are_the_ones_inside_or_just_after_a_stall() -> None:
    lateness = record((10, 20), (50, 51))  # the second is below what the rule needs
    reads = [5 * MS, 15 * MS, 20 * MS + MS // 2, 25 * MS, 50 * MS + MS // 2]
    assert ct.late_reads(lateness, reads, 2 * MS) == {1, 2}


def test_late_in_clips_to_the_stretch_and_merged_keeps_every_stall() -> None:
    assert ct.late_in(record((0, 30), (40, 45), (60, 61)), 10 * MS, 50 * MS, 2 * MS) == (20 * MS, 25 * MS)
    both = ct.merged([record((1, 5)), record((7, 9), tick_ms=2)])
    assert both is not None and both.late_ns == ((1 * MS, 5 * MS), (7 * MS, 9 * MS)) and both.tick_ns == 2 * MS
    assert ct.merged([record(), None]) is None  # one reader unmetered: nothing vouched


async def test_the_meter_sees_a_blocked_loop_where_it_was_blocked() -> None:
    meter = LatenessMeter(time.perf_counter_ns)
    meter.start()
    await asyncio.sleep(0.02)
    t0 = time.perf_counter_ns()
    time.sleep(0.04)  # the loop blocked, as a descheduled client's is
    t1 = time.perf_counter_ns()
    await asyncio.sleep(0.02)
    await meter.stop()
    got = meter.record(t0 - 5 * MS, t1 + 5 * MS)
    assert got is not None and got.resolution_ns == int(1.5 * MS)
    assert any(a <= t0 + MS and b >= t1 and b - a >= 40 * MS for a, b in got.late_ns), got.late_ns
    assert not ct.vouch(got, t0, t1, 10 * MS).ok


async def test_a_meter_moved_onto_another_clock_keeps_its_windows_on_it() -> None:
    """A Ray actor's driver is moved onto the run's clock (its start mapped there) before its batch: the
    ticker must stamp its windows on that clock too, or they land where no request was."""
    shift = 10_000 * MS
    meter = LatenessMeter(time.perf_counter_ns)
    meter.start()
    time.sleep(0.02)  # a window on the old clock, which the move drops
    await asyncio.sleep(0.005)

    def moved() -> int:
        return time.perf_counter_ns() - shift

    meter.rebase(moved)
    await asyncio.sleep(0.005)
    t0 = moved()
    time.sleep(0.04)
    t1 = moved()
    await asyncio.sleep(0.01)
    await meter.stop()
    got = meter.record(t0 - 5 * MS, t1 + 5 * MS)
    assert got is not None and got.from_ns <= t0 and got.to_ns >= t1
    assert any(a <= t0 + MS and b >= t1 for a, b in got.late_ns), got.late_ns
    before = meter.record(-shift, t1)
    assert before is not None
    assert all(a >= t0 - 10 * MS for a, _ in before.late_ns)  # nothing left from before the move


@pytest.mark.parametrize(("text", "want"), [
    ("wake:3-5.4", StallPattern("wake", 3.0, 5.4)),
    ("exp:4.5@7", StallPattern("exp", 4.5, seed=7)),
    ("starve:120/200", StallPattern("starve", 120.0, 200.0)),
    ("long-send:8000:200:1200", StallPattern("long-send", 8000.0, 200.0, 1200.0)),
])
def test_stall_patterns_parse(text: str, want: StallPattern) -> None:
    assert parse_pattern(text) == want


@pytest.mark.parametrize("text", ["wake:5-3", "nap:3", "starve:200/120", "exp:x", "wake:1-2@seed", "exp:1:2"])
def test_a_bad_stall_pattern_says_what_to_write(text: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_pattern(text)
    assert ENV in err.value.message and "wake:" in (err.value.hint or "")


# ---------------------------------------------------------------- verdicts under injected lateness (simulator)

STEP_S = 0.003  # a fast server's decode step (a GPU's small model): what a late reader turns into bursts


def spec_law(step_s: float, mean: float = 0.0) -> SimConfig:
    spec = {"spec_mean": mean, "spec_draft": 4, "spec_draft_token_s": 0.0} if mean else {}
    return SimConfig(mode="batched", token_s=step_s, per_seq_s=0.0002, prompt_token_s=1e-5, **spec)  # type: ignore[arg-type]


async def speculative(url: str, seed: int, tokens: int = 160):
    async with LoadDriver(Target(url, first_token_timeout_s=60)) as driver:
        result = await run_speculative(driver, ns=(1, 2), tokens=tokens, reps=1, rng=random.Random(seed))
    return result.body()


@pytest.mark.timing(seconds=20)
@pytest.mark.parametrize("pattern", ["wake:3-5.4", "exp:4.5"], ids=["late-wakeups", "exponential"])
async def test_a_late_reader_never_makes_one_token_a_step_speculating(monkeypatch: pytest.MonkeyPatch,
                                                                      pattern: str) -> None:
    """The issue's case: a reader waking 1.0-1.8 steps late (or exponentially, 1.5 steps on average) on a
    3 ms one-token-per-step server read 1.30 tokens per step, `speculating`, before the groups opened by a
    late read were left out."""
    monkeypatch.setenv(ENV, f"{pattern}@11")
    with sim_in_thread(spec_law(STEP_S)) as sim:
        for seed in range(2):
            body = await speculative(sim.url, seed)
            assert body.verdict != "speculating", body.verdict_reason
            for p in body.points:
                assert p.verdict != "speculating", (p.n, p.reason)
                if p.verdict == "inconclusive":
                    assert "client" in str(p.reason), p.reason  # the reason names who could not time it
            assert sum(p.client_late_groups or 0 for p in body.points) > 0 or all(
                "client" in str(p.reason) for p in body.points if p.reason)


@pytest.mark.timing(seconds=25)
@pytest.mark.parametrize(("step_s", "mean"), [(0.02, 0.0), (0.003, 0.0), (0.02, 3.0)],
                         ids=["one-token-20ms", "one-token-3ms", "three-tokens-20ms"])
async def test_bursts_from_a_buffering_hop_are_named_and_never_read_as_steps(step_s: float, mean: float) -> None:
    """Behind a hop that releases events every 35-105 ms: a one-token-per-step server read 2.9-3.2 tokens per
    step, `speculating`, before; a speculating one read 9-11 (three steps a burst). Now the bursts are named
    (their sizes follow their spacing, or too few of them to group) and the run decides nothing."""
    with sim_in_thread(spec_law(step_s, mean)) as sim, \
            running_proxy(sim.url, "--burst", "35-105", "--burst-seed", "3") as url:
        body = await speculative(url, 1, tokens=128)
    assert body.verdict == "inconclusive", body.verdict_reason
    said = str(body.verdict_reason)  # the words a reader gets, as the document says them
    assert "transit" in said or "buffered on its way" in said, said
    for p in body.points:  # no point stands alone behind a hop either, even one whose own streams looked clean
        assert p.verdict != "speculating", (p.n, p.reason)
        assert p.tokens_per_step is None and p.counters_agree is None, (p.n, p.tokens_per_step)  # bursts, no figure
    if step_s == 0.02 and mean == 0.0:
        assert all(p.coalesced_streams for p in body.points), [(p.n, p.reason) for p in body.points]


@pytest.mark.timing(seconds=15)
async def test_a_server_that_speculates_still_reads_speculating_within_15_percent() -> None:
    with sim_in_thread(spec_law(0.02, mean=3.0)) as sim:
        body = await speculative(sim.url, 2, tokens=128)
    assert body.verdict == "speculating", body.verdict_reason
    for p in body.points:
        assert p.tokens_per_step == pytest.approx(3.0, rel=0.15) and p.coalesced_streams == 0


def prefill_law(**kw: object) -> SimConfig:
    # 8,192 prompt tokens prefill in about 1.6 s: the window the 1.2 s stall fell inside
    return SimConfig(mode="batched", token_s=0.005, per_seq_s=0.001, prompt_token_s=0.0002, n_ctx=16384, **kw)  # type: ignore[arg-type]


async def interference(url: str, seed: int):
    async with LoadDriver(Target(url, first_token_timeout_s=60)) as driver:
        result = await run_interference(driver, sizes=(512, 8192), streams=2, tokens=320, reps=1,
                                        rng=random.Random(seed))
    return result, result.body()


@pytest.mark.timing(seconds=40)
@pytest.mark.parametrize(("law", "truth"),
                         [({"prefill_isolated": True}, "isolated"), ({"prefill_chunk": 256}, "chunked")],
                         ids=["isolated", "chunked"])
async def test_a_client_stall_inside_the_prefill_window_is_no_freeze(monkeypatch: pytest.MonkeyPatch, law: dict,
                                                                     truth: str) -> None:
    """The client stalls 1.2 s inside every 8,192-token prefill window of a server that prefills elsewhere or
    in chunks. Before: `blocking` for both (the stall is a 1.2 s gap covering 65% of the window). Now each
    such rep is repeated, then left invalid with the client named, and the other sizes decide."""
    monkeypatch.setenv(ENV, "long-send:8000:200:1200")
    with sim_in_thread(prefill_law(**law)) as sim:
        result, body = await interference(sim.url, 1)
    assert body.verdict in (truth, "inconclusive"), body.verdict_reason
    big = [r for p in body.points if p.prompt_tokens == 8192 for r in p.reps]
    assert big and not any(r.valid for r in big)  # no rep of the stalled size is evidence
    late = [r for r in big if r.client_late]
    assert late and all(r.problems[-1].code in ("interference.client_late_window", "interference.client_bursts")
                        for r in late)
    assert len(big) == 1 + sum(r.client_late for r in big[:-1])  # each client-late rep but the last was repeated
    assert [t.prompt_tokens for t in result.trials].count(8192) == len(big) <= 3


@pytest.mark.timing(seconds=40)
async def test_periodic_starvation_gives_no_phantom_chunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """120 ms of every 200 ms the client does not run: before, `chunked` with a phantom chunk of about 700
    tokens on a server that isolates prefill; now no rep is evidence and the reason names the client."""
    monkeypatch.setenv(ENV, "starve:120/200")
    with sim_in_thread(prefill_law(prefill_isolated=True)) as sim:
        _, body = await interference(sim.url, 2)
    assert body.verdict == "inconclusive" and body.chunk_tokens is None, body.verdict_reason
    problems = [q for p in body.points for q in p.problems]
    client = {"interference.client_late_window", "interference.client_late_baseline", "interference.client_bursts"}
    assert any(q.code in client for q in problems), problems
    if sum(p.valid for p in body.points) < 2:  # the run's own reason names the client, not only the sizes'
        assert "interference.unread_client_late" in set(body.verdict_reason.codes()), body.verdict_reason


@pytest.mark.timing(seconds=20)
async def test_interference_behind_a_buffering_hop_names_the_hop() -> None:
    """Victims' tokens released in bursts have no decode interval: before, the client was blamed for
    reading them late (or the intruder for arriving early); now the hop is named."""
    with sim_in_thread(prefill_law()) as sim, running_proxy(sim.url, "--burst", "35-105", "--burst-seed", "5") as url:
        async with LoadDriver(Target(url, first_token_timeout_s=60)) as driver:
            result = await run_interference(driver, sizes=(512, 2048), streams=2, tokens=200, reps=1,
                                            rng=random.Random(3))
    body = result.body()
    assert body.verdict == "inconclusive", body.verdict_reason
    assert all(any(as_reason(q).code == "interference.hop_bursts" for q in p.problems) for p in body.points), [
        p.problems for p in body.points]
    assert isinstance(body.verdict_reason, Reason)
    hop = [r for r in body.verdict_reason["unread"]["parts"] if r.code == "interference.unread_hop_bursts"]
    assert hop and hop[0]["sizes"] == (512, 2048), body.verdict_reason
