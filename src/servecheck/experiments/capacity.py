"""The capacity experiment: closed-loop probes at N = 1, 2, 4, ... then bisection, and the serial
baseline measured again at the end so drift cannot pose as a capacity effect.

A probe at N keeps exactly N equal requests in flight: the driver's N lanes each send their next
request the moment the last one ends, every request on a fresh connection with its own nonce.
Each lane's first request (the synchronized start) is discarded by the analysis. The caller gets
the run after every probe, so nothing measured is lost to a crash or a Ctrl-C.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from servecheck.analysis.client_timing import request_reads, vouch_reads
from servecheck.analysis.capacity import (
    CapacityAnalysis,
    Criteria,
    ProbeSample,
    Status,
    analyse_capacity,
    assess,
    length_valid,
    next_n,
    probe_from_records,
)
from servecheck.errors import ServerError, UsageError
from servecheck.experiments.common import (
    CALIBRATION_NONE,
    CALIBRATION_OFF,
    NOT_CALIBRATED,
    RequestFactory,
    calibration_mode,
    check_once,
    client_bound_messages,
    held_requests,
    late_requests,
    latency_s,
    make,
    queue_wait_s,
    rate_unresolved_message,
    ttft_unresolved,
)
from servecheck.load.protocol import Driver
from servecheck.model.client import FIX as CLIENT_FIX
from servecheck.model.client import CLIENT_ERROR_FRAC, FIGURE_FRAC, ClientCheck
from servecheck.model.bodies import capacity as shape
from servecheck.model.bodies.common import Finding
from servecheck.model.result import RunResult, measured
from servecheck.model.records import NS_PER_S, BatchResult, RequestRecord, ServerInfo

OnProbe = Callable[["CapacityRun"], None]
OnServer = Callable[[ServerInfo], None]

# Re-measures of a probe left `uncertain` before it stays so: each pools its samples with the
# earlier ones, so the interval narrows; two more probes at most keep a run's length predictable.
DEFAULT_REMEASURES = 2


@dataclass(frozen=True)
class CapacityDesign:
    """What every probe sends and what it is judged against."""

    criteria: Criteria
    max_n: int = 64
    tokens: int = 128
    prompt_tokens: int = 64
    remeasures: int = DEFAULT_REMEASURES

    def check(self) -> None:
        """Raise UsageError with a one-line reason for any design that cannot answer the question."""
        c = self.criteria
        if self.max_n < 1:
            raise UsageError(f"--max-n must be >= 1, got {self.max_n}", "for example --max-n 64")
        if not c.min_user_rate_tok_s > 0:
            raise UsageError(f"--min-user-rate must be > 0 tok/s, got {c.min_user_rate_tok_s:g}",
                             "for example --min-user-rate 20")
        if c.max_ttft_s is not None and not c.max_ttft_s > 0:
            raise UsageError(f"--max-ttft must be > 0 s, got {c.max_ttft_s:g}", "for example --max-ttft 0.5")
        if not 0 < c.percentile < 100:
            raise UsageError(f"--percentile must lie between 0 and 100, got {c.percentile:g}",
                             "for example --percentile 50")
        if self.tokens < 2 or self.prompt_tokens < 1 or self.remeasures < 0:
            raise UsageError("--tokens must be >= 2, --prompt-tokens >= 1 and --remeasures >= 0",
                             "a per-user rate needs tokens after the first: for example --tokens 128")

    def requests_at(self, n: int) -> int:
        """Every request a probe at n sends: each lane's discarded first plus its measured ones."""
        return n * (1 + self.criteria.measured_per_lane(n))

    def record(self) -> shape.CapacityDesign:
        c = self.criteria
        return shape.CapacityDesign(
            min_user_rate_tok_s=c.min_user_rate_tok_s, max_ttft_s=c.max_ttft_s, percentile=c.percentile,
            rate_quantile=c.rate_quantile, ttft_quantile=c.ttft_quantile, level=c.level, max_n=self.max_n,
            tokens=self.tokens, prompt_tokens=self.prompt_tokens, remeasures=self.remeasures,
            samples_needed=c.samples_needed(),
        )


