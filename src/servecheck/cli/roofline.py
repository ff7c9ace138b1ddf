"""`servecheck roofline`: achieved bandwidth = tok/s x bytes per token, utilization of the measured bandwidth,
the kill gate, the headroom a better engine could win, a target back-solved, and the batching ceiling."""

from __future__ import annotations

import asyncio
import json
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
from servecheck.cli.audit import fmt_bytes, options_from
from servecheck.cli.common import Recorder, check_input_file, make_target, output_options, target_options
from servecheck.cli.context import AppContext
from servecheck.client.base import Target
from servecheck.envinfo import environment
from servecheck.errors import AuditError, ServerError, UsageError
from servecheck.probe import GIB, BandwidthResult, measure_bandwidth, plan_sizes
from servecheck.probe.bandwidth import available_memory_bytes
from servecheck.results.jsonout import envelope

# A utilization range wholly above 1 means achieved > measured bandwidth: a wrong input, not a fast engine.
MAX_PLAUSIBLE_UTILIZATION = 1.0

UNITS_LINE = "GB = 10^9 bytes, GB/s = 10^9 bytes per second, GiB = 2^30 bytes; utilization is a fraction of measured bandwidth"
URL_DECODE_TOKENS = 256
URL_PROMPT_TOKENS = 32
# A stream shorter than this share of the asked length was cut by EOS: its rate is noisier and is said so.
SHORT_STREAM_FRACTION = 0.95


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


async def measure_tok_s(target: Target, tokens: int, prompt_tokens: int, seed: int) -> tuple[float, dict[str, Any]]:
    """Decode tokens/s of one fixed-length stream (after a short warm-up), prefill excluded."""
    from servecheck.load.driver import LoadDriver
    from servecheck.load.prompts import make_requests

    async with LoadDriver(target) as driver:
        info = await driver.detect()
        warm, req = await make_requests(driver, 2, prompt_tokens, tokens, random.Random(seed))
        await driver.generate(_short(warm))
        rec = await driver.generate(req)
    if not rec.ok or rec.first_token_ns is None or rec.end_ns is None or rec.tokens < 2:
        raise ServerError(f"the measuring request failed ({rec.status}: {rec.error or 'no tokens'})", "check the server, or pass --tok-s")
    decode_s = (rec.end_ns - rec.first_token_ns) / 1e9
    tok_s = (rec.tokens - 1) / decode_s
    server = rec.server.to_dict() if rec.server else None
    return tok_s, {"server": info.to_dict(), "tokens": rec.tokens, "tokens_source": rec.tokens_source,
                   "decode_s": decode_s, "ttft_s": (rec.first_token_ns - rec.send_ns) / 1e9, "server_timings": server}


def measure_rate(target: Target, tokens: int) -> dict[str, Any]:
    """The document fields of a --url measurement: tok_s, where it came from, and the request's record."""
    tok_s, measured = asyncio.run(measure_tok_s(target, tokens, URL_PROMPT_TOKENS, 0))
    source = f"measured: one {measured['tokens']}-token stream at {target.url}, prefill excluded"
    return {"tok_s": tok_s, "tok_s_source": source, "measurement": measured}


def _short(req: Any) -> Any:
    from dataclasses import replace

    return replace(req, max_tokens=8)


# ---------------------------------------------------------------- the analysis document


