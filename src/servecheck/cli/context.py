"""Per-invocation state passed down to commands: consoles, flags and the driver seam. No globals."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Literal, TextIO

from rich.console import Console

from servecheck.load.protocol import DriverFactory


@dataclass(frozen=True)
class Seams:
    """What a caller of `cli.main.main` may swap in for one invocation, before the group builds
    its AppContext (click hands it over as the context's initial `obj`)."""

    open_driver: DriverFactory | None = None


@dataclass
class AppContext:
    out: Console  # results (stdout)
    err: Console  # progress, warnings and errors (stderr), so stdout stays clean for `--json -`
    debug: bool = False
    quiet: bool = False
    # The seam to the server: how the measuring commands open their driver for a run. None is the
    # real `LoadDriver`; `main(args, open_driver=...)` swaps in another (a test's `FakeDriver`).
    open_driver: DriverFactory | None = None

    @classmethod
    def create(
        cls, *, debug: bool = False, quiet: bool = False, no_color: bool = False,
        open_driver: DriverFactory | None = None
    ) -> AppContext:
        # --no-color promises plain text: rich's no_color drops colours but keeps bold and dim, so
        # switch styling off altogether (color_system=None writes no escape codes at all).
        # ("auto" is rich's own default, so a coloured console is made exactly as without the argument.)
        colors: Literal["auto"] | None = None if no_color else "auto"
        out = Console(no_color=no_color, highlight=False, soft_wrap=False, width=_pipe_width(sys.stdout),
                      color_system=colors)
        err = Console(stderr=True, no_color=no_color, highlight=False, quiet=quiet, width=_pipe_width(sys.stderr),
                      color_system=colors)
        return cls(out=out, err=err, debug=debug, quiet=quiet, open_driver=open_driver)


# Rich wraps at 80 columns when stdout or stderr is a file or a pipe, which folds tables of URLs and model
# names into unreadable columns in logs and CI output. Without a terminal there is no width to
# respect, so give results room (COLUMNS still wins when it is set).
PIPE_WIDTH = 200


def _pipe_width(stream: TextIO) -> int | None:
    if os.environ.get("COLUMNS") or stream.isatty():
        return None
    return PIPE_WIDTH
