"""Folds one request's stream of `EventReading`s, stamped with arrival times, into record fields.

Pure: no I/O and no clock of its own, so every rule about first tokens and token counts
can be tested with hand-made events.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from servecheck.wire.dialects import EventReading
from servecheck.model.records import OUTPUT_LENGTH_TOLERANCE, ServerTimings, TokenCountSource

# Generated text kept per request; enough to eyeball, bounded so 256 long streams stay small.
MAX_TEXT_CHARS = 4000
# Output may run OUTPUT_LENGTH_TOLERANCE, or this many tokens, past the request (an engine's
# off-by-one, a stop token counted) before it is off-length; beyond it a longer output breaks equal
# lengths like a shorter one does.
LENGTH_SLACK_TOKENS = 2
# A stream is cut off once it carries this much more than was requested: 2x plus a margin is far
# past any tolerance, so the reading stops before an endless stream costs memory or time.
CUTOFF_FACTOR = 2
CUTOFF_MARGIN_TOKENS = 16

_SOURCE_FIELDS = {"token_ids": "streamed token ids", "logprobs": "streamed logprob entries", "events": "token events"}


@dataclass(frozen=True, slots=True)
class TokenCount:
    tokens: int
    source: TokenCountSource


@dataclass(slots=True)
class StreamTally:
    first_token_ns: int | None = None
    last_event_ns: int | None = None
    final_ns: int | None = None  # when the terminal event arrived
    token_ns: list[int] = field(default_factory=list)
    event_tokens: list[int] = field(default_factory=list)  # ids or logprob entries per event (0: not said)
    events: int = 0
    token_ids: int = 0
    logprob_tokens: int = 0
    finish_reason: str | None = None
    server_tokens: int | None = None
    server_tokens_source: TokenCountSource = "none"
    server_tokens_field: str | None = None
    server: ServerTimings | None = None
    error: str | None = None
    implausible: str | None = None  # the first count or duration no server can mean
    text_parts: list[str] = field(default_factory=list)
    text_chars: int = 0

    def add(self, reading: EventReading, t_ns: int) -> None:
        self.last_event_ns = t_ns
        if reading.carries_output:
            self._add_output(reading, t_ns)
        if reading.finish_reason is not None:
            self.finish_reason = reading.finish_reason
        if reading.server_tokens is not None:
            self.server_tokens, self.server_tokens_source = reading.server_tokens, reading.server_tokens_source
            self.server_tokens_field = reading.server_tokens_field
        if reading.implausible is not None and self.implausible is None:
            self.implausible = reading.implausible
        if reading.timings is not None:
            self.server = _merge(self.server, reading.timings)
        if reading.error is not None and self.error is None:
            self.error = reading.error
        if reading.final:
            self.final_ns = t_ns

    def done(self, t_ns: int) -> None:
        """The dialect's end marker (`data: [DONE]`)."""
        self.last_event_ns = self.final_ns = t_ns

    def _add_output(self, reading: EventReading, t_ns: int) -> None:
        if self.first_token_ns is None:
            self.first_token_ns = t_ns
        self.token_ns.append(t_ns)
        self.event_tokens.append(max(reading.token_ids, reading.logprob_tokens))
        self.events += 1
        self.token_ids += reading.token_ids
        self.logprob_tokens += reading.logprob_tokens
        if self.text_chars < MAX_TEXT_CHARS:
            self.text_parts.append(reading.text)
            self.text_chars += len(reading.text)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)[:MAX_TEXT_CHARS]

    @property
    def streamed(self) -> int:
        """Tokens the stream itself shows (ids, logprob entries or events), whatever the server claims."""
        return max(self.events, self.token_ids, self.logprob_tokens)

    def count(self) -> TokenCount:
        """The strongest generated-token count available: server > token ids > logprobs > events."""
        if self.server_tokens is not None:
            return TokenCount(self.server_tokens, self.server_tokens_source)
        for tokens, source in ((self.token_ids, "token_ids"), (self.logprob_tokens, "logprobs")):
            if tokens > 0:
                return TokenCount(tokens, source)  # type: ignore[arg-type]
        return TokenCount(self.events, "events" if self.events else "none")


def allowed_tokens(requested: int) -> int:
    """The most output tokens a request for `requested` may produce and still be on-length."""
    return requested + max(LENGTH_SLACK_TOKENS, math.ceil(requested * OUTPUT_LENGTH_TOLERANCE))


def cutoff_tokens(requested: int) -> int:
    """Streamed tokens past which the driver stops reading a request."""
    return CUTOFF_FACTOR * requested + CUTOFF_MARGIN_TOKENS


def plausibility_problem(tally: StreamTally, requested: int) -> str | None:
    """Why a finished stream's counts cannot be trusted, naming the field and its value; None when they can.

    A server count must be a real count, agree with what was streamed (each token event carries at
    least one token), and not exceed the request: a longer output is off-length like a shorter one.
    """
    seen = f"{requested} were requested and {tally.events} events streamed"
    if tally.implausible is not None:
        return f"{tally.implausible}: {seen}"
    count = tally.count()
    where = tally.server_tokens_field or "the server's token count"
    if tally.server_tokens is not None and tally.streamed > allowed_tokens(tally.server_tokens):
        return (f"{where} = {tally.server_tokens} disagrees with the stream: "
                f"{tally.streamed} {_SOURCE_FIELDS['events']} or ids arrived")
    if count.tokens > allowed_tokens(requested):
        name = where if count.source in ("usage", "timings") else _SOURCE_FIELDS.get(count.source, count.source)
        return f"{name} = {count.tokens} is longer than requested: {seen} (off-length, like a short output)"
    return None


def _merge(old: ServerTimings | None, new: ServerTimings) -> ServerTimings:
    if old is None:
        return new
    filled = {k: v for k, v in new.to_dict().items() if v is not None}
    return replace(old, **filled)
