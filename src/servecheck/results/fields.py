"""Defensive accessors for result documents: documents come from many commands and versions,
so every field may be missing or of the wrong type. Each accessor returns None rather than raise."""

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


def server_url(doc: dict[str, Any]) -> str | None:
    for holder in (as_dict(doc.get("server")), as_dict(doc.get("target")), as_dict(doc.get("params")), doc):
        url = as_str(holder.get("url"))
        if url:
            return url
    return None


def model_name(doc: dict[str, Any]) -> str | None:
    for holder in (as_dict(doc.get("server")), doc, as_dict(doc.get("target")), as_dict(doc.get("params"))):
        name = as_str(holder.get("model"))
        if name:
            return name
    return None


def verdict(doc: dict[str, Any]) -> str | None:
    """The one word a history listing shows for a run, whatever its command."""
    word = as_str(doc.get("verdict")) or as_str(doc.get("gate"))
    if word:
        return word
    if doc.get("headline_refused") is True:
        return "refused"
    if command(doc) == "context" and as_str(doc.get("effect")):
        return f"decode {doc['effect']} with depth" if doc["effect"] != "inconclusive" else "inconclusive"
    if command(doc) == "capacity" and as_str(doc.get("limit")):
        held = as_int(doc.get("max_concurrency"))
        if doc.get("limit") == "undetermined":
            return "undetermined" if held is None else f"holds >= {held} (undetermined)"
        return f"holds {held} ({doc['limit']})"
    arms = [as_dict(a) for a in as_list(doc.get("arms"))]
    if arms:
        top = max(arms, key=lambda a: as_float(a.get("concurrency")) or 0.0)
        label, concurrency = as_str(top.get("label")), as_int(top.get("concurrency"))
        return f"{label} at {concurrency}" if label and concurrency else label
    demo = [w for w in map(as_str, as_dict(doc.get("verdicts")).values()) if w]
    if demo:
        expected = doc.get("as_expected")
        tail = "" if not isinstance(expected, bool) else " (as expected)" if expected else " (not as expected)"
        return ", ".join(demo) + tail
    statuses = [as_dict(f).get("status") for f in as_list(doc.get("findings"))]
    if statuses:
        return "refused" if "refused" in statuses else "no refusals"
    return None


def is_simulated(doc: dict[str, Any]) -> bool:
    return doc.get("simulated") is True or as_dict(doc.get("server")).get("simulated") is True


def is_complete(doc: dict[str, Any]) -> bool:
    return doc.get("complete") is not False


def command(doc: dict[str, Any]) -> str:
    return as_str(doc.get("command")) or "unknown"


def request_rate(req: dict[str, Any]) -> float | None:
    """A request's per-stream generation rate: tokens after the first over the time from first token to end."""
    first, end, tokens = as_float(req.get("first_token_s")), as_float(req.get("end_s")), as_float(req.get("tokens"))
    if req.get("status", "ok") != "ok" or first is None or end is None or tokens is None or tokens < 2 or end <= first:
        return None
    return (tokens - 1) / (end - first)
