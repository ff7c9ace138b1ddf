"""Per-invocation state passed down to commands: consoles and flags. No globals."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console


@dataclass
class AppContext:
    out: Console  # results (stdout)
    err: Console  # progress, warnings and errors (stderr), so stdout stays clean for `--json -`
    debug: bool = False
    quiet: bool = False

    @classmethod
    def create(cls, *, debug: bool = False, quiet: bool = False, no_color: bool = False) -> AppContext:
        out = Console(no_color=no_color, highlight=False, soft_wrap=False)
        err = Console(stderr=True, no_color=no_color, highlight=False, quiet=quiet)
        return cls(out=out, err=err, debug=debug, quiet=quiet)
