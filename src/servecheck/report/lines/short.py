"""The short form of a saved run (`servecheck show` when a document lacks what the command's own report
needs, or for a command without one): a few rows per command, from recorded fields only."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from servecheck.runs.fields import as_float

DASH = "—"


def num(value: Any, digits: int = 1, suffix: str = "") -> str:
    number = as_float(value)
    if number is None:
        return DASH if value is None else str(value)
    return f"{number:,.{digits}f}{suffix}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    table = Table(*headers, box=None, pad_edge=False, header_style="bold", show_header=any(headers))
    for row in rows:
        table.add_row(*[Text(c) for c in row])  # Text: server strings are never read as markup
    return table


def pct(value: float | None, *, signed: bool = False) -> str:
    if value is None:
        return DASH
    return f"{value * 100:+.0f}%" if signed else f"{value * 100:.0f}%"


def span(value: tuple[float, ...] | float | None, scale: float, suffix: str, digits: int) -> str:
    """`265–315 GB/s`, or one figure where both ends (or the one value) print alike."""
    values = value if isinstance(value, tuple) else () if value is None else (value,)
    shown = [f"{v * scale:.{digits}f}" for v in values]
    return "–".join(dict.fromkeys(shown)) + suffix if shown else DASH


def scalar(value: Any) -> str:
    number = as_float(value)
    return DASH if value is None else f"{number:g}" if number is not None else str(value)