def analyse(weights: Weights, tok_s: float, bw: Bandwidth, gate_threshold: float, ceiling: Span,
            target: float | None, batches: list[int] | None, runs: dict[int, float] | None) -> dict[str, Any]:
    achieved = rl.achieved_gb_s(tok_s, weights.bytes_per_token)
    util = rl.utilization(achieved, bw.span)
    ceiling_name = f"typical {weights.kind} ceiling {ceiling.lo:.2f}-{ceiling.hi:.2f}"
    head = rl.headroom(util, ceiling, ceiling_name)
    sol = rl.headroom(util, Span.point(1.0), "speed of light (every byte at the measured bandwidth)")
    doc: dict[str, Any] = {
        "bytes_per_token": weights.bytes_per_token,
        "resident_bytes": weights.resident_bytes,
        "kind": weights.kind,
        "tok_s": tok_s,
        "achieved_gb_s": achieved,
        "bandwidth_gb_s": bw.span.as_list(),
        "bandwidth_source": bw.source,
        "utilization": util.as_list(),
        "gate": rl.gate_verdict(util, gate_threshold),
        "gate_threshold": gate_threshold,
        "ceiling": {"name": ceiling_name, "utilization": ceiling.as_list()},
        "headroom": {"ceiling": ceiling_name, "factor": head.factor.as_list(), "speed_of_light_factor": sol.factor.as_list(),
                     "speed_of_light_tok_s": rl.speed_of_light_tok_s(bw.span, weights.bytes_per_token).as_list()},
        "target": None if target is None else _target_doc(rl.back_solve(target, weights.bytes_per_token, bw.span, ceiling)),
        "batch": None,
    }
    if batches:
        doc["batch"] = _batch_doc(weights, batches, achieved, runs)
    return doc


def _target_doc(t: rl.TargetCheck) -> dict[str, Any]:
    return {"tok_s": t.tok_s, "required_gb_s": t.required_gb_s, "required_utilization": t.required_utilization.as_list(),
            "ceiling": t.ceiling.as_list(), "within_reach": t.within_reach, "partly_within_reach": t.partly_within_reach}


def _step(weights: Weights) -> rl.StepBytes:
    if weights.audit is not None:
        return weights.audit.step_bytes()
    return rl.StepBytes(weights.bytes_per_token, 0, 0, 0, 0)


def _batch_doc(weights: Weights, batches: list[int], achieved_gb_s: float, runs: dict[int, float] | None) -> list[dict[str, Any]]:
    """Ceilings at the measured utilization: measured bandwidth x utilization is the achieved bandwidth."""
    out = []
    for row in rl.batch_ceilings(_step(weights), batches, Span.point(achieved_gb_s)):
        measured = (runs or {}).get(row.batch)
        out.append({
            "batch": row.batch,
            "step_bytes": row.step_bytes,
            "distinct_experts": row.distinct_experts,
            "ceiling_tok_s": row.ceiling_tok_s.as_list(),
            "measured_tok_s": measured,
            "measured_over_ceiling": None if measured is None else rl.measured_over_ceiling(measured, row.ceiling_tok_s).as_list(),
        })
    return out


def load_run(path: str) -> tuple[dict[int, float], list[str]]:
    """Median measured aggregate tok/s per concurrency from a saved staircase or arms JSON (deviant arms
    cells left out), and notes on what the run was."""
    check_input_file(path, "--run")
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"--run {path}: cannot read a JSON result ({exc})", "give a file written by staircase or arms --json") from None
    if not isinstance(doc, dict):
        raise UsageError(f"--run {path}: not a servecheck result (a JSON object)", "give a staircase or arms result")
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


# ---------------------------------------------------------------- rendering (doc -> lines)


def _pct(span: list[float]) -> str:
    lo, hi = span
    return f"{lo:.0%}" if round(lo, 2) == round(hi, 2) else f"{lo:.0%}-{hi:.0%}"


def _gbs(span: list[float]) -> str:
    lo, hi = (rl.format_figure(v) for v in span)
    return lo if lo == hi else f"{lo}-{hi}"


def _x(span: list[float]) -> str:
    lo, hi = span
    return f"{lo:.2f}x" if round(lo, 2) == round(hi, 2) else f"{lo:.2f}-{hi:.2f}x"


GATE_MEANING = {
    "close": "the engine already sits near the ceiling: do not write your own",
    "open": "below the gate: a better engine has real room",
    "straddle": "the range crosses the gate: measure bandwidth more tightly before deciding",
}


