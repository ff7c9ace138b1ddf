"""What the design itself reads, pure: the position bias (across the positions an arm held when the order
rotated, from the drift when it was fixed), the serial arm's drift, the cells whose output was not the
run's, and the requests a prefix cache partly served."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

from servecheck.analysis.arms.labels import _median_of
from servecheck.analysis.arms.records import Cell, DeviantCell, SerialDrift, PositionBias
from servecheck.analysis.cache import record_contaminated
from servecheck.analysis.rules import OUTPUT_LENGTH_TOLERANCE
from servecheck.analysis.stats import median, mode
from servecheck.model.reason import Reason
from servecheck.model.records import RequestRecord


def _rep_key(c: Cell) -> tuple[int, int]:
    return (c.run, c.rep)


def position_spreads(cells: Sequence[Cell]) -> list[PositionBias]:
    """Per arm, its median throughput at each position it occupied, after taking out each rep's level.

    Dividing by the rep's level removes slow drift across the run (which rotation balances and the
    drift check reports), leaving what running first or last within a rep does to an arm.
    """
    arm_med = {a: _median_of([c for c in cells if c.concurrency == a], "aggregate_tok_s") for a in _arms(cells)}
    rel: dict[tuple[int, int], list[tuple[Cell, float]]] = defaultdict(list)
    for c in cells:
        agg, ref = c.aggregate_tok_s, arm_med.get(c.concurrency)
        if agg is not None and ref:
            rel[_rep_key(c)].append((c, agg / ref))
    out = []
    for a in _arms(cells):
        by_pos: dict[int, list[float]] = defaultdict(list)
        for members in rel.values():
            level = median([r for _, r in members])
            for c, r in members:
                if c.concurrency == a and level > 0:
                    by_pos[c.position].append(r / level * (arm_med[a] or 0.0))
        if len(by_pos) < 2:
            continue
        meds = tuple(sorted((p, median(v)) for p, v in by_pos.items()))
        lo, hi = min(v for _, v in meds), max(v for _, v in meds)
        out.append(PositionBias(a, (hi - lo) / lo if lo > 0 else math.inf, "positions", meds))
    return out


def drift_position_bias(cells: Sequence[Cell]) -> PositionBias | None:
    """Position bias when the order was fixed: each arm always held one position, so positions cannot
    be compared directly. A steady drift then charges each arm with the drift between its place in
    the rep and the first place; the drift rate comes from every arm's trend across the run, the
    places from the cells' own times. The arm carrying the largest bias is named."""
    arms = _arms(cells)
    slopes = [s for s in (_log_slope_per_s(cells, a) for a in arms) if s is not None]
    if len(arms) < 2 or not slopes:
        return None
    per_s = median(slopes)
    offsets = _offsets_in_rep_s(cells)
    biased = [(abs(math.expm1(per_s * off)), a) for a, off in offsets.items()]
    spread, arm = max(biased)
    return PositionBias(arm, spread, "drift")


def _mid_s(c: Cell) -> float:
    return c.start_s + c.wall_s / 2.0


def _log_slope_per_s(cells: Sequence[Cell], concurrency: int) -> float | None:
    """Theil-Sen slope of log throughput against time: robust to one odd cell. Pairs are taken within
    a run only: pooled runs each count time from their own start."""
    pts = [
        (c.run, _mid_s(c), math.log(c.aggregate_tok_s))
        for c in cells
        if c.concurrency == concurrency and c.aggregate_tok_s
    ]
    pairs = [
        (y2 - y1) / (x2 - x1)
        for k, (r1, x1, y1) in enumerate(pts)
        for r2, x2, y2 in pts[k + 1 :]
        if r1 == r2 and x2 != x1
    ]
    return median(pairs) if pairs else None


def _offsets_in_rep_s(cells: Sequence[Cell]) -> dict[int, float]:
    """Per arm, the median time between its cell's middle and the middle of its rep's first cell."""
    firsts = {_rep_key(c): _mid_s(c) for c in cells if c.position == 0}
    by_arm: dict[int, list[float]] = defaultdict(list)
    for c in cells:
        if _rep_key(c) in firsts:
            by_arm[c.concurrency].append(_mid_s(c) - firsts[_rep_key(c)])
    return {a: median(v) for a, v in by_arm.items()}


def position_bias(cells: Sequence[Cell]) -> PositionBias | None:
    """The widest position spread of any arm, measured from positions when the order rotated."""
    spreads = position_spreads(cells)
    if spreads:
        return max(spreads, key=lambda b: b.spread)
    return drift_position_bias(cells)


def drift(cells: Sequence[Cell], baseline: int = 1) -> SerialDrift | None:
    """Serial throughput over the first quarter of reps (at least one) against the last quarter,
    within each run (pooled runs each count time from their own start); the run that lost most."""
    found = [d for d in (_run_drift(cells, run, baseline) for run in sorted({c.run for c in cells})) if d is not None]
    return max(found, key=lambda d: d.loss, default=None)


def _run_drift(cells: Sequence[Cell], run: int, baseline: int) -> SerialDrift | None:
    serial = sorted(
        (c for c in cells if c.run == run and c.concurrency == baseline and c.aggregate_tok_s), key=lambda c: c.start_s
    )
    if len(serial) < 2:
        return None
    k = max(1, len(serial) // 4)
    first = median([c.aggregate_tok_s or 0.0 for c in serial[:k]])
    last = median([c.aggregate_tok_s or 0.0 for c in serial[-k:]])
    return SerialDrift(first, last, k, run)


def deviant_cells(cells: Sequence[Cell], limit: float = OUTPUT_LENGTH_TOLERANCE) -> list[DeviantCell]:
    """Cells whose total output is more than `limit` away from their run's modal output."""
    out = []
    for run in sorted({c.run for c in cells}):
        mine = [c for c in cells if c.run == run]
        modal = mode([c.tokens for c in mine])
        for c in mine:
            if modal > 0 and abs(c.tokens - modal) / modal > limit:
                out.append(DeviantCell(run, c.rep, c.concurrency, c.tokens, modal))
    return out


def cached_prompt_suspects(
    records: Iterable[tuple[int, int, RequestRecord]],
) -> list[Reason]:
    """Requests (rep, concurrency, record) whose prompt the prefix cache partly served, named."""
    out = []
    for rep, conc, r in records:
        if record_contaminated(r):
            cached = r.server.cached_prompt_tokens if r.server else None
            out.append(Reason("arms.cached_prompt", rep=rep, concurrency=conc, request=r.index, nonce=r.nonce,
                                   cached=cached))
    return out


def _arms(cells: Sequence[Cell]) -> list[int]:
    return sorted({c.concurrency for c in cells})

