"""The `capacity` document's body (docs/schema.md); registered in BODIES below."""

from __future__ import annotations

from typing import Literal

from servecheck.model.bodies import BODIES
from servecheck.model.bodies.common import (
    Calibrated,
    ClientCheck,
    LogAudit,
    UnscannedLogAudit,
    Request,
    Server,
    Warning,
)
from servecheck.model.codec import only_when_recorded, record, until_finished
from servecheck.model.reason import Text

Status = Literal["pass", "fail", "uncertain"]
Limit = Literal["user_rate", "ttft", "max_n", "undetermined"]
NonMonotoneKind = Literal["status", "per_user_rate"]  # which reading broke the order of N
Interval = tuple[float, float]  # [lo, hi]: the order-statistic interval of a percentile
Purpose = Literal["search", "remeasure", "baseline_end"]  # why a probe ran: the search, an uncertain N again, drift


@record
class CapacityDesign:
    """The floor and ceiling every probe was judged against, and what each probe sent."""

    min_user_rate_tok_s: float | None = None
    max_ttft_s: float | None = None
    percentile: float | None = None
    rate_quantile: float | None = None  # the per-user rate is judged at this quantile
    ttft_quantile: float | None = None
    level: float | None = None  # the coverage a verdict needs
    max_n: int | None = None
    tokens: int | None = None
    prompt_tokens: int | None = None
    remeasures: int | None = None
    samples_needed: int | None = None


@record
class CapacityPoint:
    """Every probe at one N pooled, its verdict, and what the users added since the N before bought."""

    n: int | None = None
    per_user_tok_s: float | None = None
    ttft_s: float | None = None
    aggregate_tok_s: float | None = None
    status: Status | None = None
    per_user_interval: Interval | None = None
    ttft_interval: Interval | None = None
    interval_level: float | None = None  # the intervals' exact coverage of the true percentile
    samples: int | None = None
    probes: int | None = None
    failed: int | None = None
    rate_status: Status | None = None
    ttft_status: Status | None = None  # None without --max-ttft
    reason: Text | None = None
    prev_n: int | None = None
    marginal_gain_tok_s_per_user: float | None = None
    marginal_aggregate_gain: float | None = None
    marginal_per_user_change: float | None = None


@record
class LeastMarginal:
    """The step between two probed N where an added user bought least, with its sentence."""

    n: int | None = None
    prev_n: int | None = None
    gain_tok_s_per_user: float | None = None
    aggregate_gain: float | None = None
    per_user_change: float | None = None
    text: Text | None = None


@record
class CapacityDrift:
    """The serial baseline at the start against the same probe after the search."""

    start_tok_s: float | None = None
    end_tok_s: float | None = None
    change: float | None = None
    limit: float | None = None
    exceeded: bool | None = None


@record
class NonMonotone:
    kind: NonMonotoneKind | None = None
    n_low: int | None = None
    n_high: int | None = None
    message: Text | None = None


@record
class CapacityProbe:
    """One probe as it ran: its steady-window samples and every request record."""

    n: int | None = None
    purpose: Purpose | None = None
    release_s: float | None = None
    dispatch_skew_s: float | None = None
    window_s: tuple[float, float] | None = None  # [start, end], seconds from the run start
    requests_sent: int | None = None
    discarded: int | None = None
    measured: int | None = None
    failed: int | None = None
    failure: Text | None = None  # how many failed, and the first failure's reason in the server's words
    aggregate_tok_s: float | None = None
    per_user_rates_tok_s: tuple[float, ...] = ()
    ttfts_s: tuple[float, ...] = ()
    length_off: tuple[Text, ...] = ()
    # steady requests the client itself read late, named with how late: left out of the samples (present
    # only where there were some, so a document written before the field reads back to itself)
    client_late: tuple[Text, ...] | None = only_when_recorded()
    # steady requests whose stream arrived coalesced in transit, which a hop may have held beyond the same
    # tolerance, named with how long: left out of the samples (present only where there were some)
    hop_held: tuple[Text, ...] | None = only_when_recorded()
    requests: tuple[Request, ...] = ()


@record
class CapacityBody:
    max_concurrency: int | None = None  # 0: one user alone fails; None: not even N=1 was shown either way
    limit: Limit | None = None
    determined: bool | None = None
    answer: Text | None = None
    design: CapacityDesign | None = None
    points: tuple[CapacityPoint, ...] = ()
    least_marginal: LeastMarginal | None = None
    drift: CapacityDrift | None = None
    non_monotone: tuple[NonMonotone, ...] = ()
    probes: tuple[CapacityProbe, ...] = ()
    server: Server | None = None
    warmup: Request | None = None
    warnings: tuple[Warning, ...] = ()
    notes: tuple[str, ...] = ()
    log_audit: LogAudit | UnscannedLogAudit | None = until_finished()  # with --serve; null in a finished run without
    calibration: Calibrated | None = None  # the client's pre-flight; None: a document from before it
    # one per concurrency, before its first batch; None: from before it
    client_checks: tuple[ClientCheck, ...] | None = None


BODIES["capacity"] = CapacityBody
