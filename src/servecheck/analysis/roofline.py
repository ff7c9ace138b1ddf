"""Decode roofline arithmetic: achieved bandwidth, utilization, the kill gate, target back-solve,
the batching ceiling, the two-factor decomposition of a speed ratio, and the whole roofline of one decode
rate with its validity and its caveats. Pure: numbers in, values out.

Units: bytes are plain integers; bandwidth is GB/s with GB = 10^9 bytes; utilization is a fraction.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from servecheck.model.bodies import roofline as shape
from servecheck.model.bodies.roofline import Gate, Range
from servecheck.model.reason import Reason, Text

GB = 1_000_000_000

# The seed's pre-registered kill gate: at or above 55% of measured bandwidth a custom engine can win at
# most ~0.9/0.55 = 1.6x and realistically 1.2-1.4x, so writing one is not worth it.
DEFAULT_GATE = 0.55

ModelKind = Literal["dense", "moe"]


@dataclass(frozen=True, slots=True)
class Span:
    """A closed range [lo, hi]; a point value has lo == hi."""

    lo: float
    hi: float

    def __post_init__(self) -> None:
        if not (self.lo <= self.hi):
            raise ValueError(f"range low {self.lo} is above high {self.hi}")

    @classmethod
    def point(cls, value: float) -> Span:
        return cls(value, value)

    def as_list(self) -> list[float]:
        return [self.lo, self.hi]

    def as_range(self) -> Range:
        return (self.lo, self.hi)


# Typical best achieved utilization of measured read bandwidth, per model kind.
# MoE: the seed (section 4) puts batch-1 MoE decode at 60-65% (sparse, non-contiguous expert reads;
# published engines sit at 25-52%, reference/roofline.md section 7.3).
# Dense: the best engines reach 85-95% of measured bandwidth (roofline.md sections 1.4 and 7.1-7.2).
TYPICAL_CEILING: dict[str, Span] = {
    "moe": Span(0.60, 0.65),
    "dense": Span(0.85, 0.95),
}


def achieved_gb_s(tok_s: float, bytes_per_token: float) -> float:
    """Bandwidth a decoder must sustain: tokens per second times bytes read per token, in GB/s."""
    return tok_s * bytes_per_token / GB


def utilization(achieved_gb_s_value: float, bandwidth_gb_s: Span) -> Span:
    """Achieved over measured bandwidth; the high bandwidth gives the low utilization."""
    if bandwidth_gb_s.lo <= 0:
        raise ValueError("bandwidth must be positive")
    return Span(achieved_gb_s_value / bandwidth_gb_s.hi, achieved_gb_s_value / bandwidth_gb_s.lo)


def gate_verdict(util: Span, threshold: float = DEFAULT_GATE) -> Gate:
    """close: the whole range is at or above the gate (the engine already sits near the ceiling);
    open: the whole range is below it; straddle: the range crosses it."""
    if util.lo >= threshold:
        return "close"
    if util.hi < threshold:
        return "open"
    return "straddle"


@dataclass(frozen=True, slots=True)
class Headroom:
    """How much faster a better engine could go: ceiling / utilization, as a range."""

    ceiling_name: Text  # roofline.typical_ceiling or roofline.speed_of_light
    ceiling: Span
    factor: Span  # lo = ceiling.lo / util.hi, hi = ceiling.hi / util.lo


def headroom(util: Span, ceiling: Span, ceiling_name: Text) -> Headroom:
    if util.lo <= 0:
        raise ValueError("utilization must be positive")
    return Headroom(ceiling_name, ceiling, Span(ceiling.lo / util.hi, ceiling.hi / util.lo))


@dataclass(frozen=True, slots=True)
class TargetCheck:
    tok_s: float
    required_gb_s: float
    required_utilization: Span
    ceiling: Span
    within_reach: bool  # the whole required range is at or below the top of the typical ceiling
    partly_within_reach: bool  # at least the optimistic end (highest bandwidth) is

    def record(self) -> shape.Target:
        return shape.Target(tok_s=self.tok_s, required_gb_s=self.required_gb_s,
                            required_utilization=self.required_utilization.as_range(), ceiling=self.ceiling.as_range(),
                            within_reach=self.within_reach, partly_within_reach=self.partly_within_reach)


def back_solve(target_tok_s: float, bytes_per_token: float, bandwidth_gb_s: Span, ceiling: Span) -> TargetCheck:
    """Seed: 125 tok/s x 1.849 GB = 231 GB/s = 73-87% of 265-315 GB/s, above a 60-65% MoE ceiling."""
    required = achieved_gb_s(target_tok_s, bytes_per_token)
    req_util = utilization(required, bandwidth_gb_s)
    return TargetCheck(
        tok_s=target_tok_s,
        required_gb_s=required,
        required_utilization=req_util,
        ceiling=ceiling,
        within_reach=req_util.hi <= ceiling.hi,
        partly_within_reach=req_util.lo <= ceiling.hi,
    )


def speed_of_light_tok_s(bandwidth_gb_s: Span, bytes_per_token: float) -> Span:
    """The tok/s a decoder reading every byte at the full measured bandwidth would reach."""
    return Span(bandwidth_gb_s.lo * GB / bytes_per_token, bandwidth_gb_s.hi * GB / bytes_per_token)


# ---------------------------------------------------------------------------------------------------
# Batching ceiling


@dataclass(frozen=True, slots=True)
class StepBytes:
    """What one batch-1 decode step reads, split by how each part scales with batch size."""

    shared_bytes: int  # dense weights, head, shared experts: read once per step whatever the batch
    per_sequence_bytes: int  # KV cache, recurrent state (x2), embedding row: read once per sequence
    routed_expert_bytes: int  # all routed experts of all layers (stored, not the k/E share)
    expert_count: int  # E (0 when the model has no routed experts)
    expert_used: int  # k


def expected_distinct_experts(expert_count: int, expert_used: int, batch: int) -> float:
    """Expected distinct experts a layer touches for `batch` tokens under uniform routing:
    E(1-(1-k/E)^b), at most min(b*k, E); the shape bound b*k over-counts."""
    if expert_count <= 0:
        return 0.0
    return expert_count * (1.0 - (1.0 - expert_used / expert_count) ** batch)


def step_bytes(step: StepBytes, batch: int) -> float:
    """Bytes one decode step reads at batch size `batch`."""
    if batch < 1:
        raise ValueError("batch must be at least 1")
    experts = 0.0
    if step.expert_count > 0:
        fraction = expected_distinct_experts(step.expert_count, step.expert_used, batch) / step.expert_count
        experts = step.routed_expert_bytes * fraction
    return step.shared_bytes + experts + batch * step.per_sequence_bytes


@dataclass(frozen=True, slots=True)
class BatchCeiling:
    batch: int
    step_bytes: float
    distinct_experts: float | None  # per layer, None for dense models
    ceiling_tok_s: Span  # aggregate tokens/s the bandwidth allows at the given utilization


def batch_ceilings(step: StepBytes, batches: list[int], effective_gb_s: Span) -> list[BatchCeiling]:
    """Aggregate tok/s ceiling per batch size: b x effective bandwidth / bytes per step.

    `effective_gb_s` is bandwidth x utilization. At the measured utilization that product is the achieved
    bandwidth, a single figure: pairing the low bandwidth with the low utilization instead would divide the
    bandwidth range into itself twice and put batch 1 below and above the rate that was measured."""
    out = []
    for b in batches:
        nbytes = step_bytes(step, b)
        distinct = expected_distinct_experts(step.expert_count, step.expert_used, b) if step.expert_count else None
        ceiling = Span(b * effective_gb_s.lo * GB / nbytes, b * effective_gb_s.hi * GB / nbytes)
        out.append(BatchCeiling(b, nbytes, distinct, ceiling))
    return out


# ---------------------------------------------------------------------------------------------------
# Decomposition of a speed ratio


@dataclass(frozen=True, slots=True)
class Decomposition:
    """speed ratio A/B = (bytes B / bytes A) x (achieved bandwidth A / achieved bandwidth B), same machine."""

    name_a: str
    name_b: str
    measured_ratio: float
    bytes_ratio: float
    utilization_ratio: float
    product: float
    bytes_share: float | None  # share of ln(ratio); None when the ratio is 1 (no gap to split)
    utilization_share: float | None


def decompose(
    name_a: str, bytes_a: float, tok_s_a: float, name_b: str, bytes_b: float, tok_s_b: float
) -> Decomposition:
    """Split tok_s_a / tok_s_b into fewer bytes per token and better bandwidth use (log shares)."""
    measured = tok_s_a / tok_s_b
    bytes_ratio = bytes_b / bytes_a
    util_ratio = achieved_gb_s(tok_s_a, bytes_a) / achieved_gb_s(tok_s_b, bytes_b)
    log_r = math.log(measured)
    if abs(log_r) < 1e-12:
        shares: tuple[float | None, float | None] = (None, None)
    else:
        shares = (math.log(bytes_ratio) / log_r, math.log(util_ratio) / log_r)
    return Decomposition(
        name_a=name_a,
        name_b=name_b,
        measured_ratio=measured,
        bytes_ratio=bytes_ratio,
        utilization_ratio=util_ratio,
        product=bytes_ratio * util_ratio,
        bytes_share=shares[0],
        utilization_share=shares[1],
    )


# ---------------------------------------------------------------------------------------------------
# Utilization versus measured aggregate throughput


def measured_over_ceiling(measured_tok_s: float, ceiling: Span) -> Span:
    """Measured aggregate tok/s as a fraction of the ceiling range (lo uses the high ceiling)."""
    return Span(measured_tok_s / ceiling.hi, measured_tok_s / ceiling.lo)


# ---------------------------------------------------------------------------------------------------
# One decode rate against measured bandwidth: the whole roofline, its validity and its caveats

# Achieved above measured bandwidth across the whole range is physically impossible: the bytes per token,
# the bandwidth or the rate is wrong, and no gate drawn from it can stand.
MAX_PLAUSIBLE_UTILIZATION = 1.0
# Below this share of measured bandwidth the engine usually runs on the wrong device or a fallback path
# (reference/roofline.md section 6.3 item 7).
LOW_UTILIZATION = 0.15
# A stream shorter than this share of the asked length was cut by EOS: its rate rests on fewer tokens.
SHORT_STREAM_FRACTION = 0.95
SPEED_OF_LIGHT = Reason("roofline.speed_of_light")  # the ceiling of every byte at the measured bandwidth


@dataclass(frozen=True, slots=True)
class BatchRow:
    """A batch size's aggregate ceiling, and what a saved run measured there (None without one)."""

    ceiling: BatchCeiling
    measured_tok_s: float | None = None

    @property
    def measured_over_ceiling(self) -> Span | None:
        return (None if self.measured_tok_s is None
                else measured_over_ceiling(self.measured_tok_s, self.ceiling.ceiling_tok_s))

    def record(self) -> shape.BatchRow:
        c, ratio = self.ceiling, self.measured_over_ceiling
        return shape.BatchRow(batch=c.batch, step_bytes=c.step_bytes, distinct_experts=c.distinct_experts,
                              ceiling_tok_s=c.ceiling_tok_s.as_range(), measured_tok_s=self.measured_tok_s,
                              measured_over_ceiling=None if ratio is None else ratio.as_range())


