"""Input files a command reads, checked before anything opens them (standard library and errors only)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from servecheck.errors import ServecheckError


def check_input_file(
    path: str | Path, what: str, *, allow_dir: bool = False, error: type[ServecheckError] = ServecheckError
) -> None:
    """Refuse a path that is not a regular file (or `-`) before anything opens it: reading a FIFO
    blocks until a writer comes, and a device may never end. A missing path is left to the opener."""
    if str(path) == "-":
        return
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    if stat.S_ISREG(mode) or (allow_dir and stat.S_ISDIR(mode)):
        return
    expected = "a regular file or a folder" if allow_dir else "a regular file"
    raise error(f"{what} {path} is {_file_kind(mode)}, not {expected}", f"give {expected}")


def _file_kind(mode: int) -> str:
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))
    return next((name for test, name in kinds if test(mode)), "a special file")
