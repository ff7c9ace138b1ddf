"""`servecheck cache [show|clear|build]`: what the local engine cache holds, and provisioning it."""

from __future__ import annotations

import json

import click

from servecheck import exitcodes
from servecheck.cli.context import AppContext
from servecheck.cli.serve_local import llama_server_option, progress_printer
from servecheck.engine.build import provision_engine
from servecheck.engine.cache import CACHE_ENV, CacheEntry, EngineCache, clear, list_entries
from servecheck.engine.model import SIZES, ensure_model

# `cache build` provisions what `make test` and `servecheck demo` need.
DEFAULT_BUILD_MODELS = ("tiny", "moe")


def fmt_size(size_bytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.1f} {unit}"
    return f"{size_bytes} B"


def entry_line(entry: CacheEntry) -> str:
    line = f"{entry.kind:<7} {fmt_size(entry.size_bytes):>9}  {entry.path}"
    stamp = entry.path / "stamp.json"
    if entry.kind == "engine" and stamp.is_file():
        try:
            info = json.loads(stamp.read_text())
            line += f"  (llama-server {info.get('llama_server_version')}, built {info.get('built_at')})"
        except (OSError, ValueError):
            line += "  (unreadable stamp)"
    return line


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
        app.out.print(entry_line(entry), markup=False, highlight=False, soft_wrap=True)
    total = sum(e.size_bytes for e in entries)
    app.out.print(f"total {fmt_size(total)}" if entries else "empty", markup=False, highlight=False, soft_wrap=True)
    return exitcodes.OK


@cmd.command("clear")
@click.pass_obj
def clear_cmd(app: AppContext) -> int:
    """Delete everything servecheck cached (the next demo rebuilds llama-server)."""
    cache = EngineCache.default()
    with cache.lock("build", on_wait=progress_printer(app)):
        freed = clear(cache)
    app.out.print(f"cleared {cache.root} ({fmt_size(freed)} freed)", markup=False, highlight=False, soft_wrap=True)
    return exitcodes.OK


@cmd.command("build")
@click.option(
    "--models",
    default=",".join(DEFAULT_BUILD_MODELS),
    show_default=True,
    help=f"Models to generate, comma-separated ({', '.join(SIZES)}).",
)
@llama_server_option
@click.pass_obj
def build(app: AppContext, models: str, llama_server: str | None) -> int:
    """Provision the engine (find or build llama-server) and generate the default models."""
    from servecheck.errors import UsageError

    names = [m.strip() for m in models.split(",") if m.strip()]
    unknown = [m for m in names if m not in SIZES]
    if unknown:
        raise UsageError(f"--models: unknown size(s) {', '.join(unknown)}", f"choose from {', '.join(SIZES)}")
    say = progress_printer(app)
    cache = EngineCache.default()
    binary = provision_engine(llama_server, cache=cache, progress=say)
    app.out.print(binary.describe(), markup=False, highlight=False, soft_wrap=True)
    for name in names:
        path = ensure_model(name, cache, say)
        app.out.print(f"model {name}: {path} ({fmt_size(path.stat().st_size)})", markup=False, highlight=False, soft_wrap=True)
    return exitcodes.OK
