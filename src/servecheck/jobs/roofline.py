"""`servecheck roofline`'s inputs, made into what its experiment and job take: the weights (from a
model file's audit or --bytes-per-token), the plan (ceiling, gate, target, batches, a saved run), the
params the document records, and the step that settles a result with the memory bandwidth (given, or
probed on this machine). This layer composes the audit, the bandwidth probe, saved results and the
roofline experiment; the command (`cli.roofline`) parses the flags into `RooflineOptions`, runs, renders.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from servecheck.analysis import roofline as rl
from servecheck.analysis.roofline import Span
from servecheck.audit import audit_model
from servecheck.audit.options import options_from
from servecheck.envinfo import environment
from servecheck.errors import AuditError, UsageError
from servecheck.experiments.roofline import (
    Rate,
    document,
    URL_DECODE_TOKENS,
    URL_PROMPT_TOKENS,
    Bandwidth,
    Plan,
    RooflineResult,
    Weights,
)
from servecheck.inputs import check_input_file
from servecheck.model.bodies.roofline import AuditSummary
from servecheck.model.bodies import roofline as shape
from servecheck.model.result import Envelope, RunResult, measured
from servecheck.probe import GIB, measure_bandwidth, plan_sizes
from servecheck.probe.bandwidth import available_memory_bytes
from servecheck.runs.jsonout import envelope, read_json

Say = Callable[[str], None]


@dataclass(frozen=True)
class RooflineOptions:
    """The flags of `servecheck roofline` that say what to compute; the server's and the outputs' flags
    are records of their own (cli.common.ClientOptions, OutputOptions)."""

    model_path: Path | None = None  # MODEL: a weight file or folder to audit
    bytes_text: str | None = None  # --bytes-per-token
    tok_s: float | None = None  # --tok-s: a rate measured elsewhere
    url: str | None = None  # --url: measure the rate on this server
    bandwidth_raw: str = "auto"  # --bandwidth: auto (probe), GB/s or LO-HI GB/s
    target_tok_s: float | None = None  # --target
    gate_threshold: float = rl.DEFAULT_GATE  # --gate
    batch_raw: str | None = None  # --batch
    run_path: str | None = None  # --run
    kind: str = "auto"  # --kind
    ceiling_raw: str | None = None  # --ceiling
    resident: str | None = None  # --resident
    context: int | None = None  # --context
    kv_type: str = "f16"  # --kv-type
    experts_used: int | None = None  # --experts-used
    device: str = "cpu"  # --device (for the probe)
    threads: int | None = None  # --threads (for the probe)
    tokens: int = URL_DECODE_TOKENS  # --tokens (with --url)


@dataclass(frozen=True)
class RooflineSetup:
    """What the command runs: the weights and plan, and the document's envelope (its params)."""

    options: RooflineOptions
    weights: Weights
    plan: Plan
    head: Envelope

    def settle(self, say: Say) -> Callable[[RooflineResult], RooflineResult]:
        """The last step of either run: the bandwidth the rate is held against (a probe prints what it
        does to `say`)."""
        o = self.options

        def settle(result: RooflineResult) -> RooflineResult:
            return replace(result, bandwidth=resolve_bandwidth(o.bandwidth_raw, self.weights.resident_bytes, o.device,
                                                               o.threads, say))

        return settle


