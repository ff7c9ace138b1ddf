"""Folds one request's stream of `EventReading`s, stamped with arrival times, into record fields.

Pure: no I/O and no clock of its own, so every rule about first tokens and token counts
can be tested with hand-made events.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from servecheck.client.dialects import EventReading
from servecheck.model.records import ServerTimings, TokenCountSource

# Generated text kept per request; enough to eyeball, bounded so 256 long streams stay small.
MAX_TEXT_CHARS = 4000


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
    events: int = 0
    token_ids: int = 0
    logprob_tokens: int = 0
    finish_reason: str | None = None
    server_tokens: int | None = None
    server_tokens_source: TokenCountSource = "none"
    server: ServerTimings | None = None
    error: str | None = None
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
        self.events += 1
        self.token_ids += reading.token_ids
        self.logprob_tokens += reading.logprob_tokens
        if self.text_chars < MAX_TEXT_CHARS:
            self.text_parts.append(reading.text)
            self.text_chars += len(reading.text)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)[:MAX_TEXT_CHARS]

    def count(self) -> TokenCount:
        """The strongest generated-token count available: server > token ids > logprobs > events."""
        if self.server_tokens is not None:
            return TokenCount(self.server_tokens, self.server_tokens_source)
        for tokens, source in ((self.token_ids, "token_ids"), (self.logprob_tokens, "logprobs")):
            if tokens > 0:
                return TokenCount(tokens, source)  # type: ignore[arg-type]
        return TokenCount(self.events, "events" if self.events else "none")


def _merge(old: ServerTimings | None, new: ServerTimings) -> ServerTimings:
    if old is None:
        return new
    filled = {k: v for k, v in new.to_dict().items() if v is not None}
    return replace(old, **filled)
