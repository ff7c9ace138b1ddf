"""`servecheck context URL`: decode rate against context depth, one stream at a time, and with --model the
roofline at each depth (weights + the KV cache of the sequence) beside the rate constant utilization predicts."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from servecheck import exitcodes
from servecheck.analysis import context as ctx
from servecheck.audit import AuditResult, audit_model
from servecheck.audit.gguf_audit import kv_element_bytes
from servecheck.audit.options import options_from
from servecheck.cli.common import ClientOptions, OutputOptions, client_record, output_record, say
from servecheck.cli.context import AppContext
from servecheck.cli.measure import Progress, interrupted, measure, show_report
from servecheck.cli.serve import Served, resolve_url, serve_option, served
from servecheck.envinfo import environment
from servecheck.inputs import check_input_file
from servecheck.jobs import roofline as roofline_inputs
from servecheck.errors import AuditError, UsageError
from servecheck.experiments.context import ContextExperiment, ContextResult
from servecheck.model.bodies.context import ContextBody
from servecheck.model.result import RunResult, from_doc
from servecheck.report.lines import context as context_report
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


# ---------------------------------------------------------------- reporting


def report_lines(doc: Mapping[str, Any]) -> list[str]:
    """The whole terminal report of a context document (what `servecheck show` prints for it)."""
    return context_report.report_lines(from_doc({"command": "context", **doc}))


def exit_code(run: RunResult[ContextBody]) -> int:
    """3 when a point is invalid (truncated prompt, failed request, length off), the context effect is
    inconclusive, or the --serve log audit found a refused feature; 0 otherwise."""
    audit = run.body.log_audit
    refused = audit is not None and bool(audit.refused)
    if not run.valid or run.body.effect == "inconclusive" or refused:
        return exitcodes.INVALID
    return exitcodes.OK


# ---------------------------------------------------------------- running


def progress_line(result: ContextResult) -> str:
    s = result.samples[-1]
    decode = "-" if s.decode_tok_s is None else f"{s.decode_tok_s:.1f}"
    ttft = "-" if s.ttft_s is None else f"{s.ttft_s:.3f}"
    return f"depth {s.depth} rep {s.rep + 1}  decode {decode} tok/s  TTFT {ttft} s"


def _render(app: AppContext, run: RunResult[ContextBody], json_to_stdout: bool, served_: Served | None = None) -> None:
    show_report(app, context_report.report_lines(run), simulated=run.envelope.simulated, json_to_stdout=json_to_stdout,
                served=served_)


def _with_bandwidth(result: ContextResult, raw: str, resident: int | None, device: str, app: AppContext) -> ContextResult:
    """With --model: the measured bandwidth for utilization (a figure given, or the probe, as roofline does)."""
    if result.model is None:
        return result
    bw = roofline_inputs.resolve_bandwidth(raw, resident, device, None,
                                          lambda line: app.err.print(line, style="dim", markup=False))
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
        roofline_inputs.parse_span(bandwidth_raw, "--bandwidth", "265-315")
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
            return interrupted(app, run, lambda doc: _render(app, from_doc(doc), output.json_to_stdout))
    assert run.doc is not None  # a run that was not interrupted has finished its document
    result = from_doc(run.doc)
    _render(app, result, output.json_to_stdout, server)
    return exit_code(result)