def prepare(o: RooflineOptions) -> RooflineSetup:
    """Every flag checked and every input read (the model audited, --run loaded) before anything is measured."""
    if (o.tok_s is None) == (o.url is None):
        raise UsageError("give --tok-s or --url, not both or neither", "e.g. --tok-s 97.83")
    _check_positive(o.tok_s, "--tok-s", "97.83")
    _check_positive(o.target_tok_s, "--target", "125")
    batches = parse_batches(o.batch_raw)
    runs, notes = load_run(o.run_path) if o.run_path else (None, [])
    if runs and not batches:
        batches = sorted(runs)
    context = o.context
    if o.url is not None and o.model_path is not None and context is None:
        # the measuring stream reads its KV cache at every step: count it at the stream's mean depth
        context = URL_PROMPT_TOKENS + o.tokens // 2
        notes.append(f"KV cache counted at {context} tokens, the measuring stream's mean context (--context to change)")
    weights = resolve_weights(o.model_path, o.bytes_text, o.kind, o.resident, context, o.kv_type, o.experts_used)
    ceiling = parse_fraction(o.ceiling_raw, "--ceiling") if o.ceiling_raw else rl.TYPICAL_CEILING[weights.kind]
    params = {"model": None if o.model_path is None else str(o.model_path), "bytes_per_token": o.bytes_text,
              "tok_s": o.tok_s, "url": o.url, "bandwidth": o.bandwidth_raw, "target": o.target_tok_s,
              "gate": o.gate_threshold, "batch": batches, "kind": o.kind, "context": context, "kv_type": o.kv_type,
              "device": o.device, "tokens": o.tokens if o.url else None}
    plan = Plan(ceiling, gate_threshold=o.gate_threshold, target_tok_s=o.target_tok_s, batches=tuple(batches or ()),
                runs=runs, kind_given=o.kind != "auto", asked_tokens=o.tokens if o.url else None, notes=tuple(notes))
    return RooflineSetup(o, weights, plan, envelope("roofline", params, environment()))


# ---------------------------------------------------------------- parsing


def parse_span(raw: str, flag: str, example: str) -> Span:
    """'300' or '265-315' -> Span; anything else is a one-line usage error."""
    lo_text, sep, hi_text = raw.partition("-")
    try:
        lo = float(lo_text)
        hi = float(hi_text) if sep else lo
    except ValueError:
        raise UsageError(f"{flag} {raw!r} is not a number or LO-HI range", f"for example {flag} {example}") from None
    if not (0 < lo <= hi) or hi == float("inf"):
        raise UsageError(f"{flag} {raw!r}: need 0 < LO <= HI", f"for example {flag} {example}")
    return Span(lo, hi)


def _check_positive(value: float | None, flag: str, example: str) -> None:
    if value is not None and not (0 < value < math.inf):
        raise UsageError(f"{flag} must be a positive finite number, not {value}", f"e.g. {flag} {example}")


def parse_batches(raw: str | None) -> list[int] | None:
    if raw is None:
        return None
    try:
        out = [int(p) for p in raw.split(",") if p.strip()]
    except ValueError:
        raise UsageError(f"--batch {raw!r} is not a list of integers", "for example --batch 1,2,4,8") from None
    if not out or any(b < 1 for b in out):
        raise UsageError(f"--batch {raw!r}: every batch size must be >= 1", "for example --batch 1,2,4,8")
    return out


def parse_fraction(raw: str, flag: str) -> Span:
    span = parse_span(raw, flag, "0.60-0.65")
    if span.hi > 1.5:
        raise UsageError(f"{flag} {raw!r} is a fraction of measured bandwidth, not a percentage",
                         f"for example {flag} 0.60-0.65")
    return span


# ---------------------------------------------------------------- inputs


def resolve_weights(model: Path | None, bytes_text: str | None, kind: str, resident: str | None,
                    context: int | None, kv_type: str, experts_used: int | None) -> Weights:
    if (model is None) == (bytes_text is None):
        raise UsageError("give a MODEL file or --bytes-per-token, not both or neither",
                         "e.g. roofline model.gguf --tok-s 97.8")
    resident_bytes = _bytes(resident, "--resident") if resident else None
    if model is None and (context is not None or experts_used is not None):
        flag = "--context" if context is not None else "--experts-used"
        raise UsageError(f"{flag} needs a MODEL file to audit",
                         "with --bytes-per-token, count the KV cache in the figure you give")
    if model is not None:
        options = options_from(context, kv_type, experts_used)
        check_input_file(model, "model", allow_dir=True, error=AuditError)
        result = audit_model(model, options)
        return Weights(result.total_bytes_per_token, resident_bytes or result.resident_bytes,
                       result.kind if kind == "auto" else kind, step=result.step_bytes(),
                       audit_summary=AuditSummary.of(result.body()), kv_counted=result.kv is not None)
    assert bytes_text is not None
    return Weights(_bytes(bytes_text, "--bytes-per-token"), resident_bytes, "dense" if kind == "auto" else kind)