@dataclass(frozen=True, slots=True)
class RooflineAnalysis:
    """One decode rate against the measured bandwidth: everything `servecheck roofline` reports and judges."""

    bytes_per_token: int
    kind: str
    tok_s: float
    achieved_gb_s: float
    bandwidth_gb_s: Span
    utilization: Span
    gate: Gate
    gate_threshold: float
    headroom: Headroom  # to the typical ceiling of the model's kind
    speed_of_light: Headroom  # to every byte at the measured bandwidth
    speed_of_light_tok_s: Span
    target: TargetCheck | None
    batch: tuple[BatchRow, ...] | None  # None when no batch size was asked for

    @property
    def valid(self) -> bool:
        return plausible(self.utilization)

    def ceiling_record(self) -> shape.Ceiling:
        return shape.Ceiling(name=self.headroom.ceiling_name, utilization=self.headroom.ceiling.as_range())

    def headroom_record(self) -> shape.Headroom:
        return shape.Headroom(ceiling=self.headroom.ceiling_name, factor=self.headroom.factor.as_range(),
                              speed_of_light_factor=self.speed_of_light.factor.as_range(),
                              speed_of_light_tok_s=self.speed_of_light_tok_s.as_range())

    def target_record(self) -> shape.Target | None:
        return None if self.target is None else self.target.record()

    def batch_records(self) -> tuple[shape.BatchRow, ...] | None:
        return None if self.batch is None else tuple(row.record() for row in self.batch)


