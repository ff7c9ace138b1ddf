"""What one user's long prompt costs every other user's stream, pure: from the victims' token arrivals and
the intruder's send and first-token times, the victims' baseline interval, their longest and p99 gap while
the intruder was prefilled, the time they lost, and whether the server prefills in chunks, in one blocking
step, or elsewhere.

The stopwatch decides. A server that prefills a prompt of S tokens in one step freezes every running stream
for that whole step: the longest victim gap covers the intruder's whole prefill window and grows with it.
A server that splits the prompt into chunks of K tokens, each in the same step as the running streams'
next tokens, stretches every victim gap to about one chunk's prefill plus a decode step, however long the
prompt: the longest gap stays bounded while the prefill window grows, and longest gap x prefill rate is
about K. A server that prefills elsewhere leaves the victims' gaps as they were. Witnesses (the batch
budget an engine logged) are compared with the measured chunk; they never decide.

Its modules, each importing only those listed before it: `intrusion` (one intrusion read, and the rules
that read it), `points` (one prompt size, its reps pooled), `verdict` (the verdict across sizes), `headline`
(the figures the run's one sentence quotes) and `witnesses` (the engine's stated budget beside the measured
chunk); a layers contract in pyproject.toml holds that order. Each returns its reasons as codes and values
(`model.reason`); their words are `model.words.interference`'s. Every public name is re-exported here:
`analysis.interference.NAME` reads as it always did.
"""

from __future__ import annotations

from servecheck.analysis.interference.intrusion import (
    BURST_S,
    CLIENT_BASELINE_SHARE,
    CLIENT_BURSTS,
    CLIENT_BURST_FRACTION,
    CLIENT_STRETCHED_SHARE,
    GAP_PERCENTILE,
    HOP_BURSTS,
    MIN_BASELINE_GAPS,
    SENT_EARLY,
    STRETCH_RATIO,
    TRUNCATED_SHARE,
    Intrusion,
    Reading,
    baseline_gaps,
    baseline_spans,
    client_problem,
    gaps,
    intrusion_problems,
    percentile,
    read_intrusion,
    stretched_share,
    time_weighted_median,
    window_gaps,
)
from servecheck.analysis.interference.points import Point, pool
from servecheck.analysis.interference.verdict import (
    BLOCKING_COVER,
    CHUNKED_COVER,
    CHUNKED_SHARE,
    ISOLATED_SHARE,
    PREFILL_GROWTH_MIN,
    PROPORTIONAL,
    Evidence,
    InterferenceAnalysis,
    chunk_estimate,
    evidence_of,
    analyse_interference,
    what_left_sizes_unread,
)
from servecheck.analysis.interference.witnesses import WITNESS_TOLERANCE, WitnessCheck, check_witness
from servecheck.analysis.interference.headline import REFERENCE_CHUNK, sentence

# The names the module `analysis/interference.py` defined.
__all__ = [
    "BLOCKING_COVER", "BURST_S", "CHUNKED_COVER", "CHUNKED_SHARE", "CLIENT_BASELINE_SHARE", "CLIENT_BURSTS",
    "CLIENT_BURST_FRACTION", "CLIENT_STRETCHED_SHARE", "Evidence", "GAP_PERCENTILE", "HOP_BURSTS", "ISOLATED_SHARE",
    "Intrusion", "MIN_BASELINE_GAPS", "PREFILL_GROWTH_MIN", "PROPORTIONAL", "Point", "REFERENCE_CHUNK", "Reading",
    "InterferenceAnalysis", "SENT_EARLY", "STRETCH_RATIO", "TRUNCATED_SHARE", "WITNESS_TOLERANCE", "WitnessCheck",
    "baseline_gaps", "baseline_spans", "check_witness", "chunk_estimate", "client_problem", "evidence_of", "gaps",
    "intrusion_problems", "analyse_interference", "percentile", "pool", "read_intrusion", "sentence",
    "stretched_share", "time_weighted_median", "what_left_sizes_unread", "window_gaps",
]
