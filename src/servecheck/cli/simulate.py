"""`servecheck simulate`: run the simulated inference server until Ctrl-C or SIGTERM.

The first line of stdout is the server's URL (so scripts and tests can read it); the second says,
in words, that it is simulated and how it behaves. Log lines go to stderr (and to --log).
"""

from __future__ import annotations

import asyncio

import click

from servecheck import exitcodes
from servecheck.cli.context import AppContext
from servecheck.cli.collect import options_record
from servecheck.sim.config import MODES, PREFIX_CACHE_MODES
from servecheck.sim.flags import SimFlags, serve_until_stopped


@click.command("simulate")
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default=None,
    help="serial: one request at a time; batched: continuous batching; slots: batch up to --slots, "
    "queue the rest; pipelined: one prefill overlaps one decode, decode never batches. "
    "[default: serial, or slots when --slots is given]",
)
@click.option("--slots", type=click.IntRange(min=1), default=None, help="Slot count for --mode slots [default: 4].")
@click.option("--token-ms", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Base time of a decode step.")
@click.option(
    "--per-seq-ms",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Extra decode-step time per sequence in the batch.",
)
@click.option(
    "--prompt-token-ms",
    type=click.FloatRange(min=0),
    default=0.1,
    show_default=True,
    help="Prefill time per uncached prompt token.",
)
@click.option(
    "--context-token-ms",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Extra decode-step time per token of context (prompt + generated) of each sequence decoding: "
    "step time = token + per-seq x sequences + this x context tokens.",
)
@click.option(
    "--truncate-prompt",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Keep only a prompt's last N tokens and report that smaller count (0: never), as a truncating server does.",
)
@click.option("--eos-ceiling", is_flag=True, help="Ignore ignore_eos: some requests stop early (as Ollama does).")
@click.option(
    "--eos-short-fraction",
    type=click.FloatRange(0, 1),
    default=0.5,
    show_default=True,
    help="With --eos-ceiling: the share of prompts that stop early (drawn per prompt).",
)
@click.option(
    "--prefix-cache",
    type=click.Choice(PREFIX_CACHE_MODES),
    default="on",
    show_default=True,
    help="on: a repeated prefix skips prefill; off: never hits; inert: claims to be on, never hits.",
)
@click.option("--heat-per-s", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Slow-down per second of uptime (0.01 = +1%/s).")
@click.option("--n-ctx", type=click.IntRange(min=2), default=8192, show_default=True,
              help="Context per request (per slot).")
@click.option("--n-ctx-shared", type=click.IntRange(min=0), default=0, show_default=True,
              help="One context of this many tokens shared by the requests in flight, though each is told --n-ctx: "
              "a request that does not fit what they leave is refused 400 (0: each slot has its own).")
@click.option("--spec-mean", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Speculation law: mean tokens per decode step (1 .. draft + 1; 0: no speculation).")
@click.option("--spec-draft", type=click.IntRange(min=1), default=4, show_default=True,
              help="Draft tokens per step and sequence.")
@click.option("--spec-draft-ms", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Step time added per draft token per sequence (verifying the draft).")
@click.option("--spec-seed", type=int, default=0, show_default=True, help="Seed of the acceptance draws.")
@click.option("--prefill-chunk", type=click.IntRange(min=0), default=0, show_default=True,
              help="Prefill at most K prompt tokens a step, in the same step as the running streams' next tokens "
              "(chunked prefill); 0: a new prompt is prefilled whole in a step that stalls every stream.")
@click.option("--prefill-isolated", is_flag=True,
              help="Prefill prompts elsewhere (as disaggregated serving): running streams never wait for a prefill.")
@click.option("--serialize-on", multiple=True, metavar="FIELD",
              help="Serve a request whose body carries FIELD alone, batching the rest (repeatable), as mlx-lm's server "
              "does with seed. Modes slots and batched.")
@click.option("--refusal", is_flag=True, help="Log llama.cpp-like 'feature refused' lines at start-up.")
@click.option("--lying-gauges", is_flag=True,
              help="/metrics counts every admitted request as processing and none as deferred (gauges that lie).")
@click.option("--lying-cache", is_flag=True,
              help="Report as cached the prefix a working cache would have served (timings.cache_n, usage "
              "cached_tokens) whatever --prefix-cache serves: with off or inert, cache counters that lie.")
@click.option("--hostile", is_flag=True,
              help="Put <script> and <img onerror> markup into the model name, text and log.")
@click.option("--log", "log_path", default=None, metavar="PATH", help="Also write the server log to PATH.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="Port; 0 picks a free one.")
@options_record("flags", SimFlags)
def cmd(flags: SimFlags, host: str, port: int) -> int:
    """Run a SIMULATED inference server (not a real engine) for tests and demos.

    It speaks OpenAI (/v1/completions, /v1/chat/completions), llama.cpp (/completion, /props,
    /slots, /tokenize) and Ollama (/api/generate, /api/tags, /api/show), marks every response
    with X-Servecheck-Simulated: 1, and serves models named servecheck-sim*. Its first line of
    stdout is its URL.
    """
    app = click.get_current_context().find_object(AppContext)
    quiet = app.quiet if app is not None else False
    asyncio.run(serve_until_stopped(flags.config(), host, port, out=click.echo, log=None if quiet else _echo_log))
    if not quiet:
        click.echo("servecheck simulate: stopped", err=True)
    return exitcodes.OK


def _echo_log(line: str) -> None:
    click.echo(line, err=True)
