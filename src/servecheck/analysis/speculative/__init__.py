"""Speculative decoding from the stopwatch, pure: group one stream's token arrivals into decode steps,
estimate the mean tokens per step with an interval, and judge whether speculation is on and whether it pays.

A speculative step verifies a draft and emits every accepted token plus one at once: the tokens of one
step reach the client microseconds apart, steps arrive a step-time apart. The gaps between arrivals
therefore fall into two modes, and the step boundaries are the gaps of the larger one. A server's own
draft counters (llama.cpp `timings.draft_n` / `draft_n_accepted`) are compared with the estimate; they
corroborate, never decide.

Its modules, each importing only those listed before it: `grouping` (one stream's arrivals into steps),
`verdict` (tokens per step, its interval, the point's and the run's verdict), `paying` and `counters`
(the rate against a baseline; the server's own account), and `run` (`analyse_point`, `analyse_speculative`); a
layers contract in pyproject.toml holds that order. Every public name is re-exported here:
`analysis.speculative.NAME` reads as it always did.
"""

from __future__ import annotations

from servecheck.analysis.speculative.counters import (
    COUNTER_TOLERANCE,
    CounterCheck,
    MetricDeltas,
    check_counters,
    metric_tokens_per_step,
    server_tokens_per_step,
)
from servecheck.analysis.speculative.grouping import (
    BIMODAL_RATIO,
    DEAD_HI,
    DEAD_LO,
    GAP_FLOOR_NS,
    HELD_LOCAL_STEPS,
    HELD_SLACK,
    LATE_PAIR_TOLERANCE,
    LATE_READ_FRACTION,
    MAX_LATE_SHARE,
    NOISE_SHARE,
    SPLIT_FRACTION,
    Grouping,
    Stream,
    event_sizes,
    group_steps,
    late_arrivals,
    step_time,
    unhold,
)
from servecheck.analysis.speculative.paying import Pays, pays, stops_paying
from servecheck.analysis.speculative.run import (
    SpecPointAnalysis,
    SpeculativeAnalysis,
    analyse_point,
    analyse_speculative,
    behind_a_hop,
    pays_undecided,
    repeated,
)
from servecheck.analysis.speculative.verdict import (
    NOT_SPECULATING_HI,
    SPECULATING_LO,
    Estimate,
    estimate,
    judge,
    run_verdict,
)

# tests/test_backbone_pins.py pins the interval of the steps through `analysis.speculative._normal_interval`.
from servecheck.analysis.speculative.verdict import _normal_interval as _normal_interval

# The names the module `analysis/speculative.py` defined.
__all__ = [
    "BIMODAL_RATIO", "COUNTER_TOLERANCE", "CounterCheck", "DEAD_HI", "DEAD_LO", "Estimate", "GAP_FLOOR_NS", "Grouping",
    "HELD_LOCAL_STEPS", "HELD_SLACK", "LATE_PAIR_TOLERANCE", "LATE_READ_FRACTION", "MAX_LATE_SHARE", "MetricDeltas",
    "NOISE_SHARE", "NOT_SPECULATING_HI", "Pays", "SpecPointAnalysis", "SpeculativeAnalysis", "SPECULATING_LO",
    "SPLIT_FRACTION",
    "Stream", "analyse_point", "analyse_speculative", "behind_a_hop", "check_counters", "estimate", "event_sizes",
    "group_steps", "judge", "late_arrivals", "metric_tokens_per_step", "pays", "pays_undecided", "repeated",
    "run_verdict", "server_tokens_per_step", "step_time", "stops_paying", "unhold",
]
