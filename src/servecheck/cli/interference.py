"""`servecheck interference URL`: what one user's long prompt costs every other user's stream, and whether the
server prefills in chunks, in one blocking step, or elsewhere (from the victims' token arrivals alone)."""

from __future__ import annotations

import random


import click

from servecheck import exitcodes
from servecheck.cli.common import ClientOptions, OutputOptions, client_record, output_record, say
from servecheck.cli.context import AppContext
from servecheck.cli.measure import Progress, interrupted, measure, show_report
from servecheck.cli.serve import Served, resolve_url, serve_option, served
from servecheck.envinfo import environment
from servecheck.errors import UsageError
from servecheck.experiments.interference import MIN_TOKENS, InterferenceExperiment, InterferenceResult, with_witness
from servecheck.model.bodies.interference import InterferenceBody
from servecheck.model.result import RunResult
from servecheck.report.lines import interference as interference_report
from servecheck.runs.jsonout import envelope

DEFINITE = ("chunked", "blocking", "isolated")


def exit_code(run: RunResult[InterferenceBody], expect: str | None) -> int:
    """3 when the run is invalid (a client-bound pre-flight), the verdict is inconclusive or the --serve log
    audit found a refused feature; 4 when --expect names another definite verdict; 0 otherwise."""
    body = run.body
    refused = body.log_audit is not None and bool(body.log_audit.refused)
    if run.valid is False or body.verdict not in DEFINITE or refused:
        return exitcodes.INVALID
    if expect is not None and body.verdict != expect:
        return exitcodes.EXPECT_MISMATCH
    return exitcodes.OK


def parse_sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--prompt-sizes must be comma-separated integers, got {text!r}",
                         "for example --prompt-sizes 512,2048,8192") from None
    return sizes


def progress_line(result: InterferenceResult) -> str:
    t = result.trials[-1]
    return f"S={t.prompt_tokens} rep {t.rep + 1}: {len(result.trials)} of {len(result.plan)} intruders"


def _render(app: AppContext, run: RunResult[InterferenceBody], json_to_stdout: bool,
            served_: Served | None = None) -> None:
    show_report(app, interference_report.report_lines(run), simulated=run.simulated, json_to_stdout=json_to_stdout,
                served=served_)


@click.command("interference")
@click.argument("url", required=False)
@click.option("--streams", type=int, default=2, show_default=True,
              help="Victim streams generating when the intruder comes.")
@click.option("--prompt-sizes", "sizes_text", default="512,2048,8192", show_default=True,
              help="The intruder's prompt sizes in tokens (by the server's tokenizer where it has one).")
@click.option("--tokens", type=int, default=256, show_default=True, help="Output tokens per victim (forced length).")
@click.option("--reps", type=int, default=3, show_default=True, help="Intruders per size (the size order rotates).")
@click.option("--expect", type=click.Choice(DEFINITE), default=None,
              help="Exit 4 when the run's verdict is another definite verdict (for CI gates).")
@click.option("--seed", type=int, default=None,
              help="Seed for the prompts and nonces (default: fresh each run, recorded).")
@serve_option
@client_record(preflight=True)
@output_record
@click.pass_obj
def cmd(app: AppContext, url: str | None, streams: int, sizes_text: str, tokens: int, reps: int, expect: str | None,
        seed: int | None, serve_command: str | None, serve_log: str | None, client: ClientOptions,
        output: OutputOptions) -> int:
    """Start --streams victims with a long fixed output, let them steady, then send one intruder per size
    (its own nonce first, never a cached prefix): the victims' baseline interval, their longest and p99 gap
    while it was prefilled, the time they lost, its TTFT and prefill rate; chunked / blocking / isolated /
    inconclusive, with the chunk in tokens where chunked."""
    url = resolve_url(url, serve_command)
    sizes = parse_sizes(sizes_text)
    if streams < 1:
        raise UsageError(f"--streams must be >= 1, got {streams}", "for example --streams 2")
    if tokens < MIN_TOKENS:
        raise UsageError(f"--tokens must be >= {MIN_TOKENS} (the victims must outlast the intruder), got {tokens}",
                         "for example --tokens 256")
    if reps < 1:
        raise UsageError(f"--reps must be >= 1, got {reps}", "for example --reps 3")
    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    sinks = output.sinks()
    with served(serve_command, url, log_path=serve_log, say=lambda line: say(app.err, line)) as server:
        target = client.target(server.url)
        params = {**target.public_dict(), "streams": streams, "prompt_sizes": sizes, "tokens": tokens, "reps": reps,
                  "expect": expect, "seed": seed, "serve": serve_command, "calibrate": client.calibrate}
        experiment = InterferenceExperiment(tuple(sizes), streams, tokens, reps, random.Random(seed), expect)
        watch = Progress(app, "interference: intruders", progress_line, total=len(sizes) * reps)
        run = measure(app, experiment, target, sinks, head=envelope("interference", params, environment()), watch=watch,
                      served=server, workers=1, calibrate=client.calibrate, amend=with_witness)
        if run.interrupted:
            return interrupted(app, run, lambda written: _render(app, written, output.json_to_stdout))
    assert run.written is not None
    result = run.written
    _render(app, result, output.json_to_stdout, server)
    return exit_code(result, expect)



