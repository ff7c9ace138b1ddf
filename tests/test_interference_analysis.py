"""The interference analysis on hand-built arrival times with known answers: victims stepping every 10 ms,
an intruder whose prefill freezes them (blocking), stretches each of their steps (chunked) or leaves them
be (isolated); and the problems that make an intrusion unreadable."""

from __future__ import annotations

import pytest

from servecheck.analysis import interference as inf
from servecheck.model.reason import Reason
from functools import partial

from factories import NEVER_LATE

# A client that read every token on time (hand-built arrivals have no client to be late).
Intrusion = partial(inf.Intrusion, lateness=NEVER_LATE)

MS = 1_000_000
STEP_MS = 10


def steady(start_ms: float, n: int, step_ms: float = STEP_MS) -> list[int]:
    return [round((start_ms + k * step_ms) * MS) for k in range(n)]


def blocking(size: int, *, per_token_ms: float = 0.05, victims: int = 2) -> inf.Intrusion:
    """Victims step every 10 ms from 0; the intruder arrives at 205 ms; its whole prefill runs as one step
    from 210 ms, then one decode step gives everyone their next token."""
    prefill = size * per_token_ms
    resume = 210 + prefill + STEP_MS
    before = steady(0, 22)  # 0 .. 210 ms
    after = steady(resume, 40)
    tracks = tuple(tuple(before + after) for _ in range(victims))
    return Intrusion(prompt_tokens=size, send_ns=205 * MS, first_token_ns=round(resume * MS),
                         end_ns=round((resume + STEP_MS) * MS), victims=tracks, sent_tokens=size, counted_tokens=size)


