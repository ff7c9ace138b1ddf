"""Options and plumbing shared by the measuring commands: target flags, output flags, and the Recorder
that writes JSON, HTML and the history database, including partial results when a run is interrupted."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import click
from rich.console import Console

from servecheck.client.base import Target
from servecheck.errors import UsageError
from servecheck.model.records import DIALECTS

F = Callable[..., Any]

SIMULATED_BANNER = "SIMULATED SERVER: these numbers come from servecheck's simulator, not from a real engine"


def say(console: Console, line: str, style: str | None = None) -> None:
    """Print server-supplied text literally: no markup, no highlighting, no wrapping."""
    console.print(line, markup=False, highlight=False, style=style, soft_wrap=True)


def target_options(f: F) -> F:
    """--api, --model, --api-key, --header, --timeout for commands that talk to a server."""
    f = click.option(
        "--timeout",
        "first_token_timeout_s",
        type=click.FloatRange(min=0.1),
        default=300.0,
        show_default=True,
        help="Seconds to wait for a first token before declaring a request stuck; a request that may be "
        "queued behind others gets this wait plus its place in the queue (measured from the warm-up).",
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
    f = click.option("--model", default=None, help="Model name to request (default: the server's first model).")(f)
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


def parse_headers(values: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    out = []
    for raw in values:
        name, sep, value = raw.partition(":")
        if not sep or not name.strip():
            raise UsageError(f"--header {raw!r} is not NAME:VALUE", "write it like --header 'X-Org:team-a'")
        out.append((name.strip(), value.strip()))
    return tuple(out)


def check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{url!r} is not an http(s) URL", "give the server's base URL, e.g. http://127.0.0.1:8080")
    return url.rstrip("/")


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
        from servecheck.report.jsonout import check_writable

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
        self.doc = {**doc, "complete": False}
        if self._store is not None and self.run_id is not None:
            self._store.update_run(self.run_id, self.doc, complete=False)

    def finish(self, doc: dict[str, Any], *, complete: bool = True) -> dict[str, Any]:
        self.doc = {**doc, "complete": complete}
        if self.run_id is not None:
            self.doc["run_id"] = self.run_id
        if self._store is not None and self.run_id is not None:
            self._store.update_run(self.run_id, self.doc, complete=complete)
        if self.json_path:
            from servecheck.report.jsonout import write_json

            write_json(self.json_path, self.doc)
        if self.html_path:
            from servecheck.report.html import write_html

            write_html(self.html_path, [self.doc])
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