@dataclass(frozen=True)
class MeasuredProbe:
    """One probe as it ran: its samples, its timing and every request record."""

    n: int
    purpose: shape.Purpose
    sample: ProbeSample
    release_ns: int
    dispatch_skew_ns: int
    records: tuple[RequestRecord, ...]

    def body(self) -> shape.CapacityProbe:
        s = self.sample
        return shape.CapacityProbe(
            n=self.n, purpose=self.purpose, release_s=self.release_ns / NS_PER_S,
            dispatch_skew_s=self.dispatch_skew_ns / NS_PER_S, window_s=s.window_s, requests_sent=s.requests,
            discarded=s.discarded, measured=s.measured, failed=s.failed, failure=s.failure,
            aggregate_tok_s=s.aggregate_tok_s, per_user_rates_tok_s=s.rates_tok_s, ttfts_s=s.ttfts_s,
            length_off=s.length_off, client_late=s.client_late or None,
            hop_held=s.hop_held or None, requests=tuple(r.body(with_token_times=False) for r in self.records),
        )


@dataclass(frozen=True)
class CapacityRun:
    """Everything a capacity run measured; the analysis is computed from it."""

    design: CapacityDesign
    server: ServerInfo | None = None
    warmup: RequestRecord | None = None
    probes: tuple[MeasuredProbe, ...] = ()
    complete: bool = False
    calibration: str = CALIBRATION_NONE  # the pre-flight: "on" before each N, "off" (--no-calibrate), "none"
    client_checks: tuple[ClientCheck, ...] = ()  # the pre-flight before each N's first probe

    def samples(self) -> dict[int, list[ProbeSample]]:
        out: dict[int, list[ProbeSample]] = {}
        for p in self.probes:
            if p.purpose != "baseline_end":
                out.setdefault(p.n, []).append(p.sample)
        return out

    def baseline_end(self) -> ProbeSample | None:
        return next((p.sample for p in self.probes if p.purpose == "baseline_end"), None)

    def statuses(self) -> dict[int, Status]:
        c = self.design.criteria
        return {n: assess(n, s, c).status for n, s in self.samples().items()}

    def analysis(self) -> CapacityAnalysis:
        return analyse_capacity(self.samples(), self.design.criteria, max_n=self.design.max_n,
                                baseline_end=self.baseline_end())

    def body(self) -> shape.CapacityBody:
        """The capacity body record (docs/schema.md)."""
        a = self.analysis()
        points = a.point_records()
        return shape.CapacityBody(
            max_concurrency=a.max_concurrency, limit=a.limit, determined=a.determined, answer=a.answer, points=points,
            least_marginal=None if a.least is None else a.least.record(),
            drift=None if a.drift is None else a.drift.record(), non_monotone=tuple(x.record() for x in a.non_monotone),
            warnings=(*(w.record() for w in a.warnings), *self.client_bound(points), *self.unresolved()),
            design=self.design.record(), server=None if self.server is None else self.server.body(),
            warmup=None if self.warmup is None else self.warmup.body(with_token_times=False),
            probes=tuple(p.body() for p in self.probes),
            notes=notes(self.design) + ((NOT_CALIBRATED,) if self.calibration == CALIBRATION_OFF else ()),
            calibration=self.calibration,  # type: ignore[arg-type]  # "on" | "off" | "none"
            client_checks=tuple(c.body() for c in self.client_checks),
        )

    def client_bound(self, points: Sequence[shape.CapacityPoint]) -> tuple[Finding, ...]:
        """The findings that make the run invalid: a client-bound pre-flight, a TTFT fail within the client's error."""
        bound = [Finding(message=f"client-bound: {m}", hint=CLIENT_FIX)
                 for m in client_bound_messages(self.client_checks)]
        return (*bound, *ttft_fails_within_error(points, self.client_checks, self.design.criteria.max_ttft_s))

    def unresolved(self) -> tuple[Finding, ...]:
        """Warnings for the figures the client's timing error leaves unresolved."""
        ttft = ttft_unresolved_warning(self.client_checks, self.warmup)
        rate = rate_unresolved_message(self.client_checks, self.warmup, lambda n: f"N={n}")
        return (*(() if ttft is None else (ttft,)),
                *(() if rate is None else (Finding(message=rate, hint=CLIENT_FIX),)))

    def document(self) -> RunResult[shape.CapacityBody]:
        """The capacity run's typed result (the runner puts the run's head on it)."""
        body = self.body()
        return measured("capacity", body, complete=self.complete, simulated=bool(self.server and self.server.simulated),
                        valid=length_valid([p.sample for p in self.probes]) and not self.client_bound(body.points))


