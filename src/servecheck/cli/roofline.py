"""`servecheck roofline`: achieved bandwidth = tok/s x bytes per token, utilization of the measured bandwidth,
the kill gate, the headroom a better engine could win, a target back-solved, and the batching ceiling."""

from __future__ import annotations

import asyncio
import math
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from servecheck import exitcodes
from servecheck.analysis import roofline as rl
from servecheck.analysis.roofline import Span
from servecheck.audit import AuditResult, audit_model
from servecheck.cli.audit import options_from
from servecheck.cli.common import Recorder, check_input_file, make_target, output_options, target_options
from servecheck.cli.context import AppContext
from servecheck.client.base import Target
from servecheck.envinfo import environment
from servecheck.errors import AuditError, ServerError, UsageError
from servecheck.load.driver import LoadDriver
from servecheck.load.prompts import make_requests
from servecheck.model.bodies.roofline import RooflineBody
from servecheck.model.records import RequestRecord, ServerInfo
from servecheck.model.result import RunResult, from_doc
from servecheck.probe import GIB, BandwidthResult, measure_bandwidth, plan_sizes
from servecheck.probe.bandwidth import available_memory_bytes
from servecheck.report.lines.roofline import report_lines
from servecheck.results.jsonout import envelope, read_json

URL_DECODE_TOKENS = 256
URL_PROMPT_TOKENS = 32


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
        raise UsageError(f"{flag} {raw!r} is a fraction of measured bandwidth, not a percentage", f"for example {flag} 0.60-0.65")
    return span


# ---------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Weights:
    bytes_per_token: int
    resident_bytes: int | None
    kind: str
    audit: AuditResult | None


def resolve_weights(model: Path | None, bytes_text: str | None, kind: str, resident: str | None,
                    context: int | None, kv_type: str, experts_used: int | None) -> Weights:
    if (model is None) == (bytes_text is None):
        raise UsageError("give a MODEL file or --bytes-per-token, not both or neither", "e.g. roofline model.gguf --tok-s 97.8")
    resident_bytes = _bytes(resident, "--resident") if resident else None
    if model is None and (context is not None or experts_used is not None):
        flag = "--context" if context is not None else "--experts-used"
        raise UsageError(f"{flag} needs a MODEL file to audit", "with --bytes-per-token, count the KV cache in the figure you give")
    if model is not None:
        options = options_from(context, kv_type, experts_used)
        check_input_file(model, "model", allow_dir=True, error=AuditError)
        result = audit_model(model, options)
        return Weights(result.total_bytes_per_token, resident_bytes or result.resident_bytes,
                       result.kind if kind == "auto" else kind, result)
    assert bytes_text is not None
    return Weights(_bytes(bytes_text, "--bytes-per-token"), resident_bytes, "dense" if kind == "auto" else kind, None)


# A petabyte per token: no model reads more, and inside it every rate and ratio stays finite
# (1e300GB overflowed the arithmetic).
MAX_BYTES = 10**15


def _bytes(text: str, flag: str) -> int:
    try:
        nbytes = rl.parse_bytes(text)
    except OverflowError:
        raise UsageError(f"{flag} {text!r} is too large a byte figure", f"for example {flag} 1.849GB") from None
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}", f"for example {flag} 1.849GB") from None
    if nbytes > MAX_BYTES:
        raise UsageError(f"{flag} {text!r} is above {MAX_BYTES / 1e15:g} PB", f"for example {flag} 1.849GB")
    return nbytes


@dataclass(frozen=True)
class Bandwidth:
    span: Span
    source: str
    probe: BandwidthResult | None = None


