"""The context sweep: one stream at a time, a prompt of each depth in tokens, a fixed output length.

Depths run ascending, then descending on the next rep, and the shallowest again last, so drift is
measured rather than mistaken for a context effect (`analysis.context.plan_order`). Every prompt opens
with its own nonce and asks the engine not to reuse its prompt cache where it takes `cache_prompt`.
After each stream the caller gets the partial result, so nothing measured is lost to a Ctrl-C.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from servecheck.analysis import context as ctx
from servecheck.analysis.roofline import Span
from servecheck.analysis.rules import DRIFT_LIMIT
from servecheck.errors import ServerError, UsageError
from servecheck.experiments.common import (
    CALIBRATION_NONE,
    CLIENT_RETRIES,
    WARMUP_TOKENS,
    calibration_mode,
    calibration_notes,
    check_once,
    client_bound_finding,
    hop_held_ms,
    latency_s,
    request_late_ms,
    stream_time_s,
)
from servecheck.load.prompts import distinct_nonces, fixed_prompt, new_nonce
from servecheck.load.protocol import Driver
from servecheck.model.bodies import context as shape
from servecheck.model.client import ClientCheck
from servecheck.model.reason import Text
from servecheck.model.result import RunResult, measured
from servecheck.model.records import NS_PER_S, GenRequest, RequestRecord, ServerInfo

OnPoint = Callable[["ContextResult"], None]
OnServer = Callable[[ServerInfo], None]
WARMUP_PROMPT_TOKENS = 16  # the warm-up stream's prompt (its output: common.WARMUP_TOKENS)
# Tokens a server may add around a prompt (BOS, a chat template head): a depth that fills the context to
# the last token would fail by these.
CONTEXT_MARGIN_TOKENS = 4


@dataclass(frozen=True)
class ContextResult:
    """Everything a context sweep measured; the analysis is computed from it, never stored beside it."""

    server: ServerInfo
    depths: tuple[int, ...]  # as asked
    measured: tuple[int, ...]  # the depths that fit the server's context
    tokens: int
    reps: int
    plan: tuple[int, ...]
    cache_prompt: bool | None
    skipped: tuple[tuple[int, str], ...] = ()
    warmup: RequestRecord | None = None
    samples: tuple[ctx.Sample, ...] = ()
    records: tuple[RequestRecord, ...] = ()  # one per sample, same order
    complete: bool = False
    notes: tuple[str, ...] = field(default=())
    model: ctx.ModelBytes | None = None  # with --model: what each token reads besides the KV cache
    model_summary: shape.ModelBytesSummary | None = None
    bandwidth_gb_s: Span | None = None
    bandwidth_source: str | None = None
    calibration: str = CALIBRATION_NONE  # the pre-flight: "on" before the first stream, "off" (--no-calibrate), "none"
    client_checks: tuple[ClientCheck, ...] = ()

    @property
    def valid(self) -> bool:
        return self.analysis().valid and client_bound_finding(self.client_checks) is None

    def analysis(self) -> ctx.ContextAnalysis:
        return ctx.analyse_context(self.samples, self.measured)

    def roofline(self, a: ctx.ContextAnalysis) -> tuple[ctx.RooflineRow, ...] | None:
        if self.model is None:
            return None
        return ctx.roofline_at_depth(a.points, self.model, self.tokens, self.bandwidth_gb_s)

    def body(self) -> shape.ContextBody:
        """The context body record (docs/schema.md)."""
        a = self.analysis()
        rows = self.roofline(a)
        notes: tuple[Text, ...] = (self.notes + tuple(f"depth {d} skipped: {why}" for d, why in self.skipped)
                                   + calibration_notes(self.calibration))
        if rows and (steep := ctx.steeper_note(rows)) is not None:
            notes += (steep,)
        by_sample = dict(zip(self.samples, self.records))
        return shape.ContextBody(
            server=self.server.body(), tokens=self.tokens, reps=self.reps, order=self.plan,
            cache_prompt=self.cache_prompt, effect=a.effect, effect_reason=a.effect_reason,
            drift=None if a.drift is None else _drift(a.drift),
            points=tuple(_point(p, by_sample, a.late_kept) for p in a.points),
            skipped=tuple(shape.SkippedDepth(depth=d, reason=why) for d, why in self.skipped),
            roofline=None if rows is None else tuple(_row(r) for r in rows), model_bytes=self.model_summary,
            bandwidth_gb_s=None if self.bandwidth_gb_s is None else (self.bandwidth_gb_s.lo, self.bandwidth_gb_s.hi),
            bandwidth_source=self.bandwidth_source,
            warmup=None if self.warmup is None else self.warmup.body(with_token_times=False),
            invalid=(*(f.record() for f in a.invalid), *(f for f in (client_bound_finding(self.client_checks),) if f)),
            warnings=tuple(f.record() for f in a.warnings), notes=notes,
            calibration=self.calibration,  # type: ignore[arg-type]  # "on" | "off" | "none"
            client_checks=tuple(c.body() for c in self.client_checks),
        )

    def document(self) -> RunResult[shape.ContextBody]:
        """The context run's typed result (the runner puts the run's head on it)."""
        return measured("context", self.body(), valid=self.valid, simulated=self.server.simulated,
                        complete=self.complete)


def _drift(d: ctx.ReferenceDrift) -> shape.ContextDrift:
    return shape.ContextDrift(first_tok_s=d.first_tok_s, last_tok_s=d.last_tok_s, first_s=d.first_s, last_s=d.last_s,
                              change=d.change, warn_above=DRIFT_LIMIT)


def _point(p: ctx.DepthAnalysis, by_sample: Mapping[ctx.Sample, RequestRecord],
           excuse_late: bool = False) -> shape.ContextPoint:
    return shape.ContextPoint(
        depth=p.depth, context_tokens=p.context_tokens, ttft_s=p.ttft_s, prefill_tok_s=p.prefill_tok_s,
        decode_tok_s=p.decode_tok_s, decode_range_tok_s=p.decode_range_tok_s, tokens=p.tokens, ratio=p.ratio,
        ratio_raw=p.ratio_raw, valid=p.valid, problems=p.problems,
        samples=tuple(_sample(s, by_sample.get(s), excuse_late) for s in p.samples),
    )


def _sample(s: ctx.Sample, record: RequestRecord | None, excuse_late: bool = False) -> shape.ContextSample:
    return shape.ContextSample(
        rep=s.rep, order=s.order, prompt_tokens=s.prompt_tokens, reported_prompt_tokens=s.reported_prompt_tokens,
        tokens=s.tokens, ttft_s=s.ttft_s, decode_s=s.decode_s, decode_tok_s=s.decode_tok_s,
        prefill_tok_s=s.prefill_tok_s, mid_s=s.mid_s, problem=ctx.sample_problem(s, excuse_late=excuse_late),
        client_late_ms=s.client_late_ms or None, resent=s.resent or None, hop_held_ms=s.hop_held_ms or None,
        request=None if record is None else record.body(with_token_times=False),
    )


def _row(r: ctx.RooflineRow) -> shape.ContextRooflineRow:
    return shape.ContextRooflineRow(
        depth=r.depth, mean_context_tokens=r.mean_context_tokens, kv_bytes_per_token=r.kv_bytes_per_token,
        bytes_per_token=r.bytes_per_token, decode_tok_s=r.decode_tok_s, predicted_tok_s=r.predicted_tok_s,
        measured_over_predicted=r.measured_over_predicted, steeper=r.steeper, achieved_gb_s=r.achieved_gb_s,
        utilization=None if r.utilization is None else (r.utilization.lo, r.utilization.hi),
    )


def fit_depths(depths: Sequence[int], tokens: int, server: ServerInfo) -> tuple[list[int], list[tuple[int, str]]]:
    """The depths whose prompt plus output fit the server's context per request, and why each other is skipped."""
    n_ctx = server.n_ctx_per_request
    if n_ctx is None:
        return list(depths), []
    fit = [d for d in depths if max(d, 1) + tokens + CONTEXT_MARGIN_TOKENS <= n_ctx]
    skipped = [(d, f"{d} prompt + {tokens} output tokens exceed the server's context of {n_ctx} tokens per request; "
                   "not sent") for d in depths if d not in fit]
    return fit, skipped