def report_lines(doc: dict[str, Any]) -> list[str]:
    lines = [
        f"bytes per token      {fmt_bytes(doc['bytes_per_token'])} ({doc['kind']})",
        f"decode rate          {doc['tok_s']:.2f} tok/s ({doc.get('tok_s_source', 'given')})",
        f"achieved bandwidth   {rl.format_figure(doc['achieved_gb_s'])} GB/s  = {doc['tok_s']:.2f} tok/s x {fmt_bytes(doc['bytes_per_token'])}",
        f"measured bandwidth   {_gbs(doc['bandwidth_gb_s'])} GB/s ({doc['bandwidth_source']})",
        f"utilization          {_pct(doc['utilization'])} of measured bandwidth",
        f"gate {doc['gate_threshold']:.2f}            {doc['gate'].upper()}: {GATE_MEANING[doc['gate']]}",
        f"headroom             {_x(doc['headroom']['factor'])} to the {doc['headroom']['ceiling']}; "
        f"{_x(doc['headroom']['speed_of_light_factor'])} to the speed of light "
        f"({_gbs(doc['headroom']['speed_of_light_tok_s'])} tok/s)",
    ]
    lines += _target_lines(doc.get("target"))
    lines += _batch_lines(doc.get("batch"))
    lines += [f"note: {n}" for n in doc.get("notes", [])]
    if doc.get("simulated"):
        lines.insert(0, "SIMULATED SERVER: the decode rate comes from servecheck's simulator, not from a real engine")
    lines.append(UNITS_LINE)
    return lines


def _target_lines(t: dict[str, Any] | None) -> list[str]:
    if not t:
        return []
    verdict = "within reach" if t["within_reach"] else ("partly within reach" if t["partly_within_reach"] else "out of reach")
    return [f"target {t['tok_s']:g} tok/s     needs {rl.format_figure(t['required_gb_s'])} GB/s = {_pct(t['required_utilization'])} utilization: "
            f"{verdict} (typical ceiling {_pct(t['ceiling'])})"]