def resolve_bandwidth(raw: str, resident: int | None, device: str, threads: int | None, app: AppContext) -> Bandwidth:
    if raw != "auto":
        return Bandwidth(parse_span(raw, "--bandwidth", "265-315"), "given")
    size, note = probe_size(resident)
    app.err.print(f"probing read bandwidth at {size / GIB:.2f} GiB on {device} ({note})", style="dim", markup=False)
    result = measure_bandwidth([size], device=device, threads=threads)
    point = result.closest(resident or size)
    return Bandwidth(Span(min(point.low_gb_s, point.gb_s), point.gb_s), f"probed at {point.bytes / GIB:.2f} GiB ({note})", result)


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


# ---------------------------------------------------------------- --url: single-stream decode rate


@dataclass(frozen=True)
class Rate:
    """The decode rate the roofline is drawn for: given, or measured on one stream at --url."""

    tok_s: float
    source: str = "given"
    server: ServerInfo | None = None  # --url: what detection learned about the server
    stream: RequestRecord | None = None  # --url: the measuring request

    def fields(self) -> dict[str, Any]:
        """The document's `tok_s`, `tok_s_source` and `measurement` (null for a given rate)."""
        rec, measurement = self.stream, None
        if self.server is not None and rec is not None and rec.first_token_ns is not None and rec.end_ns is not None:
            measurement = {"server": self.server.to_dict(), "tokens": rec.tokens, "tokens_source": rec.tokens_source,
                           "decode_s": (rec.end_ns - rec.first_token_ns) / 1e9, "ttft_s": (rec.first_token_ns - rec.send_ns) / 1e9,
                           "server_timings": rec.server.to_dict() if rec.server else None}
        return {"tok_s": self.tok_s, "tok_s_source": self.source, "measurement": measurement}


async def measure_tok_s(target: Target, tokens: int, prompt_tokens: int, seed: int) -> tuple[float, ServerInfo, RequestRecord]:
    """Decode tokens/s of one fixed-length stream (after a short warm-up), prefill excluded."""

    async with LoadDriver(target) as driver:
        info = await driver.detect()
        warm, req = await make_requests(driver, 2, prompt_tokens, tokens, random.Random(seed))
        await driver.generate(_short(warm))
        rec = await driver.generate(req)
    if not rec.ok or rec.first_token_ns is None or rec.end_ns is None or rec.tokens < 2:
        raise ServerError(f"the measuring request failed ({rec.status}: {rec.error or 'no tokens'})", "check the server, or pass --tok-s")
    return (rec.tokens - 1) / ((rec.end_ns - rec.first_token_ns) / 1e9), info, rec


def measure_rate(target: Target, tokens: int) -> Rate:
    """The decode rate of one --url stream, where it came from, and the request's record."""
    tok_s, info, rec = asyncio.run(measure_tok_s(target, tokens, URL_PROMPT_TOKENS, 0))
    return Rate(tok_s, f"measured: one {rec.tokens}-token stream at {target.url}, prefill excluded", info, rec)


def _short(req: Any) -> Any:
    from dataclasses import replace

    return replace(req, max_tokens=8)


# ---------------------------------------------------------------- the document


def document(weights: Weights, rate: Rate, bw: Bandwidth, ceiling: Span, *, gate_threshold: float, target_tok_s: float | None,
             batches: list[int] | None, runs: dict[int, float] | None, kind: str, asked_tokens: int | None,
             notes: list[str]) -> dict[str, Any]:
    """The command's fields: the analysis of the rate against the bandwidth, what it was drawn from, and its notes."""
    r = rl.analyse(weights.bytes_per_token, weights.kind, rate.tok_s, bw.span, ceiling, gate_threshold=gate_threshold,
                   target_tok_s=target_tok_s, step=_step(weights), batches=batches or (), measured=runs)
    audit = weights.audit
    sanity = rl.sanity_notes(r.utilization, audited=audit is not None, kv_counted=audit is not None and audit.kv is not None,
                             kind_given=kind != "auto", batched=bool(r.batch), asked_tokens=asked_tokens,
                             stream_tokens=None if rate.stream is None else rate.stream.tokens)
    return {
        **r.to_dict(),
        "resident_bytes": weights.resident_bytes,
        "bandwidth_source": bw.source,
        **rate.fields(),
        "probe": None if bw.probe is None else bw.probe.to_dict(),
        "audit": None if audit is None else _audit_summary(audit),
        "notes": [*notes, *(f"probe: {n}" for n in (bw.probe.notes if bw.probe else ())), *sanity],
        "valid": r.valid,
    }


