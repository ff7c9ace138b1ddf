"""A command's typed result as the tests read it: the JSON the writer makes of it (`model.result.written_doc`),
round-tripped through the JSON text, less the head the run loop puts on every result (schema and servecheck
version, start time, machine, parameters, run id), which a test of one command's fields has no use for."""

from __future__ import annotations

import json
from typing import Any

from servecheck.model.reason import Reason, Text
from servecheck.model.result import ENVELOPE_KEYS, RunResult, from_doc, written_doc
from servecheck.runs.jsonout import dumps

# the envelope less the four keys a command's own result sets (`model.result.measured`)
HEAD_ONLY = ENVELOPE_KEYS - {"command", "valid", "simulated", "complete"}


def fields_of(run: RunResult[Any]) -> dict[str, Any]:
    """The command's fields of the written document (its body, `command`, `valid`, `simulated`, `complete`)."""
    return {k: v for k, v in json.loads(dumps(written_doc(run))).items() if k not in HEAD_ONLY}


def reads_back(doc: dict[str, Any]) -> None:
    """The document read into its typed result and written again is the same document, key for key."""
    assert json.dumps(fields_of(from_doc(doc)), sort_keys=True) == json.dumps(doc, sort_keys=True)


def as_reason(text: Text | None) -> Reason:
    """A prose field of a result still in memory, where it holds a Reason (read back from a document, it is text)."""
    assert isinstance(text, Reason), text
    return text
