"""The `audit` command's byte figures, shared by the reports that print bytes per token (roofline,
context). `audit` itself prints from its AuditResult, and `show` keeps the short rendering for it."""

from __future__ import annotations


def fmt_bytes(n: float) -> str:
    """Decimal units, chosen so the figure keeps three or four significant digits."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if abs(n) >= scale:
            return f"{n / scale:.3f} {unit}" if unit == "GB" else f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"
