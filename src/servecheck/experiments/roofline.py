"""The roofline as the run loop drives it: with --url, one fixed-length stream measured through the
driver seam (`RooflineExperiment`); with --tok-s, a given rate and no server (`jobs.roofline.RooflineJob`). Either
way the command settles the result with the measured bandwidth (the probe lives beside this layer),
and the document is the analysis of the rate against it (`analysis.roofline`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import cast

from servecheck.analysis import roofline as rl
from servecheck.analysis.roofline import Span
from servecheck.errors import ServerError
from servecheck.experiments.common import WARMUP_TOKENS  # the warm-up stream's output length
from servecheck.load.prompts import make_requests
from servecheck.load.protocol import Driver
from servecheck.model.bodies import roofline as shape
from servecheck.model.bodies.audit import Kind
from servecheck.model.bodies.bandwidth import BandwidthBody
from servecheck.model.reason import Reason
from servecheck.model.result import RunResult, measured
from servecheck.model.records import RequestRecord, ServerInfo

URL_DECODE_TOKENS = 256
URL_PROMPT_TOKENS = 32


@dataclass(frozen=True)
class Rate:
    """The decode rate the roofline is drawn for: given, or measured on one stream at --url."""

    tok_s: float
    source: str = "given"
    server: ServerInfo | None = None  # --url: what detection learned about the server
    stream: RequestRecord | None = None  # --url: the measuring request

    def measurement(self) -> shape.Measurement | None:
        """The --url stream the rate was measured on; None for a given rate."""
        rec = self.stream
        if self.server is None or rec is None or rec.first_token_ns is None or rec.end_ns is None:
            return None
        return shape.Measurement(server=self.server.body(), tokens=rec.tokens, tokens_source=rec.tokens_source,
                                 decode_s=(rec.end_ns - rec.first_token_ns) / 1e9,
                                 ttft_s=(rec.first_token_ns - rec.send_ns) / 1e9,
                                 server_timings=rec.server.body() if rec.server else None)

    def record(self) -> shape.RooflineBody:
        """The rate alone, before its bandwidth is in (the document then holds `RooflineRate`'s keys)."""
        return shape.RooflineBody(tok_s=self.tok_s, tok_s_source=self.source, measurement=self.measurement())


@dataclass(frozen=True)
class Weights:
    """What every token reads, as the command resolved it (an audit of the model file, or a figure given)."""

    bytes_per_token: int
    resident_bytes: int | None
    kind: str
    step: rl.StepBytes | None = None  # the audit's split of a step by how it scales with batch size
    audit_summary: shape.AuditSummary | None = None
    kv_counted: bool = False  # the audit counted a KV cache (--context)


@dataclass(frozen=True)
class Bandwidth:
    span: Span
    source: str
    probe: BandwidthBody | None = None  # the probe's result, when the bandwidth was probed
    probe_notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Plan:
    """The analysis asked for: the kind's ceiling, the gate, a target, batch sizes and a saved run's rates."""

    ceiling: Span
    gate_threshold: float = rl.DEFAULT_GATE
    target_tok_s: float | None = None
    batches: tuple[int, ...] = ()
    runs: Mapping[int, float] | None = None
    kind_given: bool = False
    asked_tokens: int | None = None  # --tokens with --url
    notes: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class RooflineResult:
    """The rate, and once settled, the bandwidth it is drawn against."""

    rate: Rate
    bandwidth: Bandwidth | None = None


def document(result: RooflineResult, weights: Weights, plan: Plan) -> RunResult[shape.RooflineBody]:
    """The command's typed result: the rate alone until the bandwidth is in, then the analysis of one
    against the other."""
    rate, bw = result.rate, result.bandwidth
    simulated = rate.server is not None and rate.server.simulated
    if bw is None:
        return measured("roofline", rate.record(), simulated=simulated)
    r = analyse(rate, bw, weights, plan)
    return measured("roofline", body(r, rate, bw, weights, plan), valid=r.valid, simulated=simulated)


def analyse(rate: Rate, bw: Bandwidth, weights: Weights, plan: Plan) -> rl.RooflineAnalysis:
    return rl.analyse_roofline(weights.bytes_per_token, weights.kind, rate.tok_s, bw.span, plan.ceiling,
                      gate_threshold=plan.gate_threshold, target_tok_s=plan.target_tok_s, step=weights.step,
                      batches=plan.batches, measured=plan.runs)


def body(r: rl.RooflineAnalysis, rate: Rate, bw: Bandwidth, weights: Weights, plan: Plan) -> shape.RooflineBody:
    """The roofline body record (docs/schema.md) of the analysis `r` of `rate` against `bw`."""
    return shape.RooflineBody(
        bytes_per_token=r.bytes_per_token, resident_bytes=weights.resident_bytes, kind=cast(Kind, r.kind),
        tok_s=rate.tok_s, tok_s_source=rate.source, achieved_gb_s=r.achieved_gb_s,
        bandwidth_gb_s=r.bandwidth_gb_s.as_range(), bandwidth_source=bw.source, utilization=r.utilization.as_range(),
        gate=r.gate, gate_threshold=r.gate_threshold, ceiling=r.ceiling_record(), headroom=r.headroom_record(),
        target=r.target_record(), batch=r.batch_records(), audit=weights.audit_summary, probe=bw.probe,
        measurement=rate.measurement(),
        notes=(*plan.notes, *(f"probe: {n}" for n in bw.probe_notes), *notes(r, rate, weights, plan)),
    )


def notes(r: rl.RooflineAnalysis, rate: Rate, weights: Weights, plan: Plan) -> list[Reason]:
    """The caveats these numbers need (analysis.roofline.sanity_notes)."""
    audited = weights.audit_summary is not None
    return rl.sanity_notes(r.utilization, audited=audited, kv_counted=audited and weights.kv_counted,
                           kind_given=plan.kind_given, batched=bool(r.batch), asked_tokens=plan.asked_tokens,
                           stream_tokens=None if rate.stream is None else rate.stream.tokens)


@dataclass(frozen=True)
class RooflineInputs:
    """What `check`'s roofline card needs besides a rate: the weights audited and the plan before any
    request (jobs.roofline.prepare), and the step that settles a result with the bandwidth."""

    weights: Weights
    plan: Plan
    settle: Callable[[RooflineResult], RooflineResult]


@dataclass(frozen=True)
class RooflineExperiment:
    """--url: the decode rate of one fixed-length stream after a short warm-up, prefill excluded."""

    weights: Weights
    plan: Plan
    tokens: int = URL_DECODE_TOKENS
    prompt_tokens: int = URL_PROMPT_TOKENS
    seed: int = 0

    async def run(self, driver: Driver, on_server: Callable[[ServerInfo], None],
                  on_point: Callable[[RooflineResult], None]) -> RooflineResult:
        info = await driver.detect()
        on_server(info)
        warm, req = await make_requests(driver, 2, self.prompt_tokens, self.tokens, random.Random(self.seed))
        await driver.generate(replace(warm, max_tokens=WARMUP_TOKENS))
        rec = await driver.generate(req)
        if not rec.ok or rec.first_token_ns is None or rec.end_ns is None or rec.tokens < 2:
            raise ServerError(f"the measuring request failed ({rec.status}: {rec.error or 'no tokens'})",
                              "check the server, or pass --tok-s")
        tok_s = (rec.tokens - 1) / ((rec.end_ns - rec.first_token_ns) / 1e9)
        result = RooflineResult(Rate(tok_s, f"measured: one {rec.tokens}-token stream at {info.url}, prefill excluded",
                                     info, rec))
        on_point(result)  # a Ctrl-C during the bandwidth probe keeps the measured rate
        return result

    def opening(self, server: ServerInfo) -> RunResult[shape.RooflineBody]:
        return measured("roofline", shape.RooflineBody(), simulated=server.simulated)

    def document(self, result: RooflineResult) -> RunResult[shape.RooflineBody]:
        return document(result, self.weights, self.plan)