def takes_cache_prompt(server: ServerInfo) -> bool:
    """llama.cpp (and the simulator, which speaks its dialect) read `cache_prompt`; others may refuse it."""
    return server.engine in ("llama.cpp", "simulator") or server.dialect == "llamacpp"


def reported_prompt_tokens(record: RequestRecord, dialect: str) -> int | None:
    """The prompt length the server counted: llama.cpp's native prompt_n leaves out cached tokens."""
    t = record.server
    if t is None or t.prompt_tokens is None:
        return None
    if dialect == "llamacpp":
        return t.prompt_tokens + (t.cached_prompt_tokens or 0)
    return t.prompt_tokens


# ---------------------------------------------------------------- running


async def _request(driver: Driver, index: int, depth: int, tokens: int, nonce: str, rng: random.Random,
                   cache_prompt: bool | None) -> GenRequest:
    prompt = await fixed_prompt(driver, max(depth, 1), random.Random(rng.getrandbits(32)), nonce)
    return GenRequest(index=index, prompt=prompt.text, nonce=prompt.nonce, max_tokens=tokens,
                      prompt_tokens=prompt.prompt_tokens, cache_prompt=cache_prompt)


def to_sample(record: RequestRecord, depth: int, rep: int, order: int, dialect: str, sent: int | None) -> ctx.Sample:
    """One stream as the analysis reads it; `sent` is the prompt's length by the server's tokenizer (None
    without one: then only the server's own count is known, and truncation cannot be told)."""
    ttft = record.ttft_ns
    decode = None
    mid = None
    if record.first_token_ns is not None and record.end_ns is not None:
        decode = (record.end_ns - record.first_token_ns) / NS_PER_S
        mid = (record.first_token_ns + record.end_ns) / 2 / NS_PER_S
    return ctx.Sample(
        depth=depth, rep=rep, order=order,
        prompt_tokens=sent,
        reported_prompt_tokens=reported_prompt_tokens(record, dialect),
        tokens=record.tokens, tokens_requested=record.tokens_requested,
        ttft_s=None if ttft is None else ttft / NS_PER_S, decode_s=decode, mid_s=mid,
        error=None if record.ok else (record.error or record.status),
    )