def _batch_lines(rows: list[dict[str, Any]] | None) -> list[str]:
    if not rows:
        return []
    lines = ["", "batch  bytes/step     experts/layer  ceiling tok/s (aggregate)   measured  measured/ceiling"]
    for r in rows:
        experts = "-" if r["distinct_experts"] is None else f"{r['distinct_experts']:.1f}"
        measured = "-" if r["measured_tok_s"] is None else f"{r['measured_tok_s']:.1f}"
        ratio = "-" if r["measured_over_ceiling"] is None else _pct(r["measured_over_ceiling"])
        lines.append(f"{r['batch']:>5}  {fmt_bytes(r['step_bytes']):>12}  {experts:>13}  {_gbs(r['ceiling_tok_s']):>25}  "
                     f"{measured:>8}  {ratio:>16}")
    lines.append("dense weights read once per step, routed experts E(1-(1-k/E)^b) of E, KV cache and state b times")
    return lines


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
    runs, run_notes = load_run(run_path) if run_path else (None, [])
    if runs and not batches:
        batches = sorted(runs)
    if url is not None and model_path is not None and context is None:
        # the measuring stream reads its KV cache at every step: count it at the stream's mean depth
        context = URL_PROMPT_TOKENS + tokens // 2
        run_notes.append(f"KV cache counted at {context} tokens, the measuring stream's mean context (--context to change)")
    weights = resolve_weights(model_path, bytes_text, kind, resident, context, kv_type, experts_used)
    ceiling = parse_fraction(ceiling_raw, "--ceiling") if ceiling_raw else rl.TYPICAL_CEILING[weights.kind]
    params = {"model": None if model_path is None else str(model_path), "bytes_per_token": bytes_text, "tok_s": tok_s, "url": url,
              "bandwidth": bandwidth_raw, "target": target_tok_s, "gate": gate_threshold, "batch": batches, "kind": kind,
              "context": context, "kv_type": kv_type, "device": device, "tokens": tokens if url else None}
    recorder = Recorder(json_path=json_path, html_path=html_path, db_path=db_path, no_save=no_save)
    head = envelope("roofline", params, environment())
    notes: list[str] = list(run_notes)
    try:
        recorder.start(head)
        rate: dict[str, Any] = {"tok_s": tok_s, "tok_s_source": "given", "measurement": None}
        if url is not None:
            target = make_target(url, api=api, model=model, api_key=api_key, headers=headers,
                                 first_token_timeout_s=first_token_timeout_s)
            rate = measure_rate(target, tokens)
            head["simulated"] = bool(rate["measurement"]["server"].get("simulated"))
            recorder.partial({**head, **rate})  # a Ctrl-C during the probe keeps the measured rate
        bw = resolve_bandwidth(bandwidth_raw, weights.resident_bytes, device, threads, app)
        doc = {**head, **analyse(weights, rate["tok_s"], bw, gate_threshold, ceiling, target_tok_s, batches, runs), **rate}
        doc["probe"] = None if bw.probe is None else bw.probe.to_dict()
        doc["audit"] = None if weights.audit is None else _audit_summary(weights.audit)
        notes += [f"probe: {n}" for n in (bw.probe.notes if bw.probe else ())]
        doc["notes"] = notes + _sanity_notes(doc, weights)
        # Achieved above measured bandwidth across the whole range is physically impossible: the
        # bytes per token, the bandwidth or the rate is wrong, and no gate drawn from it can stand.
        doc["valid"] = doc["utilization"][0] <= MAX_PLAUSIBLE_UTILIZATION
        doc = recorder.finish(doc)
    except KeyboardInterrupt:
        recorder.interrupted()
        app.err.print("Interrupted.", markup=False)
        return exitcodes.INTERRUPTED
    finally:
        recorder.close()
    console = app.err if json_path == "-" else app.out
    for line in report_lines(doc):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if not doc["valid"]:
        console.print("INVALID: utilization above 100% of the measured bandwidth over the whole range (see the note)",
                      style="bold yellow", markup=False, highlight=False, soft_wrap=True)
        return exitcodes.INVALID
    return exitcodes.OK


def _audit_summary(a: AuditResult) -> dict[str, Any]:
    d = a.to_dict()
    return {k: d[k] for k in ("path", "format", "architecture", "bytes_per_token", "kv_bytes_per_token",
                              "state_bytes_per_token", "resident_bytes", "experts", "tied_head")}


def _sanity_notes(doc: dict[str, Any], weights: Weights) -> list[str]:
    """reference/roofline.md section 6.3 item 7: U > 1 means bytes over-counted or a cache-resident model;
    U < 0.15 usually means the wrong device or a fallback path."""
    notes = []
    lo, hi = doc["utilization"]
    if hi > 1.0:
        notes.append("utilization above 100%: bytes over-counted, the model fits in a cache, or the bandwidth was probed on the wrong device")
    if lo < 0.15:
        notes.append("utilization below 15%: often the wrong device or a fallback path (check where the engine runs)")
    if weights.audit is None and doc["params"].get("kind") == "auto":
        notes.append("model kind assumed dense with --bytes-per-token: pass --kind moe for a mixture of experts")
    if weights.audit is None and doc.get("batch"):
        notes.append("batching ceiling without an audit: every byte counted once per step (no experts, no KV cache); "
                     "give the MODEL file for the split")
    if weights.audit is not None and weights.audit.kv is None:
        notes.append("KV cache not counted: pass --context N for long-context decode")
    measured, wanted = doc.get("measurement"), doc["params"].get("tokens")
    if measured and wanted and measured["tokens"] < SHORT_STREAM_FRACTION * wanted:
        notes.append(f"the measuring stream stopped at {measured['tokens']} of {wanted} tokens (the server did not pin the "
                     "length): the rate rests on fewer tokens, rerun with a server that honours ignore_eos")
    return notes
