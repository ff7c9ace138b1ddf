"""The whole arms analysis, pure: `analyse` puts the arms' labels, the position bias, the drift, the
deviant cells, the headline (or its refusal) and the warnings together from cells alone."""

from __future__ import annotations

from collections.abc import Sequence

from servecheck.analysis.arms.checks import _arms, _rep_key, deviant_cells, drift, position_bias
from servecheck.analysis.arms.findings import _warnings, headline, refusal
from servecheck.analysis.arms.labels import arm_result
from servecheck.analysis.arms.late import _client_named, labels_stand, late_reps
from servecheck.analysis.arms.records import DEFAULT_BIAS_LIMIT, ArmsAnalysis, Cell


def analyse_arms(
    cells: Sequence[Cell],
    *,
    bias_limit: float = DEFAULT_BIAS_LIMIT,
    baseline: int = 1,
    ttft_unresolved: frozenset[int] = frozenset(),
    gauges_decide: bool = True,
) -> ArmsAnalysis:
    """Everything `servecheck arms` reports, from cells alone; `ttft_unresolved` are the concurrencies
    whose TTFT the client's own timing error swamps (the headline then says nothing of TTFT there);
    `gauges_decide` off (--evidence stopwatch): the server's gauges never decide a label."""
    if not any(c.concurrency == baseline for c in cells):
        raise ValueError("the serial arm (concurrency 1) is the baseline and has no cells")
    late = late_reps(cells)
    kept = bool(late) and labels_stand(cells, baseline, gauges_decide=gauges_decide)
    if kept:
        late = set()
    timed = [c for c in cells if _rep_key(c) not in late]
    results = tuple(_client_named(arm_result(timed, a, gauges_decide=gauges_decide), len(late))
                    for a in _arms(cells))
    bias = position_bias(timed)
    refused = refusal(bias, bias_limit) if bias is not None and bias.spread > bias_limit else None
    top = results[-1]
    drift_ = drift(timed, baseline)
    deviants = tuple(deviant_cells(cells))
    return ArmsAnalysis(
        arms=results,
        position_bias=bias,
        bias_limit=bias_limit,
        drift=drift_,
        deviant_cells=deviants,
        headline=None if refused else headline(top, with_ttft=not ({top.concurrency, baseline} & ttft_unresolved)),
        refusal=refused,
        warnings=tuple(_warnings(cells, results, drift_, deviants, late_kept=kept)),
    )

