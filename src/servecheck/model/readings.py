"""What the analysis reads off a saved run for its reports: the figures a renderer shows that the
document does not hold as such (medians over reps, the run's one verdict word). Built by
`analysis.readings.read_run`, handed to the renderers by whoever reads the run; renderers only
format these fields."""

from __future__ import annotations

from dataclasses import dataclass, field

from servecheck.model.reason import Text
from servecheck.model.sidebyside import Diff


@dataclass(frozen=True, slots=True)
class StaircasePointReading:
    """One staircase point, read across its reps (medians over the reps that have the figure)."""

    queue_s: tuple[float, ...] | None = None  # queue time per finishing rank; None where no rep has it for all
    effective_concurrency: float | None = None  # sum of latencies / wall (Little's law)
    self_reported_sum_tok_s: float | None = None  # the server's claimed sum, over the reps that have both
    true_aggregate_tok_s: float | None = None  # the true aggregate, over those same reps
    # the sum misleads (a queue's requests each report their own rate) where any rep recorded so, or where
    # the document predates that record (it keeps the word it was shown with); None without a sum
    self_reported_misleading: bool | None = None
    per_user_rate_tok_s: float | None = None  # median over the point's requests of each one's stream rate


@dataclass(frozen=True, slots=True)
class ArmsReading:
    """An arms run's intervals and its per-arm medians."""

    # the coverage of the run's intervals: that of the arm with the fewest reps among those beyond the
    # serial arm that have one (`analysis.arms.interval_level`); None where no arm has an interval
    interval_level: float | None = None
    # by concurrency: the arm's own median, else the median over its cells (an older document kept only those)
    aggregate_tok_s: dict[int, float] = field(default_factory=dict)
    per_user_rate_tok_s: dict[int, float] = field(default_factory=dict)
    ttft_s: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunReading:
    """Everything a report of one run shows beyond the document's own fields."""

    verdict: Text | None = None  # the run's one word (`analysis.run_verdict`); None where it has none
    log_audit: str | None = None  # the word of the run's log findings (`log`, or a --serve run's audit); None without
    staircase: tuple[StaircasePointReading, ...] = ()  # one per point, in the document's order
    arms: ArmsReading = field(default_factory=ArmsReading)
    parts: tuple[RunReading, ...] = ()  # a demo's: one per server configuration, in the document's order


@dataclass(frozen=True, slots=True)
class ReportReading:
    """A report of several runs: each run's reading, in order, and the runs side by side."""

    runs: tuple[RunReading, ...] = ()
    side_by_side: Diff | None = None  # staircase and arms runs by level, where two or more are in the report