def ttft_fails_within_error(points: Sequence[shape.CapacityPoint], checks: tuple[ClientCheck, ...],
                            ceiling_s: float | None) -> list[Finding]:
    """A finding per N whose TTFT failed the ceiling by less than the client's timing error there.
    The client's stamp delay only ever adds to a measured TTFT, so a pass stands; a fail that close
    to the ceiling may be the client's, and it decides the answer."""
    if ceiling_s is None:
        return []
    error_s = {c.streams: c.chosen.error_ms / 1e3 for c in checks}
    out = []
    for p in points:
        n, interval = p.n, p.ttft_interval
        if p.ttft_status != "fail" or not interval or n not in error_s:
            continue
        margin = interval[0] - ceiling_s
        if margin < error_s[n]:
            out.append(Finding(
                message=f"client-bound: the TTFT at N={n} failed the {ceiling_s:g} s ceiling by {margin * 1e3:.1f} ms, "
                        f"less than the client's own timing error there ({error_s[n] * 1e3:.1f} ms)",
                hint=CLIENT_FIX,
            ))
    return out


def ttft_unresolved_warning(checks: tuple[ClientCheck, ...], warmup: RequestRecord | None) -> Finding | None:
    """A warning for the TTFT figures at the N where the client's timing error is above
    FIGURE_FRAC of the warm-up's TTFT: there they are this client's as much as the server's."""
    over = ttft_unresolved(checks, warmup)
    if not over or warmup is None or warmup.ttft_ns is None:
        return None
    ttft_ms = warmup.ttft_ns / 1e6
    return Finding(
        message=f"TTFT unresolved at {', '.join(f'N={c.streams}' for c in over)}: the client's timing error (up to "
                f"{max(c.chosen.error_ms for c in over):.1f} ms) is above {FIGURE_FRAC:.0%} of the "
                f"{ttft_ms:.1f} ms warm-up TTFT; the TTFT figures there are this client's as much as the server's",
        hint=CLIENT_FIX,
    )


def notes(design: CapacityDesign) -> tuple[str, ...]:
    c = design.criteria
    return (
        f"intervals: order statistics of the per-request samples, covering the true percentile with "
        f"{c.level:.0%} confidence or more (reported per point); {c.samples_needed()} samples are the fewest "
        "that can reach it",
        "the samples of one probe share one server state: the interval covers the requests of this run, "
        "not every future run",
    )


async def _warm_up(factory: RequestFactory | None, driver: Driver, design: CapacityDesign,
                   rng: random.Random) -> RequestRecord:
    (req,) = await make(factory, driver, 1, design.prompt_tokens, design.tokens, rng, 0)
    record = await driver.generate(req)
    if not record.ok:
        raise ServerError(
            f"the warm-up request failed: {record.error or record.status}",
            "check the URL, --model and --api; the server must answer one request before the probes run",
            status=record.http_status,
        )
    return record


