"""The `servecheck` entry point: a lazy click group, global options, and the one place errors become exit codes."""

from __future__ import annotations

import importlib
import signal
import sys
import traceback
from typing import Any

import click

from servecheck import __version__, exitcodes
from servecheck.cli.context import AppContext, Seams
from servecheck.cli.signals import SignalTrap, trapped_signals
from servecheck.errors import ServecheckError, UsageError
from servecheck.load.protocol import DriverFactory


# command name -> module; each module defines `cmd`, a click.Command. Imported lazily so
# `servecheck --help` stays fast and one command's heavy imports never slow another.
COMMANDS: dict[str, str] = {
    "check": "servecheck.cli.check",
    "staircase": "servecheck.cli.staircase",
    "arms": "servecheck.cli.arms",
    "capacity": "servecheck.cli.capacity",
    "prefix-cache": "servecheck.cli.prefix_cache",
    "context": "servecheck.cli.context_sweep",
    "speculative": "servecheck.cli.speculative",
    "interference": "servecheck.cli.interference",
    "log": "servecheck.cli.log",
    "audit": "servecheck.cli.audit",
    "bandwidth": "servecheck.cli.bandwidth",
    "calibrate": "servecheck.cli.calibrate",
    "roofline": "servecheck.cli.roofline",
    "compare": "servecheck.cli.compare",
    "simulate": "servecheck.cli.simulate",
    "serve-local": "servecheck.cli.serve_local",
    "demo": "servecheck.cli.demo",
    "cache": "servecheck.cli.cache",
    "history": "servecheck.cli.history",
    "show": "servecheck.cli.show",
    "diff": "servecheck.cli.diff",
    "report": "servecheck.cli.report",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if self.get_command(ctx, name) is not None)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module_name = COMMANDS.get(cmd_name)
        if module_name is None:
            return None
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                return None
            raise
        return getattr(module, "cmd", None)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=exitcodes.DOC + f" {exitcodes.INTERRUPTED} interrupted (Ctrl-C): what was measured is saved, marked "
    f"incomplete; {exitcodes.TERMINATED} and {exitcodes.HANGUP} the same for SIGTERM and SIGHUP.",
)
@click.version_option(__version__, "--version", prog_name="servecheck")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("--quiet", "-q", is_flag=True, help="Print only results and errors (no progress).")
@click.option("--no-color", is_flag=True, help="Plain text output, no colours.")
@click.pass_context
def cli(ctx: click.Context, debug: bool, quiet: bool, no_color: bool) -> None:
    """Tell the truth about LLM inference servers, from the outside."""
    seams = ctx.obj if isinstance(ctx.obj, Seams) else Seams()
    ctx.obj = AppContext.create(debug=debug, quiet=quiet, no_color=no_color, open_driver=seams.open_driver)


def _debug_requested(argv: list[str]) -> bool:
    return "--debug" in argv


def main(argv: list[str] | None = None, *, open_driver: DriverFactory | None = None) -> None:
    """Run one command and exit with its code. `open_driver` is the seam to the server: how the
    measuring commands open their driver (default: the real `LoadDriver`; tests pass a `FakeDriver`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    with trapped_signals() as trap:
        code = _run(args, trap, Seams(open_driver=open_driver))
    sys.exit(code)


def _run(args: list[str], trap: SignalTrap, seams: Seams) -> int:
    debug = _debug_requested(args)
    try:
        rv = cli.main(args=args, prog_name="servecheck", standalone_mode=False, obj=seams)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        exc.show()
        return exitcodes.USAGE if isinstance(exc, click.UsageError) else exitcodes.ERROR
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("Interrupted." if trap.signum is None else f"Interrupted ({signal.Signals(trap.signum).name}).",
                   err=True)
        return trap.exit_code(exitcodes.INTERRUPTED)
    except ServecheckError as exc:
        if debug:
            traceback.print_exc()
        click.echo(f"Error: {exc.one_line()}", err=True)
        return exitcodes.USAGE if isinstance(exc, UsageError) else exitcodes.ERROR
    except BrokenPipeError:
        return exitcodes.ERROR
    except Exception as exc:  # noqa: BLE001 - the one place an unexpected failure becomes one line
        if debug:
            traceback.print_exc()
        click.echo(
            f"Error: unexpected {type(exc).__name__}: {exc} (rerun with --debug for the traceback)",
            err=True,
        )
        return exitcodes.ERROR
    return trap.exit_code(_exit_code(rv))


def _exit_code(rv: Any) -> int:
    return rv if isinstance(rv, int) else exitcodes.OK
