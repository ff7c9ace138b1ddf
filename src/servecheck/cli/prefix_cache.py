"""`servecheck prefix-cache URL`: the same long prompt several times, then a control of equal length:
does the prefix cache work, or was the flag accepted and inert?"""

from __future__ import annotations

import random

import click
from rich.console import Console

from servecheck import exitcodes
from servecheck.cli.common import SIMULATED_BANNER, ClientOptions, OutputOptions, client_record, output_record, say
from servecheck.cli.context import AppContext
from servecheck.cli.measure import Progress, interrupted, measure
from servecheck.cli.run_flags import evidence_option
from servecheck.cli.serve import Served, render_audit, resolve_url, serve_option, served
from servecheck.envinfo import environment
from servecheck.experiments.prefix_cache import (
    DEFAULT_MAX_TOKENS,
    PrefixCacheExperiment,
    PrefixCacheResult,
    check_params,
)
from servecheck.model.bodies.prefix_cache import PrefixCacheBody
from servecheck.model.result import RunResult
from servecheck.report.lines.prefix_cache import header_line, sends_table, verdict_lines
from servecheck.runs.jsonout import envelope

VERDICT_STYLE = {"working": "green", "inert": "bold red", "unknown": "yellow"}


# ---------------------------------------------------------------- reporting


def exit_code(run: RunResult[PrefixCacheBody], expect: str | None) -> int:
    """--expect: 0 on that verdict, 4 on another definite one. Otherwise only `working` is a pass:
    an inert cache is a refused feature, an unknown one is inconclusive (both 3)."""
    audit = run.body.log_audit
    refused = audit is not None and bool(audit.refused)
    verdict = run.body.verdict
    if not run.valid or verdict == "unknown" or refused:
        return exitcodes.INVALID
    if expect is not None:
        return exitcodes.OK if verdict == expect else exitcodes.EXPECT_MISMATCH
    return exitcodes.OK if verdict == "working" else exitcodes.INVALID


def render(console: Console, run: RunResult[PrefixCacheBody], served_: Served | None = None) -> None:
    if run.simulated:
        console.print(SIMULATED_BANNER, style="bold yellow", markup=False, highlight=False)
    console.print(header_line(run.body), markup=False, highlight=False, soft_wrap=True)
    console.print(sends_table(run.body))
    for line in verdict_lines(run):
        style = VERDICT_STYLE.get(run.body.verdict or "") if line.startswith("verdict") else None
        console.print(line, style=style, markup=False, highlight=False, soft_wrap=True)
    if served_ is not None and served_.owned:
        render_audit(console, served_)


# ---------------------------------------------------------------- running


def progress_line(result: PrefixCacheResult) -> str:
    s = result.sends[-1]
    cached = "not reported" if s.cached_tokens is None else s.cached_tokens
    ttft = "-" if s.ttft_s is None else f"{s.ttft_s:.3f}"
    return f"send {len(result.sends)} ({s.kind}): TTFT {ttft} s, cached tokens {cached}"


@click.command("prefix-cache")
@click.argument("url", required=False)
@click.option("--prompt-tokens", type=int, default=6000, show_default=True,
              help="Prompt length; capped to the server's per-request context (saying so).")
@click.option("--repeats", type=int, default=3, show_default=True, help="Sends of the same prompt, one after another.")
@click.option("--no-cache-prompt", is_flag=True, help="Send cache_prompt: false with every request (llama.cpp).")
@click.option("--expect", type=click.Choice(["working", "inert"]), default=None,
              help="Exit 0 on this verdict and 4 on the other (for CI).")
@click.option("--seed", type=int, default=None,
              help="Seed for the prompt text and nonces (default: fresh each run, recorded in the JSON). A fixed "
              "seed resends the previous run's prompt, which a long-running server may still hold in its cache.")
@evidence_option("the cache counters: timings.cache_n, usage cached_tokens, /metrics hits",
                 "a verdict the time to first token leaves open")
@serve_option
@client_record(preflight=True)
@output_record
@click.pass_obj
def cmd(
    app: AppContext,
    url: str | None,
    prompt_tokens: int,
    repeats: int,
    no_cache_prompt: bool,
    expect: str | None,
    seed: int | None,
    evidence_mode: str,
    serve_command: str | None,
    serve_log: str | None,
    client: ClientOptions,
    output: OutputOptions,
) -> int:
    """Send the same long prompt --repeats times, then a control of equal length with different
    bytes; read time to first token and every cache counter: working, inert or unknown."""
    url = resolve_url(url, serve_command)
    check_params(prompt_tokens, repeats, DEFAULT_MAX_TOKENS)
    json_to_stdout = output.json_to_stdout
    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    sinks = output.sinks()
    with served(serve_command, url, log_path=serve_log, say=lambda line: say(app.err, line)) as server:
        target = client.target(server.url)
        cache_prompt = False if no_cache_prompt else None
        params = {**target.public_dict(), "prompt_tokens": prompt_tokens, "repeats": repeats,
                  "cache_prompt": cache_prompt, "expect": expect, "seed": seed, "serve": serve_command,
                  "evidence": evidence_mode, "calibrate": client.calibrate}
        experiment = PrefixCacheExperiment(prompt_tokens, repeats, cache_prompt, random.Random(seed),
                                           evidence_mode=evidence_mode)
        watch = Progress(app, "prefix-cache: sends", progress_line, total=repeats + 1)
        run = measure(app, experiment, target, sinks, head=envelope("prefix-cache", params, environment()),
                      watch=watch, served=server, workers=1, calibrate=client.calibrate)
        if run.interrupted:  # the table of the sends it did measure
            return interrupted(app, run, lambda written: render(app.err if json_to_stdout else app.out, written))
    assert run.written is not None  # a run that was not interrupted has finished its result
    result = run.written
    render(app.err if json_to_stdout else app.out, result, server)
    return exit_code(result, expect)