async def run_context(
    driver: Driver,
    *,
    depths: Sequence[int],
    tokens: int,
    reps: int,
    rng: random.Random,
    on_point: OnPoint | None = None,
    on_server: OnServer | None = None,
    model: ctx.ModelBytes | None = None,
    model_summary: shape.ModelBytesSummary | None = None,
) -> ContextResult:
    """Detect the server, skip the depths it cannot hold, warm up, then one stream per planned depth."""
    if (problem := ctx.check_depths(depths)) is not None:
        raise UsageError(f"--depths: {problem}", "for example --depths 0,2048,8192,32768")
    if tokens < 2 or reps < 1:
        raise UsageError("--tokens must be >= 2 and --reps >= 1", "for example --tokens 128 --reps 1")
    server = await driver.detect()
    fit, skipped = fit_depths(depths, tokens, server)
    if len(fit) < 2:
        raise UsageError(
            f"--depths: only {fit or 'none'} of {list(depths)} fit{'s' if len(fit) == 1 else ''} the server's context "
            f"of {server.n_ctx_per_request} tokens per request with {tokens} output tokens: nothing to compare",
            "lower the depths or --tokens, or start the server with more context per slot (llama-server -c)",
        )
    if on_server is not None:
        on_server(server)
    plan = ctx.plan_order(fit, reps)
    cache_prompt = False if takes_cache_prompt(server) else None
    notes = (() if server.n_ctx_per_request is not None
             else ("the server's context per request is unknown: every depth was sent",))
    result = ContextResult(server, tuple(depths), tuple(fit), tokens, reps, tuple(plan), cache_prompt,
                           skipped=tuple(skipped), notes=notes, model=model, model_summary=model_summary)
    nonces = distinct_nonces(len(plan) + 1, rng)
    warmup = await _warm_up(driver, nonces[0], rng, cache_prompt)
    # The pre-flight before the one stream, bounded as the client-timing judge bounds each stream: 5% of
    # the stream's own time. The shortest the sweep sends is a `tokens` stream at the shallowest depth,
    # about the warm-up's pace over `tokens`; the warm-up's own 8 tokens would hold the client to a bound
    # `tokens` / 8 times tighter than anything the sweep reads.
    checks = await check_once(driver, (), 1, warmup, stream_time_s(warmup, tokens),
                              f"{tokens}-token stream at the warm-up's pace")
    result = replace(result, warmup=warmup, calibration=calibration_mode(driver), client_checks=checks)
    for order, depth in enumerate(plan):
        rep = sum(1 for s in result.samples if s.depth == depth)
        async def make(nonce: str, depth: int = depth, order: int = order) -> GenRequest:
            return await _request(driver, order + 1, depth, tokens, nonce, rng, cache_prompt)

        req, record, late, resent = await _timed(driver, make, nonces[order + 1], rng)
        sample = replace(to_sample(record, depth, rep, order, server.dialect, req.prompt_tokens), client_late_ms=late,
                         resent=resent, hop_held_ms=await _held_ms(driver, record))
        result = replace(result, samples=(*result.samples, sample), records=(*result.records, record))
        if on_point is not None:
            on_point(result)
    return replace(result, complete=True)


