"""Values of flags that take some parsing: a list of concurrencies (--n, --arms), of context depths, a
count that must be positive."""

from __future__ import annotations

from servecheck.analysis.context import check_depths
from servecheck.cli.run_flags import check_concurrency
from servecheck.errors import UsageError


def parse_ns(raw: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8]; anything else is a one-line usage error."""
    try:
        ns = [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--n {raw!r} is not a comma-separated list of integers", "for example --n 1,2,4,8") from None
    if not ns or any(n < 1 for n in ns):
        raise UsageError(f"--n {raw!r}: every N must be >= 1", "for example --n 1,2,4,8")
    check_concurrency(max(ns), "--n")
    return ns


def parse_arms(raw: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4); anything else is a one-line usage error."""
    try:
        arms = tuple(int(part) for part in raw.split(",") if part.strip())
    except ValueError:
        raise UsageError(f"--arms {raw!r} is not a comma-separated list of integers",
                         "for example --arms 1,2,4") from None
    if not arms:
        raise UsageError("--arms is empty", "for example --arms 1,2,4")
    if max(arms) >= 1:
        check_concurrency(max(arms), "--arms")
    return tuple(sorted(arms))


def check_positive(name: str, value: int) -> None:
    if value < 1:
        raise UsageError(f"{name} must be >= 1, got {value}", f"for example {name} 64")


def parse_depths(raw: str) -> list[int]:
    """'0,2048,8192' -> [0, 2048, 8192]: at least two, zero or more, strictly increasing."""
    try:
        depths = [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--depths {raw!r} is not a comma-separated list of integers",
                         "for example --depths 0,2048,8192") from None
    if (problem := check_depths(depths)) is not None:
        raise UsageError(f"--depths {raw!r}: {problem}", "for example --depths 0,2048,8192,32768")
    return depths
