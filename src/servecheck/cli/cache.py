"""`servecheck cache [show|clear|build]`: what the local engine cache holds, and provisioning it."""

from __future__ import annotations


import click

from servecheck import exitcodes
from servecheck.cli.context import AppContext
from servecheck.cli.engine_flags import ENGINES, llama_server_option, progress_printer
from servecheck.engine.llamacpp.build import provision_engine
from servecheck.engine.cache import CACHE_ENV, EngineCache, clear, fmt_size, list_entries, size_bytes
from servecheck.engine.hf_model import DEFAULT_HF_SIZE
from servecheck.engine.mlx_engine import MLX_LM_VERSION, MLX_VERSION, provision_mlx_local
from servecheck.engine.mlx_model import DEFAULT_MLX_SIZE
from servecheck.engine.running import RunningRecords
from servecheck.engine.llamacpp.model import SIZES, ensure_model
from servecheck.engine.vllm import VLLM_DIST, VLLM_VERSION, provision_vllm_local
from servecheck.errors import UsageError

# `cache build` provisions what `make test` and `servecheck demo` need.
DEFAULT_BUILD_MODELS = ("tiny", "moe")


@click.group("cache", invoke_without_command=True)
@click.pass_context
def cmd(ctx: click.Context) -> None:
    """Show, clear or build the local engine cache (llama-server build, sources, generated models).

    The cache lives in the user cache directory, or in $SERVECHECK_CACHE_DIR when set."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(show)


@cmd.command("show")
@click.pass_obj
def show(app: AppContext) -> int:
    """List what is cached, with sizes and paths."""
    cache = EngineCache.default()
    entries = list_entries(cache)
    app.out.print(f"cache {cache.root}  (set {CACHE_ENV} to move it)", markup=False, highlight=False, soft_wrap=True)
    for entry in entries:
        app.out.print(entry.line(), markup=False, highlight=False, soft_wrap=True)
    total = sum(e.size_bytes for e in entries)
    app.out.print(f"total {fmt_size(total)}" if entries else "empty", markup=False, highlight=False, soft_wrap=True)
    for line in RunningRecords.in_cache(cache).status_lines():
        app.out.print(line, markup=False, highlight=False, soft_wrap=True)
    return exitcodes.OK


@cmd.command("clear")
@click.pass_obj
def clear_cmd(app: AppContext) -> int:
    """Delete everything servecheck cached (the next demo rebuilds llama-server)."""
    cache = EngineCache.default()
    with cache.all_locks(progress_printer(app)):
        freed = clear(cache)
    app.out.print(f"cleared {cache.root} ({fmt_size(freed)} freed)", markup=False, highlight=False, soft_wrap=True)
    return exitcodes.OK


@cmd.command("build")
@click.option("--models", default=",".join(DEFAULT_BUILD_MODELS), show_default=True,
              help=f"Models to generate, comma-separated ({', '.join(SIZES)}).")
@click.option(
    "--engines", default="llamacpp", show_default=True,
    help="Engines to provision, comma-separated: llamacpp (build llama-server, generate --models), "
    f"vllm (install {VLLM_DIST}=={VLLM_VERSION}, about 3.5 GB, and generate its {DEFAULT_HF_SIZE} model), "
    f"mlx (install mlx=={MLX_VERSION} and mlx-lm=={MLX_LM_VERSION}, about 380 MB, and generate its "
    f"{DEFAULT_MLX_SIZE} model).",
)
@click.option("--vllm", "with_vllm", is_flag=True, help="Add vllm to --engines.")
@click.option("--mlx", "with_mlx", is_flag=True, help="Add mlx to --engines.")
@llama_server_option
@click.pass_obj
def build(app: AppContext, models: str, engines: str, with_vllm: bool, with_mlx: bool, llama_server: str | None) -> int:
    """Provision the engine (find or build llama-server) and generate the default models; with --vllm
    or --mlx, that engine and its model too."""
    names = [m.strip() for m in models.split(",") if m.strip()]
    unknown = [m for m in names if m not in SIZES]
    if unknown:
        raise UsageError(f"--models: unknown size(s) {', '.join(unknown)}", f"choose from {', '.join(SIZES)}")
    wanted = {e.strip() for e in engines.split(",") if e.strip()} | ({"vllm"} if with_vllm else set()) | (
        {"mlx"} if with_mlx else set())
    if not wanted or wanted - set(ENGINES):
        raise UsageError(f"--engines {engines!r}: choose from {', '.join(ENGINES)}", "e.g. --engines llamacpp,vllm")
    say = progress_printer(app)
    cache = EngineCache.default()
    if "llamacpp" in wanted:
        binary = provision_engine(llama_server, cache=cache, progress=say)
        app.out.print(binary.describe(), markup=False, highlight=False, soft_wrap=True)
        for name in names:
            path = ensure_model(name, cache, say)
            app.out.print(f"model {name}: {path} ({fmt_size(path.stat().st_size)})", markup=False, highlight=False,
                          soft_wrap=True)
    if "vllm" in wanted:
        local = provision_vllm_local(DEFAULT_HF_SIZE, cache=cache, progress=say)
        app.out.print(local.env.describe(), markup=False, highlight=False, soft_wrap=True)
        app.out.print(f"vLLM model {DEFAULT_HF_SIZE}: {local.model_path} ({fmt_size(size_bytes(local.model_path))})",
                      markup=False, highlight=False, soft_wrap=True)
    if "mlx" in wanted:
        mlx = provision_mlx_local(DEFAULT_MLX_SIZE, cache=cache, progress=say)
        app.out.print(mlx.env.describe(), markup=False, highlight=False, soft_wrap=True)
        app.out.print(f"MLX model {DEFAULT_MLX_SIZE}: {mlx.model_path} ({fmt_size(size_bytes(mlx.model_path))})",
                      markup=False, highlight=False, soft_wrap=True)
    return exitcodes.OK
