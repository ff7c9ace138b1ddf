"""What is judged, pure: the per-user floor, the TTFT ceiling and the percentile every probe is judged
against, and how many requests each lane must send for an interval at the asked level."""

from __future__ import annotations

import math
from dataclasses import dataclass

from servecheck.analysis.rules import INTERVAL_LEVEL
from servecheck.analysis.stats import samples_needed


# A verdict needs an interval that covers the true percentile with at least INTERVAL_LEVEL
# (analysis.rules; exact, from the binomial). A probe too small to reach it is `uncertain`.
# Each lane's measured requests after its discarded first one. Two, so that every lane contributes
# a request that started and ended while all N were in flight, and the aggregate window holds at
# least one whole round of the loop.
MIN_MEASURED_PER_LANE = 2
# The serial baseline is measured again at the end; a change beyond DRIFT_LIMIT (analysis.rules),
# either way, means the machine drifted while the search ran.


@dataclass(frozen=True)
class Criteria:
    """The floor and ceiling every probe is judged against.

    `percentile` P reads "P% of users are served at least this well": the per-user rate is judged
    at its (100 - P)th percentile and the TTFT at its Pth (50: both at the median)."""

    min_user_rate_tok_s: float
    max_ttft_s: float | None = None
    percentile: float = 50.0
    level: float = INTERVAL_LEVEL

    @property
    def rate_quantile(self) -> float:
        return 1.0 - self.percentile / 100.0

    @property
    def ttft_quantile(self) -> float:
        return self.percentile / 100.0

    def samples_needed(self) -> int:
        return max(samples_needed(self.rate_quantile, self.level), samples_needed(self.ttft_quantile, self.level))

    def measured_per_lane(self, n: int) -> int:
        """Requests each of n lanes sends after its discarded first one. When the lanes finish in
        step, the last round loses all but one request to the drain, hence the one extra round."""
        needed = self.samples_needed()
        return max(MIN_MEASURED_PER_LANE, 1 + math.ceil((needed - 1) / n))
