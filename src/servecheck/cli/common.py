"""What every command's output shares: the banner of a simulated server, and printing a server's text
literally. The flags live in `target_flags` (which server), `run_flags` (how a run reads and where it
writes) and `option_records` (the frozen records a command takes them as)."""

from __future__ import annotations

from rich.console import Console

from servecheck.cli.collect import options_record
from servecheck.cli.option_records import ClientOptions, OutputOptions, client_record, output_record
from servecheck.cli.run_flags import MAX_WORKERS, check_concurrency, output_options, output_sinks, workers_option
from servecheck.cli.target_flags import check_url, make_target

__all__ = ["MAX_WORKERS", "SIMULATED_BANNER", "ClientOptions", "OutputOptions", "check_concurrency", "check_url",
           "client_record", "make_target", "options_record", "output_options", "output_record", "output_sinks", "say",
           "workers_option"]

SIMULATED_BANNER = "SIMULATED SERVER: these numbers come from servecheck's simulator, not from a real engine"


def say(console: Console, line: str, style: str | None = None) -> None:
    """Print server-supplied text literally: no markup, no highlighting, no wrapping."""
    console.print(line, markup=False, highlight=False, style=style, soft_wrap=True)
