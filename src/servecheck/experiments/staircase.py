"""The staircase experiment: a warm-up, then N equal-length requests released together for each N.

Runs through the load driver and hands every batch to `analysis.staircase`; after each batch the
caller gets the partial result so nothing measured is lost to a crash or a Ctrl-C.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from servecheck.analysis.staircase import (
    BatchAnalysis,
    MeasuredBatch,
    LevelAnalysis,
    StaircaseAnalysis,
    analyse_staircase,
    needs_more,
)
from servecheck.errors import ServerError, UsageError
from servecheck.experiments.common import (
    CALIBRATION_NONE,
    CALIBRATION_OFF,
    NOT_CALIBRATED,
    RequestFactory,
    calibration_mode,
    check_once,
    latency_s,
    make,
    queue_wait_s,
)
from servecheck.load.protocol import Driver
from servecheck.model.bodies import staircase as shape
from servecheck.model.result import RunResult, measured
from servecheck.model.client import FIGURE_FRAC, ClientCheck
from servecheck.model.records import NS_PER_S, BatchResult, RequestRecord, ServerInfo

OnPoint = Callable[["StaircaseResult"], None]
OnServer = Callable[[ServerInfo], None]


@dataclass(frozen=True)
class StaircaseResult:
    """Everything a staircase run measured; analysis is computed from it, never stored beside it."""

    server: ServerInfo
    ns: tuple[int, ...]
    tokens: int
    prompt_tokens: int
    reps: int
    max_reps: int = 1
    warmup: RequestRecord | None = None
    batches: tuple[MeasuredBatch, ...] = ()
    complete: bool = False
    notes: tuple[str, ...] = field(default=())
    calibration: str = CALIBRATION_NONE  # the pre-flight: "on" before each N, "off" (--no-calibrate), "none"
    client_checks: tuple[ClientCheck, ...] = ()  # the pre-flight before each N's first batch
    evidence_mode: str = "all"  # "stopwatch": the server's witnesses never decide (--evidence stopwatch)

    def analysis(self) -> StaircaseAnalysis:
        return analyse_staircase(self.batches, tokens_requested=self.tokens, client_checks=self.client_checks,
                                 witnesses_decide=self.evidence_mode != "stopwatch")

    def body(self, a: StaircaseAnalysis | None = None) -> shape.StaircaseBody:
        """The staircase body record (docs/schema.md); `a`: this result's analysis, when already made."""
        a = self.analysis() if a is None else a
        return replace(
            a.record(),  # what the analysis decided; the run's own fields below
            evidence_mode=self.evidence_mode,  # type: ignore[arg-type]  # a Choice of EVIDENCE_MODES
            max_reps=self.max_reps, server=self.server.body(),
            warmup=None if self.warmup is None else self.warmup.body(with_token_times=False),
            points=tuple(_point(p, self.batches, a.aggregate_error_frac.get(p.n)) for p in a.points),
            notes=self.notes, calibration=self.calibration,  # type: ignore[arg-type]  # "on" | "off" | "none"
            client_checks=tuple(c.body() for c in self.client_checks),
        )

    def document(self) -> RunResult[shape.StaircaseBody]:
        """The staircase's typed result (the runner puts the run's head on it)."""
        a = self.analysis()
        return measured("staircase", self.body(a), valid=a.valid, simulated=self.server.simulated,
                        complete=self.complete)


def _point(point: LevelAnalysis, batches: Sequence[MeasuredBatch], error_frac: float | None = None) -> shape.Point:
    raw = {(mb.n, mb.rep): mb.batch for mb in batches}
    agg = point.aggregate
    return shape.Point(
        # with a pre-flight at this N: how far the client's timing error can move the aggregate
        aggregate_client_error_frac=error_frac,
        aggregate_client_bound=None if error_frac is None else error_frac > FIGURE_FRAC,
        n=point.n, finish_s=point.finish_s, tokens=point.tokens, aggregate_tok_s=point.aggregate_tok_s,
        aggregate_range_tok_s=None if agg is None else (agg.lo, agg.hi), verdict=point.verdict, reason=point.reason,
        evidence=point.evidence, decided_by_witness=point.decided_by_witness, shown_rep=point.shown_rep,
        reps_taken=point.reps_taken, batches=tuple(_batch(b, raw[(b.n, b.rep)]) for b in point.batches),
    )


