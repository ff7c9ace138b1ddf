"""The speculative-decoding test: at each N, batches of predictable and unpredictable prompts with a fixed
output length, against the target and, with a baseline (the same model without speculation), against it
too, rep by rep in turn so both see the same drift. The analysis groups each stream's arrivals into steps.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field, replace

from servecheck.analysis import speculative as sp
from servecheck.analysis.across import stream_rate
from servecheck.analysis.design import rotation
from servecheck.errors import ServecheckError, ServerError, UsageError
from servecheck.experiments.common import (
    CALIBRATION_NONE,
    WARMUP_TOKENS,
    calibration_mode,
    calibration_notes,
    check_once,
    client_bound_finding,
    token_gap_ms,
)
from servecheck.load.prompts import new_nonce
from servecheck.load.protocol import Driver
from servecheck.load.witness import metric_totals
from servecheck.model.bodies import speculative as shape
from servecheck.model.bodies.speculative import PROMPT_KINDS
from servecheck.model.client import ClientCheck, ClientLateness
from servecheck.model.result import RunResult, measured
from servecheck.model.records import (
    NS_PER_S,
    BatchResult,
    GenRequest,
    RequestRecord,
    ServerInfo,
)

# What every run says of its client beside the pre-flight: the ticker's word on each group it reads.
LATENESS_NOTE = "the client's own lateness is metered all run long, and groups it read late are left out"

# An undecided pays / costs (its interval straddles the rule) is measured again, one target + baseline pair
# at a time, up to this many times the planned reps in all (the default of --max-reps): the point at most
# doubles its time, the bound arms takes too. A 95% t interval on k streams is t(k-1) / sqrt(k) standard
# deviations wide, so doubling the streams narrows each side's interval to about half (0.53 of it from 4
# to 8, 0.42 from the default 3 to 6); a figure that still straddles then lies close to the rule, where
# more reps buy little per minute and `inconclusive` is the honest word.
MAX_REPS_FACTOR = 2



def rep_budget(reps: int, max_reps: int | None) -> int:
    """Reps in all an undecided pays / costs may take: `max_reps` (never below the planned reps), else
    MAX_REPS_FACTOR x reps."""
    return max(reps, max_reps if max_reps is not None else MAX_REPS_FACTOR * reps)


OnPoint = Callable[["SpeculativeResult"], None]
OnServer = Callable[[ServerInfo], None]
OpenDriver = Callable[[], AbstractAsyncContextManager[Driver]]
# A passage a prompt-lookup or ngram draft can copy from: the model is asked to repeat it, and the
# prompt already holds it three times, so every continuation is in the context.
PASSAGE = ("The quick brown fox jumps over the lazy dog while the seven sleepy cats watch from the old stone "
           "wall, counting one two three four five six seven eight nine ten, and then they start again.")
TOPICS = ("a lighthouse keeper", "a chess tournament", "a village bakery", "a night train", "a glacier",
          "a lost violin", "a desert market", "a robot gardener", "a storm at sea", "an abandoned observatory")


def prompt_for(kind: str, nonce: str, rng: random.Random) -> str:
    """The prompt of one stream; each opens with its own nonce so no two share a cached prefix."""
    if kind == "predictable":
        return (f"{nonce}\nRepeat the following passage verbatim, over and over, without changing a word.\n\n"
                f"{PASSAGE}\n{PASSAGE}\n{PASSAGE}\n")
    return f"{nonce}\nWrite an original, open-ended story about {rng.choice(TOPICS)}. Begin:\n"


@dataclass(frozen=True)
class Batch:
    """One batch of one prompt kind at one N, against the target or the baseline."""

    n: int
    kind: str
    rep: int
    side: str  # "target" | "baseline"
    result: BatchResult
    metrics: sp.MetricDeltas | None = None  # the server's spec-decode counters over this batch (vLLM /metrics)


@dataclass(frozen=True)
class SpeculativeResult:
    server: ServerInfo
    ns: tuple[int, ...]
    tokens: int
    reps: int
    baseline: ServerInfo | None = None
    batches: tuple[Batch, ...] = ()
    max_reps: int | None = None  # reps in all an undecided pays / costs may take (None: the planned reps)
    warmup: RequestRecord | None = None
    complete: bool = False
    notes: tuple[str, ...] = field(default=())
    # the pre-flight: "on" before each N's first batch, "off" (--no-calibrate), "none"
    calibration: str = CALIBRATION_NONE
    client_checks: tuple[ClientCheck, ...] = ()

    def records(self, n: int, kind: str, side: str = "target") -> list[RequestRecord]:
        return [r for b in self.batches if (b.n, b.kind, b.side) == (n, kind, side) for r in b.result.records]

    def metrics(self, n: int, kind: str) -> sp.MetricDeltas | None:
        """The target's spec-decode counters summed over the point's batches, where every batch had them."""
        ds = [b.metrics for b in self.batches if (b.n, b.kind, b.side) == (n, kind, "target")]
        if not ds or any(d is None for d in ds):
            return None
        got = [d for d in ds if d is not None]
        return sp.MetricDeltas(drafts=sum(d.drafts for d in got), draft_tokens=sum(d.draft_tokens for d in got),
                               accepted=sum(d.accepted for d in got))

    def points(self) -> list[sp.SpecPointAnalysis]:
        """Every N and prompt kind measured, predictable prompts first."""
        return [self.point(n, kind) for kind in PROMPT_KINDS for n in self.ns if self.records(n, kind)]

    def extra_reps(self, n: int, kind: str) -> int:
        """The reps the point took beyond the planned ones (an undecided pays / costs measured again)."""
        return len({b.rep for b in self.batches if (b.n, b.kind, b.side) == (n, kind, "target") and b.rep >= self.reps})

    def body(self, expect: str | None = None) -> shape.SpeculativeBody:
        """The speculative body record (docs/speculative.md)."""
        points = sp.behind_a_hop(self.points())
        run = sp.analyse_speculative(points, with_baseline=self.baseline is not None)
        return shape.SpeculativeBody(
            verdict=run.verdict, verdict_reason=run.reason, expect=expect, server=self.server.body(),
            baseline=None if self.baseline is None else self.baseline.body(), ns=self.ns, tokens=self.tokens,
            reps=self.reps, max_reps=self.max_reps, points=tuple(p.record() for p in points),
            stops_paying_n=run.stops_paying_n, stops_paying_reason=run.stops_paying_reason,
            notes=self.notes + calibration_notes(self.calibration),
            warmup=None if self.warmup is None else self.warmup.body(with_token_times=False),
            invalid=tuple(f for f in (client_bound_finding(self.client_checks),) if f is not None) or None,
            calibration=self.calibration,  # type: ignore[arg-type]  # "on" | "off" | "none"
            client_checks=tuple(c.body() for c in self.client_checks),
        )

    def document(self, expect: str | None = None) -> RunResult[shape.SpeculativeBody]:
        """The speculative run's typed result (the runner puts the run's head on it): invalid where the
        pre-flight found the client the bottleneck; it judges no other validity (null)."""
        valid = False if client_bound_finding(self.client_checks) is not None else None
        return measured("speculative", self.body(expect), valid=valid, simulated=self.server.simulated,
                        complete=self.complete)

    def streams(self, n: int, kind: str) -> list[sp.Stream]:
        """The point's finished streams, each with the client's lateness over its batch."""
        return [to_stream(r, b.result.lateness) for b in self.batches if (b.n, b.kind, b.side) == (n, kind, "target")
                for r in b.result.records if r.ok]

    def point(self, n: int, kind: str) -> sp.SpecPointAnalysis:
        """One N and prompt kind from the batches so far."""
        records = [r for r in self.records(n, kind) if r.ok]
        rates = [x for x in (record_rate(r) for r in records) if x is not None]
        aggregates = [a for a in (aggregate(b.result) for b in self.batches
                                  if (b.n, b.kind, b.side) == (n, kind, "target")) if a is not None]
        base_rates = [x for x in (record_rate(r) for r in self.records(n, kind, "baseline")) if x is not None]
        return sp.analyse_point(n, kind, self.streams(n, kind), failed=len(self.records(n, kind)) - len(records),
                                rates=rates, aggregates=aggregates, metrics=self.metrics(n, kind),
                                baseline_rates=base_rates if self.baseline is not None else None,
                                extra_reps=self.extra_reps(n, kind))


def to_stream(record: RequestRecord, lateness: ClientLateness | None = None) -> sp.Stream:
    """A record as the analysis reads it: its arrivals, tokens per event where the stream said, the counters,
    and how late the client was while it read them."""
    counts = record.event_tokens if record.event_tokens and all(k > 0 for k in record.event_tokens) else ()
    t = record.server
    return sp.Stream(arrivals_ns=record.token_ns, event_tokens=tuple(counts), tokens=record.tokens,
                     draft_n=None if t is None else t.draft_tokens,
                     draft_accepted=None if t is None else t.draft_accepted,
                     server_generated=None if t is None else t.generated_tokens, lateness=lateness)


def record_rate(record: RequestRecord) -> float | None:
    if not record.ok or record.first_token_ns is None or record.end_ns is None:
        return None
    return stream_rate(record.tokens, (record.end_ns - record.first_token_ns) / NS_PER_S)


def aggregate(batch: BatchResult) -> float | None:
    """Seed 000's one division: tokens of the batch over the time the last request finished."""
    wall = batch.wall_ns
    ok = [r for r in batch.records if r.ok]
    if not wall or not ok or len(ok) < len(batch.records):
        return None
    return sum(r.tokens for r in ok) / (wall / NS_PER_S)


