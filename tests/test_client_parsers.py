"""SSE and NDJSON framing: events split across reads, several per read, comments, [DONE], bad lines."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servecheck.wire.base import StreamParseError
from servecheck.wire.ndjson import NdjsonParser
from servecheck.wire.sse import SseEvent, SseParser


def sse_all(chunks: list[bytes]) -> list[SseEvent]:
    parser = SseParser()
    events = [e for c in chunks for e in parser.feed(c)]
    return events + parser.close()


def ndjson_all(chunks: list[bytes]) -> list[dict]:
    parser = NdjsonParser()
    objs = [o for c in chunks for o in parser.feed(c)]
    return objs + parser.close()


SSE_CASES = [
    # (name, chunks, expected data strings)
    ("one event one read", [b'data: {"a":1}\n\n'], ['{"a":1}']),
    ("two events in one read", [b'data: {"a":1}\n\ndata: {"a":2}\n\n'], ['{"a":1}', '{"a":2}']),
    ("event split mid-json", [b'data: {"a"', b':1}\n\n'], ['{"a":1}']),
    ("split between the two newlines", [b'data: {"a":1}\n', b"\n"], ['{"a":1}']),
    ("split inside the field name", [b"da", b'ta: x\n\n'], ["x"]),
    ("comment ping skipped", [b": ping\n\ndata: x\n\n: keep-alive\n\n"], ["x"]),
    ("CRLF line ends", [b"data: x\r\n\r\ndata: y\r\n\r\n"], ["x", "y"]),
    ("CRLF split between CR and LF", [b"data: x\r", b"\n\r", b"\n"], ["x"]),
    ("no space after colon", [b"data:x\n\n"], ["x"]),
    ("multi-line data joined", [b"data: a\ndata: b\n\n"], ["a\nb"]),
    ("done marker", [b'data: {"a":1}\n\ndata: [DONE]\n\n'], ['{"a":1}', "[DONE]"]),
    ("last event without blank line", [b"data: x\n"], ["x"]),
    ("last event without any newline", [b"data: x"], ["x"]),
    ("event and id fields", [b"event: message\nid: 3\ndata: x\n\n"], ["x"]),
    ("blank lines alone make no event", [b"\n\n\n"], []),
    ("utf-8 split across reads", ["data: é€\n\n".encode()[:7], "data: é€\n\n".encode()[7:]], ["é€"]),
]


@pytest.mark.parametrize("name,chunks,expected", SSE_CASES, ids=[c[0] for c in SSE_CASES])
def test_sse_framing(name: str, chunks: list[bytes], expected: list[str]) -> None:
    assert [e.data for e in sse_all(chunks)] == expected


def test_sse_done_and_event_name() -> None:
    events = sse_all([b"event: message.delta\ndata: {}\n\ndata: [DONE]\n\n"])
    assert [(e.event, e.done) for e in events] == [("message.delta", False), (None, True)]


def test_sse_error_field_becomes_error_event() -> None:
    (event,) = sse_all([b'error: {"message":"boom"}\n\n'])
    assert event.event == "error" and event.json() == {"message": "boom"}


def test_sse_events_complete_as_soon_as_the_blank_line_arrives() -> None:
    parser = SseParser()
    assert parser.feed(b"data: 1\n") == []
    assert [e.data for e in parser.feed(b"\ndata: 2")] == ["1"]
    assert [e.data for e in parser.close()] == ["2"]


@pytest.mark.parametrize(
    "payload,fragment",
    [
        (b"data: {not json\n\n", "{not json"),
        (b"data: [1, 2]\n\n", "[1, 2]"),
        (b'data: "just a string"\n\n', "just a string"),
    ],
)
def test_sse_bad_json_is_a_typed_error_naming_the_line(payload: bytes, fragment: str) -> None:
    (event,) = sse_all([payload])
    with pytest.raises(StreamParseError) as info:
        event.json()
    assert fragment in info.value.line and fragment in info.value.message


def test_sse_line_that_is_not_sse_raises() -> None:
    with pytest.raises(StreamParseError) as info:
        sse_all([b'{"content": "plain json, not SSE"}\n\n'])
    assert "plain json" in info.value.line


def test_parse_error_shortens_long_lines() -> None:
    line = "data: {" + "x" * 5000 + "\n\n"
    (event,) = sse_all([line.encode()])
    with pytest.raises(StreamParseError) as info:
        event.json()
    assert len(info.value.line) <= 120 and info.value.line.endswith("...")
    assert len(info.value.one_line()) < 300


NDJSON_CASES = [
    ("one line", [b'{"a":1}\n'], [{"a": 1}]),
    ("two lines one read", [b'{"a":1}\n{"a":2}\n'], [{"a": 1}, {"a": 2}]),
    ("line split across reads", [b'{"a', b'":1}\n{"a":', b"2}\n"], [{"a": 1}, {"a": 2}]),
    ("blank lines skipped", [b'\n{"a":1}\n\n\n'], [{"a": 1}]),
    ("CRLF", [b'{"a":1}\r\n'], [{"a": 1}]),
    ("last line without newline", [b'{"a":1}\n{"done":true}'], [{"a": 1}, {"done": True}]),
]


@pytest.mark.parametrize("name,chunks,expected", NDJSON_CASES, ids=[c[0] for c in NDJSON_CASES])
def test_ndjson_framing(name: str, chunks: list[bytes], expected: list[dict]) -> None:
    assert ndjson_all(chunks) == expected


def test_ndjson_malformed_line_raises_with_the_line() -> None:
    parser = NdjsonParser()
    with pytest.raises(StreamParseError) as info:
        parser.feed(b'{"a":1}\n{"response": "oops"\n')
    assert '{"response": "oops"' in info.value.line


# ---- any split of a valid stream gives the same events ------------------------------------

json_values = st.dictionaries(
    st.text(min_size=1, max_size=5),
    st.one_of(st.integers(), st.text(max_size=12), st.booleans(), st.none()),
    max_size=4,
)


def _splits(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


@settings(max_examples=200, deadline=None)
@given(
    objs=st.lists(json_values, min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
    crlf=st.booleans(),
    pings=st.booleans(),
)
def test_sse_any_split_gives_same_events(objs: list[dict], cuts: list[int], crlf: bool, pings: bool) -> None:
    nl = "\r\n" if crlf else "\n"
    body = "".join((f": ping{nl}{nl}" if pings else "") + f"data: {json.dumps(o)}{nl}{nl}" for o in objs)
    data = (body + f"data: [DONE]{nl}{nl}").encode()
    whole = sse_all([data])
    assert [e.json() for e in whole[:-1]] == objs and whole[-1].done
    assert sse_all(_splits(data, cuts)) == whole


@settings(max_examples=200, deadline=None)
@given(
    objs=st.lists(json_values, min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
)
def test_ndjson_any_split_gives_same_objects(objs: list[dict], cuts: list[int]) -> None:
    data = "".join(json.dumps(o, ensure_ascii=False) + "\n" for o in objs).encode()
    assert ndjson_all(_splits(data, cuts)) == objs
