"""The staircase test, pure: classify how a batch's completion times group, and judge a whole run.

A queue finishes N equal requests in an evenly spaced staircase whose step is one single-request
time; real batching finishes them together; K slots finish them in groups of K. Verdicts are
judged from how the finish times group, never from how long the batch took.

Its modules, each importing only those listed before it: `windows` (the generation windows),
`records` (what the analysis takes in and decides), `grouping` (one batch's finish times),
`validity` (which measurements count), `trend` and `weighing` (the trend across N; the verdicts of a
batch, a point and the run), `findings`, and `run` (`analyse_staircase`); a layers contract in
pyproject.toml holds that order. Every public name is re-exported here: `analysis.staircase.NAME`
reads as it always did.
"""

from __future__ import annotations

from servecheck.analysis.rules import OUTPUT_LENGTH_TOLERANCE
from servecheck.analysis.staircase.findings import (
    aggregate_error_fracs,
    aggregate_finding,
    approximate_finding,
    client_finding,
    contamination_finding,
    failed_finding,
    length_finding,
    reference_disagreement_finding,
    reference_finding,
    short_of_request_finding,
    skew_finding,
    witness_finding,
)
from servecheck.analysis.staircase.grouping import (
    CLUSTER_MIN_LAST_FRAC,
    CLUSTER_SPREAD_FRAC,
    EVEN_STEP_SPREAD,
    LARGE_GAP_FRAC,
    PARTIAL_MIN_STEP_FRAC,
    REFERENCE_STEP_HI,
    REFERENCE_STEP_LO,
    SMALL_GAP_FRAC,
    STAIRCASE_EVEN_SPREAD,
    Grouping,
    classify_batch,
    group_finishes,
    group_steps,
)
from servecheck.analysis.findings import Finding, RequestRef
from servecheck.analysis.staircase.records import (
    DEFINITE_VERDICTS,
    MISLEADING_SUM_FRAC,
    STOPWATCH,
    BatchAnalysis,
    BatchVerdict,
    LevelAnalysis,
    MeasuredBatch,
    StaircaseAnalysis,
)
from servecheck.analysis.staircase.run import analyse_staircase, needs_more
from servecheck.analysis.staircase.trend import (
    FLAT_HI_RATIO,
    FLAT_LO_RATIO,
    REFERENCE_SPREAD_WARN,
    classify_trend,
    own_gain_bound,
    prefill_gain_bound,
    single_aggregates,
)
from servecheck.analysis.staircase.validity import (
    DISPATCH_SKEW_FRAC,
    STALL_DOUBT_FRAC,
    STALL_READ_FRAC,
    aggregate_tok_s,
    batch_doubt,
    length_outliers,
    off_length,
    queue_time_s,
    self_reported_sum,
    single_time_s,
    single_times_s,
    skew_invalid,
    stall_doubt,
)
from servecheck.analysis.staircase.weighing import (
    analyze_batch,
    analyze_point,
    contradiction,
    median_batch,
    point_verdict,
    set_aside_witness_decisions,
    slots_implied,
    weigh_windows,
    weigh_witnesses,
)
from servecheck.analysis.staircase.windows import (
    WINDOW_MIN_EVENTS,
    WINDOW_MIN_FRAC,
    WINDOW_OVERLAP_TOL,
    WindowReading,
    generation_windows,
    read_windows,
)
from servecheck.model.bodies.staircase import RISING_RATIO

# The names the module `analysis/staircase.py` defined, and two it imported that other code reads
# through it: RISING_RATIO (benchmarks/batching_gain.py) and OUTPUT_LENGTH_TOLERANCE
# (tests/test_thresholds_once.py checks that it is the one rule).
__all__ = [
    "BatchAnalysis", "BatchVerdict", "CLUSTER_MIN_LAST_FRAC", "CLUSTER_SPREAD_FRAC", "DEFINITE_VERDICTS",
    "DISPATCH_SKEW_FRAC", "EVEN_STEP_SPREAD", "FLAT_HI_RATIO", "FLAT_LO_RATIO", "Finding", "Grouping", "LARGE_GAP_FRAC",
    "MISLEADING_SUM_FRAC", "MeasuredBatch", "OUTPUT_LENGTH_TOLERANCE", "PARTIAL_MIN_STEP_FRAC", "LevelAnalysis",
    "REFERENCE_SPREAD_WARN", "REFERENCE_STEP_HI", "REFERENCE_STEP_LO", "RISING_RATIO", "RequestRef", "SMALL_GAP_FRAC",
    "STAIRCASE_EVEN_SPREAD", "STALL_DOUBT_FRAC", "STALL_READ_FRAC", "STOPWATCH", "StaircaseAnalysis",
    "WINDOW_MIN_EVENTS", "WINDOW_MIN_FRAC", "WINDOW_OVERLAP_TOL", "WindowReading",
    "aggregate_error_fracs", "aggregate_finding", "aggregate_tok_s", "analyze_batch", "analyze_point",
    "analyse_staircase", "approximate_finding", "batch_doubt", "classify_batch", "classify_trend", "client_finding",
    "contamination_finding", "contradiction", "failed_finding", "generation_windows", "group_finishes", "group_steps",
    "length_finding", "length_outliers", "median_batch", "needs_more", "off_length", "own_gain_bound", "point_verdict",
    "prefill_gain_bound", "queue_time_s", "read_windows", "reference_disagreement_finding", "reference_finding",
    "self_reported_sum", "set_aside_witness_decisions", "short_of_request_finding", "single_aggregates",
    "single_time_s", "single_times_s", "skew_finding", "skew_invalid", "slots_implied", "stall_doubt", "weigh_windows",
    "weigh_witnesses", "witness_finding",
]
