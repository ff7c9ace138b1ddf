"""Whether a stream's arrival times are the server's or a hop's (analysis.transit), on streams built
with a known truth: a server's steps, and the same steps released by a hop that buffers them."""

from __future__ import annotations

import random
from dataclasses import replace

from servecheck.analysis import arms as A
from servecheck.analysis.transit import PACED_MIN_GROUPS, bursts, hop_hold_ns, paced_on_the_way, relative
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


def varied_steps(seed: int, steps: int, step_ms: float = 13.0, mean: float = 2.0, cost_ms: float = 0.0) -> list[int]:
    """A speculating server's stream: 1 + Binomial(4, (mean - 1) / 4) tokens a step, each step `step_ms` plus
    `cost_ms` a token (a verify step that costs per token accepted), jittered 5%."""
    rng, t, out = random.Random(seed), 0.0, []
    for _ in range(steps):
        k = 1 + sum(rng.random() < (mean - 1) / 4 for _ in range(4))
        t += (step_ms + cost_ms * k) * rng.uniform(0.95, 1.05) * MS
        out += [int(t) + j * 2_000 for j in range(k)]
    return out


def pooled(streams: list[list[int]]) -> list[tuple[float, float]]:
    """Every stream's (opening gap, size) per group, as speculative's grouping hands them on (first and last out)."""
    pairs: list[tuple[float, float]] = []
    for times in streams:
        found = bursts(times)
        pairs += relative([(k, g) for k, g, _ in found[1:-1] if g is not None])
    return pairs


def test_a_hop_in_front_of_a_speculating_server_shows_only_pooled() -> None:
    """Two tokens a 13 ms step on average, through a 35-105 ms hop: the way real llama.cpp with
    --spec-synth-len 2 read `speculating` at 4-5x its tokens per step. Pooled over four streams the sizes
    grow with the gaps at a hop's slope; without the hop the same server's steps keep their size."""
    held = [through_hop(varied_steps(s, 64), (35, 105), seed=s) for s in range(4)]
    found = paced_on_the_way(pooled(held))
    assert found is not None and found.code == "run.paced", found
    assert found["lo"] > 0 and found["lo"] <= 1 <= found["hi"] and found["groups"] >= PACED_MIN_GROUPS
    assert paced_on_the_way(pooled([varied_steps(s, 64) for s in range(4)])) is None


def test_a_draft_whose_steps_cost_per_token_is_no_hop() -> None:
    """A verify step that takes longer the more it accepts: sizes grow with the gaps, but far more steeply than
    a hop's 1 (the step's fixed cost dominates), so the steps stand; gaps varying too little tell nothing."""
    costly = [varied_steps(s, 64, step_ms=13.0, cost_ms=2.0) for s in range(4)]
    assert paced_on_the_way(pooled(costly)) is None
    even = [made(13.0, 64, per_step=3) for _ in range(2)]
    assert paced_on_the_way(pooled(even)) is None


def test_too_few_groups_across_the_run_are_no_evidence_of_steps() -> None:
    few = [through_hop(varied_steps(0, 40, step_ms=8.0), (35, 105))]
    found = paced_on_the_way(pooled(few))
    assert found is not None and found.code == "run.paced_too_few"
    assert found["groups"] < PACED_MIN_GROUPS == found["needed"]