async def _held_ms(driver: Driver, record: RequestRecord) -> float:
    """`hop_held_ms` of one stream, with the client's own record over it (its late reads are its own)."""
    if record.end_ns is None:
        return 0.0
    return hop_held_ms((record,), latency_s(record), await driver.client_lateness(record.send_ns, record.end_ns))


async def _timed(driver: Driver, make: Callable[[str], Awaitable[GenRequest]], nonce: str,
                 rng: random.Random) -> tuple[GenRequest, RequestRecord, float, int]:
    """One stream, sent again with a new nonce (so no cache serves it) while the client read it late, at
    most CLIENT_RETRIES times: the last request and record, how late the client read it (ms beyond 5% of
    its own time, 0 when on time) and how many sends went before it."""
    resent = 0
    while True:
        req = await make(nonce)
        record = await driver.generate(req)
        late = await request_late_ms(driver, record, latency_s(record)) if record.ok else 0.0
        if not late or resent == CLIENT_RETRIES:
            return req, record, late, resent
        resent, nonce = resent + 1, new_nonce(rng)


async def _warm_up(driver: Driver, nonce: str, rng: random.Random, cache_prompt: bool | None) -> RequestRecord:
    req = await _request(driver, 0, WARMUP_PROMPT_TOKENS, WARMUP_TOKENS, nonce, rng, cache_prompt)
    record = await driver.generate(req)
    if not record.ok:
        raise ServerError(f"the warm-up request failed: {record.error or record.status}",
                          "check the URL, --model and --api; the server must answer one request first",
                          status=record.http_status)
    return record


@dataclass(frozen=True)
class ContextExperiment:
    """The context sweep as `runs.runner.run_experiment` drives it: the depths, the prompt seed,
    and with --model what every token reads besides the KV cache."""

    depths: tuple[int, ...]
    tokens: int
    reps: int
    rng: random.Random
    model: ctx.ModelBytes | None = None
    model_summary: shape.ModelBytesSummary | None = None

    async def run(self, driver: Driver, on_server: OnServer, on_point: OnPoint) -> ContextResult:
        return await run_context(driver, depths=self.depths, tokens=self.tokens, reps=self.reps, rng=self.rng,
                                 on_point=on_point, on_server=on_server, model=self.model,
                                 model_summary=self.model_summary)

    def opening(self, server: ServerInfo) -> RunResult[shape.ContextBody]:
        return measured("context", shape.ContextBody(server=server.body()), simulated=server.simulated)

    def document(self, result: ContextResult) -> RunResult[shape.ContextBody]:
        return result.document()