def _bytes(text: str, flag: str) -> int:
    try:
        nbytes = rl.parse_bytes(text)
    except OverflowError:
        raise UsageError(f"{flag} {text!r} is too large a byte figure", f"for example {flag} 1.849GB") from None
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}", f"for example {flag} 1.849GB") from None
    if nbytes > rl.MAX_BYTES_PER_TOKEN:
        raise UsageError(f"{flag} {text!r} is above {rl.MAX_BYTES_PER_TOKEN / 1e15:g} PB",
                         f"for example {flag} 1.849GB")
    return nbytes


def resolve_bandwidth(raw: str, resident: int | None, device: str, threads: int | None, say: Say) -> Bandwidth:
    if raw != "auto":
        return Bandwidth(parse_span(raw, "--bandwidth", "265-315"), "given")
    size, note = probe_size(resident)
    say(f"probing read bandwidth at {size / GIB:.2f} GiB on {device} ({note})")
    result = measure_bandwidth([size], device=device, threads=threads)
    point = result.closest(resident or size)
    return Bandwidth(Span(min(point.low_gb_s, point.gb_s), point.gb_s),
                     f"probed at {point.bytes / GIB:.2f} GiB ({note})", result.body(), tuple(result.notes))


def probe_size(resident: int | None) -> tuple[int, str]:
    """The working set to probe: the model's resident size when it fits, else the largest default that does."""
    available = available_memory_bytes()
    defaults, _ = plan_sizes(None, available)
    if resident is None:
        return defaults[-1], "no resident size known: the largest default size that fits"
    resident = max(resident, 1 << 20)
    try:
        plan_sizes([resident], available)
        return resident, "the model's resident size"
    except UsageError:
        return defaults[-1], (f"resident {resident / GIB:.1f} GiB does not fit: the largest size that does, "
                              "so bandwidth reads high and utilization low")


def load_run(path: str) -> tuple[dict[int, float], list[str]]:
    """Median measured aggregate tok/s per concurrency from a saved staircase or arms JSON (deviant arms
    cells left out), and notes on what the run was."""
    check_input_file(path, "--run")  # a FIFO or a device: exit 1, before anything opens it
    doc = read_json(path, flag="--run", hint="give a file written by staircase or arms --json")
    samples: dict[int, list[float]] = {}
    rows = [row for key in ("points", "cells") if isinstance(doc.get(key), list) for row in doc[key]]
    for row in rows:
        if not isinstance(row, dict) or row.get("deviant"):
            continue
        n, agg = row.get("n", row.get("concurrency")), row.get("aggregate_tok_s")
        if (isinstance(n, int) and not isinstance(n, bool) and n >= 1
                and isinstance(agg, (int, float)) and 0 < agg < math.inf):
            samples.setdefault(n, []).append(float(agg))
    if not samples:
        raise UsageError(f"--run {path}: no aggregate tok/s per N found", "give a staircase or arms result")
    notes = []
    if doc.get("simulated"):
        notes.append(f"--run {path} was measured on servecheck's SIMULATED server: "
                     "its measured/ceiling says nothing about a real engine")
    if doc.get("complete") is False:
        notes.append(f"--run {path} is incomplete (interrupted): only the points it reached are compared")
    return {n: statistics.median(v) for n, v in samples.items()}, notes


@dataclass(frozen=True)
class RooflineJob:
    """--tok-s: a rate given, nothing to measure on a server; the bandwidth is settled after."""

    weights: Weights
    plan: Plan
    tok_s: float
    settle: Callable[[RooflineResult], RooflineResult]

    def opening(self) -> RunResult[shape.RooflineBody]:
        return measured("roofline", shape.RooflineBody())

    def run(self, on_point: Callable[[RooflineResult], None]) -> RooflineResult:
        return self.settle(RooflineResult(Rate(self.tok_s)))

    def document(self, result: RooflineResult) -> RunResult[shape.RooflineBody]:
        return document(result, self.weights, self.plan)
