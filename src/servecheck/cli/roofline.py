"""`servecheck roofline`: achieved bandwidth = tok/s x bytes per token, utilization of the measured bandwidth,
the kill gate, the headroom a better engine could win, a target back-solved, and the batching ceiling.

The flags become `jobs.roofline.RooflineOptions`; `jobs.roofline.prepare` checks them and reads the inputs;
--url runs `experiments.roofline.RooflineExperiment` under `runs.runner.run_experiment`, --tok-s runs
`RooflineJob` under `run_job`; either settles with the bandwidth (given or probed)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from servecheck import exitcodes
from servecheck.analysis import roofline as rl
from servecheck.cli.common import ClientOptions, OutputOptions, client_record, options_record, output_record
from servecheck.cli.context import AppContext
from servecheck.experiments.roofline import URL_DECODE_TOKENS, URL_PROMPT_TOKENS, RooflineExperiment
from servecheck.jobs.roofline import RooflineJob, RooflineOptions, prepare
from servecheck.load.driver import LoadDriver
from servecheck.model.bodies.roofline import RooflineBody
from servecheck.model.result import RunResult
from servecheck.report.lines.roofline import report_lines
from servecheck.runs.runner import run_experiment, run_job


@click.command("roofline")
@click.argument("model_path", metavar="[MODEL]", required=False, type=click.Path(path_type=Path))
@click.option("--bytes-per-token", "bytes_text", default=None,
              help="Bytes read per token from an audit done elsewhere, e.g. 1.849GB.")
@click.option("--tok-s", type=float, default=None, help="Measured single-stream decode tok/s.")
@click.option("--url", default=None, help="Measure single-stream decode tok/s on this server instead.")
@click.option("--bandwidth", "bandwidth_raw", default="auto", show_default=True,
              help="auto (probe), GB/s, or LO-HI GB/s.")
@click.option("--target", "target_tok_s", type=float, default=None, help="Back-solve the utilization this tok/s needs.")
@click.option("--gate", "gate_threshold", type=click.FloatRange(0.01, 1.5), default=rl.DEFAULT_GATE, show_default=True,
              help="Kill gate: utilization at or above which writing your own engine is not worth it.")
@click.option("--batch", "batch_raw", default=None, help="Batching ceiling per batch size, e.g. 1,2,4,8.")
@click.option("--run", "run_path", default=None, metavar="PATH",
              help="Saved staircase/arms JSON: measured aggregate / ceiling per N.")
@click.option("--kind", type=click.Choice(["auto", "dense", "moe"]), default="auto", show_default=True,
              help="Model kind for the typical ceiling (auto: from the audit; dense for --bytes-per-token).")
@click.option("--ceiling", "ceiling_raw", default=None,
              help="Typical best utilization for this kind, LO-HI (default: dense 0.85-0.95, moe 0.60-0.65).")
@click.option("--resident", default=None,
              help="Working set for the bandwidth probe with --bytes-per-token, e.g. 21GiB.")
@click.option("--context", type=int, default=None, help="Count KV-cache bytes at this context (with MODEL).")
@click.option("--kv-type", default="f16", show_default=True, help="KV cache type (with MODEL and --context).")
@click.option("--experts-used", type=int, default=None, help="Override the routed experts per token (with MODEL).")
@click.option("--device", type=click.Choice(["cpu", "cuda", "mps"]), default="cpu", show_default=True,
              help="Where to probe bandwidth.")
@click.option("--threads", type=int, default=None, help="Probe threads (default: every core).")
@click.option("--tokens", type=click.IntRange(min=8), default=URL_DECODE_TOKENS, show_default=True,
              help="Decode length for --url.")
@options_record("options", RooflineOptions)
@client_record()
@output_record
@click.pass_obj
def cmd(app: AppContext, options: RooflineOptions, client: ClientOptions, output: OutputOptions) -> int:
    """Utilization of measured memory bandwidth: tok/s x bytes per token / bandwidth, and the kill gate."""
    setup = prepare(options)
    sinks = output.sinks()
    settle = setup.settle(lambda line: app.err.print(line, style="dim", markup=False))
    if options.url is None:
        assert options.tok_s is not None  # one of --tok-s and --url is given (prepare checked)
        run = run_job(RooflineJob(setup.weights, setup.plan, options.tok_s, settle), sinks, head=setup.head)
    else:
        target = client.target(options.url)
        open_driver = app.open_driver or LoadDriver
        experiment = RooflineExperiment(setup.weights, setup.plan, tokens=options.tokens,
                                        prompt_tokens=URL_PROMPT_TOKENS)
        head = replace(setup.head, params={**setup.head.params, "request_params": dict(target.request_params)})
        run = run_experiment(experiment, lambda: open_driver(target), sinks, head=head, settle=settle)
    if run.interrupted or run.written is None:
        app.err.print("Interrupted.", markup=False)
        return exitcodes.INTERRUPTED
    return _report(app, run.written, output.json_to_stdout)


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
