"""One logged step of a build or install: a command whose every output line goes to a kept log."""

from __future__ import annotations

import shlex
import subprocess
from collections import deque
from collections.abc import Callable, Mapping
from typing import TextIO

# Lines of a failed step's output (a build, an install, a model generator) its error quotes.
LOG_TAIL_LINES = 15


def run_logged(
    cmd: list[str], log: TextIO, feed: Callable[[str], None], env: Mapping[str, str] | None = None
) -> tuple[int, list[str]]:
    """Run `cmd` to the end, every line to `log` and to `feed` (progress); (exit code, last lines).

    Raises OSError when it cannot start. An interrupt kills the command before it propagates."""
    log.write(f"$ {shlex.join(cmd)}\n")
    log.flush()
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            text=True, errors="replace", env=None if env is None else dict(env))
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            log.write(line)
            tail.append(line.rstrip("\n"))
            feed(line)
        rc = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    log.flush()
    return rc, list(tail)