def analyse_roofline(bytes_per_token: int, kind: str, tok_s: float, bandwidth_gb_s: Span, ceiling: Span, *,
            gate_threshold: float = DEFAULT_GATE, target_tok_s: float | None = None, step: StepBytes | None = None,
            batches: Sequence[int] = (), measured: Mapping[int, float] | None = None) -> RooflineAnalysis:
    """The roofline of `tok_s` decoding `bytes_per_token` on `bandwidth_gb_s`, against the typical `ceiling` of
    the kind; `step` splits the bytes for the batching ceiling (every byte once per step without it), and
    `measured` holds a saved run's aggregate tok/s per batch size."""
    achieved = achieved_gb_s(tok_s, bytes_per_token)
    util = utilization(achieved, bandwidth_gb_s)
    name = Reason("roofline.typical_ceiling", kind=kind, lo=ceiling.lo, hi=ceiling.hi)
    return RooflineAnalysis(
        bytes_per_token=bytes_per_token, kind=kind, tok_s=tok_s, achieved_gb_s=achieved, bandwidth_gb_s=bandwidth_gb_s,
        utilization=util, gate=gate_verdict(util, gate_threshold), gate_threshold=gate_threshold,
        headroom=headroom(util, ceiling, name), speed_of_light=headroom(
            util, Span.point(1.0), SPEED_OF_LIGHT),
        speed_of_light_tok_s=speed_of_light_tok_s(bandwidth_gb_s, bytes_per_token),
        target=None if target_tok_s is None else back_solve(target_tok_s, bytes_per_token, bandwidth_gb_s, ceiling),
        batch=(_batch_rows(step or StepBytes(bytes_per_token, 0, 0, 0, 0), batches, achieved, measured or {})
               if batches else None),
    )


