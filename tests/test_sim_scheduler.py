"""The scheduler's timeline, exactly, with a fake clock: the ground truth other tests lean on."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from servecheck.sim import SimConfig
from servecheck.sim.scheduler import MAX_CATCHUP_NS, Job, JobDone, Scheduler, TokenEvent

MS = 1_000_000


@dataclass
class Arrival:
    at_ms: float
    prompt: tuple[int, ...]
    tokens: int
    cache_prompt: bool = True
    alone: bool = False  # carries a field of SimConfig.serialize_on


def words(n: int, first: int = 0) -> tuple[int, ...]:
    """A prompt of n tokens whose first token (the 'nonce') is `first`."""
    return (first, *range(1000, 1000 + n - 1))


def simulate(config: SimConfig, arrivals: list[Arrival], *, late_ms: float = 0.0) -> tuple[list[Job], Scheduler]:
    """Drive the scheduler through every event; `late_ms` makes every wake-up that much late."""
    now = 0
    sched = Scheduler(config, log=lambda _: None, clock=lambda: now)
    jobs = [
        Job(task_id=i, prompt_tokens=a.prompt, target_tokens=a.tokens, max_tokens=a.tokens,
            cache_prompt=a.cache_prompt, arrival_ns=round(a.at_ms * MS), alone=a.alone)
        for i, a in enumerate(arrivals)
    ]
    pending = sorted(jobs, key=lambda j: j.arrival_ns)
    for _ in range(100_000):
        while pending and pending[0].arrival_ns <= now:
            sched.submit(pending.pop(0))
        deadline = sched.advance(now)
        if deadline is not None:
            deadline += round(late_ms * MS)
        candidates = [t for t in (deadline, pending[0].arrival_ns if pending else None) if t is not None]
        if not candidates:
            return jobs, sched
        now = max(now, min(candidates))
    raise AssertionError("scheduler did not settle")


def ends_ms(jobs: list[Job]) -> list[float]:
    return [j.end_ns / MS for j in jobs]  # type: ignore[operator]


def cfg(mode: str, **kw: object) -> SimConfig:
    base: dict[str, object] = dict(token_s=0.010, per_seq_s=0.0, prompt_token_s=0.001)
    base.update(kw)
    return SimConfig(mode=mode, **base)  # type: ignore[arg-type]


THREE_AT_ONCE = [Arrival(0, words(10, i), 5) for i in range(3)]


@pytest.mark.parametrize(
    "config, arrivals, expected_ends_ms, peak",
    [
        # serial: 10 ms prefill + 5 x 10 ms decode, one after another
        (cfg("serial"), THREE_AT_ONCE, [60, 120, 180], 1),
        # batched: one 30 ms prefill step for all three, then 5 steps of 10 + 3 x 1 ms
        (cfg("batched", per_seq_s=0.001), THREE_AT_ONCE, [95, 95, 95], 3),
        # slots=2, four requests: a pair (20 ms prefill + 5 x 12 ms), then the next pair
        (cfg("slots", slots=2, per_seq_s=0.001), [Arrival(0, words(10, i), 5) for i in range(4)], [80, 80, 160, 160],
         2),
        # pipelined: the next prefill overlaps the current decode; decode never batches
        (cfg("pipelined"), THREE_AT_ONCE, [60, 110, 160], 1),
        # batched, a late arrival joins the running batch after a prefill step of its own
        (cfg("batched"), [Arrival(0, words(10, 0), 5), Arrival(25, words(10, 1), 5)], [70, 90], 2),
    ],
)
def test_timeline(config: SimConfig, arrivals: list[Arrival], expected_ends_ms: list[float], peak: int) -> None:
    jobs, sched = simulate(config, arrivals)
    assert ends_ms(jobs) == pytest.approx(expected_ends_ms)
    assert sched.peak_decoding == peak
    assert sched.completed == len(arrivals)


@pytest.mark.parametrize(
    "arrivals, expected_ends_ms",
    [
        # each alone: one after another, as serial (10 ms prefill + 5 x 10 ms decode)
        ([Arrival(0, words(10, i), 5, alone=True) for i in range(3)], [60, 120, 180]),
        # the two before it batch (20 ms prefill + 50 ms); it waits for them and runs alone
        ([Arrival(0, words(10, 0), 5), Arrival(0, words(10, 1), 5), Arrival(0, words(10, 2), 5, alone=True)],
         [70, 70, 130]),
        # first in line: it runs alone, and the one behind it waits (FIFO) though the server batches
        ([Arrival(0, words(10, 0), 5, alone=True), Arrival(0, words(10, 1), 5)], [60, 120]),
        # arriving into a running batch it waits for the batch to empty; a later arrival waits for it
        ([Arrival(0, words(10, 0), 5), Arrival(25, words(10, 1), 5, alone=True), Arrival(70, words(10, 2), 5)],
         [60, 120, 180]),
    ],
)
def test_a_request_carrying_a_serializing_field_is_served_alone(arrivals: list[Arrival],
                                                                expected_ends_ms: list[float]) -> None:
    jobs, sched = simulate(cfg("batched", serialize_on=("seed",)), arrivals)
    assert ends_ms(jobs) == pytest.approx(expected_ends_ms)
    if all(a.alone for a in arrivals):
        assert sched.peak_decoding == 1


def test_events_reach_the_handler_queue_in_order() -> None:
    jobs, _ = simulate(cfg("serial"), [Arrival(0, words(4), 3)])
    events = [jobs[0].events.get_nowait() for _ in range(4)]
    assert [type(e) for e in events] == [TokenEvent, TokenEvent, TokenEvent, JobDone]
    assert [e.index for e in events[:3]] == [0, 1, 2]  # type: ignore[union-attr]
    timed = [e for e in events if isinstance(e, (TokenEvent, JobDone))]  # all of them, as asserted above
    assert [e.t_ns / MS for e in timed] == pytest.approx([14, 24, 34, 34])


def test_self_reported_rate_ignores_queueing() -> None:
    """In a serial queue every request reports the solo rate: the misleading figure of seed 000."""
    jobs, _ = simulate(cfg("serial", prompt_token_s=0.0), THREE_AT_ONCE)
    rates = [j.timings().predicted_per_second for j in jobs]
    assert rates == pytest.approx([100.0, 100.0, 100.0])  # 5 tokens / 50 ms each
    assert [j.timings().queue_ms for j in jobs] == pytest.approx([0, 50, 100])


def test_late_wakeups_do_not_slow_the_server() -> None:
    """Chained steps follow the ideal timeline, not the moment the loop happened to wake."""
    on_time, _ = simulate(cfg("serial"), THREE_AT_ONCE)
    late, _ = simulate(cfg("serial"), THREE_AT_ONCE, late_ms=3)
    assert ends_ms(late)[-1] - ends_ms(on_time)[-1] <= 3 + 1e-6


def test_a_stall_beyond_the_catch_up_cap_is_lost_time() -> None:
    cap_ms = MAX_CATCHUP_NS / MS
    on_time, _ = simulate(cfg("serial", prompt_token_s=0.0), [Arrival(0, words(4), 3)])
    late, _ = simulate(cfg("serial", prompt_token_s=0.0), [Arrival(0, words(4), 3)], late_ms=2 * cap_ms)
    # woken 2 x cap after the first token: one cap is caught up, the other is lost
    assert ends_ms(late)[0] == pytest.approx(ends_ms(on_time)[0] + cap_ms)


def heated_steps_ms(start_ms: float, steps: int, step_ms: float, heat_per_s: float) -> float:
    """Ground truth: each step takes step_ms x (1 + heat_per_s x its start time in seconds)."""
    t = start_ms
    for _ in range(steps):
        t += step_ms * (1 + heat_per_s * t / 1e3)
    return t - start_ms


def test_heat_slows_later_steps() -> None:
    config = cfg("serial", prompt_token_s=0.0, token_s=0.1, heat_per_s=1.0)
    jobs, _ = simulate(config, [Arrival(0, words(4, i), 5) for i in range(2)])
    first, second = (j.timings().predicted_ms for j in jobs)
    assert first == pytest.approx(heated_steps_ms(0, 5, 100, 1.0))
    assert second == pytest.approx(heated_steps_ms(first, 5, 100, 1.0))
    assert second / first > 1.5


def test_pipelined_staggered_arrivals_follow_the_stages() -> None:
    # decode 5 x 10 ms, prefill 10 ms; B arrives mid-decode of A, C after A is done
    jobs, _ = simulate(cfg("pipelined"), [Arrival(0, words(10, 0), 5), Arrival(30, words(10, 1), 5),
                                          Arrival(200, words(10, 2), 5)])
    assert [j.prefill_start_ns / MS for j in jobs] == pytest.approx([0, 30, 200])  # type: ignore[operator]
    assert ends_ms(jobs) == pytest.approx([60, 110, 260])


@pytest.mark.parametrize(
    "mode, second_cache_prompt, expected_cache_n",
    [
        ("on", True, 9),  # the whole prompt but its last token, as llama.cpp
        ("on", False, 0),  # cache_prompt: false on the request
        ("off", True, 0),
        ("inert", True, 0),  # accepted, never hits
    ],
)
def test_prefix_cache(mode: str, second_cache_prompt: bool, expected_cache_n: int) -> None:
    prompt = words(10)
    jobs, _ = simulate(
        cfg("serial", prefix_cache=mode),
        [Arrival(0, prompt, 2), Arrival(100, prompt, 2, cache_prompt=second_cache_prompt)],
    )
    first, second = (j.timings() for j in jobs)
    assert first.cache_n == 0 and first.prompt_ms == pytest.approx(10)
    assert second.cache_n == expected_cache_n
    assert second.prompt_n == 10 - expected_cache_n
    assert second.prompt_ms == pytest.approx((10 - expected_cache_n) * 1.0)


def test_prefix_cache_shares_only_the_common_prefix_and_not_before_prefill() -> None:
    base = words(10)
    jobs, _ = simulate(
        cfg("batched", prefix_cache="on"),
        [Arrival(0, base, 2), Arrival(0, base, 2), Arrival(100, base[:6] + (7, 7, 7, 7), 2),
         Arrival(200, (9, *base[1:]), 2)],
    )
    assert [j.cache_n for j in jobs] == [0, 0, 6, 0]  # concurrent twins miss; a nonce breaks the prefix


def test_cancelled_job_frees_its_slot() -> None:
    now = 0
    sched = Scheduler(cfg("serial", prompt_token_s=0.0), log=lambda _: None, clock=lambda: now)
    a = Job(task_id=0, prompt_tokens=words(3), target_tokens=100, max_tokens=100, cache_prompt=True, arrival_ns=0)
    b = Job(task_id=1, prompt_tokens=words(3, 1), target_tokens=2, max_tokens=2, cache_prompt=True, arrival_ns=0)
    sched.submit(a)
    sched.submit(b)
    deadline = sched.advance(now)
    sched.cancel(a)
    while deadline is not None:
        now = deadline
        deadline = sched.advance(now)
    assert b.finished and not a.finished and a.produced <= 1
    assert b.end_ns is not None and b.end_ns <= 40 * MS


def test_logs_launch_and_timing_lines() -> None:
    lines: list[str] = []
    now = 0
    sched = Scheduler(cfg("serial"), log=lines.append, clock=lambda: now)
    sched.submit(Job(task_id=7, prompt_tokens=words(3), target_tokens=2, max_tokens=2, cache_prompt=True, arrival_ns=0))
    deadline = sched.advance(now)
    while deadline is not None:
        now = deadline
        deadline = sched.advance(now)
    assert any("task 7 | processing task" in ln for ln in lines)
    assert any("print_timing" in ln and "task 7" in ln for ln in lines)
