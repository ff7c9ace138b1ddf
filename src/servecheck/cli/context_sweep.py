"""`servecheck context URL`: decode rate against context depth, one stream at a time, and with --model the
roofline at each depth (weights + the KV cache of the sequence) beside the rate constant utilization predicts."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from servecheck import exitcodes
from servecheck.analysis import context as ctx
from servecheck.analysis.roofline import format_figure
from servecheck.audit import AuditResult, audit_model
from servecheck.audit.gguf_audit import kv_element_bytes
from servecheck.cli import roofline as roofline_cli
from servecheck.cli.audit import fmt_bytes, options_from
from servecheck.cli.common import ClientOptions, OutputOptions, check_input_file, client_record, output_record, say
from servecheck.cli.context import AppContext
from servecheck.cli.measure import Progress, interrupted, measure, show_report
from servecheck.cli.serve import Served, resolve_url, serve_option, served
from servecheck.envinfo import environment
from servecheck.errors import AuditError, UsageError
from servecheck.experiments.context import ContextExperiment, ContextResult
from servecheck.results.jsonout import envelope

DEFAULT_DEPTHS = "0,2048,8192,32768"


# ---------------------------------------------------------------- parsing


def parse_depths(raw: str) -> list[int]:
    """'0,2048,8192' -> [0, 2048, 8192]: at least two, zero or more, strictly increasing."""
    try:
        depths = [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--depths {raw!r} is not a comma-separated list of integers", "for example --depths 0,2048,8192") from None
    if (problem := ctx.check_depths(depths)) is not None:
        raise UsageError(f"--depths {raw!r}: {problem}", "for example --depths 0,2048,8192,32768")
    return depths


def model_bytes(audit: AuditResult, kv_type: str) -> ctx.ModelBytes:
    """The audit's weights, recurrent state and KV layout (audited at context 0, so the layout is known)."""
    layers: tuple[ctx.KVLayer, ...] = ()
    kv = audit.kv
    if kv is not None:
        windows = kv.windows or (None,) * kv.layers
        layers = tuple(ctx.KVLayer(h, kv.key_length, kv.value_length, w) for h, w in zip(kv.kv_heads, windows))
    return ctx.ModelBytes(audit.bytes_per_token, audit.state_bytes_per_token, layers, kv_element_bytes(kv_type), kv_type.lower())


def model_summary(audit: AuditResult, model: ctx.ModelBytes) -> dict[str, Any]:
    kv = audit.kv
    heads = sorted({layer.kv_heads for layer in model.kv_layers})
    return {
        "path": audit.path,
        "architecture": audit.architecture,
        "kind": audit.kind,
        "weights_bytes_per_token": model.weights_bytes,
        "state_bytes_per_token": model.state_bytes,
        "resident_bytes": audit.resident_bytes,
        "kv_type": model.kv_type,
        "kv_element_bytes": model.kv_element_bytes,
        "kv_layers": len(model.kv_layers),
        "kv_heads": heads[0] if len(heads) == 1 else heads,
        "key_length": None if kv is None else kv.key_length,
        "value_length": None if kv is None else kv.value_length,
        "sliding_layers": sum(1 for layer in model.kv_layers if layer.window),
        "kv_layout": None if kv is None else kv.layout,
        "kv_bytes_per_context_token": ctx.kv_bytes_per_context_token(model),
        "notes": list(audit.notes),
    }


def load_model(path: Path | None, kv_type: str) -> tuple[ctx.ModelBytes | None, dict[str, Any] | None, int | None]:
    if path is None:
        return None, None, None
    options = options_from(0, kv_type, None)
    check_input_file(path, "model", allow_dir=True, error=AuditError)
    audit = audit_model(path, options)
    model = model_bytes(audit, kv_type)
    return model, model_summary(audit, model), audit.resident_bytes


# ---------------------------------------------------------------- formatting (pure: doc -> lines)


def depth_label(depth: int) -> str:
    """Seed 000 section 6's words: 'short context' for depth 0, '43k tokens' beyond a thousand."""
    if depth == 0:
        return "short context"
    if depth < 1000:
        return f"{depth} tokens"
    return f"{depth / 1000:.1f}".rstrip("0").rstrip(".") + "k tokens"


