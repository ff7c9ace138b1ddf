"""How a measured figure is written for a reader: the one rule the reports and the analysis's own
sentences share. Pure formatting, no judgement."""

from __future__ import annotations

GIB = 1 << 30  # 2^30 bytes: the binary unit sizes are given and printed in (GB = 10^9 bytes is a decimal one)


def format_figure(value: float) -> str:
    """At least three significant figures without exponent: 181, 41.5, 2.53 (a small model's 2.5 GB/s
    must not print as 3)."""
    digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2
    return f"{value:.{digits}f}"
