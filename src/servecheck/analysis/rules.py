"""Every limit that more than one analysis applies, once: a command that asks "is this drift?" or "is
this difference a figure?" gets the same answer as every other. A limit that lower layers need too
lives in `model` and is named here, so an analysis finds all its shared rules in one place.

`tests/test_thresholds_once.py` holds it: a number written under two names is an error unless the
names are listed there as different rules that happen to share a value."""

from __future__ import annotations

from servecheck.model.bodies.arms import INTERVAL_LEVEL
from servecheck.model.client import CLIENT_ERROR_FRAC, FIGURE_FRAC
from servecheck.model.records import OUTPUT_LENGTH_TOLERANCE

__all__ = [
    "CLIENT_ERROR_FRAC", "DRIFT_LIMIT", "FIGURE_FRAC", "INTERVAL_LEVEL", "OUTPUT_LENGTH_TOLERANCE",
    "STAIRCASE_STEP_TOL", "drifted",
]

# OUTPUT_LENGTH_TOLERANCE (model.records, 5%): output more than this far from what was asked (or
# from the run's modal length) did not do the same work. In `model` because the client's tally
# needs it to size a stream's budget.

# INTERVAL_LEVEL (model.bodies.arms, 95%): the coverage every order-statistic interval aims at,
# arms' median ratios and capacity's percentiles alike. In `model` because the arms reports print it.

# FIGURE_FRAC (model.client, 2%): the precision of a figure servecheck reports. The client's timing
# error may be at most this much of a figure called the server's, and for the same reason a
# difference smaller than this is not one servecheck claims: a speculative rate that pays or costs,
# a per-user rate that changed. In `model` because the client's pre-flight judges against it.

# CLIENT_ERROR_FRAC (model.client, 5%): the client's timing error at N streams may be at most this
# much of the time a command measures for its verdict to stand (the figure beside it answers to
# FIGURE_FRAC). In `model` because the client's pre-flight judges against it.

# A reference measured again at the end of a run (arms' serial arm, capacity's serial baseline,
# context's shallowest depth) that moved more than this, either way, means the machine drifted
# while the run went on: the seed's burst-to-plateau 8.2% was the order of the effects looked for,
# so 5% deserves the reader's attention, and a server that speeds up moves ratios as much.
DRIFT_LIMIT = 0.05
# Beside it, not the same rule: staircase's REFERENCE_SPREAD_WARN (25%) names a machine whose speed
# moved across its several N=1 measurements (slowest / fastest - 1, not first against last). Its
# definition gives no reason for 25%; it equals STAIRCASE_STEP_TOL below, the smallest difference the
# staircase's shapes are told apart by, where the commands that read ratios judge effects of 5-10%
# and need the tighter limit. Left as it is (behaviour unchanged); tying it to one of the two is a decision.

# A queue hands work over one request at a time: each step of its staircase (release -> first
# finish, then finish -> finish) lies within +-25% of the single-request time T1, and a request that
# waited for k whole requests queued k service times within 25% of one. Seed 000's queue stepped
# 5.5-5.7 s against T1 = 5.51 s (under 4%), so 25% is wide for noise yet far from the 50% steps of
# a two-way batch. The staircase and the server-timing witness judge a queue by it.
STAIRCASE_STEP_TOL = 0.25


def drifted(change: float) -> bool:
    """Whether a reference's relative change between its first and last measurement is drift."""
    return abs(change) > DRIFT_LIMIT