def same_model(server: ServerInfo, baseline: ServerInfo) -> str | None:
    """Why the baseline cannot stand for the target without speculation, or None."""
    if server.model and baseline.model and server.model != baseline.model:
        return (f"the baseline at {baseline.url} serves {baseline.model!r}, the target {server.model!r}: a baseline "
                "must be the same model without speculation")
    return None


@asynccontextmanager
async def _none() -> AsyncIterator[None]:
    yield None


async def _warm(driver: Driver, rng: random.Random, what: str) -> RequestRecord:
    nonce = new_nonce(rng)
    record = await driver.generate(GenRequest(index=0, prompt=prompt_for("unpredictable", nonce, rng), nonce=nonce,
                                              max_tokens=WARMUP_TOKENS))
    if not record.ok:
        raise ServerError(f"the {what}'s warm-up request failed: {record.error or record.status}",
                          "check the URL, --model and --api; the server must answer one request first",
                          status=record.http_status)
    return record


# vLLM's spec-decode counters (vllm/v1/spec_decode/metrics.py, 0.32.0). llama.cpp reports its draft
# counters per request (timings.draft_n, draft_n_accepted) and has none of these.
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_COUNTERS = {SPEC_DRAFTS, SPEC_DRAFT_TOKENS, SPEC_ACCEPTED}


