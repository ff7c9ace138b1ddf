"""Defensive readers of single JSON values, for the formatters and the generic rendering of a
document without a body type: each returns None (or empty) rather than raise. Whole documents are
read by the typed result model (`model.result.from_doc`), not here."""

from __future__ import annotations

import math
from typing import Any


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def as_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if float(value).is_integer() else None


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
