"""The HTTP side of the driver: the aiohttp session, control requests, probes and JSON gets.

aiohttp, not httpx: `content.readany()` hands us each raw chunk as it arrives, so every event
is stamped on arrival, and the simulated server is built on aiohttp too: one HTTP library
shared by both sides of every test.

Redirects are never followed by aiohttp (it would carry the API key and --header values to
wherever a server points): control requests follow them by hand, on the same origin only and at
most MAX_REDIRECTS times; a measured request that is redirected fails, naming where to.
"""

from __future__ import annotations

import json
import ssl
from typing import Any

import aiohttp
from yarl import URL

from servecheck.wire.base import StreamParseError, Target, shorten
from servecheck.wire.dialects import Dialect
from servecheck.wire.sse import loads_object
from servecheck.errors import ConnectError, ProtocolError, RequestTimeout, ServerError

SIMULATED_HEADER = "X-Servecheck-Simulated"
# Detection and tokenize calls are cheap; a server that takes longer than this (or than --timeout,
# whichever is shorter) is not answering.
CONTROL_TIMEOUT_S = 30.0
# Redirects a control request follows (on the server's own origin) before it is called a loop:
# aiohttp's and browsers' own limit.
MAX_REDIRECTS = 10
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


def base_url(url: str) -> str:
    """The server root: an OpenAI-style base URL ending in /v1 is accepted and trimmed."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class Transport:
    """One server's HTTP side: its session, headers and TLS context, and the short control requests
    (detection, /tokenize, gauges) made on it. `LoadDriver` is one, opened with `async with`; the
    measured requests it sends over it are `load.recording`'s."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.url = base_url(target.url)
        self._session: aiohttp.ClientSession | None = None
        self._saw_simulated = False
        self.server_header: str | None = None  # the `Server` header of the latest control answer (detection reads it)
        # Built once per driver (not per lane: loading CA certificates costs milliseconds), and at
        # run time so SSL_CERT_FILE / SSL_CERT_DIR name a private CA for https servers.
        self._ssl = ssl.create_default_context() if self.url.startswith("https:") else None

    # ---- sessions, headers, errors -------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = dict(self.target.headers)
        if self.target.api_key:
            headers["Authorization"] = f"Bearer {self.target.api_key}"
        return headers

    def _new_session(self, limit: int, queue_wait_s: float = 0.0, force_close: bool = False) -> aiohttp.ClientSession:
        # No total timeout on streams (a 5-minute default would kill long runs); the first-token
        # and stall limits are enforced while reading, the request limit here.
        timeout = aiohttp.ClientTimeout(
            total=self.target.request_timeout_s + queue_wait_s,
            connect=self.target.connect_timeout_s,
            sock_connect=self.target.connect_timeout_s,
        )
        connector = aiohttp.TCPConnector(
            limit=limit, limit_per_host=0, ssl=self._ssl if self._ssl else True, force_close=force_close
        )
        return aiohttp.ClientSession(connector=connector, headers=self._headers(), timeout=timeout)

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use LoadDriver as `async with LoadDriver(target) as driver:`")
        return self._session

    def scrub(self, text: str) -> str:
        """Remove the API key and header values from anything that may be shown or saved."""
        secrets = [self.target.api_key or ""] + [v for _, v in self.target.headers]
        for secret in secrets:
            if len(secret) >= 4:
                text = text.replace(secret, "***")
        return text

    def _note_headers(self, resp: aiohttp.ClientResponse) -> None:
        self.server_header = resp.headers.get("Server")
        if resp.headers.get(SIMULATED_HEADER, "").strip() == "1":
            self._saw_simulated = True

    def _connect_error(self, exc: BaseException) -> ConnectError:
        if isinstance(exc, aiohttp.ClientConnectorCertificateError):
            return ConnectError(
                f"TLS certificate of {self.url} was refused: {shorten(str(exc.certificate_error))}",
                "check the https URL's certificate",
            )
        reason = getattr(exc, "os_error", None) or exc
        return ConnectError(
            self.scrub(f"cannot connect to {self.url}: {shorten(str(reason))}"),
            "check the host and port; is the server running?",
        )

    # ---- control requests ----------------------------------------------------------------

    async def _call(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        """One short request, redirects followed by hand (same origin only, MAX_REDIRECTS at most)."""
        url = self.url + path
        for _ in range(MAX_REDIRECTS):
            status, raw, location = await self._call_once(method, url, body)
            if location is None:
                return status, raw
            url = self._redirect_target(path, url, location)
            if status == 303 or (status in (301, 302) and method == "POST"):
                method, body = "GET", None  # what every HTTP client does with these
        status, raw, location = await self._call_once(method, url, body)
        if location is None:
            return status, raw
        raise ProtocolError(
            self.scrub(f"the server redirected {path} {MAX_REDIRECTS} times and asked for more; last URL {url}, "
                       f"which redirects to {location}"),
            "a redirect loop: check the server's URL, or its proxy's redirect rules",
        )

    def _redirect_target(self, path: str, url: str, location: str) -> str:
        """Where a redirect points, when that is the server's own origin; otherwise an error: the
        API key and the headers go to the host and port the user named, nowhere else."""
        try:
            target = URL(url).join(URL(location))
        except ValueError:
            raise ProtocolError(self.scrub(f"the server redirected {path} to an unreadable URL {location!r}")) from None
        if target.origin() != URL(self.url).origin():
            raise ProtocolError(
                self.scrub(f"the server redirected {path} to {target}, away from {URL(self.url).origin()}: "
                           "servecheck sends the API key and headers only to the server it was given, and stopped"),
                f"if {target.origin()} is the server to test, give servecheck that URL",
            )
        return str(target)

    async def _call_once(self, method: str, url: str, body: Any) -> tuple[int, bytes, str | None]:
        """One short request, with network errors translated into servecheck errors; the Location
        of a redirect (None for any other answer)."""
        limit_s = self.control_timeout_s
        connect_s = min(self.target.connect_timeout_s, limit_s)
        # Connecting (TCP and TLS) and answering are bounded apart, so the error can say which one stalled.
        timeout = aiohttp.ClientTimeout(total=connect_s + limit_s, connect=connect_s, sock_connect=connect_s,
                                        sock_read=limit_s)
        try:
            async with self.session.request(method, url, json=body, timeout=timeout, allow_redirects=False) as resp:
                self._note_headers(resp)
                location = resp.headers.get("Location") if resp.status in REDIRECT_STATUSES else None
                return resp.status, await resp.content.read(1 << 22), location
        except aiohttp.ClientConnectorError as exc:
            raise self._connect_error(exc) from exc
        except aiohttp.ConnectionTimeoutError as exc:
            raise self._connect_timeout(connect_s) from exc
        except TimeoutError as exc:
            raise RequestTimeout(
                f"{url} accepted the connection but sent no answer within {limit_s:g} s",
                "is the server overloaded or stuck? raise --timeout to wait longer",
            ) from exc
        except aiohttp.ServerDisconnectedError as exc:
            raise ConnectError(f"{url}: the server closed the connection without answering",
                               "is this an HTTP server?") from exc
        except aiohttp.ClientOSError as exc:
            raise ConnectError(self.scrub(f"{url}: connection reset ({shorten(str(exc.strerror or exc))})"),
                               None) from exc
        except aiohttp.ClientError as exc:
            raise ConnectError(self.scrub(f"{url}: {shorten(str(exc))}"), "is this an HTTP server?") from exc

    @property
    def control_timeout_s(self) -> float:
        """Detection and tokenize calls honour --timeout when it is shorter than the usual limit."""
        return min(CONTROL_TIMEOUT_S, self.target.first_token_timeout_s)

    def _connect_timeout(self, limit_s: float) -> ConnectError:
        if self._ssl is not None:
            return ConnectError(
                f"TLS handshake with {self.url} did not complete within {limit_s:g} s: the port accepted the "
                "connection but never answered the handshake",
                "is this port serving plain http? try an http:// URL",
            )
        return ConnectError(f"connecting to {self.url} timed out after {limit_s:g} s", "check the host and port")

    async def probe(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """(status, decoded JSON or None). HTTP errors are returned, not raised; 401/403 are raised."""
        status, raw = await self._call(method, path, body)
        if status in (401, 403):
            raise ServerError(
                f"{self.url}{path} refused the request (HTTP {status}): {self.scrub(_message(raw))}",
                "pass --api-key or --header 'Authorization: Bearer ...'",
                status=status,
            )
        try:
            return status, loads_object(raw.decode("utf-8", errors="replace")) if raw.strip()[:1] == b"{" else None
        except StreamParseError:
            return status, None

    async def get_json(self, path: str) -> Any | None:
        """GET a JSON document; None on 404. Other HTTP errors raise ServerError."""
        status, raw = await self._call("GET", path)
        if status == 404:
            return None
        self._raise_for(status, path, raw)
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ProtocolError(f"{self.url}{path} did not return JSON: "
                                f"{shorten(raw.decode(errors='replace'))!r}") from exc

    async def fetch_raw(self, path: str, timeout_s: float = CONTROL_TIMEOUT_S) -> tuple[int, bytes] | None:
        """(status, body) of a GET, or None on any network failure: for best-effort witnesses."""
        timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=self.target.connect_timeout_s)
        try:
            async with self.session.get(self.url + path, timeout=timeout, allow_redirects=False) as resp:
                return resp.status, await resp.content.read(1 << 20)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            return None

    async def get_text(self, path: str) -> str | None:
        """GET a text document (e.g. /metrics); None on 404."""
        status, raw = await self._call("GET", path)
        if status == 404:
            return None
        self._raise_for(status, path, raw)
        return raw.decode("utf-8", errors="replace")

    def _raise_for(self, status: int, path: str, raw: bytes) -> None:
        if status >= 400:
            raise ServerError(f"{self.url}{path}: HTTP {status}: {self.scrub(_message(raw))}", status=status)

    # ---- a lane's connection ----------------------------------------------------------------

    async def _warm(self, session: aiohttp.ClientSession, dialect: Dialect) -> None:
        """Open this lane's connection before the barrier, so TCP/TLS setup is not timed."""
        try:
            async with session.get(self.url + dialect.warm_path, allow_redirects=False) as resp:
                await resp.read()
        except (aiohttp.ClientError, TimeoutError):
            pass  # the request itself will record the failure


def _message(raw: bytes) -> str:
    """The server's own error message from an error body, shortened to one line."""
    text = raw.decode("utf-8", errors="replace")
    try:
        data = loads_object(text)
    except StreamParseError:
        return shorten(text, 200) or "(empty body)"
    err = data.get("error", data)
    if isinstance(err, dict):
        err = err.get("message") or err.get("detail") or err
    return shorten(str(data.get("detail", err) if "error" not in data else err), 200)
