"""The flags that say which server and how to reach it (--api, --model, --api-key, --header, --timeout),
what every request carries besides servecheck's own fields (--request-param, --extra-body), and the
checks their values pass before any request is sent."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import click

from servecheck.wire.base import Target
from servecheck.wire.request_params import RequestParams
from servecheck.errors import UsageError
from servecheck.model.records import DIALECTS

F = Callable[..., Any]

class Seconds(click.FloatRange):
    """A finite number of seconds: `nan` slips through a plain FloatRange (every comparison is false)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return rv


def target_options(f: F) -> F:
    """--api, --model, --api-key, --header, --timeout, --request-param, --extra-body for commands that
    talk to a server."""
    return target_options_as(f, "--model")


def target_options_as(f: F, model_flag: str) -> F:
    """The model name may sit under another flag, for a command whose `--model` names a weight file
    (`context`); the value still arrives as `model`."""
    f = request_options(f)
    f = click.option(
        "--timeout", "first_token_timeout_s", type=Seconds(min=0.1), default=300.0, show_default=True,
        help="Seconds to wait for a first token before declaring a request stuck; a request that may be "
        "queued behind others gets this wait plus its place in the queue (measured from the warm-up). "
        "Also the longest gap allowed between tokens, and the limit for detection calls (at most 30 s). "
        "However it streams, a request is cut off after this wait plus 2 s per requested token, or once "
        "it has streamed more than 2x the requested tokens + 16.",
    )(f)
    f = click.option("--header", "headers", multiple=True, metavar="NAME:VALUE",
                     help="Extra HTTP header, repeatable. Values are never written to any output.")(f)
    f = click.option("--api-key", envvar="OPENAI_API_KEY", default=None,
                     help="Bearer token (default: $OPENAI_API_KEY). Never written to any output or file.")(f)
    f = click.option(model_flag, "model", default=None,
                     help="Model name to request (default: the server's first model).")(f)
    f = click.option("--api", type=click.Choice(["auto", *DIALECTS]), default="auto", show_default=True,
                     help="API dialect; auto detects it from the server and says what it found.")(f)
    return f


def request_options(f: F) -> F:
    """--request-param and --extra-body: fields every request body carries, as the user's clients send them."""
    f = click.option(
        "--extra-body", default=None, metavar="JSON",
        help="A JSON object whose fields every request body carries (merged as --request-param's are).",
    )(f)
    return click.option(
        "--request-param", "request_params", multiple=True, metavar="KEY=VALUE",
        help="A field every request body carries, as your users' clients send it (repeatable): VALUE is JSON "
        "where it parses, else a string, e.g. seed=7, logprobs=true, 'response_format={\"type\":\"json_object\"}'. "
        "Some servers schedule such requests differently (mlx-lm serves a request with a seed alone). Fields "
        "servecheck sets to measure (stream, max_tokens, ignore_eos, the prompt, model, ...) are refused; "
        "the run records the fields and its report names them beside the verdict.",
    )(f)


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
            raise UsageError(f"--header name {name!r} holds characters a header name cannot",
                             "use letters, digits and -")
        if any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in value):
            # Shown by name only: the value may be a secret.
            raise UsageError(f"--header {name}: the value holds a control character (CR, LF, ...)",
                             "give the value on one line")
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



def make_target(url: str, *, api: str = "auto", model: str | None = None, api_key: str | None = None,
                headers: tuple[str, ...] = (), first_token_timeout_s: float = 300.0,
                request_params: RequestParams = ()) -> Target:
    return Target(url=check_url(url), api=api, model=model, api_key=api_key or None, headers=parse_headers(headers),
                  first_token_timeout_s=first_token_timeout_s, request_params=request_params)
