"""Options and plumbing shared by the measuring commands: target flags, output flags, and the Recorder
that writes JSON, HTML and the history database, including partial results when a run is interrupted."""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
from rich.console import Console

from servecheck.client.base import Target
from servecheck.errors import ServecheckError, UsageError
from servecheck.model.records import DIALECTS

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
    return target_options_named("--model")(f)


def target_options_named(model_flag: str) -> Callable[[F], F]:
    """The target options with the server's model name under another flag, for a command whose
    `--model` names a weight file (`context`); the value still arrives as `model`."""
    return lambda f: _target_options(f, model_flag)


def _target_options(f: F, model_flag: str) -> F:
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


def check_input_file(
    path: str | Path, what: str, *, allow_dir: bool = False, error: type[ServecheckError] = ServecheckError
) -> None:
    """Refuse a path that is not a regular file (or `-`) before anything opens it: reading a FIFO
    blocks until a writer comes, and a device may never end. A missing path is left to the opener."""
    if str(path) == "-":
        return
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    if stat.S_ISREG(mode) or (allow_dir and stat.S_ISDIR(mode)):
        return
    expected = "a regular file or a folder" if allow_dir else "a regular file"
    raise error(f"{what} {path} is {_file_kind(mode)}, not {expected}", f"give {expected}")


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))
    return next((name for test, name in kinds if test(mode)), "a special file")


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


class Recorder:
    """Keeps the latest snapshot of a run's document and writes it wherever the user asked.

    The history row is created when the run starts and updated after every measured point,
    so a run that is killed still leaves its partial result, marked incomplete.
    """

    def __init__(
        self,
        *,
        json_path: str | None,
        html_path: str | None,
        db_path: str | None,
        no_save: bool,
    ) -> None:
        from servecheck.results.jsonout import check_writable

        for path in (json_path, html_path):
            if path and path != "-":
                check_writable(path)
        self.json_path = json_path
        self.html_path = html_path
        self.db_path = db_path if db_path is not None else os.environ.get("SERVECHECK_DB")
        self.no_save = no_save
        self.doc: dict[str, Any] | None = None
        self.run_id: int | None = None
        self._store: Any = None

    def start(self, doc: dict[str, Any]) -> None:
        self.doc = {**doc, "complete": False}
        if self.no_save:
            return
        from servecheck.store.db import open_store

        self._store = open_store(self.db_path)
        self.run_id = self._store.begin_run(self.doc)

    def partial(self, doc: dict[str, Any]) -> None:
        """After every measured point: the history row, and the JSON and HTML files too (written
        atomically, marked incomplete), so a run killed outright (SIGKILL) still leaves every file
        the user asked for with what was measured. Standard output gets only the final document."""
        self.doc = {**doc, "complete": False}
        if self.run_id is not None:
            self.doc["run_id"] = self.run_id
        if self._store is not None and self.run_id is not None:
            self._store.update_run(self.run_id, self.doc, complete=False)
        self._write_files(to_stdout=False)

    def _write_files(self, *, to_stdout: bool) -> None:
        assert self.doc is not None
        if self.json_path and (to_stdout or self.json_path != "-"):
            from servecheck.results.jsonout import write_json

            write_json(self.json_path, self.doc)
        if self.html_path and (to_stdout or self.html_path != "-"):
            from servecheck.report.html import write_html

            if to_stdout:
                write_html(self.html_path, [self.doc])
                return
            try:
                write_html(self.html_path, [self.doc])
            except (KeyError, TypeError, ValueError, IndexError):
                # A partial the report cannot draw yet must never stop the measurement; the JSON
                # and the history row hold it, and the final write renders (or reports) it.
                pass

    def finish(self, doc: dict[str, Any], *, complete: bool = True) -> dict[str, Any]:
        self.doc = {**doc, "complete": complete}
        if self.run_id is not None:
            self.doc["run_id"] = self.run_id
        if self._store is not None and self.run_id is not None:
            self._store.update_run(self.run_id, self.doc, complete=complete)
        self._write_files(to_stdout=True)
        return self.doc

    def interrupted(self) -> dict[str, Any] | None:
        """Save whatever was measured before an interrupt, marked incomplete."""
        if self.doc is None:
            return None
        return self.finish(self.doc, complete=False)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