def _f(value: Any, digits: int = 1, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _pct(span: list[float] | None) -> str:
    if not span:
        return "-"
    lo, hi = span
    return f"{lo:.0%}" if round(lo, 2) == round(hi, 2) else f"{lo:.0%}-{hi:.0%}"


def header_lines(doc: dict[str, Any]) -> list[str]:
    server = doc.get("server") or {}
    order = " ".join(str(d) for d in doc.get("order") or [])
    cache = {False: "cache_prompt false", None: "cache_prompt not sent (the engine does not take it)"}.get(doc.get("cache_prompt"), "")
    return [
        f"context  {server.get('url', '?')}  api {server.get('dialect', '?')}  model {server.get('model') or '?'}",
        f"{doc.get('tokens')} tokens per stream, one stream at a time, {doc.get('reps')} rep(s), {cache}; order {order}",
    ]


def table_lines(doc: dict[str, Any]) -> list[str]:
    """The seed's shape, one row per depth: 'short context  98.0 tok/s ... 43k tokens  34.0 tok/s'."""
    rows = {r["depth"]: r for r in doc.get("roofline") or []}
    with_model = doc.get("roofline") is not None
    head = f"{'depth':<15} {'context':>8} {'TTFT s':>8} {'prefill tok/s':>14} {'decode tok/s':>13} {'ratio':>6}"
    if with_model:
        head += f" {'predicted':>10} {'meas/pred':>9} {'bytes/token':>13} {'GB/s':>7} {'util':>9}"
    lines = [head]
    for p in doc.get("points") or []:
        line = (f"{depth_label(p['depth']):<15} {_f(p.get('context_tokens'), 0):>8} {_f(p.get('ttft_s'), 3):>8} "
                f"{_f(p.get('prefill_tok_s')):>14} {_f(p.get('decode_tok_s')):>13} {_f(p.get('ratio'), 2):>6}")
        if with_model:
            r = rows.get(p["depth"])
            line += (f" {_f(r and r['predicted_tok_s']):>10} {_f(r and r['measured_over_predicted'], 2):>9} "
                     f"{fmt_bytes(r['bytes_per_token']) if r else '-':>13} "
                     f"{format_figure(r['achieved_gb_s']) if r else '-':>7} {_pct(r and r['utilization']):>9}")
        if not p.get("valid", True):
            line += "  INVALID"
        lines.append(line)
    return lines


def model_lines(doc: dict[str, Any]) -> list[str]:
    m = doc.get("model_bytes")
    if not m:
        return []
    sliding = f", {m['sliding_layers']} sliding" if m.get("sliding_layers") else ""
    lines = [
        f"bytes per token = weights {fmt_bytes(m['weights_bytes_per_token'])}"
        + (f" + recurrent state {fmt_bytes(m['state_bytes_per_token'])}" if m.get("state_bytes_per_token") else "")
        + f" + KV {fmt_bytes(m['kv_bytes_per_context_token'])} per token of context "
        f"({m['kv_layers']} layers{sliding} x {m['kv_heads']} KV heads x ({m['key_length']}+{m['value_length']}) x "
        f"{m['kv_element_bytes']:g} B {m['kv_type']}), at the stream's mean context (depth + tokens/2)",
    ]
    bw = doc.get("bandwidth_gb_s")
    if bw:
        lines.append(f"measured bandwidth {format_figure(bw[0])}-{format_figure(bw[1])} GB/s ({doc.get('bandwidth_source')})")
    lines.append("predicted = the shallowest depth's rate x its bytes / these bytes (constant utilization); ratios corrected for drift")
    return lines


def finding_lines(doc: dict[str, Any]) -> list[str]:
    lines = []
    for kind, findings in (("INVALID", doc.get("invalid") or []), ("warning", doc.get("warnings") or [])):
        for f in findings:
            lines.append(f"{kind}: {f['message']}" + (f" ({f['hint']})" if f.get("hint") else ""))
    return lines


def report_lines(doc: dict[str, Any]) -> list[str]:
    """The whole terminal report, from the JSON document alone."""
    lines = header_lines(doc) + [""] + table_lines(doc) + [""]
    lines += model_lines(doc)
    lines.append(f"context effect  {doc.get('effect')}  ({doc.get('effect_reason')})")
    lines += finding_lines(doc) + [f"note: {n}" for n in doc.get("notes", [])]
    if not doc.get("complete"):
        lines.append("INCOMPLETE: interrupted; the depths above are all that was measured")
    lines.append(f"run {'valid' if doc.get('valid') else 'INVALID'}")
    return lines


def exit_code(doc: dict[str, Any]) -> int:
    """3 when a point is invalid (truncated prompt, failed request, length off), the context effect is
    inconclusive, or the --serve log audit found a refused feature; 0 otherwise."""
    refused = bool((doc.get("log_audit") or {}).get("refused"))
    if not doc["valid"] or doc.get("effect") == "inconclusive" or refused:
        return exitcodes.INVALID
    return exitcodes.OK


# ---------------------------------------------------------------- running


def progress_line(result: ContextResult) -> str:
    s = result.samples[-1]
    return f"depth {s.depth} rep {s.rep + 1}  decode {_f(s.decode_tok_s)} tok/s  TTFT {_f(s.ttft_s, 3)} s"


def _render(app: AppContext, doc: dict[str, Any], json_to_stdout: bool, served_: Served | None = None) -> None:
    show_report(app, report_lines(doc), simulated=bool(doc.get("simulated")), json_to_stdout=json_to_stdout, served=served_)


def _with_bandwidth(result: ContextResult, raw: str, resident: int | None, device: str, app: AppContext) -> ContextResult:
    """With --model: the measured bandwidth for utilization (a figure given, or the probe, as roofline does)."""
    if result.model is None:
        return result
    bw = roofline_cli.resolve_bandwidth(raw, resident, device, None, app)
    return replace(result, bandwidth_gb_s=bw.span, bandwidth_source=bw.source)


@click.command("context")
@click.argument("url", required=False)
@click.option("--depths", "depths_raw", default=DEFAULT_DEPTHS, show_default=True,
              help="Prompt lengths in tokens, strictly increasing; depths beyond the server's context are skipped, never sent.")
@click.option("--tokens", type=int, default=128, show_default=True, help="Output tokens per stream (forced length).")
@click.option("--reps", type=int, default=1, show_default=True,
              help="Passes over the depths: ascending, then descending, ...; the shallowest is measured again last.")
@click.option("--model", "model_path", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="Weight file (GGUF, safetensors, MLX folder) for the roofline at each depth, audited as `servecheck audit` "
              "does. The server's model name is --served-model here.")
@click.option("--kv-type", default="f16", show_default=True, help="The engine's KV cache type (f16, bf16, q8_0, q4_0, f32).")
@click.option("--bandwidth", "bandwidth_raw", default="auto", show_default=True,
              help="With a model file: measured bandwidth, auto (probe at the model's resident size), GB/s, or LO-HI GB/s.")
@click.option("--device", type=click.Choice(["cpu", "cuda", "mps"]), default="cpu", show_default=True, help="Where to probe bandwidth.")
@click.option("--seed", type=int, default=None, help="Seed for the prompt text and nonces (default: fresh each run, recorded).")
@serve_option
@client_record("--served-model")
@output_record
@click.pass_obj
def cmd(app: AppContext, url: str | None, depths_raw: str, tokens: int, reps: int, model_path: Path | None, kv_type: str,
        bandwidth_raw: str, device: str, seed: int | None, serve_command: str | None, serve_log: str | None,
        client: ClientOptions, output: OutputOptions) -> int:
    """Decode rate against context length: a prompt of each depth, one stream at a time, fixed output
    length; TTFT, prefill rate, decode rate and the ratio to the shallowest depth (corrected for drift)."""
    url = resolve_url(url, serve_command)
    depths = parse_depths(depths_raw)
    if tokens < 2:
        raise UsageError(f"--tokens must be >= 2 (a decode rate needs two tokens), got {tokens}", "for example --tokens 128")
    if reps < 1:
        raise UsageError(f"--reps must be >= 1, got {reps}", "for example --reps 2")
    if bandwidth_raw != "auto":
        roofline_cli.parse_span(bandwidth_raw, "--bandwidth", "265-315")
    model_bytes_, summary, resident = load_model(model_path, kv_type)
    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    sinks = output.sinks()
    with served(serve_command, url, log_path=serve_log, say=lambda line: say(app.err, line)) as server:
        target = client.target(server.url)
        params = {**target.public_dict(), "depths": depths, "tokens": tokens, "reps": reps,
                  "model_file": None if model_path is None else str(model_path), "kv_type": kv_type,
                  "bandwidth": bandwidth_raw, "seed": seed, "serve": serve_command}
        experiment = ContextExperiment(tuple(depths), tokens, reps, random.Random(seed), model_bytes_, summary)
        watch = Progress(app, "context: depths", progress_line, total=len(ctx.plan_order(depths, reps)))
        run = measure(app, experiment, target, sinks, head=envelope("context", params, environment()), watch=watch,
                      served=server, settle=lambda result: _with_bandwidth(result, bandwidth_raw, resident, device, app))
        if run.interrupted:
            return interrupted(app, run, lambda doc: _render(app, doc, output.json_to_stdout))
    assert run.doc is not None  # a run that was not interrupted has finished its document
    _render(app, run.doc, output.json_to_stdout, server)
    return exit_code(run.doc)
