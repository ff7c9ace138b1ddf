"""Small formatters the terminal reports share: a dash for what was not recorded."""

from __future__ import annotations

from servecheck.model.bodies.common import Warning


def num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def signed_pct(x: float | None) -> str:
    """A change as a signed percentage; never "-0%" for a change that rounds to nothing."""
    return "-" if x is None else f"{0.0 if abs(x) < 0.005 else x:+.0%}"


def warning_line(w: Warning) -> str:
    if isinstance(w, str):
        return f"warning: {w}"
    return f"warning: {w.message or '-'}" + (f" ({w.hint})" if w.hint else "")
