"""`servecheck simulate`: run the simulated inference server until Ctrl-C or SIGTERM.

The first line of stdout is the server's URL (so scripts and tests can read it); the second says,
in words, that it is simulated and how it behaves. Log lines go to stderr (and to --log).
"""

from __future__ import annotations

import asyncio
import signal
import sys

import click

from servecheck import exitcodes
from servecheck.cli.context import AppContext
from servecheck.errors import UsageError
from servecheck.sim import SimConfig, start_sim
from servecheck.sim.config import MODES, PREFIX_CACHE_MODES


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
@click.option("--token-ms", type=click.FloatRange(min=0), default=10.0, show_default=True, help="Base time of a decode step.")
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
@click.option("--heat-per-s", type=click.FloatRange(min=0), default=0.0, show_default=True, help="Slow-down per second of uptime (0.01 = +1%/s).")
@click.option("--n-ctx", type=click.IntRange(min=2), default=8192, show_default=True, help="Context per request (per slot).")
@click.option("--spec-mean", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Speculation law: mean tokens per decode step (1 .. draft + 1; 0: no speculation).")
@click.option("--spec-draft", type=click.IntRange(min=1), default=4, show_default=True, help="Draft tokens per step and sequence.")
@click.option("--spec-draft-ms", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Step time added per draft token per sequence (verifying the draft).")
@click.option("--spec-seed", type=int, default=0, show_default=True, help="Seed of the acceptance draws.")
@click.option("--prefill-chunk", type=click.IntRange(min=0), default=0, show_default=True,
              help="Prefill at most K prompt tokens a step, in the same step as the running streams' next tokens "
              "(chunked prefill); 0: a new prompt is prefilled whole in a step that stalls every stream.")
@click.option("--prefill-isolated", is_flag=True,
              help="Prefill prompts elsewhere (as disaggregated serving): running streams never wait for a prefill.")
@click.option("--refusal", is_flag=True, help="Log llama.cpp-like 'feature refused' lines at start-up.")
@click.option("--lying-gauges", is_flag=True,
              help="/metrics counts every admitted request as processing and none as deferred (gauges that lie).")
@click.option("--hostile", is_flag=True, help="Put <script> and <img onerror> markup into the model name, text and log.")
@click.option("--log", "log_path", default=None, metavar="PATH", help="Also write the server log to PATH.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="Port; 0 picks a free one.")
def cmd(
    mode: str | None,
    slots: int | None,
    token_ms: float,
    per_seq_ms: float,
    prompt_token_ms: float,
    context_token_ms: float,
    truncate_prompt: int,
    eos_ceiling: bool,
    eos_short_fraction: float,
    prefix_cache: str,
    heat_per_s: float,
    n_ctx: int,
    spec_mean: float,
    spec_draft: int,
    spec_draft_ms: float,
    spec_seed: int,
    prefill_chunk: int,
    prefill_isolated: bool,
    refusal: bool,
    lying_gauges: bool,
    hostile: bool,
    log_path: str | None,
    host: str,
    port: int,
) -> int:
    """Run a SIMULATED inference server (not a real engine) for tests and demos.

    It speaks OpenAI (/v1/completions, /v1/chat/completions), llama.cpp (/completion, /props,
    /slots, /tokenize) and Ollama (/api/generate, /api/tags, /api/show), marks every response
    with X-Servecheck-Simulated: 1, and serves models named servecheck-sim*. Its first line of
    stdout is its URL.
    """
    app = click.get_current_context().find_object(AppContext)
    quiet = app.quiet if app is not None else False
    config = SimConfig(
        mode=_resolve_mode(mode, slots),  # type: ignore[arg-type]
        slots=slots or 4,
        token_s=token_ms / 1e3,
        per_seq_s=per_seq_ms / 1e3,
        prompt_token_s=prompt_token_ms / 1e3,
        context_token_s=context_token_ms / 1e3,
        truncate_prompt=truncate_prompt,
        heat_per_s=heat_per_s,
        eos_ceiling=eos_ceiling,
        eos_short_fraction=eos_short_fraction,
        prefix_cache=prefix_cache,  # type: ignore[arg-type]
        n_ctx=n_ctx,
        default_max_tokens=min(128, n_ctx - 1),
        spec_mean=spec_mean,
        spec_draft=spec_draft,
        spec_draft_token_s=spec_draft_ms / 1e3,
        spec_seed=spec_seed,
        prefill_chunk=prefill_chunk,
        prefill_isolated=prefill_isolated,
        refusal=refusal,
        hostile=hostile,
        lying_gauges=lying_gauges,
        log_path=log_path,
    )
    asyncio.run(_serve(config, host, port, quiet=quiet))
    return exitcodes.OK


def _resolve_mode(mode: str | None, slots: int | None) -> str:
    if mode is None:
        return "slots" if slots is not None else "serial"
    if slots is not None and mode != "slots":
        raise UsageError(f"--slots applies to --mode slots, not --mode {mode}", "drop --slots or use --mode slots")
    return mode


def _echo_log(line: str) -> None:
    click.echo(line, err=True)


async def _serve(config: SimConfig, host: str, port: int, *, quiet: bool) -> None:
    # Handlers first: a signal that arrives once the URL is printed must stop the server cleanly.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        sim = await start_sim(config, host, port, echo=None if quiet else _echo_log)
        try:
            click.echo(sim.url)
            click.echo(f"SIMULATED inference server, not a real engine: {sim.describe()}")
            sys.stdout.flush()
            await stop.wait()
        finally:
            await sim.stop()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    if not quiet:
        click.echo("servecheck simulate: stopped", err=True)
