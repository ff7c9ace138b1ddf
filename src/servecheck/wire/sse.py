"""An incremental Server-Sent Events parser: feed it bytes as they arrive, get back complete events.

Events end at a blank line, never at the end of a read: one read may hold several events
and one event may span several reads (llama.cpp writes multi-chunk results in one write).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from servecheck.wire.base import StreamParseError

DONE = "[DONE]"
# The most one event (or one unfinished line) may hold. Real events are a few kB; a server that never
# ends a line or an event would otherwise grow the buffer until memory runs out.
MAX_EVENT_BYTES = 4 << 20
# Fields a server may send; any other line is not SSE (e.g. plain JSON sent to a stream request).
_KNOWN_FIELDS = frozenset({"data", "event", "id", "retry", "error"})


@dataclass(frozen=True, slots=True)
class SseEvent:
    data: str
    event: str | None = None

    @property
    def done(self) -> bool:
        return self.data.strip() == DONE

    def json(self) -> dict[str, Any]:
        return loads_object(self.data)


def loads_object(line: str) -> dict[str, Any]:
    """Decode one JSON object, or raise StreamParseError naming the line."""
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise StreamParseError("malformed JSON in stream", line) from exc
    if not isinstance(value, dict):
        raise StreamParseError("stream event is not a JSON object", line)
    return value


class SseParser:
    """Pure framing: bytes in, `SseEvent`s out. Comment lines (`:` pings) are skipped."""

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []
        self._data_chars = 0
        self._event: str | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        *lines, self._buf = (self._buf + chunk).split(b"\n")  # one pass per read, however many events
        check_line_length(self._buf)
        events: list[SseEvent] = []
        for raw in lines:
            event = self._line(raw.rstrip(b"\r").decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)
        return events

    def close(self) -> list[SseEvent]:
        """End of stream: a last event without its blank line still counts."""
        events = self.feed(b"\n") if self._buf else []
        pending = self._dispatch()
        return events + ([pending] if pending is not None else [])

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if name not in _KNOWN_FIELDS:
            if line.lstrip().startswith(("{", "[")):
                raise StreamParseError('a JSON document where server-sent events were expected: '
                                       'the server ignores "stream": true', line)
            raise StreamParseError("not a server-sent-events line", line)
        value = value[1:] if value.startswith(" ") else value
        if name in ("data", "error"):
            self._data_chars += len(value)
            if self._data_chars > MAX_EVENT_BYTES:
                raise StreamParseError(f"stream event longer than {MAX_EVENT_BYTES >> 20} MiB without its blank line",
                                       value)
            self._data.append(value)
            self._event = "error" if name == "error" else self._event
        elif name == "event":
            self._event = value
        return None

    def _dispatch(self) -> SseEvent | None:
        if not self._data:
            self._event, self._data_chars = None, 0
            return None
        event = SseEvent("\n".join(self._data), self._event)
        self._data, self._data_chars, self._event = [], 0, None
        return event


def check_line_length(pending: bytes) -> None:
    """Refuse an unfinished line past MAX_EVENT_BYTES: the buffer holding it must stay bounded."""
    if len(pending) > MAX_EVENT_BYTES:
        raise StreamParseError(
            f"stream line longer than {MAX_EVENT_BYTES >> 20} MiB without a newline",
            pending[:120].decode("utf-8", "replace")
        )
