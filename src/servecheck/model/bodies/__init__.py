"""One body type per command: the fields a command's document carries besides the envelope."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from servecheck.model.codec import JSON, record

Body = Any  # a @record class from this package (or Other)


@record
class Other:
    """A document of a command this servecheck has no body type for: its fields, kept as read."""

    fields: Mapping[str, JSON] = field(default_factory=dict)


# command -> body type; each command's module adds itself below
BODIES: dict[str, type] = {}

# Each module registers its body type in BODIES (imported last: they import Other's neighbours above).
from servecheck.model.bodies import (  # noqa: E402,F401
    arms,
    audit,
    bandwidth,
    calibrate,
    capacity,
    check,
    compare,
    context,
    demo,
    interference,
    log,
    prefix_cache,
    roofline,
    speculative,
    staircase,
)
