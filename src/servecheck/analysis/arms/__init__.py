"""What concurrency buys the operator and costs each user: the pure analysis behind `servecheck arms`.

A cell is one rep of one arm (the same requests, `concurrency` of them in flight at once). Speedups
are within-rep ratios against the serial arm, which is what the rotated design supports; the
generation stage is measured from the time during which at least one request was decoding, so a
queue cannot pass for batching.

Its modules, each importing only those listed before it: `records` (what the analysis takes in and
decides, and the rules its labels read), `cells` (a batch's request records reduced to a cell) and
`order` (the rotated design), `labels` (each arm's intervals and label), `checks` (position bias, drift,
deviant cells, cached prompts), `late` (reps the client read late or a hop held), `findings` (the
headline or why it is withheld, and the warnings), and `run` (`analyse_arms`); a layers contract in
pyproject.toml holds that order. Every public name is re-exported here: `analysis.arms.NAME` reads as it
always did. What the analysis decides it returns as reasons (`model.reason`); their words are
`model.words.arms`'.
"""

from __future__ import annotations

from servecheck.analysis.arms.cells import cell_from_records, decode_interval_ns, per_user_rate_tok_s, union_length_ns
from servecheck.analysis.arms.checks import (
    cached_prompt_suspects,
    deviant_cells,
    drift,
    drift_position_bias,
    position_bias,
    position_spreads,
)
from servecheck.analysis.arms.findings import headline, refusal
from servecheck.analysis.arms.labels import (
    arm_result,
    interval_level,
    label_arm,
    label_with_reason,
    median_by_arm,
    median_interval,
    observed_peak,
    within_rep_ratios,
)
from servecheck.analysis.arms.late import labels_stand, late_reps, shifted
from servecheck.analysis.arms.order import balanced, rotated_order, schedule
from servecheck.analysis.arms.records import (
    DEFAULT_BIAS_LIMIT,
    MIN_GAUGE_CELL_SHARE,
    MIN_REPS_FOR_RISE,
    MIN_RISE,
    NO_GAIN_CEILING,
    RISE_INTERVAL_FLOOR,
    ArmResult,
    ArmsAnalysis,
    Cell,
    DeviantCell,
    SerialDrift,
    Estimate,
    PositionBias,
    Finding,
)
from servecheck.analysis.arms.run import analyse_arms
from servecheck.analysis.rules import OUTPUT_LENGTH_TOLERANCE
from servecheck.model.bodies.arms import INTERVAL_LEVEL

# The names the module `analysis/arms.py` defined, and two it imported that other code may read
# through it: OUTPUT_LENGTH_TOLERANCE (tests/test_thresholds_once.py checks that it is the one rule) and
# INTERVAL_LEVEL, the level its intervals aim at (model.bodies.arms).
__all__ = [
    "ArmResult", "ArmsAnalysis", "Cell", "DEFAULT_BIAS_LIMIT", "DeviantCell", "Estimate", "Finding", "INTERVAL_LEVEL",
    "MIN_GAUGE_CELL_SHARE", "MIN_REPS_FOR_RISE", "MIN_RISE", "NO_GAIN_CEILING", "OUTPUT_LENGTH_TOLERANCE",
    "PositionBias", "RISE_INTERVAL_FLOOR", "SerialDrift", "analyse_arms", "arm_result", "balanced",
    "cached_prompt_suspects",
    "cell_from_records", "decode_interval_ns", "deviant_cells", "drift", "drift_position_bias", "headline",
    "interval_level", "label_arm", "label_with_reason", "labels_stand", "late_reps", "median_by_arm",
    "median_interval", "observed_peak", "per_user_rate_tok_s", "position_bias", "position_spreads", "refusal",
    "rotated_order", "schedule", "shifted", "union_length_ns", "within_rep_ratios",
]