class _Prober:
    """Sends the probes of one run, numbering requests across the whole run."""

    def __init__(self, driver: Driver, design: CapacityDesign, rng: random.Random,
                 factory: RequestFactory | None) -> None:
        self.driver, self.design, self.rng, self.factory = driver, design, rng, factory
        self.next_index = 1  # 0 is the warm-up

    def late_ttfts(self, batch: BatchResult) -> dict[int, float]:
        """The requests whose send or first token the client read late by more than 5% of the TTFT
        ceiling, by index: how late, ms (`assess` keeps their TTFTs where the status cannot turn on them)."""
        ceiling = self.design.criteria.max_ttft_s
        if not ceiling or batch.lateness is None:
            return {}
        needed = CLIENT_ERROR_FRAC * ceiling * NS_PER_S
        late = {r.index: vouch_reads(batch.lateness, request_reads(r)[:2], needed) for r in batch.records
                if r.ttft_ns is not None}
        return {i: v.late_ms for i, v in late.items() if v.code == "late" and v.late_ms}

    async def probe(self, n: int, purpose: shape.Purpose, warmup: RequestRecord | None) -> MeasuredProbe:
        count = self.design.requests_at(n)
        reqs = await make(self.factory, self.driver, count, self.design.prompt_tokens, self.design.tokens, self.rng,
                          self.next_index)
        self.next_index += count
        batch = await self.driver.run_batch(reqs, in_flight=n, queue_wait_s=queue_wait_s(warmup, n))
        # a per-user rate is judged against its own request's time (5% of it), a TTFT against the ceiling
        sample = probe_from_records(batch.records, n=n, tokens_asked=self.design.tokens, late=late_requests(batch),
                                    held=held_requests(batch), late_ttfts=self.late_ttfts(batch))
        return MeasuredProbe(n, purpose, sample, batch.release_ns, batch.dispatch_skew_ns, tuple(batch.records))


async def run_capacity(
    driver: Driver,
    design: CapacityDesign,
    *,
    rng: random.Random,
    on_probe: OnProbe | None = None,
    on_server: OnServer | None = None,
    requests_factory: RequestFactory | None = None,
) -> CapacityRun:
    """Detect, warm up, search, then measure the serial baseline again; returns the whole run."""
    design.check()
    run = CapacityRun(design, server=await driver.detect(), calibration=calibration_mode(driver))
    if on_server is not None and run.server is not None:
        on_server(run.server)
    run = replace(run, warmup=await _warm_up(requests_factory, driver, design, rng))
    prober = _Prober(driver, design, rng, requests_factory)

    async def measure(n: int, purpose: shape.Purpose) -> None:
        nonlocal run
        # a per-user rate is over each request's whole time: the client's error is judged against one
        # request; a TTFT verdict against the ceiling is judged by its own margin (ttft_fails_within_error)
        run = replace(run, client_checks=await check_once(driver, run.client_checks, n, run.warmup,
                                                          latency_s(run.warmup), "warm-up request"))
        probe = await prober.probe(n, purpose, run.warmup)
        run = replace(run, probes=(*run.probes, probe))
        if on_probe is not None:
            on_probe(run)

    while (n := next_n(run.statuses(), design.max_n)) is not None:
        await measure(n, "search")
        for _ in range(design.remeasures):
            if run.statuses()[n] != "uncertain":
                break
            await measure(n, "remeasure")
    if any(n > 1 for n in run.statuses()):
        await measure(1, "baseline_end")
    return replace(run, complete=True)


@dataclass(frozen=True)
class CapacityExperiment:
    """Capacity as `runs.runner.run_experiment` drives it: the design and its prompt seed."""

    design: CapacityDesign
    rng: random.Random
    requests_factory: RequestFactory | None = None

    async def run(self, driver: Driver, on_server: OnServer, on_point: OnProbe) -> CapacityRun:
        return await run_capacity(driver, self.design, rng=self.rng, on_probe=on_point, on_server=on_server,
                                  requests_factory=self.requests_factory)

    def opening(self, server: ServerInfo) -> RunResult[shape.CapacityBody]:
        return self.document(CapacityRun(self.design, server=server))

    def document(self, result: CapacityRun) -> RunResult[shape.CapacityBody]:
        return result.document()
