"""`servecheck capacity URL --min-user-rate TOK_S`: how many users a server holds above a per-user
floor, and what each added user buys the operator and costs each user."""

from __future__ import annotations

import random

import click

from servecheck import exitcodes
from servecheck.analysis.capacity import Criteria
from servecheck.cli.common import ClientOptions, OutputOptions, client_record, output_record, say
from servecheck.cli.context import AppContext
from servecheck.cli.measure import Progress, interrupted, measure, show_report
from servecheck.cli.serve import Served, resolve_url, serve_option, served
from servecheck.envinfo import environment
from servecheck.errors import UsageError
from servecheck.experiments.capacity import DEFAULT_REMEASURES, CapacityDesign, CapacityExperiment, CapacityRun
from servecheck.model.bodies.capacity import CapacityBody
from servecheck.model.codec import encode
from servecheck.model.result import RunResult
from servecheck.report.lines.capacity import report_lines
from servecheck.runs.jsonout import envelope


def exit_code(run: RunResult[CapacityBody], expect_at_least: int | None) -> int:
    """3 when undetermined, invalid, or the --serve log audit found a refused feature; 4 when
    --expect-at-least was given and the server holds fewer users."""
    body = run.body
    refused = body.log_audit is not None and bool(body.log_audit.refused)
    if body.limit == "undetermined" or run.valid is False or refused:
        return exitcodes.INVALID
    if expect_at_least is not None and (body.max_concurrency or 0) < expect_at_least:
        return exitcodes.EXPECT_MISMATCH
    return exitcodes.OK


# ---------------------------------------------------------------- running


def progress_line(run: CapacityRun) -> str:
    probe = run.probes[-1]
    s = probe.sample
    status = run.statuses().get(probe.n, "-") if probe.purpose != "baseline_end" else "baseline again"
    return (f"N={probe.n} ({probe.purpose}): {s.measured} measured of {s.requests} sent, "
            f"aggregate {s.aggregate_tok_s or 0:.1f} tok/s -> {status}")


def _render(app: AppContext, run: RunResult[CapacityBody], json_to_stdout: bool, served_: Served | None = None) -> None:
    show_report(app, report_lines(run), simulated=run.simulated, json_to_stdout=json_to_stdout, served=served_)


@click.command("capacity")
@click.argument("url", required=False)
@click.option("--min-user-rate", "min_user_rate", type=float, required=True, metavar="TOK_S",
              help="The per-user floor: generation rate (tokens after the first / first to last token) "
                   "each user must keep.")
@click.option("--max-ttft", "max_ttft", type=float, default=None, metavar="S",
              help="Also a ceiling on the time to first token, in seconds.")
@click.option("--percentile", type=float, default=50.0, show_default=True,
              help="P% of users must be served at least this well: the rate is judged at its (100-P)th percentile, "
                   "TTFT at its Pth.")
@click.option("--max-n", type=int, default=64, show_default=True, help="The most users in flight to probe.")
@click.option("--tokens", type=int, default=128, show_default=True,
              help="Output tokens per request (pinned where the engine allows).")
@click.option("--prompt-tokens", type=int, default=64, show_default=True,
              help="Prompt length in tokens (equal for every request).")
@click.option("--remeasures", type=int, default=DEFAULT_REMEASURES, show_default=True,
              help="Extra probes at an N left uncertain (their samples pooled) before it stays uncertain.")
@click.option("--expect-at-least", "expect_at_least", type=int, default=None, metavar="N",
              help="Exit 4 when the server holds fewer than N users (for CI gates).")
@click.option("--seed", type=int, default=None,
              help="Seed for the prompts and nonces (default: fresh each run, recorded in the result).")
@serve_option
@client_record(batches=True)
@output_record
@click.pass_obj
def cmd(
    app: AppContext,
    url: str | None,
    min_user_rate: float,
    max_ttft: float | None,
    percentile: float,
    max_n: int,
    tokens: int,
    prompt_tokens: int,
    remeasures: int,
    expect_at_least: int | None,
    seed: int | None,
    serve_command: str | None,
    serve_log: str | None,
    client: ClientOptions,
    output: OutputOptions,
) -> int:
    """Probe N = 1, 2, 4, ... users in a closed loop (then bisect) and report the most users the server
    holds with each above --min-user-rate (and under --max-ttft), with what every added user buys."""
    design = CapacityDesign(Criteria(min_user_rate, max_ttft, percentile), max_n, tokens, prompt_tokens, remeasures)
    design.check()
    if expect_at_least is not None and expect_at_least < 0:
        raise UsageError(f"--expect-at-least must be >= 0, got {expect_at_least}", "for example --expect-at-least 4")
    url = resolve_url(url, serve_command)
    prompt_seed = random.SystemRandom().randrange(2**32) if seed is None else seed
    sinks = output.sinks()
    with served(serve_command, url, log_path=serve_log, say=lambda line: say(app.err, line)) as server:
        target = client.target(server.url)
        params = {**target.public_dict(), **client.client_params(), "design": encode(design.record(), nulls=True),
                  "expect_at_least": expect_at_least, "seed": prompt_seed, "serve": serve_command}
        experiment = CapacityExperiment(design, random.Random(prompt_seed))
        run = measure(app, experiment, target, sinks, head=envelope("capacity", params, environment()),
                      watch=Progress(app, "capacity: probes", progress_line), served=server,
                      workers=client.workers, calibrate=client.calibrate, ray=client.ray)
        if run.interrupted:
            return interrupted(app, run, lambda written: _render(app, written, output.json_to_stdout))
    assert run.written is not None  # a run that was not interrupted has finished its result
    result = run.written
    _render(app, result, output.json_to_stdout, server)
    return exit_code(result, expect_at_least)