async def _spec_counters(driver: Driver, info: ServerInfo) -> dict[str, float]:
    """vLLM's spec-decode counters now; empty where the server has none (llama.cpp, Ollama, the simulator)."""
    if info.engine in ("llama.cpp", "ollama", "simulator") or info.dialect in ("llamacpp", "ollama"):
        return {}
    try:
        text = await driver.get_text("/metrics")
    except ServecheckError:
        return {}
    totals = metric_totals(text or "", SPEC_COUNTERS)
    return totals if SPEC_COUNTERS <= totals.keys() else {}


def metric_deltas(before: dict[str, float], after: dict[str, float]) -> sp.MetricDeltas | None:
    """The counters' increase over one batch; None where a counter is missing or went backwards (a restart)."""
    if not (SPEC_COUNTERS <= before.keys() and SPEC_COUNTERS <= after.keys()):
        return None
    d = {k: after[k] - before[k] for k in SPEC_COUNTERS}
    if any(v < 0 for v in d.values()):
        return None
    return sp.MetricDeltas(drafts=d[SPEC_DRAFTS], draft_tokens=d[SPEC_DRAFT_TOKENS], accepted=d[SPEC_ACCEPTED])


def requests(kind: str, n: int, tokens: int, rng: random.Random, start: int) -> list[GenRequest]:
    out = []
    for i in range(n):
        nonce = new_nonce(rng)
        out.append(GenRequest(index=start + i, prompt=prompt_for(kind, nonce, rng), nonce=nonce, max_tokens=tokens,
                              token_counts=True))
    return out


