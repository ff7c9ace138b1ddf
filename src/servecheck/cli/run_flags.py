"""The flags of a measuring run (--workers, --ray, --no-calibrate, --json, --html, --db, --no-save), the
concurrency ceiling, and the sinks the output flags ask for; every command writes to them through
`runs.runner` (run_experiment, or run_job without a server)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import get_args

import click

from servecheck.analysis.readings import read_report
from servecheck.cli.target_flags import F
from servecheck.errors import UsageError
from servecheck.model.bodies.common import EvidenceMode
from servecheck.runs.runner import Sink
from servecheck.report.html import write_html
from servecheck.runs.sinks import HistorySink, HtmlFileSink, JsonFileSink
from servecheck.store.db import open_store

# One client process reads a few hundred streams before its own lag shows in the token times
# (benchmarks/client_fidelity.py); more processes than cores only compete with each other.
MAX_WORKERS = max(1, os.cpu_count() or 1)


def workers_option(f: F, *, auto: bool = False) -> F:
    """--workers K: the batch's streams read by K client processes (`load.lanes`); with `auto` (the
    measuring commands) the default is the fewest that pass the pre-flight check."""
    if auto:
        return click.option(
            "--workers",
            type=click.IntRange(min=1),
            default=None,
            help="Client processes that send and read a batch's streams, released together and stamped on one "
            f"clock (at most the {MAX_WORKERS} cores; with --ray, Ray actors, at most the cluster's CPUs). Default: "
            "before each concurrency the client checks itself (see --no-calibrate) and uses the fewest processes "
            "whose timing error is within the command's bound; give a number to use exactly that many.",
        )(f)
    return click.option(
        "--workers",
        type=click.IntRange(min=1, max=MAX_WORKERS),
        default=1,
        show_default=True,
        help="Client processes that send and read a batch's streams, released together and stamped on one "
        f"clock (at most the {MAX_WORKERS} cores). More than one helps when one process cannot keep up "
        "with hundreds of streams; `servecheck calibrate --workers K` shows what each adds.",
    )(f)


def ray_option(f: F) -> F:
    """--ray ADDRESS: the batches' lanes on Ray actors across a cluster (`load.ray_lanes`)."""
    return click.option(
        "--ray",
        default=None,
        metavar="auto|local|ADDRESS",
        help="Place the client's lanes on Ray actors spread over a cluster's nodes (needs the extra: pip install "
        "'servecheck[ray]'): auto joins the cluster this machine is in, local starts a private one here, "
        "HOST:PORT names a head. Each actor's clock is bounded against this one's by round trips before every "
        "batch; --workers then counts actors.",
    )(f)


EVIDENCE_MODES: tuple[str, ...] = get_args(EvidenceMode)


def evidence_option(witnesses: str, decides: str) -> Callable[[F], F]:
    """--evidence all|stopwatch, on every command whose verdict the server's own witnesses (`witnesses`,
    in words) could decide: `decides` says what they may decide under `all`."""
    return click.option(
        "--evidence", "evidence_mode", type=click.Choice(EVIDENCE_MODES), default="all", show_default=True,
        help=f"stopwatch: the server's own witnesses ({witnesses}) never decide a verdict; they are still read and "
        f"any contradiction is shown. all: they may decide {decides}, and the verdict then says so.",
    )


def calibrate_option(f: F) -> F:
    """--no-calibrate: skip the pre-flight check of the client before each concurrency."""
    return click.option(
        "--calibrate/--no-calibrate",
        default=True,
        help="Before each concurrency, stream that many requests from a loopback stamp server of servecheck's own at "
        "the warm-up's token rate and measure what this client adds (p99 stamp delay + dispatch skew); a concurrency "
        "where that exceeds the command's bound (5% of what it judges; half a decode step where it reads steps) is "
        "client-bound and the run invalid. --no-calibrate skips it (about 0.5 s per "
        "concurrency) and the result says so.",
    )(f)


def output_options(f: F) -> F:
    """--json, --html, --db, --no-save for every measuring command."""
    f = click.option("--no-save", is_flag=True, help="Do not save this run to the history database.")(f)
    f = click.option("--db", "db_path", default=None, metavar="PATH",
                     help="History database (default: $SERVECHECK_DB or the user data directory).")(f)
    f = click.option("--html", "html_path", default=None, metavar="PATH", help="Write a self-contained HTML report.")(f)
    f = click.option("--json", "json_path", default=None, metavar="PATH",
                     help="Write the JSON result ('-' for stdout).")(f)
    return f


# The most requests one batch may hold: each is a connection and a prompt, and no server serves more
# at once; a mistyped --n 100000 would otherwise spend minutes building prompts before failing.
MAX_CONCURRENCY = 4096
# Descriptors kept free besides one connection per request: the history database, logs, the event loop.
RESERVED_FILES = 64


def check_concurrency(n: int, flag: str) -> None:
    """Refuse a concurrency the documented ceiling or this process's open-file limit cannot hold."""
    if n > MAX_CONCURRENCY:
        raise UsageError(f"{flag} {n} is above the ceiling of {MAX_CONCURRENCY} concurrent requests",
                         f"for example {flag} 1,2,4,8")
    limit = open_file_limit()
    if limit is not None and n + RESERVED_FILES > limit:
        raise UsageError(
            f"{flag} {n} needs {n + RESERVED_FILES} open files, but this process may open {limit}",
            f"raise the limit (ulimit -n {n + RESERVED_FILES}) or lower {flag}",
        )


def open_file_limit() -> int | None:
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else int(soft)



def output_sinks(*, json_path: str | None, html_path: str | None, db_path: str | None,
                 no_save: bool) -> tuple[Sink, ...]:
    """The sinks --json, --html, --db and --no-save ask for, history first: its run id goes into the files.

    The file paths are checked here, before any server is started or request sent."""
    history: tuple[Sink, ...] = () if no_save else (
        HistorySink(db_path if db_path is not None else os.environ.get("SERVECHECK_DB"), open_store),)
    files = (JsonFileSink(json_path) if json_path else None,
             HtmlFileSink(html_path, read_report, write_html) if html_path else None)
    return history + tuple(sink for sink in files if sink is not None)

