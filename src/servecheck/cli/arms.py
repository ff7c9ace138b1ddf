"""`servecheck arms URL`: what concurrency buys the operator and costs each user, from the same
requests sent 1, 2, 4 at a time in rotated order."""

from __future__ import annotations

import random
from dataclasses import replace

import click

from servecheck import exitcodes
from servecheck.analysis.arms import DEFAULT_BIAS_LIMIT
from servecheck.analysis.readings import read_run
from servecheck.cli.common import SIMULATED_BANNER  # noqa: F401 - callers read the banner from the command's module
from servecheck.cli.common import ClientOptions, OutputOptions, check_url, client_record, output_record, say
from servecheck.cli.context import AppContext
from servecheck.cli.measure import Progress, interrupted, measure, show_report
from servecheck.cli.run_flags import evidence_option
from servecheck.cli.serve import Served, serve_option, served
from servecheck.cli.values import parse_arms
from servecheck.envinfo import environment
from servecheck.errors import UsageError
from servecheck.experiments.arms import ArmsDesign, ArmsExperiment, ArmsRun, pool_runs
from servecheck.jobs.arms import PooledArmsJob
from servecheck.model.bodies.arms import ArmsBody
from servecheck.model.codec import encode
from servecheck.model.result import RunResult
from servecheck.probe.thermal import ThermalSampler
from servecheck.report.lines.arms import report_lines
from servecheck.runs.jsonout import envelope
from servecheck.runs.runner import run_job
from servecheck.store.pool import load_pool


def exit_code(run: RunResult[ArmsBody]) -> int:
    """3 when the headline is refused, the run is invalid, or the --serve log audit found a refused feature."""
    body = run.body
    refused = body.log_audit is not None and bool(body.log_audit.refused)
    if body.headline_refused or run.valid is False or not body.arms or refused:
        return exitcodes.INVALID
    return exitcodes.OK


def progress_line(run: ArmsRun) -> str:
    cell = run.measured[-1].cell
    return (f"rep {cell.rep + 1}/{max(run.design.reps, cell.rep + 1)}  {cell.concurrency}-way  {cell.tokens} tokens in "
            f"{cell.wall_s:.2f} s  aggregate {cell.aggregate_tok_s or 0:.1f} tok/s")


def _render(app: AppContext, run: RunResult[ArmsBody], json_to_stdout: bool, served_: Served | None = None) -> None:
    show_report(app, report_lines(run, read_run(run)), simulated=run.simulated, json_to_stdout=json_to_stdout,
                served=served_)


@click.command("arms")
@click.argument("url", required=False)
@click.option("--requests", "n_requests", type=int, default=4, show_default=True,
              help="Requests in every cell (the same in every arm).")
@click.option("--arms", "arms_raw", default="1,2,4", show_default=True,
              help="In-flight counts to compare, comma-separated; must include 1.")
@click.option("--reps", type=int, default=12, show_default=True,
              help="Reps; each runs every arm once. Use a multiple of the arm count.")
@click.option("--tokens", type=int, default=128, show_default=True,
              help="Output tokens per request (pinned where the engine allows).")
@click.option("--prompt-tokens", type=int, default=64, show_default=True,
              help="Prompt length in tokens (equal for every request).")
@click.option("--fixed-order", is_flag=True, help="Run the arms in the same order every rep (the control experiment).")
@click.option("--max-reps", type=click.IntRange(min=1), default=None,
              help="Reps in all while the headline is withheld for position bias or an arm's label is inconclusive; "
              "reps are added a whole rotation at a time [default: twice --reps].")
@click.option("--bias-limit", type=click.FloatRange(min=0.0, min_open=True), default=DEFAULT_BIAS_LIMIT,
              show_default=True,
              help="Withhold the headline when an arm's median spreads more than this fraction across positions.")
@click.option("--pool", multiple=True, metavar="RUN",
              help="Pool the cells of a saved run (arms JSON file or history run id); repeatable.")
@click.option("--seed", type=int, default=None,
              help="Seed for the prompts and nonces (default: fresh each run, recorded in the result). Reusing one "
              "against a long-running server resends the same prompts, which its prefix cache may still hold.")
@evidence_option("gauges", "an arm's label (none: one request running at a time in every cell)")
@serve_option
@client_record(batches=True)
@output_record
@click.pass_obj
def cmd(
    app: AppContext, url: str | None, n_requests: int, arms_raw: str, reps: int, tokens: int, prompt_tokens: int,
    fixed_order: bool, max_reps: int | None, bias_limit: float, pool: tuple[str, ...], seed: int | None,
    evidence_mode: str, serve_command: str | None, serve_log: str | None, client: ClientOptions, output: OutputOptions,
) -> int:
    """Send the same requests 1, 2, 4 at a time (rotated order, fresh nonces) and report what
    concurrency buys the operator (aggregate throughput) and costs each user (generation rate,
    time to first token), and whether the gain is batching or pipelining. Without URL, analyse
    the --pool runs alone."""
    design = ArmsDesign(parse_arms(arms_raw), n_requests, reps, tokens, prompt_tokens, fixed_order,
                        max_reps if max_reps is not None else 2 * reps)
    design.check()
    if url is None and serve_command is None and not pool:
        raise UsageError("give the server URL, --serve \"COMMAND\", or --pool saved runs to analyse",
                         "for example servecheck arms http://127.0.0.1:8080")
    pooled = pool_runs(load_pool(pool, output.db_path), pool)
    # fresh nonces every run: a server that stayed up may still hold a fixed seed's prompts in its prefix cache
    prompt_seed = random.SystemRandom().getrandbits(32) if seed is None else seed
    params = {"design": encode(design.record(), nulls=True), "bias_limit": bias_limit, "seed": prompt_seed,
              "pool": list(pool), "serve": serve_command, "evidence": evidence_mode}
    if url is None and serve_command is None:
        # nothing measured, so nothing new for the history: the files only
        pooled_run = run_job(PooledArmsJob(pooled, design, bias_limit, evidence_mode),
                             replace(output, no_save=True).sinks(), head=envelope("arms", params, environment()))
        assert pooled_run.written is not None  # a job with nothing to measure cannot be interrupted before its result
        _render(app, pooled_run.written, output.json_to_stdout)
        return exit_code(pooled_run.written)
    sinks = output.sinks()
    for note in design.notes():
        say(app.err, f"note: {note}", "yellow")
    with served(serve_command, url and check_url(url), log_path=serve_log,
                say=lambda line: say(app.err, line)) as server:
        target = client.target(server.url)
        head = envelope("arms", {**target.public_dict(), **client.client_params(), **params}, environment())
        watch = Progress(app, "arms: cells", progress_line, total=design.reps * len(design.arms))
        with ThermalSampler() as sampler:
            experiment = ArmsExperiment(design, random.Random(prompt_seed), pooled=pooled.cells,
                                        pooled_from=pooled.names, pooled_simulated=pooled.simulated,
                                        bias_limit=bias_limit, thermal=sampler.summary, evidence_mode=evidence_mode)
            run = measure(app, experiment, target, sinks, head=head, watch=watch, served=server,
                          workers=client.workers, calibrate=client.calibrate, ray=client.ray)
        if run.interrupted:
            return interrupted(app, run, lambda written: _render(app, written, output.json_to_stdout))
    assert run.written is not None  # a run that was not interrupted has finished its result
    _render(app, run.written, output.json_to_stdout, server)
    return exit_code(run.written)
