"""`servecheck serve-local`: run llama-server, vLLM or mlx-lm on 127.0.0.1 in the foreground and print its URL."""

from __future__ import annotations

import click

from servecheck.cli.context import AppContext
from servecheck.cli.engine_flags import (
    enable_ctrl_c,
    in_foreground,
    engine_args_option,
    engine_option,
    llama_server_option,
    progress_printer,
    running_records,
    serve_log_path,
    split_engine_args,
)
from servecheck.engine.cache import EngineCache
from servecheck.engine.hf_model import HF_SIZES
from servecheck.engine.llamacpp.server import DEFAULT_CTX_PER_SLOT, LlamaServer, default_threads
from servecheck.engine.local import provision_local
from servecheck.engine.mlx_engine import MlxServer, provision_mlx_local
from servecheck.engine.mlx_model import MLX_SIZES
from servecheck.engine.llamacpp.model import DEFAULT_SIZE, SIZES
from servecheck.engine.vllm import DEFAULT_MAX_MODEL_LEN, VllmServer, provision_vllm_local
from servecheck.errors import UsageError

@click.command("serve-local")
@engine_option
@click.option("--parallel", type=click.IntRange(min=1), default=4, show_default=True,
              help="Server slots (llama.cpp -np; vLLM --max-num-seqs; "
                   "MLX --decode-concurrency and --prompt-concurrency).")
@click.option(
    "--model",
    default=DEFAULT_SIZE,
    show_default=True,
    help=f"Generated model ({', '.join(SIZES)}; vLLM: {', '.join(HF_SIZES)}; MLX: {', '.join(MLX_SIZES)}) or the "
    "path of a GGUF file (vLLM: of a Hugging Face model folder; MLX: of an MLX model folder).",
)
@click.option(
    "--ctx", "ctx", type=click.IntRange(min=256), default=None,
    help=f"llama.cpp: context per slot in tokens (-c is parallel x this) [default: {DEFAULT_CTX_PER_SLOT}]; "
    f"vLLM: --max-model-len [default: {DEFAULT_MAX_MODEL_LEN}].",
)
@click.option("--threads", type=click.IntRange(min=1), default=None,
              help="llama.cpp server threads (-t), pinned [default: half the CPUs, at most 8].")
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
    """Run a local llama.cpp, vLLM or MLX server (no downloads of weights) until Ctrl-C; prints its URL first."""
    extra = split_engine_args(engine_args)
    if engine == "mlx":
        given = [f for f, v in (("--threads", threads), ("--llama-server", llama_server), ("--ctx", ctx))
                 if v is not None]
        if given:
            raise UsageError(f"{given[0]} is not for --engine mlx",
                             "drop the flag: mlx-lm takes no thread count, binary or context size")
        return _serve_mlx(app, parallel, model, port, log_path, extra)
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
    server = LlamaServer(engine.binary, engine.model_path, parallel=parallel, ctx_per_slot=ctx or DEFAULT_CTX_PER_SLOT,
                         threads=threads or default_threads(), extra_args=extra, port=port, log_path=log,
                         records=records)
    return in_foreground(
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
    server = VllmServer(local.env, local.model_path, max_num_seqs=parallel, max_model_len=ctx or DEFAULT_MAX_MODEL_LEN,
                        served_model_name=local.model_name, extra_args=extra, port=port, log_path=log, records=records)
    say(f"starting vLLM (about 2 minutes on 2 cores before it is ready, 3 the first time); log {log}")
    return in_foreground(
        server, say, "vLLM",
        lambda: f"vLLM pid {server.pid}, model {local.model_name}, --max-num-seqs {parallel}, log {log}",
        server.check_alive,
    )


def _serve_mlx(app: AppContext, parallel: int, model: str, port: int | None, log_path: str | None,
               extra: list[str]) -> int:
    say = progress_printer(app)
    enable_ctrl_c()
    cache = EngineCache.default()
    records = running_records(app, cache)
    local = provision_mlx_local(model, cache=cache, progress=say)
    log = serve_log_path(cache, "mlx", log_path)
    server = MlxServer(local.env, local.model_path, parallel=parallel, extra_args=extra, port=port, log_path=log,
                       records=records)
    if local.model.eos_token_ids:
        say(f"mlx-lm has no ignore_eos: servecheck pins lengths with logit_bias against EOS id(s) "
            f"{', '.join(map(str, local.model.eos_token_ids))}, read from {local.model_path}")
    return in_foreground(
        server, say, "mlx-lm",
        lambda: f"mlx-lm pid {server.pid}, model {local.model_name}, --decode-concurrency {parallel} "
        f"--prompt-concurrency {parallel}, log {log}",
        server.check_alive,
    )
