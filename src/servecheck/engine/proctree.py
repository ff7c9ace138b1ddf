"""The processes a server started, read from /proc, so that none outlives it.

vLLM's API server starts an engine core and workers; they normally stay in its process group,
which `managed.ManagedServer` signals as a whole. A process that left the group (its own
session) or was orphaned is still found here: by parent links while its parent lives, and by
the process group id after. A pid is only signalled while its start time still matches, so a
reused pid is never hit. Linux only; elsewhere every function finds nothing.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
POLL_S = 0.05


@dataclass(frozen=True)
class ProcId:
    """One process, told apart from a later one with the same pid by its start time."""

    pid: int
    ppid: int
    pgid: int
    start_ticks: int  # field 22 of /proc/PID/stat: clock ticks after boot
    name: str


def read_proc(pid: int) -> ProcId | None:
    """The process `pid` now, or None when it is gone or a zombie."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except (OSError, ValueError):
        return None
    # The name is in parentheses and may itself contain spaces or parentheses.
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return ProcId(pid=pid, ppid=int(fields[1]), pgid=int(fields[2]), start_ticks=int(fields[19]), name=name)


def all_procs() -> list[ProcId]:
    if not PROC.is_dir():
        return []
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            proc = read_proc(int(entry.name))
            if proc is not None:
                found.append(proc)
    return found


def descendants(pid: int, procs: Iterable[ProcId] | None = None) -> list[ProcId]:
    """Every live process below `pid` by parent links (children, grandchildren, ...)."""
    by_parent: dict[int, list[ProcId]] = {}
    for proc in all_procs() if procs is None else procs:
        by_parent.setdefault(proc.ppid, []).append(proc)
    found: list[ProcId] = []
    todo = [pid]
    while todo:
        for child in by_parent.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def group_members(pgid: int) -> list[ProcId]:
    """Every live process in process group `pgid`."""
    return [p for p in all_procs() if p.pgid == pgid]


def is_alive(proc: ProcId) -> bool:
    """True while the same process (same pid and start time) exists and is not a zombie."""
    now = read_proc(proc.pid)
    return now is not None and now.start_ticks == proc.start_ticks


def kill_survivors(procs: Iterable[ProcId], grace_s: float) -> list[ProcId]:
    """SIGTERM each of `procs` still alive, SIGKILL those left after `grace_s`.

    Returns the processes that had to be killed."""
    pending = [p for p in procs if p.pid != os.getpid() and is_alive(p)]
    for proc in pending:
        _signal(proc, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pending and time.monotonic() < deadline:
        time.sleep(POLL_S)
        pending = [p for p in pending if is_alive(p)]
    return [p for p in pending if is_alive(p) and _signal(p, signal.SIGKILL)]


def _signal(proc: ProcId, sig: signal.Signals) -> bool:
    try:
        os.kill(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True
