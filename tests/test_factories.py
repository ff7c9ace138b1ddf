"""The test factories (tests/factories.py) do what their docstrings say: the shapes other tests build their
ground truth from (a queue whose windows never overlap, a batch whose windows all open together, evenly
spaced events from the first token to the end) cannot drift without a failure here."""

from __future__ import annotations

from typing import Any

import pytest

from servecheck.model.records import NS_PER_S
from factories import (
    NEVER_LATE,
    RELEASE_SKEW_NS,
    batch,
    batch_result,
    lateness_ms,
    lateness_s,
    measured_batch,
    queue,
    request_ns,
    request_s,
)

MS = 1_000_000


def gaps_ns(times: tuple[int, ...]) -> list[int]:
    return [b - a for a, b in zip(times, times[1:])]


# --- one request ----------------------------------------------------------------------------------


def test_request_ns_takes_first_and_end_from_its_events_and_asks_for_what_it_produced() -> None:
    r = request_ns(3, token_ns=(10, 20, 40), tokens=5)
    assert (r.index, r.nonce, r.status, r.tokens_source) == (3, "n3", "ok", "usage")
    assert (r.send_ns, r.first_token_ns, r.end_ns, r.token_ns) == (0, 10, 40, (10, 20, 40))
    assert (r.tokens, r.tokens_requested) == (5, 5)


def test_request_ns_keeps_what_it_is_given() -> None:
    given: dict[str, Any] = dict(first_token_ns=5, end_ns=50, tokens_requested=8, nonce="x", status="timeout",
                                 tokens_source="events")
    r = request_ns(0, token_ns=(10, 20), tokens=2, text="hi", **given)
    assert {k: getattr(r, k) for k in given} == given and r.text == "hi"
    bare = request_ns(1, tokens=0)
    assert (bare.first_token_ns, bare.end_ns, bare.token_ns) == (None, None, ())


def test_request_s_without_events_records_only_the_first_token_and_the_end() -> None:
    r = request_s(2, send_s=0.5, first_token_s=0.55, end_s=2.5, tokens=64)
    assert (r.send_ns, r.first_token_ns, r.end_ns) == (500_000_000, 550_000_000, 2_500_000_000)
    assert r.token_ns == () and (r.tokens, r.tokens_requested) == (64, 64)


def test_evenly_spaced_events_start_at_the_first_token_and_end_at_the_end() -> None:
    r = request_s(0, first_token_s=0.05, end_s=1.0, events=16)
    assert len(r.token_ns) == 16 and r.tokens == 16
    assert r.token_ns[0] == r.first_token_ns == int(0.05 * NS_PER_S)
    assert r.end_ns == int(1.0 * NS_PER_S) and abs(r.token_ns[-1] - r.end_ns) <= 1
    gaps = gaps_ns(r.token_ns)
    assert max(gaps) - min(gaps) <= 1  # even, to the nanosecond the truncation takes
    # float seconds truncated to whole ns, as the tests computed them before they shared the factory
    assert r.token_ns[:4] == (50_000_000, 113_333_333, 176_666_666, 240_000_000)


def test_stepped_events_come_every_step_and_the_request_ends_at_its_last_one() -> None:
    r = request_s(1, send_s=0.2, first_token_s=0.3, events=11, step_s=0.01)
    assert len(r.token_ns) == 11 and r.first_token_ns == r.token_ns[0] == int(0.3 * NS_PER_S)
    assert all(abs(g - 10 * MS) <= 1 for g in gaps_ns(r.token_ns))
    assert r.end_ns == r.token_ns[-1] and r.send_ns == int(0.2 * NS_PER_S)
    later = request_s(1, first_token_s=0.3, events=11, step_s=0.01, end_s=0.5)
    assert later.end_ns == int(0.5 * NS_PER_S) and later.token_ns == r.token_ns


@pytest.mark.parametrize(
    "kw", [dict(first_token_s=0.1), dict(first_token_s=0.1, events=4), dict(first_token_s=0.1, end_s=1.0, events=1)]
)
def test_a_request_whose_times_are_not_all_said_is_refused(kw: dict) -> None:
    with pytest.raises(ValueError):
        request_s(0, **kw)


