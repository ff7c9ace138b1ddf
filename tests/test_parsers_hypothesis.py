"""The stream parsers and dialect readers fed arbitrary bytes and JSON: they return events or raise
StreamParseError, never anything else; they finish; and their buffers stay bounded."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servecheck.wire.base import StreamParseError
from servecheck.wire.dialects import DIALECT_CLASSES, MAX_PLAUSIBLE_TOKENS, EventReading, get_dialect
from servecheck.wire.ndjson import NdjsonParser
from servecheck.wire.sse import MAX_EVENT_BYTES, SseEvent, SseParser
from servecheck.wire.tally import StreamTally, plausibility_problem

EXAMPLES = settings(max_examples=500, deadline=None)

# Bytes that look like streams often enough to reach past the first line: SSE and NDJSON pieces.
_PIECES = st.sampled_from([b"data: ", b"event: error\n", b"error: ", b": ping\n", b"\n", b"\r\n", b"{", b"}", b"[DONE]",
                           b'"content": "x"', b"id: 1\n", b"retry: 5\n", b"\xff\xfe", b"\x00"])
_CHUNK = st.one_of(st.binary(max_size=64), st.lists(_PIECES, max_size=12).map(b"".join))
CHUNKS = st.lists(_CHUNK, max_size=20)

_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
)
JSON_VALUES = st.recursive(_SCALARS,
                           lambda inner: (st.lists(inner, max_size=4)
                                          | st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=20)
# Keys the dialects read, so generated objects reach their branches instead of missing every key.
_KEYS = st.sampled_from(["choices", "usage", "timings", "content", "tokens", "stop", "stop_type", "truncated", "done",
                         "response", "thinking", "message", "eval_count", "eval_duration", "prompt_eval_count",
                         "tokens_predicted", "error", "text", "delta", "finish_reason", "logprobs",
                         "completion_tokens", "prompt_tokens", "predicted_n", "predicted_ms", "cache_n"])
EVENTS = st.dictionaries(_KEYS, st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3)
                                             | st.dictionaries(_KEYS, inner, max_size=4), max_leaves=12), max_size=6)


def _feed_all(parser: SseParser | NdjsonParser, chunks: list[bytes]) -> list[Any]:
    out: list[Any] = []
    try:
        for chunk in chunks:
            out += parser.feed(chunk)
            assert len(parser._buf) <= MAX_EVENT_BYTES
        out += parser.close()
    except StreamParseError as exc:
        assert exc.message and "\n" not in exc.line  # one line, shortened, for the error message
    return out


@EXAMPLES
@given(CHUNKS)
def test_sse_parser_yields_events_or_a_parse_error(chunks: list[bytes]) -> None:
    for event in _feed_all(SseParser(), chunks):
        assert isinstance(event, SseEvent) and isinstance(event.data, str)


@EXAMPLES
@given(CHUNKS, st.integers(min_value=1, max_value=7))
def test_sse_parser_does_not_depend_on_where_reads_split(chunks: list[bytes], step: int) -> None:
    """The same bytes in other read sizes give the same events (or the same failure)."""
    whole = b"".join(chunks)

    def parse(pieces: list[bytes]) -> object:
        try:
            parser = SseParser()
            events = [e for p in pieces for e in parser.feed(p)] + parser.close()
            return [(e.data, e.event) for e in events]
        except StreamParseError as exc:
            return ("error", exc.message)

    assert parse([whole]) == parse([whole[i:i + step] for i in range(0, len(whole), step)])


@EXAMPLES
@given(CHUNKS)
def test_ndjson_parser_yields_objects_or_a_parse_error(chunks: list[bytes]) -> None:
    for obj in _feed_all(NdjsonParser(), chunks):
        assert isinstance(obj, dict)


@EXAMPLES
@given(st.lists(JSON_VALUES, max_size=6))
def test_ndjson_lines_of_any_json(values: list[Any]) -> None:
    lines = b"".join(json.dumps(v).encode() + b"\n" for v in values)
    objects = _feed_all(NdjsonParser(), [lines])
    assert all(isinstance(o, dict) for o in objects)


@pytest.mark.parametrize("cls", [SseParser, NdjsonParser])
def test_an_endless_line_is_refused_not_buffered(cls: type[SseParser] | type[NdjsonParser]) -> None:
    """A server that never ends a line cannot grow the buffer past the limit."""
    parser = cls()
    chunk = b"data: " + b"x" * (1 << 20)
    fed = 0
    try:
        while fed <= 2 * MAX_EVENT_BYTES:
            parser.feed(chunk)
            fed += len(chunk)
            assert len(parser._buf) <= MAX_EVENT_BYTES
    except StreamParseError as exc:
        assert "longer than" in exc.message
    else:
        raise AssertionError("an unterminated line past the limit was accepted")


def _check_reading(reading: EventReading) -> None:
    assert isinstance(reading, EventReading)
    if reading.server_tokens is not None:
        assert isinstance(reading.server_tokens, int) and 0 <= reading.server_tokens <= MAX_PLAUSIBLE_TOKENS
    if reading.timings is not None:
        for value in reading.timings.to_dict().values():
            assert value is None or (isinstance(value, (int, float)) and math.isfinite(value))


@EXAMPLES
@given(st.sampled_from(sorted(DIALECT_CLASSES)), EVENTS)
def test_dialect_readers_take_any_object(dialect: str, event: dict[str, Any]) -> None:
    """Any JSON object reads into a reading whose counts are real counts and whose times are finite."""
    _check_reading(get_dialect(dialect).read(event))


@EXAMPLES
@given(st.sampled_from(sorted(DIALECT_CLASSES)), st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=6))
def test_dialect_readers_take_any_keys(dialect: str, event: dict[str, Any]) -> None:
    _check_reading(get_dialect(dialect).read(event))


def test_an_endless_event_is_refused_not_buffered() -> None:
    """Data lines without the blank line that ends an event are bounded too."""
    parser = SseParser()
    line = b"data: " + b"x" * (1 << 16) + b"\n"
    try:
        for _ in range(2 * MAX_EVENT_BYTES // len(line)):
            parser.feed(line)
    except StreamParseError as exc:
        assert "longer than" in exc.message
    else:
        raise AssertionError("an event without its blank line grew past the limit")


@EXAMPLES
@given(st.sampled_from(sorted(DIALECT_CLASSES)), st.lists(EVENTS, max_size=8), st.integers(min_value=0, max_value=4096))
def test_tally_and_plausibility_of_any_stream(dialect: str, events: list[dict[str, Any]], requested: int) -> None:
    """Folding any readings gives a count that is a real number, and the gate names a field or passes."""
    tally = StreamTally()
    reader = get_dialect(dialect)
    for t_ns, event in enumerate(events):
        tally.add(reader.read(event), t_ns)
    count = tally.count()
    assert isinstance(count.tokens, int) and 0 <= count.tokens <= max(MAX_PLAUSIBLE_TOKENS, tally.streamed)
    problem = plausibility_problem(tally, requested)
    assert problem is None or (" = " in problem and "\n" not in problem)
    if tally.implausible is not None:
        assert problem is not None  # an implausible number never passes