def chunked(size: int, chunk: int, *, per_token_ms: float = 0.05, victims: int = 2) -> inf.Intrusion:
    """From 210 ms every step carries the victims' tokens and `chunk` prompt tokens: 10 + chunk x 0.05 ms."""
    steps = -(-size // chunk)
    t = 210.0
    times = steady(0, 22)
    left = size
    for _ in range(steps):
        take = min(chunk, left)
        left -= take
        t += STEP_MS + take * per_token_ms
        times.append(round(t * MS))
    first = t + STEP_MS  # the intruder's first token comes with the next decode step
    times += steady(first, 40)
    tracks = tuple(tuple(times) for _ in range(victims))
    return Intrusion(prompt_tokens=size, send_ns=205 * MS, first_token_ns=round(first * MS),
                         end_ns=round((first + STEP_MS) * MS), victims=tracks, sent_tokens=size, counted_tokens=size)


def isolated(size: int, *, per_token_ms: float = 0.05) -> inf.Intrusion:
    first = 205 + size * per_token_ms + STEP_MS
    tracks = tuple(tuple(steady(0, 120)) for _ in range(2))
    return Intrusion(prompt_tokens=size, send_ns=205 * MS, first_token_ns=round(first * MS),
                         end_ns=round((first + STEP_MS) * MS), victims=tracks, sent_tokens=size, counted_tokens=size)


def judged(intrusions: list[inf.Intrusion]) -> inf.InterferenceAnalysis:
    return inf.analyse_interference(inf.pool([inf.read_intrusion(i) for i in intrusions]))


def test_one_blocking_intrusion_reads_its_freeze_exactly() -> None:
    r = inf.read_intrusion(blocking(4096))
    assert r.valid and r.baseline_s == pytest.approx(0.010)
    # the gap from the victims' token at 210 ms to the one after the prefill step and a decode step
    assert r.max_gap_s == pytest.approx((4096 * 0.05 + STEP_MS) / 1e3)
    assert r.ttft_s is not None and r.ttft_s == pytest.approx((5 + 4096 * 0.05 + STEP_MS) / 1e3)
    # two victims, each with the gap 200..210 (overlapping the send at 205) and the freeze
    assert r.stretched == 2
    assert r.lost_s == pytest.approx(2 * (4096 * 0.05 / 1e3))
    assert r.prefill_tok_s == pytest.approx(4096 / r.ttft_s)


@pytest.mark.parametrize("chunk", [256, 1024])
def test_chunked_intrusions_read_chunked_with_the_chunk(chunk: int) -> None:
    v = judged([chunked(s, chunk) for s in (512, 2048, 8192)])
    assert v.verdict == "chunked", v.reason
    assert v.decided_by == "victim gaps"
    e = v.evidence
    assert e is not None and e.cover_hi <= inf.CHUNKED_COVER
    assert e.gap_growth <= inf.PROPORTIONAL * e.prefill_growth
    assert e.gap_hi_s == pytest.approx((STEP_MS + chunk * 0.05) / 1e3)
    assert e.longest_hi_s >= e.gap_hi_s
    assert v.chunk_tokens == pytest.approx(chunk, rel=0.15)
    assert v.chunk_interval is not None and v.chunk_interval[0] <= chunk <= v.chunk_interval[1]


def test_blocking_intrusions_read_blocking_by_cover_and_growth() -> None:
    v = judged([blocking(s) for s in (512, 2048, 8192)])
    assert v.verdict == "blocking", v.reason
    e = v.evidence
    assert e is not None and e.cover_hi >= inf.BLOCKING_COVER
    assert e.gap_growth >= inf.PROPORTIONAL * e.prefill_growth
    assert v.chunk_tokens is None
    line = inf.sentence(v, inf.pool([inf.read_intrusion(blocking(s)) for s in (512, 2048, 8192)]), 2)
    assert line.code == "interference.headline_blocking"
    assert line["size"] == 8192 and line["streams"] == 2 and line["longest_s"] == pytest.approx(0.42, abs=0.005)
    assert line["chunk"] == inf.REFERENCE_CHUNK == 512 and line["would_s"] < line["longest_s"]
    assert str(line).startswith("an 8,192-token prompt froze both other streams for 0.42 s (blocking)")


def test_isolated_intrusions_read_isolated() -> None:
    v = judged([isolated(s) for s in (512, 2048, 8192)])
    assert v.verdict == "isolated", v.reason
    assert v.evidence is not None and v.evidence.stretch_hi < inf.STRETCH_RATIO


def test_a_prefill_too_cheap_to_see_is_inconclusive_and_says_what_would_decide() -> None:
    v = judged([blocking(s, per_token_ms=0.0005) for s in (512, 1024)])
    assert v.verdict == "inconclusive" and v.decided_by == "nothing"
    assert v.reason.code == "interference.too_cheap" and v.reason["growth"] < inf.PREFILL_GROWTH_MIN


def test_two_chunks_at_the_largest_size_cannot_be_told_from_one_step() -> None:
    """A chunk of 1024 with prompts of 512 and 2048: one step, then two; the gap covers about half the window."""
    v = judged([chunked(s, 1024) for s in (512, 2048)])
    assert v.verdict == "inconclusive", v.reason
    assert v.reason.code == "interference.undecided"


def test_a_truncated_prompt_is_named_and_its_point_invalid() -> None:
    cut = blocking(8192)
    cut = inf.Intrusion(**{**{f: getattr(cut, f) for f in cut.__slots__}, "counted_tokens": 4096})
    r = inf.read_intrusion(cut)
    assert not r.valid
    assert any(p.code == "interference.truncated" and p["counted"] == 4096 and p["sent"] == 8192 for p in r.problems)
    v = judged([blocking(512), cut])
    assert v.verdict == "inconclusive" and v.reason.code == "interference.too_few_sizes" and v.reason["valid"] == 1


def test_victims_that_queued_behind_each_other_are_named() -> None:
    one, two = steady(0, 30), steady(400, 30)
    r = inf.read_intrusion(Intrusion(prompt_tokens=512, send_ns=100 * MS, first_token_ns=150 * MS, end_ns=160 * MS,
                                         victims=(tuple(one), tuple(two))))
    assert not r.valid and any(p.code == "interference.victims_queued" for p in r.problems)


def test_an_intruder_that_waited_for_a_slot_is_named() -> None:
    """Victims run 0..300 ms undisturbed; the intruder's first token comes after they ended."""
    tracks = (tuple(steady(0, 31)), tuple(steady(0, 31)))
    r = inf.read_intrusion(Intrusion(prompt_tokens=512, send_ns=100 * MS, first_token_ns=340 * MS, end_ns=350 * MS,
                                         victims=tracks, server_slots=2))
    assert not r.valid
    assert any(p.code == "interference.waited_for_slot" and p["slots"] == 2 for p in r.problems)


def test_percentile_is_nearest_rank() -> None:
    assert inf.percentile([1.0, 2.0, 3.0, 4.0], 0.99) == 4.0
    assert inf.percentile([float(k) for k in range(1, 201)], 0.99) == 198.0


@pytest.mark.parametrize(("chunk", "configured", "agrees"), [(256, 256, True), (256, 1024, False)])
def test_a_witness_corroborates_and_never_decides(chunk: int, configured: int, agrees: bool) -> None:
    v = judged([chunked(s, chunk) for s in (512, 2048, 8192)])
    w = inf.check_witness(v.verdict, v.chunk_tokens, configured, "llamacpp.n_batch", 8192)
    assert w.agrees is agrees and v.verdict == "chunked"
    assert inf.check_witness(v.verdict, v.chunk_tokens, None, None, 8192).agrees is None
    assert inf.check_witness("blocking", None, 256, "llamacpp.n_batch", 8192).agrees is False


def test_two_freezes_beside_short_stretched_gaps_read_as_the_freeze() -> None:
    """Blocking under load (seen on real llama.cpp -b 8192 under tools/busy.py): both victims frozen for
    the whole prefill, and five short gaps also stretched past 1.5x the baseline (a busy client). The
    victims' step is the freeze, not the middle of the four longest gaps counted (a freeze and a short gap)."""
    freeze = 3000

    def victim(short: int) -> tuple[int, ...]:
        t = steady(0, 21)  # 0 .. 200 ms
        for _ in range(short):  # 20 ms steps after the intruder came
            t.append(t[-1] + 20 * MS)
        t.append(t[-1] + freeze * MS)  # the prompt's one step
        return tuple(t + [t[-1] + k * STEP_MS * MS for k in range(1, 30)])

    a, b = victim(3), victim(2)
    first = max(a[24], b[23])
    i = Intrusion(prompt_tokens=6144, send_ns=200 * MS, first_token_ns=first, end_ns=first + STEP_MS * MS,
                      victims=(a, b), sent_tokens=6144, counted_tokens=6144)
    r = inf.read_intrusion(i)
    assert r.stretched == 7  # five short gaps and two freezes
    assert r.step_gap_s == pytest.approx(freeze / 1000, rel=1e-6) == r.max_gap_s
    assert r.cover is not None and r.cover > 0.9


def hiccup(i: inf.Intrusion, at_ms: float, late_ms: float) -> inf.Intrusion:
    """The first victim's token after `at_ms` arrives `late_ms` late (a client or machine stall), as the
    simulator's did with three pytest workers on 2 cores; the next one is on time again."""
    first, *rest = i.victims
    k = next(n for n, t in enumerate(first) if t > at_ms * MS)
    moved = (*first[:k], first[k] + round(late_ms * MS), *first[k + 1:])
    return inf.Intrusion(**{**{f: getattr(i, f) for f in i.__slots__}, "victims": (moved, *rest)})


def test_one_hiccup_in_an_isolated_window_is_not_a_chunk() -> None:
    """An isolated prefill with one victim gap stretched 9 ms by a stall, at the largest size: the stretched
    gaps tile 2% of the window, not the whole of it as chunk steps do. The old rule (any stretched gap, small
    cover, bounded growth) called it `chunked`."""
    intrusions = [isolated(512), isolated(2048), hiccup(isolated(8192), 300, 9)]
    points = inf.pool([inf.read_intrusion(i) for i in intrusions])
    v = inf.analyse_interference(points)
    assert v.verdict == "isolated", v.reason
    e = v.evidence
    assert e is not None and e.stretch_hi >= inf.STRETCH_RATIO  # the hiccup is a stretched gap ...
    # ... that looked like a chunk
    assert e.cover_hi <= inf.CHUNKED_COVER and e.gap_growth <= inf.PROPORTIONAL * e.prefill_growth
    # the median of two victims: half of the one stall's 9 + 10 ms over the 420 ms window
    assert e.share_hi == pytest.approx(19 / 420 / 2, rel=0.05)
    assert e.share_max <= inf.ISOLATED_SHARE


def test_chunk_steps_tile_the_window_and_one_victim_hiccup_changes_nothing() -> None:
    v = judged([chunked(512, 256), chunked(2048, 256), hiccup(chunked(8192, 256), 100, 9)])
    assert v.verdict == "chunked", v.reason
    assert v.evidence is not None and v.evidence.share_hi >= 0.9


def test_stretched_gaps_tiling_a_third_of_the_window_decide_nothing() -> None:
    """Neither a tiled window (chunks) nor a few slow steps (isolated): between the two thresholds."""
    v = judged([thirds(s) for s in (512, 2048, 8192)])
    assert v.verdict == "inconclusive", v.reason
    e = v.evidence
    assert e is not None and inf.ISOLATED_SHARE < e.share_hi < inf.CHUNKED_SHARE, e


def thirds(size: int) -> inf.Intrusion:
    """An isolated prefill whose victims nonetheless stretch one 16 ms gap in every 48 ms of the window."""
    i = isolated(size)
    window_ms = (i.first_token_ns - i.send_ns) / MS  # type: ignore[operator]
    out = i
    for k in range(int(window_ms / 48)):
        out = hiccup(out, 206 + k * 48, 6)
    return inf.Intrusion(**{**{f: getattr(out, f) for f in out.__slots__},
                            "victims": (out.victims[0], out.victims[0])})


def test_an_undecided_reason_names_the_smaller_size_share_that_ruled_out_isolated() -> None:
    """Isolated is weighed on the largest stretched share at any size: where that is a smaller size's, the
    reason names it, not only the largest size's (0% there, which alone would read as isolated)."""
    v = judged([isolated(512), thirds(2048), isolated(8192)])
    assert v.verdict == "inconclusive", v.reason
    e = v.evidence
    assert e is not None and e.share_hi == 0.0 and e.share_max > inf.ISOLATED_SHARE, e
    assert v.reason.code == "interference.undecided" and v.reason["smaller_share"] == e.share_max


def test_sizes_the_client_or_a_hop_left_unread_are_named_in_the_run_reason() -> None:
    """Fewer than two readable sizes: the run's reason says which were the client's doing and which a hop's,
    from the readings' flags, and points at the rest."""
    def unread(size: int, *, client: bool = False, hop: bool = False, problem: str = "victim_silent") -> inf.Reading:
        why = Reason(f"interference.{problem}")
        return inf.Reading(size, None, None, None, None, None, None, None, problems=(why,), client_late=client,
                           hop_held=hop)

    late = inf.analyse_interference(
        inf.pool([unread(512, client=True), unread(2048, client=True), unread(8192, client=True)]))
    assert late.verdict == "inconclusive" and late.decided_by == "nothing"
    why = late.reason["unread"]
    assert why.code == "interference.unread" and not why["others"]
    assert [r.code for r in why["parts"]] == ["interference.unread_client_late"]
    assert why["parts"][0]["sizes"] == (512, 2048, 8192)
    assert "512, 2,048, 8,192 prompt tokens" in str(late.reason)
    held = inf.analyse_interference(inf.pool([unread(512, hop=True), unread(2048, problem="no_window_gaps")]))
    why = held.reason["unread"]
    assert why["others"]
    assert [(r.code, r["sizes"]) for r in why["parts"]] == [("interference.unread_hop_bursts", (512,))]
    # a size with one client-late rep and one rep that failed otherwise is not the client's alone
    mixed = inf.analyse_interference(inf.pool([unread(512, client=True), unread(512), unread(2048)]))
    assert mixed.reason["unread"].code == "interference.unread_elsewhere", mixed.reason
