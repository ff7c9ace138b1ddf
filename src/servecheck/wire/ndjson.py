"""An incremental newline-delimited JSON parser (Ollama's native stream): bytes in, objects out."""

from __future__ import annotations

from typing import Any

from servecheck.wire.sse import check_line_length, loads_object


class NdjsonParser:
    """Lines may be split across reads; blank lines are skipped; a bad line raises StreamParseError."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        check_line_length(self._buf)
        return [obj for obj in map(_decode, lines) if obj is not None]

    def close(self) -> list[dict[str, Any]]:
        """End of stream: a last line without its newline still counts."""
        rest, self._buf = self._buf, b""
        obj = _decode(rest)
        return [] if obj is None else [obj]


def _decode(raw: bytes) -> dict[str, Any] | None:
    line = raw.rstrip(b"\r").decode("utf-8", errors="replace")
    return loads_object(line) if line.strip() else None
