"""One prompt size, its reps pooled, pure: medians of the valid reps' figures and the p99 over all
their gaps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servecheck.analysis.interference.intrusion import GAP_PERCENTILE, Reading, percentile
from servecheck.analysis.stats import median
from servecheck.model.reason import Reason


@dataclass(frozen=True, slots=True)
class Point:
    """One prompt size, its valid reps pooled: medians of the per-rep figures, the p99 over all their gaps."""

    prompt_tokens: int
    readings: tuple[Reading, ...]

    @property
    def valid_readings(self) -> tuple[Reading, ...]:
        return tuple(r for r in self.readings if r.valid)

    @property
    def valid(self) -> bool:
        return bool(self.valid_readings)

    def _median(self, values: Sequence[float | int | None]) -> float | None:
        found = [float(v) for v in values if v is not None]
        return median(found) if found else None

    @property
    def baseline_s(self) -> float | None:
        return self._median([r.baseline_s for r in self.valid_readings])

    @property
    def max_gap_s(self) -> float | None:
        return self._median([r.max_gap_s for r in self.valid_readings])

    @property
    def step_gap_s(self) -> float | None:
        return self._median([r.step_gap_s for r in self.valid_readings])

    @property
    def p99_gap_s(self) -> float | None:
        pooled = [g for r in self.valid_readings for g in r.window_gaps_s]
        return percentile(pooled, GAP_PERCENTILE) if pooled else None

    @property
    def lost_s(self) -> float | None:
        return self._median([r.lost_s for r in self.valid_readings])

    @property
    def stretched(self) -> float | None:
        return self._median([r.stretched for r in self.valid_readings])

    @property
    def ttft_s(self) -> float | None:
        return self._median([r.ttft_s for r in self.valid_readings])

    @property
    def stretched_share(self) -> float | None:
        return self._median([r.stretched_share for r in self.valid_readings])

    @property
    def prefill_tok_s(self) -> float | None:
        return self._median([r.prefill_tok_s for r in self.valid_readings])

    @property
    def cover(self) -> float | None:
        return self._median([r.cover for r in self.valid_readings])

    @property
    def chunk_tokens(self) -> float | None:
        return self._median([r.chunk_tokens for r in self.valid_readings])

    @property
    def problems(self) -> tuple[Reason, ...]:
        return tuple(dict.fromkeys(p for r in self.readings for p in r.problems))


def pool(readings: Sequence[Reading]) -> list[Point]:
    """One point per prompt size, in ascending order."""
    sizes = sorted({r.prompt_tokens for r in readings})
    return [Point(s, tuple(r for r in readings if r.prompt_tokens == s)) for s in sizes]
