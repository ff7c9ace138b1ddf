"""Options and plumbing shared by the measuring commands: target flags and output flags (and the
frozen records they parse into), the sinks (JSON, HTML, the history database) the output flags ask
for; every command writes to them through `results.runner` (run_experiment, or run_job without a server)."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

import click
from rich.console import Console

from servecheck.analysis.readings import read_report
from servecheck.client.base import Target
from servecheck.errors import UsageError
from servecheck.model.records import DIALECTS
from servecheck.report.sinks import HtmlFileSink
from servecheck.results.runner import Sink
from servecheck.results.sinks import JsonFileSink
from servecheck.store.sinks import HistorySink

F = Callable[..., Any]

SIMULATED_BANNER = "SIMULATED SERVER: these numbers come from servecheck's simulator, not from a real engine"


def say(console: Console, line: str, style: str | None = None) -> None:
    """Print server-supplied text literally: no markup, no highlighting, no wrapping."""
    console.print(line, markup=False, highlight=False, style=style, soft_wrap=True)


class Seconds(click.FloatRange):
    """A finite number of seconds: `nan` slips through a plain FloatRange (every comparison is false)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return rv


def target_options(f: F) -> F:
    """--api, --model, --api-key, --header, --timeout for commands that talk to a server."""
    return _target_options(f, "--model")


def _target_options(f: F, model_flag: str) -> F:
    """The model name may sit under another flag, for a command whose `--model` names a weight file
    (`context`); the value still arrives as `model`."""
    f = click.option(
        "--timeout",
        "first_token_timeout_s",
        type=Seconds(min=0.1),
        default=300.0,
        show_default=True,
        help="Seconds to wait for a first token before declaring a request stuck; a request that may be "
        "queued behind others gets this wait plus its place in the queue (measured from the warm-up). "
        "Also the longest gap allowed between tokens, and the limit for detection calls (at most 30 s). "
        "However it streams, a request is cut off after this wait plus 2 s per requested token, or once "
        "it has streamed more than 2x the requested tokens + 16.",
    )(f)
    f = click.option(
        "--header",
        "headers",
        multiple=True,
        metavar="NAME:VALUE",
        help="Extra HTTP header, repeatable. Values are never written to any output.",
    )(f)
    f = click.option(
        "--api-key",
        envvar="OPENAI_API_KEY",
        default=None,
        help="Bearer token (default: $OPENAI_API_KEY). Never written to any output or file.",
    )(f)
    f = click.option(model_flag, "model", default=None, help="Model name to request (default: the server's first model).")(f)
    f = click.option(
        "--api",
        type=click.Choice(["auto", *DIALECTS]),
        default="auto",
        show_default=True,
        help="API dialect; auto detects it from the server and says what it found.",
    )(f)
    return f


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


def calibrate_option(f: F) -> F:
    """--no-calibrate: skip the pre-flight check of the client before each concurrency."""
    return click.option(
        "--calibrate/--no-calibrate",
        default=True,
        help="Before each concurrency, stream that many requests from a loopback stamp server of servecheck's "
        "own at the warm-up's token rate and measure what this client adds (p99 stamp delay + dispatch "
        "skew); a concurrency where that exceeds 5% of what the command judges is client-bound and the "
        "run invalid. --no-calibrate skips it (about 0.5 s per concurrency) and the result says so.",
    )(f)


def output_options(f: F) -> F:
    """--json, --html, --db, --no-save for every measuring command."""
    f = click.option("--no-save", is_flag=True, help="Do not save this run to the history database.")(f)
    f = click.option(
        "--db",
        "db_path",
        default=None,
        metavar="PATH",
        help="History database (default: $SERVECHECK_DB or the user data directory).",
    )(f)
    f = click.option("--html", "html_path", default=None, metavar="PATH", help="Write a self-contained HTML report.")(f)
    f = click.option("--json", "json_path", default=None, metavar="PATH", help="Write the JSON result ('-' for stdout).")(f)
    return f


# Header names are RFC 9110 tokens; a value may hold any visible character, space or tab, never CR/LF.
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def parse_headers(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    out = []
    for raw in values:
        name, sep, value = raw.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            raise UsageError(f"--header {raw!r} is not NAME:VALUE", "write it like --header 'X-Org:team-a'")
        if not set(name) <= _TOKEN_CHARS:
            raise UsageError(f"--header name {name!r} holds characters a header name cannot", "use letters, digits and -")
        if any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in value):
            # Shown by name only: the value may be a secret.
            raise UsageError(f"--header {name}: the value holds a control character (CR, LF, ...)", "give the value on one line")
        out.append((name, value))
    return tuple(out)


# Paths of the generation endpoints: a URL ending in one is a whole endpoint, not the server's base URL.
_ENDPOINT_PATHS = ("/v1/chat/completions", "/v1/completions", "/chat/completions", "/completions", "/completion",
                   "/api/generate", "/api/chat")