def _step(weights: Weights) -> rl.StepBytes | None:
    return None if weights.audit is None else weights.audit.step_bytes()


def _audit_summary(a: AuditResult) -> dict[str, Any]:
    d = a.to_dict()
    return {k: d[k] for k in ("path", "format", "architecture", "bytes_per_token", "kv_bytes_per_token",
                              "state_bytes_per_token", "resident_bytes", "experts", "tied_head")}


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
        if isinstance(n, int) and not isinstance(n, bool) and n >= 1 and isinstance(agg, (int, float)) and 0 < agg < math.inf:
            samples.setdefault(n, []).append(float(agg))
    if not samples:
        raise UsageError(f"--run {path}: no aggregate tok/s per N found", "give a staircase or arms result")
    notes = []
    if doc.get("simulated"):
        notes.append(f"--run {path} was measured on servecheck's SIMULATED server: its measured/ceiling says nothing about a real engine")
    if doc.get("complete") is False:
        notes.append(f"--run {path} is incomplete (interrupted): only the points it reached are compared")
    return {n: statistics.median(v) for n, v in samples.items()}, notes


# ---------------------------------------------------------------- the command


@click.command("roofline")
@click.argument("model_path", metavar="[MODEL]", required=False, type=click.Path(path_type=Path))
@click.option("--bytes-per-token", "bytes_text", default=None, help="Bytes read per token from an audit done elsewhere, e.g. 1.849GB.")
@click.option("--tok-s", type=float, default=None, help="Measured single-stream decode tok/s.")
@click.option("--url", default=None, help="Measure single-stream decode tok/s on this server instead.")
@click.option("--bandwidth", "bandwidth_raw", default="auto", show_default=True, help="auto (probe), GB/s, or LO-HI GB/s.")
@click.option("--target", "target_tok_s", type=float, default=None, help="Back-solve the utilization this tok/s needs.")
@click.option("--gate", "gate_threshold", type=click.FloatRange(0.01, 1.5), default=rl.DEFAULT_GATE, show_default=True,
              help="Kill gate: utilization at or above which writing your own engine is not worth it.")
@click.option("--batch", "batch_raw", default=None, help="Batching ceiling per batch size, e.g. 1,2,4,8.")
@click.option("--run", "run_path", default=None, metavar="PATH", help="Saved staircase/arms JSON: measured aggregate / ceiling per N.")
@click.option("--kind", type=click.Choice(["auto", "dense", "moe"]), default="auto", show_default=True,
              help="Model kind for the typical ceiling (auto: from the audit; dense for --bytes-per-token).")
