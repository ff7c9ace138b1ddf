"""A typed result: the envelope every document has, and one body type per command.

`from_doc` and `written_doc` are the only code that turns a result document into typed values and
back (through `model.codec`); experiments build the typed values (`measured`), and the run loop, the
sinks, the history and the renderers pass them on. `from_doc` reads
every `schema_version` this project has written, upgrading older ones on the way, and refuses a
newer one with a message that says to upgrade servecheck.

Schema history (docs/schema.md has the fields; bump SCHEMA_VERSION on any incompatible change,
add its upgrade to UPGRADES and say here what changed; adding a field is compatible):
  1  the first version: the envelope {schema_version, command, servecheck_version, created_at,
     environment, params, simulated, complete, valid, run_id} beside the command's fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from typing import Any, Generic, TypeVar

from servecheck.errors import UsageError
from servecheck.model.bodies import BODIES, Body, Other
from servecheck.model.bodies.common import Environment, Finding, Server
from servecheck.model.codec import JSON, decode, encode, finished_nulls, json_keys, record
from servecheck.model.reason import Reason, Text

SCHEMA_VERSION = 1

# version -> the function that turns a document of that version into one of the next
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}

B = TypeVar("B", bound=Body)


@record
class Envelope:
    """The head of every result document."""

    schema_version: int = SCHEMA_VERSION
    command: str = "unknown"
    servecheck_version: str | None = None
    created_at: str | None = None  # ISO 8601 UTC, when the run started
    environment: Environment = field(default_factory=Environment)
    params: Mapping[str, JSON] = field(default_factory=dict)
    simulated: bool = False
    complete: bool = True  # false when the run stopped early; its points so far are kept
    valid: bool | None = None  # null for commands that do not judge validity
    run_id: int | None = None  # the history row, when saved (the key only then)


ENVELOPE_KEYS = json_keys(Envelope)


@record
class _Common:
    """The fields most bodies share, read from a document of a command without a body type."""

    server: Server | None = None
    invalid: tuple[Finding | str, ...] = ()
    warnings: tuple[Finding | str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunResult(Generic[B]):
    envelope: Envelope
    body: B

    @property
    def command(self) -> str:
        return self.envelope.command

    def headed(self, head: Envelope) -> RunResult[B]:
        """This result under its run's head (version, start time, machine, parameters, run id): the
        result keeps its own word on validity, simulation and completeness."""
        own = self.envelope
        return RunResult(replace(head, valid=own.valid, simulated=own.simulated, complete=own.complete), self.body)

    def with_envelope(self, **changes: Any) -> RunResult[B]:
        return RunResult(replace(self.envelope, **changes), self.body)

    def with_body(self, **changes: Any) -> RunResult[B]:
        """The same run with these body fields replaced (what a run gains once it is over: the log audit)."""
        return RunResult(self.envelope, replace(self.body, **changes))

    @property
    def simulated(self) -> bool:
        """Measured on servecheck's simulator, by the envelope's mark or the server detection's."""
        server = getattr(self.body, "server", None)
        return self.envelope.simulated or (server is not None and server.simulated is True)

    @property
    def complete(self) -> bool:
        return self.envelope.complete

    @property
    def server(self) -> Server | None:
        """What detection learned about the server, for the commands that talk to one."""
        body = decode(_Common, self.body.fields) if isinstance(self.body, Other) else self.body
        server = getattr(body, "server", None)
        return server if isinstance(server, Server) else None

    @property
    def url(self) -> str | None:
        """The server the run measured: as detected, else as given."""
        return (self.server and self.server.url) or _param_str(self.envelope.params, "url")

    @property
    def model(self) -> str | None:
        return (self.server and self.server.model) or _param_str(self.envelope.params, "model")

    @property
    def valid(self) -> bool | None:
        return self.envelope.valid


def measured(command: str, body: B, *, valid: bool | None = None, simulated: bool = False,
             complete: bool = False) -> RunResult[B]:
    """A command's result as its experiment builds it; the run loop puts the run's head on it (`headed`)."""
    return RunResult(Envelope(command=command, valid=valid, simulated=simulated, complete=complete), body)


def run_findings(
    run: RunResult[Any],
) -> tuple[tuple[Finding | Text, ...], tuple[Finding | Text, ...], tuple[Text, ...]]:
    """A run's invalid findings, warnings and notes, for the commands that keep them as lists."""

    body = decode(_Common, run.body.fields) if isinstance(run.body, Other) else run.body

    def listed(name: str) -> tuple[Any, ...]:
        value = getattr(body, name, ())
        return value if isinstance(value, tuple) else ()  # log's `warnings` is a count

    notes = tuple(n for n in listed("notes") if isinstance(n, (str, Reason)))
    return listed("invalid"), listed("warnings"), notes


def environment_rows(environment: Environment) -> list[tuple[str, Any]]:
    """Every field of the machine record, null ones too (a probe that could not read its value)."""
    return [(f.name, encode(getattr(environment, f.name))) for f in dataclass_fields(environment)]


def _param_str(params: Mapping[str, Any], name: str) -> str | None:
    value = params.get(name)
    return value if isinstance(value, str) and value else None


class SchemaError(UsageError):
    pass


def from_doc(doc: Mapping[str, Any]) -> RunResult[Any]:
    """The typed result of a document any servecheck release wrote (upgraded to this schema)."""
    current = upgraded(dict(doc))
    envelope = decode(Envelope, current)
    body_type = BODIES.get(envelope.command)
    if body_type is None:
        body: Body = Other(fields={k: v for k, v in current.items() if k not in ENVELOPE_KEYS})
    else:
        body = decode(body_type, current)
    return RunResult(envelope, body)


def to_doc(result: RunResult[Any]) -> dict[str, Any]:
    """The document of a typed result: the envelope's keys and the body's, side by side."""
    body = result.body
    fields_ = dict(body.fields) if isinstance(body, Other) else encode(body)
    return {**encode(result.envelope), **fields_}


def written_doc(result: RunResult[Any]) -> dict[str, Any]:
    """The document servecheck writes for a result (the JSON file, the history): the envelope, with the
    machine's record and the parameters whole (a probe that read nothing is null), beside every field
    of the body, null where nothing was measured. Keys docs/schema.md names as the finished run's only
    (the log audit) are null in a finished document and absent from a partial one; a body may leave
    out keys it has not reached (`unrecorded`: arms before its serial cell). `to_doc` is the lean form
    a report lists fields from."""
    envelope, body = result.envelope, result.body
    head = {**encode(envelope), "environment": encode(envelope.environment, nulls=True),
            "params": encode(envelope.params)}
    if isinstance(body, Other):
        return {**head, **body.fields}
    fields_ = encode(body, nulls=True)
    if envelope.complete:
        fields_.update(finished_nulls(body))
    unrecorded = getattr(body, "unrecorded", None)
    for name in unrecorded() if unrecorded is not None else ():
        fields_.pop(name, None)
    return {**head, **fields_}


def upgraded(doc: dict[str, Any]) -> dict[str, Any]:
    """The document upgraded to this schema; a `SchemaError` for a version servecheck never wrote or a newer one."""
    version = doc.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise SchemaError(f"schema_version {version!r} is not one servecheck writes",
                          "give a JSON file or a saved run servecheck wrote")
    if version > SCHEMA_VERSION:
        raise SchemaError(f"this result was written by a newer servecheck (schema {version}; "
                          f"this one reads up to {SCHEMA_VERSION})",
                          "upgrade servecheck to read it")
    while version < SCHEMA_VERSION:
        doc = UPGRADES[version](doc)
        version += 1
        doc["schema_version"] = version
    return doc
