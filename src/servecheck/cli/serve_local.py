"""`servecheck serve-local`: run llama-server on 127.0.0.1 in the foreground and print its URL."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import click

from servecheck import exitcodes
from servecheck.cli.context import AppContext
from servecheck.engine.cache import EngineCache
from servecheck.engine.local import provision_local
from servecheck.engine.model import DEFAULT_SIZE, SIZES
from servecheck.engine.process import DEFAULT_CTX_PER_SLOT, LlamaServer, default_threads

# How often the foreground loop checks that the server is still alive.
ALIVE_POLL_S = 0.5


def progress_printer(app: AppContext) -> Callable[[str], None]:
    """Progress lines go to stderr, so stdout carries only results (here: the URL)."""

    def say(message: str) -> None:
        app.err.print(message, markup=False, highlight=False, style="dim", soft_wrap=True)

    return say


def llama_server_option(f: Callable[..., object]) -> Callable[..., object]:
    return click.option(
        "--llama-server",
        "llama_server",
        default=None,
        metavar="PATH",
        help="llama-server binary to use (default: llama-server on PATH, else servecheck's own build).",
    )(f)


@click.command("serve-local")
@click.option("--parallel", type=click.IntRange(min=1), default=4, show_default=True, help="Server slots (-np).")
@click.option(
    "--model",
    default=DEFAULT_SIZE,
    show_default=True,
    help=f"Generated model size ({', '.join(SIZES)}) or the path of a GGUF file.",
)
@click.option(
    "--ctx",
    "ctx_per_slot",
    type=click.IntRange(min=256),
    default=DEFAULT_CTX_PER_SLOT,
    show_default=True,
    help="Context per slot in tokens (-c is parallel x this).",
)
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Server threads (-t), pinned [default: half the CPUs, at most 8].")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port on 127.0.0.1 [default: a free one].")
@click.option("--log", "log_path", default=None, metavar="PATH", help="Server log file [default: in the cache].")
@llama_server_option
@click.pass_obj
def cmd(
    app: AppContext,
    parallel: int,
    model: str,
    ctx_per_slot: int,
    threads: int | None,
    port: int | None,
    log_path: str | None,
    llama_server: str | None,
) -> int:
    """Run a local llama.cpp server (no downloads of weights) until Ctrl-C; prints its URL first."""
    say = progress_printer(app)
    enable_ctrl_c()
    cache = EngineCache.default()
    engine = provision_local(llama_server, model, cache=cache, progress=say)
    log = log_path or str(cache.dir("logs") / f"serve-local-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log")
    server = LlamaServer(
        engine.binary,
        engine.model_path,
        parallel=parallel,
        ctx_per_slot=ctx_per_slot,
        threads=threads or default_threads(),
        port=port,
        log_path=Path(log),
    )
    try:
        url = server.start()
        click.echo(url)
        sys.stdout.flush()
        say(f"llama-server pid {server.pid}, model {engine.model_name}, --parallel {parallel}, log {log}")
        say("press Ctrl-C to stop it")
        _wait_forever(server)
    except KeyboardInterrupt:
        say("stopping llama-server")
        return exitcodes.OK
    finally:
        server.stop()
    return exitcodes.OK


def enable_ctrl_c() -> None:
    """Make SIGINT raise KeyboardInterrupt even when started in the background (where a shell ignores it)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _wait_forever(server: LlamaServer) -> None:
    while True:
        time.sleep(ALIVE_POLL_S)
        assert server.server is not None
        server.server.check_alive()
