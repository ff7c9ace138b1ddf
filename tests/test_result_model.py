"""The typed result model: every body type round-trips through its document, saved documents of every
command read back to the same document (so the body types cover every field the commands write),
and documents of a newer schema are refused with a clear message."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from servecheck.errors import UsageError
from servecheck.model.bodies import BODIES, Other
from servecheck.model.bodies.common import Environment
from servecheck.model.codec import decode, encode, json_keys, record
from servecheck.model.result import SCHEMA_VERSION, Envelope, RunResult, from_doc, measured, to_doc, written_doc
from servecheck.runs.jsonout import dumps

sys.path.insert(0, str(Path(__file__).parent))
from result_strategies import strategy  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures" / "results"


def run_results(command: str) -> st.SearchStrategy[RunResult]:
    envelope = strategy(Envelope).map(lambda e: Envelope(**{**e.__dict__, "command": command,
                                                            "schema_version": SCHEMA_VERSION}))
    return st.builds(RunResult, envelope, strategy(BODIES[command]))


@pytest.mark.parametrize("command", sorted(BODIES))
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data())
def test_every_body_type_round_trips_through_its_document(command, data):
    result = data.draw(run_results(command))
    doc = to_doc(result)
    assert from_doc(doc) == result
    assert from_doc(json.loads(dumps(doc))) == result  # through the JSON text the sinks write


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_a_saved_document_reads_back_to_itself(path):
    """Every key a command writes is a typed field: nothing of a real document is lost or changed."""
    doc = json.loads(path.read_text())
    result = from_doc(doc)
    assert not isinstance(result.body, Other), f"no body type for {doc['command']}"
    assert without_nulls(to_doc(result)) == without_nulls(doc)


def without_nulls(value):
    """A document with its objects' null fields left out: the codec writes a record's None field so, and
    readers treat missing and null alike (free-form values such as params keep theirs as read)."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def test_a_newer_schema_is_refused_with_what_to_do():
    with pytest.raises(UsageError, match="newer servecheck") as info:
        from_doc({"schema_version": SCHEMA_VERSION + 1, "command": "staircase"})
    assert info.value.hint is not None and "upgrade servecheck" in info.value.hint


def test_a_command_without_a_body_type_keeps_its_fields():
    doc = {"schema_version": 1, "command": "future-command", "complete": True, "answer": [1, {"a": 2}]}
    result = from_doc(doc)
    assert isinstance(result.body, Other) and to_doc(result)["answer"] == [1, {"a": 2}]


@record
class _Probe:
    n: int | None = None
    rate: float | None = None
    words: tuple[str, ...] = ()
    span: tuple[float, float] | None = None
    flag: bool | None = None


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"n": True}, _Probe()),  # a bool is never a number
        ({"n": 2.0, "rate": 3}, _Probe(n=2, rate=3.0)),  # JSON does not tell 2 from 2.0
        ({"n": 2.5}, _Probe()),
        ({"rate": "fast", "flag": "yes"}, _Probe()),
        ({"words": ["a", 1, "b"]}, _Probe(words=("a", "b"))),  # an item that does not fit is left out
        ({"span": [1, 2, 3]}, _Probe()),
        ({"span": [1, 2]}, _Probe(span=(1.0, 2.0))),
        ("not an object", _Probe()),
    ],
)
def test_reading_is_lenient_and_never_guesses(doc, expected):
    assert decode(_Probe, doc) == expected
    assert encode(expected).get("n") == expected.n


def test_a_record_needs_a_default_for_every_field():
    with pytest.raises(TypeError, match="needs a default"):
        @record
        class _Bad:
            n: int
    with pytest.raises(TypeError, match="default must be None"):
        @record
        class _Worse:
            n: int | None = 3


def test_the_written_envelope_is_the_typed_one():
    """`jsonout.envelope` writes the typed `Envelope` (one schema version, one set of keys), with the
    parameters and the machine's record as given, nulls included."""
    from servecheck.model.result import ENVELOPE_KEYS
    from servecheck.runs import jsonout

    envelope = jsonout.envelope("staircase", {"url": "http://x", "seed": None}, {"gpu": None, "cpu_count": 2})
    head = written_doc(measured("staircase", Other(fields={})).headed(envelope))
    assert set(head) == {"schema_version", "command", "servecheck_version", "created_at", "environment", "params",
                         "simulated", "complete"} <= ENVELOPE_KEYS  # no valid (not judged), no run_id (not saved)
    assert head["schema_version"] == SCHEMA_VERSION and not hasattr(jsonout, "SCHEMA_VERSION")
    assert head["params"] == {"url": "http://x", "seed": None}  # as given, nulls and all
    # every probe, null where it read nothing
    assert head["environment"] == {**dict.fromkeys(json_keys(Environment)), "cpu_count": 2}
    typed = from_doc(head).envelope
    assert ((typed.command, typed.simulated, typed.complete, typed.created_at)
            == ("staircase", False, False, head["created_at"]))


@pytest.mark.parametrize("command", sorted(BODIES))
@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(data=st.data())
def test_the_written_document_reads_back_into_the_result_it_was_written_from(command, data):
    """`written_doc`, the writer of the files and the history, loses nothing the reader reads: a finished
    result (the log audit then null, not absent) and a partial one read back as they were."""
    result = data.draw(run_results(command))
    unrecorded = getattr(result.body, "unrecorded", None)
    # arms before its serial cell, roofline before its bandwidth: keys left out on purpose
    assume(unrecorded is None or not unrecorded())
    doc = json.loads(dumps(written_doc(result)))
    assert from_doc(doc) == result
    if result.complete and "log_audit" in json_keys(type(result.body)):
        assert "log_audit" in doc


@pytest.mark.parametrize("drafted", [False, True], ids=["no-drafts", "drafted"])
def test_the_body_writes_a_requests_server_timings_as_the_driver_records_them(drafted):
    """The body's ServerTimings carries every field the driver's record writes: llama.cpp's draft counts
    only where the server drafted (a key of `only_when_recorded`), the rest as null when unreported."""
    from servecheck.model.bodies.common import ServerTimings as Body
    from servecheck.model.records import ServerTimings as Recorded

    extra = {"draft_tokens": 12, "draft_accepted": 7} if drafted else {}
    recorded = Recorded(prompt_tokens=40, prompt_s=0.25, generated_tokens=64, decode_s=1.5, **extra)
    written = recorded.to_dict()
    body = decode(Body, written)
    assert encode(body, nulls=True) == written
    assert ("draft_tokens" in written) == drafted and written["cached_prompt_tokens"] is None
