"""The target server and the clock: the inputs every driver needs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from servecheck.wire.request_params import RequestParams
from servecheck.errors import ProtocolError

Clock = Callable[[], int]  # monotonic nanoseconds


@dataclass(frozen=True)
class Target:
    """Where and how to talk to a server. The API key is never printed or written anywhere."""

    url: str
    api: str = "auto"  # "auto" or one of servecheck.model.records.DIALECTS
    model: str | None = None
    api_key: str | None = field(default=None, repr=False)
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # values may be secrets
    connect_timeout_s: float = 10.0
    # A server that sends no token for this long is declared stuck (the error names the wait).
    first_token_timeout_s: float = 300.0
    request_timeout_s: float = 1800.0
    # Token ids every request is kept from ending on, by a `logit_bias` where the API has no
    # `ignore_eos` (mlx-lm): the EOS ids of a model servecheck generated. () lets detection look.
    eos_token_ids: tuple[int, ...] = ()
    # Fields added to every request body, as a user's client sends them (--request-param, --extra-body;
    # `client.request_params`): a seed, logprobs, a response format.
    request_params: RequestParams = ()

    def public_dict(self) -> dict[str, object]:
        return {
            "url": self.url,
            "api": self.api,
            "model": self.model,
            "headers": [name for name, _ in self.headers],  # names only: values may be secrets
            "api_key_given": self.api_key is not None,
            "request_params": dict(self.request_params),
        }


@dataclass(frozen=True)
class RunClock:
    """A monotonic nanosecond clock zeroed at the run start, plus one wall-clock anchor."""

    start_ns: int
    wall_anchor_s: float
    source: Clock = time.perf_counter_ns

    @classmethod
    def start(cls, source: Clock = time.perf_counter_ns) -> RunClock:
        return cls(start_ns=source(), wall_anchor_s=time.time(), source=source)

    def now_ns(self) -> int:
        return self.source() - self.start_ns


def shorten(text: str, limit: int = 120) -> str:
    """One line of at most `limit` characters, for quoting server output in an error message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class StreamParseError(ProtocolError):
    """A stream line that is not what the dialect promises; carries the offending line, shortened."""

    def __init__(self, message: str, line: str) -> None:
        super().__init__(f"{message}: {shorten(line)!r}", "the server sent a stream line servecheck cannot read")
        self.line = shorten(line)