@click.option("--ceiling", "ceiling_raw", default=None, help="Typical best utilization for this kind, LO-HI (default: dense 0.85-0.95, moe 0.60-0.65).")
@click.option("--resident", default=None, help="Working set for the bandwidth probe with --bytes-per-token, e.g. 21GiB.")
@click.option("--context", type=int, default=None, help="Count KV-cache bytes at this context (with MODEL).")
@click.option("--kv-type", default="f16", show_default=True, help="KV cache type (with MODEL and --context).")
@click.option("--experts-used", type=int, default=None, help="Override the routed experts per token (with MODEL).")
@click.option("--device", type=click.Choice(["cpu", "cuda", "mps"]), default="cpu", show_default=True, help="Where to probe bandwidth.")
@click.option("--threads", type=int, default=None, help="Probe threads (default: every core).")
@click.option("--tokens", type=click.IntRange(min=8), default=URL_DECODE_TOKENS, show_default=True, help="Decode length for --url.")
@target_options
@output_options
@click.pass_obj
def cmd(app: AppContext, model_path: Path | None, bytes_text: str | None, tok_s: float | None, url: str | None,
        bandwidth_raw: str, target_tok_s: float | None, gate_threshold: float, batch_raw: str | None, run_path: str | None,
        kind: str, ceiling_raw: str | None, resident: str | None, context: int | None, kv_type: str,
        experts_used: int | None, device: str, threads: int | None, tokens: int, api: str, model: str | None,
        api_key: str | None, headers: tuple[str, ...], first_token_timeout_s: float,
        json_path: str | None, html_path: str | None, db_path: str | None, no_save: bool) -> int:
    """Utilization of measured memory bandwidth: tok/s x bytes per token / bandwidth, and the kill gate."""
    if (tok_s is None) == (url is None):
        raise UsageError("give --tok-s or --url, not both or neither", "e.g. --tok-s 97.83")
    _check_positive(tok_s, "--tok-s", "97.83")
    _check_positive(target_tok_s, "--target", "125")
    batches = parse_batches(batch_raw)
    runs, notes = load_run(run_path) if run_path else (None, [])
    if runs and not batches:
        batches = sorted(runs)
    if url is not None and model_path is not None and context is None:
        # the measuring stream reads its KV cache at every step: count it at the stream's mean depth
        context = URL_PROMPT_TOKENS + tokens // 2
        notes.append(f"KV cache counted at {context} tokens, the measuring stream's mean context (--context to change)")
    weights = resolve_weights(model_path, bytes_text, kind, resident, context, kv_type, experts_used)
    ceiling = parse_fraction(ceiling_raw, "--ceiling") if ceiling_raw else rl.TYPICAL_CEILING[weights.kind]
    params = {"model": None if model_path is None else str(model_path), "bytes_per_token": bytes_text, "tok_s": tok_s, "url": url,
              "bandwidth": bandwidth_raw, "target": target_tok_s, "gate": gate_threshold, "batch": batches, "kind": kind,
              "context": context, "kv_type": kv_type, "device": device, "tokens": tokens if url else None}
    recorder = Recorder(json_path=json_path, html_path=html_path, db_path=db_path, no_save=no_save)
    head = envelope("roofline", params, environment())
    try:
        recorder.start(head)
        if url is None:
            rate = Rate(tok_s)  # one of --tok-s and --url is given (checked above)
        else:
            target = make_target(url, api=api, model=model, api_key=api_key, headers=headers,
                                 first_token_timeout_s=first_token_timeout_s)
            rate = measure_rate(target, tokens)
            head["simulated"] = rate.server is not None and rate.server.simulated
            recorder.partial({**head, **rate.fields()})  # a Ctrl-C during the probe keeps the measured rate
        bw = resolve_bandwidth(bandwidth_raw, weights.resident_bytes, device, threads, app)
        doc = recorder.finish({**head, **document(weights, rate, bw, ceiling, gate_threshold=gate_threshold, target_tok_s=target_tok_s,
                                                  batches=batches, runs=runs, kind=kind, asked_tokens=tokens if url else None, notes=notes)})
    except KeyboardInterrupt:
        recorder.interrupted()
        app.err.print("Interrupted.", markup=False)
        return exitcodes.INTERRUPTED
    finally:
        recorder.close()
    return _report(app, from_doc(doc), json_path == "-")


def _report(app: AppContext, run: RunResult[RooflineBody], json_to_stdout: bool) -> int:
    """Print the report; the exit code says whether the run is valid."""
    console = app.err if json_to_stdout else app.out
    for line in report_lines(run):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if run.valid is False:
        console.print("INVALID: utilization above 100% of the measured bandwidth over the whole range (see the note)",
                      style="bold yellow", markup=False, highlight=False, soft_wrap=True)
        return exitcodes.INVALID
    return exitcodes.OK
