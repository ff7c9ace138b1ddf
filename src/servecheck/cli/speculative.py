"""`servecheck speculative URL`: is speculative decoding on, how many tokens each step delivers (from the
stream's arrival times alone), and with --baseline whether it still pays at each N."""

from __future__ import annotations

import random
from functools import partial

import click

from servecheck import exitcodes
from servecheck.cli.common import (
    ClientOptions,
    OutputOptions,
    client_record,
    output_record,
    say,
)
from servecheck.cli.context import AppContext
from servecheck.cli.measure import Progress, interrupted, measure, show_report
from servecheck.cli.serve import Served, resolve_url, serve_option, served
from servecheck.cli.staircase import parse_ns
from servecheck.wire.request_params import check_token_counts
from servecheck.envinfo import environment
from servecheck.errors import UsageError
from servecheck.experiments.speculative import SpeculativeExperiment, SpeculativeResult, rep_budget
from servecheck.load.preflight import CheckedDriver
from servecheck.model.bodies.speculative import KIND_LABELS, SpeculativeBody
from servecheck.model.result import RunResult
from servecheck.report.lines import speculative as spec_report
from servecheck.runs.jsonout import envelope

DEFINITE = ("not_speculating", "speculating")


def exit_code(run: RunResult[SpeculativeBody], expect: str | None) -> int:
    """3 when the run is invalid (a client-bound pre-flight), the verdict is inconclusive or the --serve log
    audit found a refused feature; 4 when --expect names the other definite verdict; 0 otherwise."""
    body = run.body
    refused = body.log_audit is not None and bool(body.log_audit.refused)
    if run.valid is False or body.verdict not in DEFINITE or refused:
        return exitcodes.INVALID
    if expect is not None and body.verdict != expect:
        return exitcodes.EXPECT_MISMATCH
    return exitcodes.OK


def progress_line(result: SpeculativeResult) -> str:
    b = result.batches[-1]
    return f"N={b.n} {KIND_LABELS[b.kind]}: {len(result.batches)} batches so far"


def _render(app: AppContext, run: RunResult[SpeculativeBody], json_to_stdout: bool,
            served_: Served | None = None) -> None:
    show_report(app, spec_report.report_lines(run), simulated=run.simulated, json_to_stdout=json_to_stdout,
                served=served_)


@click.command("speculative")
@click.argument("url", required=False)
@click.option("--n", "n_values", default="1,2,4", show_default=True,
              help="Concurrency levels (streams released together).")
@click.option("--tokens", type=int, default=256, show_default=True, help="Output tokens per stream (forced length).")
@click.option("--reps", type=int, default=3, show_default=True, help="Batches per N and prompt kind.")
@click.option("--baseline", "baseline_url", default=None, metavar="URL",
              help="The same model served without speculation: each N is judged pays / costs against it.")
@click.option("--max-reps", type=click.IntRange(min=1), default=None,
              help="With --baseline, reps in all for a point whose pays / costs is still undecided after --reps; it "
              "is measured again one rep at a time until it decides [default: twice --reps].")
@click.option("--expect", type=click.Choice(DEFINITE), default=None,
              help="Exit 4 when the run's verdict is the other definite verdict (for CI gates).")
@click.option("--seed", type=int, default=None,
              help="Seed for the prompts and nonces (default: fresh each run, recorded).")
@serve_option
@client_record(preflight=True)
@output_record
@click.pass_obj
def cmd(app: AppContext, url: str | None, n_values: str, tokens: int, reps: int, baseline_url: str | None,
        max_reps: int | None, expect: str | None, seed: int | None, serve_command: str | None, serve_log: str | None,
        client: ClientOptions, output: OutputOptions) -> int:
    """Group each stream's token arrivals into decode steps (tokens of one step arrive microseconds apart,
    steps a step-time apart): mean tokens per step with an interval, for predictable and open-ended prompts
    at each N; speculating / not_speculating / inconclusive; with --baseline, pays / costs per N."""
    url = resolve_url(url, serve_command)
    ns = parse_ns(n_values)
    if tokens < 16:
        raise UsageError(f"--tokens must be >= 16 (steps need a stream to group), got {tokens}",
                         "for example --tokens 256")
    if reps < 1:
        raise UsageError(f"--reps must be >= 1, got {reps}", "for example --reps 3")
    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    sinks = output.sinks()
    open_driver = app.open_driver or partial(CheckedDriver, workers=1, auto=False, calibrate=False)
    with served(serve_command, url, log_path=serve_log, say=lambda line: say(app.err, line)) as server:
        target = client.target(server.url)
        check_token_counts(target.request_params)
        base_target = None if baseline_url is None else client.target(baseline_url)
        budget = rep_budget(reps, max_reps)
        params = {**target.public_dict(), "n": ns, "tokens": tokens, "reps": reps, "baseline": baseline_url,
                  "max_reps": budget if baseline_url is not None else None, "expect": expect, "seed": seed,
                  "serve": serve_command, "calibrate": client.calibrate}
        opener = None if base_target is None else (lambda: open_driver(base_target))
        experiment = SpeculativeExperiment(tuple(ns), tokens, reps, random.Random(seed), opener, expect, budget)
        watch = Progress(app, "speculative: batches", progress_line, total=len(ns) * 2 * reps * (2 if opener else 1))
        run = measure(app, experiment, target, sinks, head=envelope("speculative", params, environment()), watch=watch,
                      served=server, workers=1, calibrate=client.calibrate)
        if run.interrupted:
            return interrupted(app, run, lambda written: _render(app, written, output.json_to_stdout))
    assert run.written is not None
    result = run.written
    _render(app, result, output.json_to_stdout, server)
    return exit_code(result, expect)