def check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{url!r} is not an http(s) URL", "give the server's base URL, e.g. http://127.0.0.1:8080")
    try:
        parts.port  # noqa: B018 - urlsplit checks the port's range only when asked
    except ValueError:
        raise UsageError(f"{url!r}: the port is not a number in 1..65535", "e.g. http://127.0.0.1:8080") from None
    path = parts.path.rstrip("/")
    for endpoint in _ENDPOINT_PATHS:
        if path.endswith(endpoint):
            base = url[: url.index(parts.path)] + path[: -len(endpoint)]
            raise UsageError(
                f"{url!r} names the endpoint {endpoint}, not the server",
                f"drop the path: give the base URL {base}; servecheck picks the endpoint, --api the dialect",
            )
    return url.rstrip("/")


# The most requests one batch may hold: each is a connection and a prompt, and no server serves more
# at once; a mistyped --n 100000 would otherwise spend minutes building prompts before failing.
MAX_CONCURRENCY = 4096
# Descriptors kept free besides one connection per request: the history database, logs, the event loop.
RESERVED_FILES = 64


def check_concurrency(n: int, flag: str) -> None:
    """Refuse a concurrency the documented ceiling or this process's open-file limit cannot hold."""
    if n > MAX_CONCURRENCY:
        raise UsageError(f"{flag} {n} is above the ceiling of {MAX_CONCURRENCY} concurrent requests", f"for example {flag} 1,2,4,8")
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


def make_target(
    url: str,
    *,
    api: str = "auto",
    model: str | None = None,
    api_key: str | None = None,
    headers: tuple[str, ...] = (),
    first_token_timeout_s: float = 300.0,
) -> Target:
    return Target(
        url=check_url(url),
        api=api,
        model=model,
        api_key=api_key or None,
        headers=parse_headers(headers),
        first_token_timeout_s=first_token_timeout_s,
    )


def output_sinks(*, json_path: str | None, html_path: str | None, db_path: str | None, no_save: bool) -> tuple[Sink, ...]:
    """The sinks --json, --html, --db and --no-save ask for, history first: its run id goes into the files.

    The file paths are checked here, before any server is started or request sent."""
    history: tuple[Sink, ...] = () if no_save else (HistorySink(db_path if db_path is not None else os.environ.get("SERVECHECK_DB")),)
    files = (JsonFileSink(json_path) if json_path else None, HtmlFileSink(html_path, read_report) if html_path else None)
    return history + tuple(sink for sink in files if sink is not None)


@dataclass(frozen=True)
class ClientOptions:
    """--api, --model (context: --served-model), --api-key, --header and --timeout: how to talk to the server."""

    api: str = "auto"
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    headers: tuple[str, ...] = field(default=(), repr=False)  # NAME:VALUE, values may be secrets
    first_token_timeout_s: float = 300.0
    workers: int | None = None  # --workers: client processes that read a batch; None: as the pre-flight chooses
    calibrate: bool = True  # --no-calibrate: False
    ray: str | None = None  # --ray: the Ray cluster whose actors read the batches; None: this machine

    @property
    def workers_param(self) -> int | str:
        """--workers as the run's params record it: the number given, or "auto"."""
        return "auto" if self.workers is None else self.workers

    def client_params(self) -> dict[str, int | str | bool]:
        """What the run's params record of the client: --workers and the pre-flight."""
        params: dict[str, int | str | bool] = {"workers": self.workers_param, "calibrate": self.calibrate}
        if self.ray is not None:
            params["ray"] = self.ray
        return params

    def target(self, url: str) -> Target:
        return make_target(url, api=self.api, model=self.model, api_key=self.api_key, headers=self.headers,
                           first_token_timeout_s=self.first_token_timeout_s)


@dataclass(frozen=True)
class OutputOptions:
    """--json, --html, --db and --no-save: where a run's documents go."""

    json_path: str | None = None
    html_path: str | None = None
    db_path: str | None = None
    no_save: bool = False

    @property
    def json_to_stdout(self) -> bool:
        return self.json_path == "-"

    def sinks(self) -> tuple[Sink, ...]:
        return output_sinks(json_path=self.json_path, html_path=self.html_path, db_path=self.db_path, no_save=self.no_save)


def client_record(model_flag: str = "--model", *, batches: bool = False) -> Callable[[F], F]:
    """The target options, handed to the command as one `client: ClientOptions` (the model name under
    `model_flag`); a command that releases batches (`batches`) also takes --workers and --no-calibrate."""

    def wrap(f: F) -> F:
        f = _target_options(_collected(f, "client", ClientOptions), model_flag)
        return ray_option(calibrate_option(workers_option(f, auto=True))) if batches else f

    return wrap


def output_record(f: F) -> F:
    """The output options, handed to the command as one `output: OutputOptions`."""
    return output_options(_collected(f, "output", OutputOptions))


def options_record(keyword: str, record: type[Any]) -> Callable[[F], F]:
    """A command's own flags, handed to it as one `keyword` argument of the frozen `record` (the flags'
    parameter names are the record's fields), e.g. roofline's `options: jobs.roofline.RooflineOptions`."""
    return lambda f: _collected(f, keyword, record)


def _collected(f: F, keyword: str, record: type[Any]) -> F:
    """`f` taking the record's fields as one `keyword` argument instead of one parameter each."""
    names = [item.name for item in fields(record)]

    @functools.wraps(f)
    def command(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in names if name in kwargs}  # a record default where no flag
        return f(*args, **{keyword: record(**values)}, **kwargs)

    return command
