"""How many users a server holds above a per-user floor: the pure analysis behind `servecheck capacity`.

A probe at N keeps N equal requests in flight (a closed loop) and is reduced here to per-request
samples from its steady part. A probed N passes only when the order-statistic interval of the
per-user rate at the asked percentile lies wholly above the floor (and, with a TTFT ceiling, the
TTFT interval wholly below it); `max_concurrency` is never an N that was not shown to pass.

Its modules, each importing only those listed before it: `criteria` (what is judged), `probes` (one
probe from its request records) and `records` (what the analysis decides), `judging` (one probed N) and
`search` (the next N), and `run` (the answer, and `analyse_capacity`); a layers contract in pyproject.toml holds
that order. The analysis builds no sentence: its reasons are codes and values (`model.reason`), said by
`model.words.capacity`. Every public name is re-exported here: `analysis.capacity.NAME` reads as it
always did.
"""

from __future__ import annotations

from servecheck.analysis.capacity.criteria import MIN_MEASURED_PER_LANE, Criteria
from servecheck.analysis.capacity.judging import assess, combine, side, ttfts_with_untimed, with_untimed
from servecheck.analysis.capacity.probes import (
    ProbeSample,
    length_valid,
    probe_from_records,
    steady_records,
    tokens_in_window,
)
from servecheck.analysis.capacity.records import (
    CapacityAnalysis,
    BaselineDrift,
    Marginal,
    NonMonotone,
    Point,
    least_words,
)
from servecheck.analysis.capacity.run import (
    analyse_capacity, answer_of, drift_of, held, limit_of, marginals, non_monotone,
)
from servecheck.analysis.capacity.search import next_n
from servecheck.analysis.rules import OUTPUT_LENGTH_TOLERANCE
from servecheck.model.bodies.capacity import Status

# The names the module `analysis/capacity.py` defined, and two it imported that other code reads
# through it: OUTPUT_LENGTH_TOLERANCE (tests/test_thresholds_once.py checks that it is the one rule) and
# Status (experiments/capacity.py).
__all__ = [
    "CapacityAnalysis", "Criteria", "BaselineDrift", "MIN_MEASURED_PER_LANE", "Marginal", "NonMonotone",
    "OUTPUT_LENGTH_TOLERANCE", "Point", "ProbeSample", "Status", "analyse_capacity", "answer_of", "assess", "combine",
    "drift_of", "held", "least_words", "length_valid", "limit_of", "marginals", "next_n", "non_monotone",
    "probe_from_records", "side", "steady_records", "tokens_in_window", "ttfts_with_untimed", "with_untimed",
]