async def run_speculative(
    driver: Driver,
    *,
    ns: Sequence[int],
    tokens: int,
    reps: int,
    rng: random.Random,
    open_baseline: OpenDriver | None = None,
    on_point: OnPoint | None = None,
    on_server: OnServer | None = None,
    max_reps: int | None = None,
) -> SpeculativeResult:
    """Detect both servers (refusing a baseline of another model), warm up, then for every N, kind and rep
    a batch against the target and one against the baseline; with a baseline, a point whose pays / costs
    the analysis leaves undecided takes another pair of batches until it decides or has `max_reps` reps
    (default MAX_REPS_FACTOR x reps)."""
    if not ns or any(n < 1 for n in ns) or tokens < 16 or reps < 1:
        raise UsageError("--n needs values >= 1, --tokens >= 16 and --reps >= 1", "for example --n 1,2,4 --tokens 256")
    budget = rep_budget(reps, max_reps)
    server = await driver.detect()
    async with (open_baseline() if open_baseline is not None else _none()) as base:
        baseline = await base.detect() if base is not None else None
        if baseline is not None and (why := same_model(server, baseline)) is not None:
            raise UsageError(why, "pass --baseline the URL of the same model served without a draft")
        if on_server is not None:
            on_server(server)
        result = SpeculativeResult(server, tuple(ns), tokens, reps, baseline=baseline, notes=(LATENESS_NOTE,),
                                   max_reps=budget if base is not None else None,
                                   warmup=await _warm(driver, rng, "target"), calibration=calibration_mode(driver))
        if base is not None:
            await _warm(base, rng, "baseline")
        for n in ns:
            result = replace(result, client_checks=await _check(driver, result, n))
            for kind in PROMPT_KINDS:
                rep = 0
                while rep < reps or (base is not None and rep < budget and sp.pays_undecided(result.point(n, kind))):
                    result = await _rep(result, driver, base, n, kind, rep, rng)
                    rep += 1
                if on_point is not None:
                    on_point(result)
    return replace(result, complete=True)


async def _check(driver: Driver, result: SpeculativeResult, n: int) -> tuple[ClientCheck, ...]:
    """The pre-flight before N's first batch against the target (the streams whose steps are read), at
    the warm-up's pace, bounded as the grouping bounds a read: late by more than LATE_READ_FRACTION of a
    step, a read could have caught the next step's token. The warm-up's mean gap between tokens is the
    step: no longer than any batch's (a step only grows with N) and, where a draft delivers several
    tokens a step, shorter still, so the bound errs strict."""
    gap_ms = token_gap_ms(result.warmup)
    step_s = None if gap_ms is None else gap_ms / 1e3
    return await check_once(driver, result.client_checks, n, result.warmup, step_s, "decode step (the warm-up's)",
                            frac=sp.LATE_READ_FRACTION)


async def _rep(result: SpeculativeResult, driver: Driver, base: Driver | None, n: int, kind: str, rep: int,
               rng: random.Random) -> SpeculativeResult:
    """One rep of a point: a batch against the target and one against the baseline, in turn first (the
    target on even reps), so both see the same drift."""
    sides = [("target", driver)] + ([("baseline", base)] if base is not None else [])
    for side, d in rotation(sides, rep):
        before = await _spec_counters(d, result.server) if side == "target" else {}
        batch = await d.run_batch(requests(kind, n, result.tokens, rng, _next_index(result)))
        deltas = metric_deltas(before, await _spec_counters(d, result.server)) if before else None
        result = replace(result, batches=(*result.batches, Batch(n, kind, rep, side, batch, deltas)))
    return result


def _next_index(result: SpeculativeResult) -> int:
    """The index of the next request: 1 after the warm-up, then on from the last batch's."""
    return 1 + sum(len(b.result.records) for b in result.batches)


@dataclass(frozen=True)
class SpeculativeExperiment:
    """The speculative test as `runs.runner.run_experiment` drives it."""

    ns: tuple[int, ...]
    tokens: int
    reps: int
    rng: random.Random
    open_baseline: OpenDriver | None = None
    expect: str | None = None
    max_reps: int | None = None

    async def run(self, driver: Driver, on_server: OnServer, on_point: OnPoint) -> SpeculativeResult:
        return await run_speculative(driver, ns=self.ns, tokens=self.tokens, reps=self.reps, rng=self.rng,
                                     open_baseline=self.open_baseline, on_point=on_point, on_server=on_server,
                                     max_reps=self.max_reps)

    def opening(self, server: ServerInfo) -> RunResult[shape.SpeculativeBody]:
        return measured("speculative", shape.SpeculativeBody(server=server.body()), simulated=server.simulated)

    def document(self, result: SpeculativeResult) -> RunResult[shape.SpeculativeBody]:
        return result.document(self.expect)