def _batch(b: BatchAnalysis, batch: BatchResult) -> shape.Batch:
    return shape.Batch(
        clock_uncertainty_s=batch.clock_uncertainty_ns / NS_PER_S if batch.clock_uncertainty_ns else None,
        rep=b.rep, release_s=batch.release_ns / NS_PER_S, dispatch_skew_s=b.dispatch_skew_s, finish_s=b.finish_s,
        tokens=b.tokens, aggregate_tok_s=b.aggregate_tok_s, verdict=b.verdict.record(), queue_s=b.queue_s,
        self_reported_sum_tok_s=b.self_reported_sum_tok_s, self_reported_misleading=b.self_reported_misleading,
        in_flight=batch.in_flight, effective_concurrency=b.effective_concurrency,
        token_interval_cv=b.token_interval_cv, gauges=None if batch.gauges is None else batch.gauges.body(),
        noise=None if batch.noise is None else batch.noise.body(), requests=tuple(r.body() for r in batch.records),
    )


def plan_ns(ns: Sequence[int]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Sorted distinct N values, always starting with the N=1 baseline every verdict needs."""
    bad = [n for n in ns if n < 1]
    if bad or not ns:
        raise UsageError(f"--n values must be integers >= 1, got {list(ns)}", "for example --n 1,2,4,8")
    planned = tuple(sorted(set(ns) | {1}))
    notes = () if 1 in ns else ("added N=1: every verdict is judged against the single-request time",)
    return planned, notes


def check_context(server: ServerInfo, prompt_tokens: int, tokens: int) -> None:
    """Refuse, before any request, a prompt + output that the server's context per request cannot hold.

    Not on Ollama: its num_ctx is a window it shifts, not a limit it enforces.
    """
    n_ctx = server.n_ctx_per_request
    if n_ctx is not None and server.engine != "ollama" and prompt_tokens + tokens > n_ctx:
        raise UsageError(
            f"--prompt-tokens {prompt_tokens} + --tokens {tokens} exceed the server's context of {n_ctx} tokens "
            "per request",
            "lower --tokens, or give the server more context per slot (llama-server: -c = slots x context)",
        )


async def _warm_up(
    factory: RequestFactory | None, driver: Driver, prompt_tokens: int, tokens: int, rng: random.Random
) -> RequestRecord:
    (req,) = await make(factory, driver, 1, prompt_tokens, tokens, rng)
    record = await driver.generate(req)
    if not record.ok:
        raise ServerError(f"the warm-up request failed: {record.error or record.status}", _warm_up_hint(record),
                          status=record.http_status)
    return record


def _warm_up_hint(record: RequestRecord) -> str:
    if record.status == "timeout":
        return "the server took too long for a single request: is it busy or stuck? (--timeout sets the wait)"
    if record.http_status is not None and record.http_status >= 400:
        return "the server refused the request; its message above says why (check --model and --api)"
    if (record.error or "").startswith("connection "):
        return "the server dropped the connection mid-request: did it crash or restart? (its log says why)"
    return "check the URL, --model and --api; the server must answer one request before a batch"


def first_plan(planned: Sequence[int], reps: int) -> list[int]:
    """The first pass: N=1 `reps` times, every N > 1 `reps` times, then N=1 once more, so the
    single-request reference is measured before and after the batches, never just once."""
    return [1] * reps + [n for n in planned if n > 1 for _ in range(reps)] + [1]


def next_plan(result: StaircaseResult) -> list[int]:
    """Another round, while the budget lasts: one more rep of every point left inconclusive, and
    one more N=1 when the trend waits on the reference; nothing when everything is decided."""
    ns, reference = needs_more(result.analysis())
    taken = {n: sum(1 for mb in result.batches if mb.n == n) for n in result.ns}
    plan = [n for n in ns if taken[n] < result.max_reps]
    if (plan or reference) and taken[1] < result.max_reps + 1:
        plan.append(1)
    return plan if any(n > 1 for n in plan) or reference else []


async def run_staircase(
    driver: Driver,
    *,
    ns: Sequence[int],
    tokens: int,
    prompt_tokens: int,
    reps: int,
    rng: random.Random,
    on_point: OnPoint | None = None,
    requests_factory: RequestFactory | None = None,
    on_server: OnServer | None = None,
    max_reps: int | None = None,
    evidence_mode: str = "all",
) -> StaircaseResult:
    """Detect the server, warm it up, measure every N `reps` times with N=1 before and after, then
    measure again what is still undecided, up to `max_reps` reps per N; returns the full result.

    Every request (the warm-up too) gets a fresh nonce from the factory, by default
    `load.prompts.make_requests`, so no prefix is ever shared across the run.
    """
    if tokens < 1 or prompt_tokens < 1 or reps < 1:
        raise UsageError("--tokens, --prompt-tokens and --reps must be >= 1", "for example --tokens 512 --reps 3")
    budget = max(reps, max_reps if max_reps is not None else reps)
    planned, notes = plan_ns(ns)
    server = await driver.detect()
    check_context(server, prompt_tokens, tokens)
    if on_server is not None:
        on_server(server)
    calibration = calibration_mode(driver)
    if calibration == CALIBRATION_OFF:
        notes = (*notes, NOT_CALIBRATED)
    result = StaircaseResult(server, planned, tokens, prompt_tokens, reps, max_reps=budget, notes=notes,
                             calibration=calibration, evidence_mode=evidence_mode)
    result = replace(result, warmup=await _warm_up(requests_factory, driver, prompt_tokens, tokens, rng))
    return await _measure_rounds(driver, result, first_plan(planned, reps), requests_factory, rng, on_point)


async def extend_staircase(driver: Driver, result: StaircaseResult, n: int, rng: random.Random, *,
                           on_point: OnPoint | None = None,
                           requests_factory: RequestFactory | None = None) -> StaircaseResult:
    """A finished run measured at one more N (check's N=8 where N=4 batched): that batch and N=1 after it,
    then the rounds the run's verdict still needs, as `run_staircase`'s own; the result complete again."""
    if n in result.ns:
        return result
    result = replace(result, ns=tuple(sorted({*result.ns, n})), complete=False)
    return await _measure_rounds(driver, result, [n, 1], requests_factory, rng, on_point)


async def _measure_rounds(driver: Driver, result: StaircaseResult, plan: list[int], factory: RequestFactory | None,
                          rng: random.Random, on_point: OnPoint | None) -> StaircaseResult:
    """`plan` measured in order, then each round `next_plan` asks for, until the run needs no more."""
    while plan:
        for n in plan:
            result = await _measure_one(driver, result, n, factory, rng)
            if on_point is not None:
                on_point(result)
        plan = next_plan(result)
    return replace(result, complete=True)


async def _measure_one(
    driver: Driver, result: StaircaseResult, n: int, factory: RequestFactory | None, rng: random.Random
) -> StaircaseResult:
    rep = sum(1 for mb in result.batches if mb.n == n)
    checks = await check_once(driver, result.client_checks, n, result.warmup, latency_s(result.warmup),
                              "warm-up request")
    result = replace(result, client_checks=checks)
    reqs = await make(factory, driver, n, result.prompt_tokens, result.tokens, rng)
    batch = await driver.run_batch(reqs, queue_wait_s=queue_wait_s(result.warmup, n))
    return replace(result, batches=(*result.batches, MeasuredBatch(n=n, rep=rep, batch=batch)))


@dataclass(frozen=True)
class StaircaseExperiment:
    """The staircase as `runs.runner.run_experiment` drives it: the design and its prompt seed."""

    ns: tuple[int, ...]
    tokens: int
    prompt_tokens: int
    reps: int
    max_reps: int
    rng: random.Random
    requests_factory: RequestFactory | None = None
    evidence_mode: str = "all"

    async def run(self, driver: Driver, on_server: OnServer, on_point: OnPoint) -> StaircaseResult:
        return await run_staircase(
            driver, ns=self.ns, tokens=self.tokens, prompt_tokens=self.prompt_tokens, reps=self.reps, rng=self.rng,
            on_point=on_point, requests_factory=self.requests_factory, on_server=on_server, max_reps=self.max_reps,
            evidence_mode=self.evidence_mode,
        )

    def opening(self, server: ServerInfo) -> RunResult[shape.StaircaseBody]:
        return measured("staircase", shape.StaircaseBody(server=server.body()), simulated=server.simulated)

    def document(self, result: StaircaseResult) -> RunResult[shape.StaircaseBody]:
        return result.document()