# --- requests together ----------------------------------------------------------------------------


def test_a_queue_serves_one_at_a_time_each_prefilled_after_the_one_before_finished() -> None:
    durations_s, prefill_s = [2.0, 1.5, 2.5, 1.0], 0.05
    records = queue(durations_s, prefill_s=prefill_s, tokens=64)
    assert [r.index for r in records] == [0, 1, 2, 3] and all(r.send_ns == 0 for r in records)
    assert all((r.tokens, r.tokens_requested, len(r.token_ns)) == (64, 64, 16) for r in records)
    assert records[0].first_token_ns == int(prefill_s * NS_PER_S)
    for before, after in zip(records, records[1:]):
        assert before.end_ns is not None and after.first_token_ns is not None
        assert after.first_token_ns > before.end_ns  # the windows never overlap
        assert abs(after.first_token_ns - before.end_ns - prefill_s * NS_PER_S) <= 1
    ends_s = [(r.end_ns or 0) / NS_PER_S for r in records]
    assert ends_s == pytest.approx([2.0, 3.5, 6.0, 7.0])


def test_a_batch_generates_together_and_finishes_within_its_stagger() -> None:
    records = batch(4, duration_s=2.4, prefill_s=0.05, stagger_s=0.02, tokens=64)
    firsts = [r.first_token_ns or 0 for r in records]
    ends = [r.end_ns or 0 for r in records]
    assert max(firsts) < min(ends)  # one instant at which all four were generating
    assert max(ends) - min(ends) == pytest.approx(3 * 0.02 * NS_PER_S, abs=1)
    assert all(r.send_ns == 0 and len(r.token_ns) == 16 and r.tokens == 64 for r in records)


def test_a_batch_result_holds_its_records_released_together() -> None:
    records = [request_s(i, first_token_s=0.1, end_s=1.0, tokens=8) for i in range(3)]
    b = batch_result(records)
    assert b.records == tuple(records) and (b.release_ns, b.in_flight) == (0, 3)
    assert b.dispatch_skew_ns == RELEASE_SKEW_NS and (b.gauges, b.noise, b.lateness) == (None, None, None)
    assert batch_result(records, in_flight=1, dispatch_skew_ns=0).in_flight == 1


def test_a_measured_batch_is_n_in_flight_at_its_rep() -> None:
    records = [request_s(i, first_token_s=0.1, end_s=1.0, tokens=8) for i in range(2)]
    late = lateness_s(to_s=2.0)
    mb = measured_batch(4, records, rep=2, lateness=late)
    assert (mb.n, mb.rep, mb.batch.in_flight, mb.batch.records) == (4, 2, 4, tuple(records))
    assert mb.batch.lateness is late and mb.batch.dispatch_skew_ns == RELEASE_SKEW_NS


# --- the client's lateness ------------------------------------------------------------------------


def test_lateness_in_seconds_keeps_its_windows_and_span_in_ns() -> None:
    late = lateness_s((0.05, 3.951), to_s=7.72)
    assert late.late_ns == ((int(0.05 * NS_PER_S), int(3.951 * NS_PER_S)),)
    assert (late.from_ns, late.to_ns) == (0, int(7.72 * NS_PER_S))
    assert (late.tick_ns, late.floor_ns, late.resolution_ns, late.dropped) == (MS, MS // 2, 3 * MS // 2, 0)


def test_lateness_in_ms_is_kept_exactly() -> None:
    late = lateness_ms((5, 12), (20, 40), to_ms=1_000, tick_ms=2, dropped=1)
    assert late.late_ns == ((5 * MS, 12 * MS), (20 * MS, 40 * MS))
    assert (late.from_ns, late.to_ns, late.tick_ns, late.floor_ns, late.dropped) == (0, 1_000 * MS, 2 * MS, MS // 2, 1)


def test_never_late_is_a_scripted_drivers_record() -> None:
    assert NEVER_LATE.late_ns == () and NEVER_LATE.resolution_ns == 0 and NEVER_LATE.dropped == 0
