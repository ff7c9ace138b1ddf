"""`servecheck staircase URL`: fire N equal requests at once and read the finish times: staircase or cluster."""

from __future__ import annotations

import random

import click

from servecheck import exitcodes
from servecheck.analysis.readings import read_run
from servecheck.analysis.staircase import DEFINITE_VERDICTS
from servecheck.cli.common import (
    SIMULATED_BANNER,  # noqa: F401 - callers read the banner from the command's module
    ClientOptions,
    OutputOptions,
    client_record,
    output_record,
    say,
)
from servecheck.cli.context import AppContext
from servecheck.cli.measure import Progress, interrupted, measure, show_report
from servecheck.cli.run_flags import evidence_option
from servecheck.cli.serve import Served, resolve_url, serve_option, served
from servecheck.cli.values import check_positive, parse_ns
from servecheck.envinfo import environment
from servecheck.experiments.staircase import StaircaseExperiment, StaircaseResult, first_plan
from servecheck.model.bodies.staircase import StaircaseBody
from servecheck.model.result import RunResult
from servecheck.report.lines.staircase import fmt_finishes, report_lines
from servecheck.runs.jsonout import envelope


# ---------------------------------------------------------------- exit code


def exit_code(run: RunResult[StaircaseBody], expect: str | None) -> int:
    """3 when invalid or inconclusive (its verdict cannot be trusted) or when the --serve log audit found
    a refused feature; 4 when --expect names another verdict."""
    valid, body = run.valid, run.body
    refused = body.log_audit is not None and bool(body.log_audit.refused)
    if not valid or body.verdict not in DEFINITE_VERDICTS or refused:
        return exitcodes.INVALID
    if expect is not None and body.verdict != expect:
        return exitcodes.EXPECT_MISMATCH
    return exitcodes.OK


# ---------------------------------------------------------------- running


def progress_line(result: StaircaseResult) -> str:
    mb = result.batches[-1]
    return f"N={mb.n} rep {mb.rep + 1}  finish at {fmt_finishes(mb.batch.finish_s())}"


def _render(app: AppContext, run: RunResult[StaircaseBody], json_to_stdout: bool,
            served_: Served | None = None) -> None:
    show_report(app, report_lines(run, read_run(run)), simulated=run.envelope.simulated, json_to_stdout=json_to_stdout,
                served=served_)


@click.command("staircase")
@click.argument("url", required=False)
@click.option("--n", "n_values", default="1,2,4,8", show_default=True, help="Concurrency levels, comma-separated.")
@click.option("--tokens", type=int, default=512, show_default=True, help="Output tokens per request (forced length).")
@click.option("--prompt-tokens", type=int, default=64, show_default=True, help="Prompt length in tokens.")
@click.option("--reps", type=int, default=1, show_default=True, help="Repetitions of every N (median and range).")
@click.option(
    "--max-reps", type=int, default=3, show_default=True,
    help="Reps an N may take in all: a point left inconclusive is measured again, up to this many times "
    "(the output says how many it took). N=1 is measured before and after the batches, and again with them.",
)
@click.option("--expect", type=click.Choice(sorted(DEFINITE_VERDICTS)), default=None,
              help="Exit 4 when the run's verdict is a different definite verdict (for CI gates).")
@click.option(
    "--seed", type=int, default=None,
    help="Seed for the prompt text and nonces (default: fresh each run, recorded in the JSON). A fixed seed "
    "repeats the same prompts, which a prefix cache then serves from memory.",
)
@evidence_option("gauges, per-request timings", "a batch the times leave ambiguous")
@serve_option
@client_record(batches=True)
@output_record
@click.pass_obj
def cmd(
    app: AppContext, url: str | None, n_values: str, tokens: int, prompt_tokens: int, reps: int, max_reps: int,
    expect: str | None, seed: int | None, evidence_mode: str, serve_command: str | None, serve_log: str | None,
    client: ClientOptions, output: OutputOptions,
) -> int:
    """Fire N equal-length requests at once and read their finish times: staircase (a queue),
    cluster (batching) or partial (a few slots). Aggregate = tokens produced / last finish."""
    url = resolve_url(url, serve_command)
    ns = parse_ns(n_values)
    for name, value in (("--tokens", tokens), ("--prompt-tokens", prompt_tokens), ("--reps", reps),
                        ("--max-reps", max_reps)):
        check_positive(name, value)
    if seed is None:
        # Fresh nonces every run: a repeated prompt would be served by the server's prefix cache.
        seed = random.SystemRandom().randrange(2**32)
    sinks = output.sinks()
    with served(serve_command, url, log_path=serve_log, say=lambda line: say(app.err, line)) as server:
        target = client.target(server.url)
        params = {**target.public_dict(), **client.client_params(), "n": ns, "tokens": tokens,
                  "prompt_tokens": prompt_tokens, "reps": reps, "max_reps": max(reps, max_reps), "expect": expect,
                  "seed": seed, "serve": serve_command, "evidence": evidence_mode}
        experiment = StaircaseExperiment(tuple(ns), tokens, prompt_tokens, reps, max_reps, random.Random(seed),
                                         evidence_mode=evidence_mode)
        watch = Progress(app, "staircase: batches", progress_line, total=len(first_plan(sorted(set(ns) | {1}), reps)))
        run = measure(app, experiment, target, sinks, head=envelope("staircase", params, environment()), watch=watch,
                      served=server, workers=client.workers, calibrate=client.calibrate, ray=client.ray)
        if run.interrupted:
            return interrupted(app, run, lambda written: _render(app, written, output.json_to_stdout))
    assert run.written is not None  # a run that was not interrupted has finished its result
    _render(app, run.written, output.json_to_stdout, server)
    return exit_code(run.written, expect)
