"""Whether a stream's arrival times are the server's or a hop's (analysis.transit), on streams built
with a known truth: a server's steps, and the same steps released by a hop that buffers them."""

from __future__ import annotations

import random
from dataclasses import replace

from servecheck.analysis import arms as A
from servecheck.analysis.transit import bursts, hop_hold_ns
from servecheck.model.reason import Reason

MS = 1_000_000


def made(step_ms: float, steps: int, per_step: int = 1) -> list[int]:
    """When a server wrote each token: `per_step` tokens a step, written microseconds apart."""
    return [int((i + 1) * step_ms * MS) + k * 2_000 for i in range(steps) for k in range(per_step)]


def through_hop(times: list[int], hold_ms: tuple[float, float], seed: int = 1) -> list[int]:
    """`times` as a hop that releases what it holds every `hold_ms` (jittered) delivers them."""
    out: list[int] = []
    rng, release, i = random.Random(seed), 0.0, 0
    while i < len(times):
        release += rng.uniform(*hold_ms) * MS
        while i < len(times) and times[i] <= release:
            out.append(int(release) + 2_000 * (len(out) % 20))
            i += 1
    return sorted(out)


def test_a_servers_own_stream_is_not_held() -> None:
    assert hop_hold_ns(made(15, 32)) == 0
    assert hop_hold_ns(made(20, 40, per_step=3)) == 0  # a speculative step's tokens come together, every step alike


def test_a_buffered_stream_is_held_up_to_its_longest_release_gap() -> None:
    """15 ms steps released every 35-105 ms: bursts whose size follows the time since the last one."""
    held = through_hop(made(15, 160), (35, 105))
    assert 35 * MS < hop_hold_ns(held) <= 105 * MS + 1_000_000
    found = bursts(held)
    assert max(g for _, g, _ in found if g is not None) == hop_hold_ns(held)


def test_too_few_bursts_to_tell_are_not_vouched_for() -> None:
    """32 tokens through the hop: about seven bursts, too few to tell a hop from a speculating server,
    so the stamps are not vouched for either."""
    assert hop_hold_ns(through_hop(made(15, 32), (35, 105))) > 35 * MS


def test_an_arms_rep_a_hop_held_is_left_out_and_named() -> None:
    cells = [A.Cell(rep=r, position=p, concurrency=c, wall_s=4.0 / (3 if c == 4 else 1), tokens=400, decode_tokens=396,
                    decoding_union_s=3.9 / (3 if c == 4 else 1), decoding_sum_s=3.9 * (1.33 if c == 4 else 1),
                    per_user_rate_tok_s=100.0, ttft_s=0.02, start_s=10.0 * r + p)
             for r in range(4) for p, c in enumerate((1, 4) if r % 2 else (4, 1))]
    held = [replace(c, hop_held_ms=3000.0) if (c.rep, c.concurrency) == (1, 4) else c for c in cells]
    result = A.analyse_arms(held)
    speedup = result.arm(4).aggregate_speedup
    assert speedup is not None and speedup.n == 3
    assert any(isinstance(w.message, Reason) and w.message.code == "arms.hop_held" and w.message["held_ms"] == 3000.0
               for w in result.warnings)
    # a hold no label can feel is kept, and said
    small = A.analyse_arms([replace(c, hop_held_ms=5.0) if (c.rep, c.concurrency) == (1, 4) else c for c in cells])
    speedup = small.arm(4).aggregate_speedup
    assert speedup is not None and speedup.n == 4
    assert any(isinstance(w.message, Reason) and w.message.code == "arms.late_kept" for w in small.warnings)

