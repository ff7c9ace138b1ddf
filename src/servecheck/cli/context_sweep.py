"""`servecheck context URL`: decode rate against context depth, one stream at a time, and with --model the
roofline at each depth (weights + the KV cache of the sequence) beside the rate constant utilization predicts."""

from __future__ import annotations

import random
from pathlib import Path

import click

from servecheck import exitcodes
from servecheck.analysis import context as ctx
from servecheck.cli.common import ClientOptions, OutputOptions, client_record, output_record, say
from servecheck.cli.context import AppContext
from servecheck.cli.measure import Progress, interrupted, measure, show_report
from servecheck.cli.serve import Served, resolve_url, serve_option, served
from servecheck.cli.values import parse_depths
from servecheck.envinfo import environment
from servecheck.jobs import roofline as roofline_inputs
from servecheck.jobs.context_model import load_model, with_bandwidth
from servecheck.errors import UsageError
from servecheck.experiments.context import ContextExperiment, ContextResult
from servecheck.model.bodies.context import ContextBody
from servecheck.model.result import RunResult
from servecheck.report.lines import context as context_report
from servecheck.runs.jsonout import envelope

DEFAULT_DEPTHS = "0,2048,8192,32768"


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


@click.command("context")
@click.argument("url", required=False)
@click.option("--depths", "depths_raw", default=DEFAULT_DEPTHS, show_default=True,
              help="Prompt lengths in tokens, strictly increasing; depths beyond the server's context are skipped, "
                   "never sent.")
@click.option("--tokens", type=int, default=128, show_default=True, help="Output tokens per stream (forced length).")
@click.option("--reps", type=int, default=1, show_default=True,
              help="Passes over the depths: ascending, then descending, ...; the shallowest is measured again last.")
@click.option("--model", "model_path", type=click.Path(path_type=Path), default=None, metavar="FILE",
              help="Weight file (GGUF, safetensors, MLX folder) for the roofline at each depth, audited as "
              "`servecheck audit` does. The server's model name is --served-model here.")
@click.option("--kv-type", default="f16", show_default=True,
              help="The engine's KV cache type (f16, bf16, q8_0, q4_0, f32).")
@click.option("--bandwidth", "bandwidth_raw", default="auto", show_default=True,
              help="With a model file: measured bandwidth, auto (probe at the model's resident size), GB/s, "
                   "or LO-HI GB/s.")
@click.option("--device", type=click.Choice(["cpu", "cuda", "mps"]), default="cpu", show_default=True,
              help="Where to probe bandwidth.")
@click.option("--seed", type=int, default=None,
              help="Seed for the prompt text and nonces (default: fresh each run, recorded).")
@serve_option
@client_record("--served-model", preflight=True)
@output_record
@click.pass_obj
def cmd(app: AppContext, url: str | None, depths_raw: str, tokens: int, reps: int, model_path: Path | None,
        kv_type: str, bandwidth_raw: str, device: str, seed: int | None, serve_command: str | None,
        serve_log: str | None, client: ClientOptions, output: OutputOptions) -> int:
    """Decode rate against context length: a prompt of each depth, one stream at a time, fixed output
    length; TTFT, prefill rate, decode rate and the ratio to the shallowest depth (corrected for drift)."""
    url = resolve_url(url, serve_command)
    depths = parse_depths(depths_raw)
    if tokens < 2:
        raise UsageError(f"--tokens must be >= 2 (a decode rate needs two tokens), got {tokens}",
                         "for example --tokens 128")
    if reps < 1:
        raise UsageError(f"--reps must be >= 1, got {reps}", "for example --reps 2")
    if bandwidth_raw != "auto":
        roofline_inputs.parse_span(bandwidth_raw, "--bandwidth", "265-315")
    model_bytes_, summary, resident = load_model(model_path, kv_type)
    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    sinks = output.sinks()

    def dim(line: str) -> None:
        app.err.print(line, style="dim", markup=False)

    with served(serve_command, url, log_path=serve_log, say=lambda line: say(app.err, line)) as server:
        target = client.target(server.url)
        params = {**target.public_dict(), "depths": depths, "tokens": tokens, "reps": reps,
                  "model_file": None if model_path is None else str(model_path), "kv_type": kv_type,
                  "bandwidth": bandwidth_raw, "seed": seed, "serve": serve_command, "calibrate": client.calibrate}
        experiment = ContextExperiment(tuple(depths), tokens, reps, random.Random(seed), model_bytes_, summary)
        watch = Progress(app, "context: depths", progress_line, total=len(ctx.plan_order(depths, reps)))
        run = measure(app, experiment, target, sinks, head=envelope("context", params, environment()), watch=watch,
                      served=server, settle=lambda result: with_bandwidth(result, bandwidth_raw, resident, device, dim),
                      workers=1, calibrate=client.calibrate)
        if run.interrupted:
            return interrupted(app, run, lambda written: _render(app, written, output.json_to_stdout))
    assert run.written is not None  # a run that was not interrupted has finished its result
    result = run.written
    _render(app, result, output.json_to_stdout, server)
    return exit_code(result)