def _batch_rows(step: StepBytes, batches: Sequence[int], achieved: float,
                measured: Mapping[int, float]) -> tuple[BatchRow, ...]:
    """Ceilings at the measured utilization: measured bandwidth x utilization is the achieved bandwidth."""
    return tuple(BatchRow(c, measured.get(c.batch)) for c in batch_ceilings(step, list(batches), Span.point(achieved)))


def plausible(util: Span) -> bool:
    """False when achieved bandwidth is above the measured bandwidth across the whole range: the run is invalid."""
    return util.lo <= MAX_PLAUSIBLE_UTILIZATION


def sanity_notes(util: Span, *, audited: bool, kv_counted: bool, kind_given: bool, batched: bool,
                 stream_tokens: int | None = None, asked_tokens: int | None = None) -> list[Reason]:
    """The caveats these numbers need (reference/roofline.md section 6.3 item 7 for the first two): U > 1 means
    bytes over-counted or a cache-resident model, U < 0.15 usually the wrong device or a fallback path.

    `audited`: the bytes come from an audit of the model file (not --bytes-per-token); `kv_counted`: that audit
    counted a KV cache (--context); `kind_given`: --kind was given; `batched`: a batching ceiling was asked for;
    `stream_tokens` of `asked_tokens`: what the --url measuring stream produced."""
    notes = []
    if util.hi > MAX_PLAUSIBLE_UTILIZATION:
        notes.append(Reason("roofline.above_bandwidth", limit=MAX_PLAUSIBLE_UTILIZATION))
    if util.lo < LOW_UTILIZATION:
        notes.append(Reason("roofline.low_utilization", limit=LOW_UTILIZATION))
    if not audited and not kind_given:
        notes.append(Reason("roofline.kind_assumed_dense"))
    if not audited and batched:
        notes.append(Reason("roofline.batch_unaudited"))
    if audited and not kv_counted:
        notes.append(Reason("roofline.kv_not_counted"))
    if stream_tokens is not None and asked_tokens and stream_tokens < SHORT_STREAM_FRACTION * asked_tokens:
        notes.append(Reason("roofline.short_stream", tokens=stream_tokens, asked=asked_tokens))
    return notes


# ---------------------------------------------------------------------------------------------------
# Byte figures with units

_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}


# A petabyte read per token: no model reads more, and inside it every rate and ratio stays finite
# (1e300GB overflowed the arithmetic). A byte figure above it is refused (roofline, compare).
MAX_BYTES_PER_TOKEN = 10**15


def parse_bytes(text: str) -> int:
    """'1.849GB' -> 1849000000, '21GiB' -> 22548578304, '4096' -> 4096. GB = 10^9, GiB = 2^30.

    Raises ValueError with a one-line message on anything else."""
    raw = text.strip().replace("_", "")
    i = len(raw)
    while i > 0 and raw[i - 1].isalpha():
        i -= 1
    number, unit = raw[:i].strip(), raw[i:].lower()
    if unit not in _UNITS:
        raise ValueError(f"unknown unit {raw[i:]!r} in {text!r} (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)")
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"{text!r} is not a byte figure like 1.849GB or 21GiB") from None
    nbytes = round(value * _UNITS[unit]) if math.isfinite(value) else 0
    if nbytes < 1:
        raise ValueError(f"{text!r} must be a positive byte figure (at least 1 byte)")
    return nbytes
