"""Every process servecheck starts dies with it, however servecheck dies (SIGKILL, the OOM killer,
a lost terminal), not only on the exits it can catch.

Two routes, both used on Linux:
* `pdeathsig_setup()`: a `preexec_fn` that asks the kernel to SIGTERM the child when servecheck
  dies (prctl PR_SET_PDEATHSIG). It covers the direct child only.
* `Watchdog.start(pgid)`: a small process in the child's process group (this file, run as a script
  by the same Python) that holds the read end of a pipe from servecheck. When the pipe reaches
  end-of-file without a word (servecheck is gone: the kernel closed its end), or its parent pid
  changes, it ends the whole group and every process below the group's leader: SIGTERM, then
  SIGKILL after a grace. That covers what an engine forks (vLLM's engine core and its helpers).
  macOS has no PDEATHSIG; the watchdog is the route there.

Standard library only: the watchdog runs as `python -I lifeline.py ...`, without servecheck on
the path.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
# The watchdog looks at its parent pid this often, for the case the pipe cannot tell (a process
# forked from servecheck without exec still holds the pipe's write end).
WATCH_POLL_S = 1.0
# After servecheck died: SIGTERM to the engine's tree, this long, then SIGKILL. Short, since nobody
# is waiting for the engine's orderly exit any more, and the whole tree must be gone within 5 s.
WATCH_GRACE_S = 2.0
DISMISS_TIMEOUT_S = 2.0
_STAND_DOWN = b"s"
_PROC = "/proc"


# -- what /proc says about a process -------------------------------------------------------------


def proc_stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, pgid, start ticks) of a live process, from /proc/PID/stat; None when gone, a zombie,
    or where there is no /proc. The start time (clock ticks after boot) tells a process apart
    from a later one that got the same pid."""
    try:
        with open(f"{_PROC}/{pid}/stat") as fh:
            stat = fh.read()
    except (OSError, ValueError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), int(fields[2]), int(fields[19])


def start_ticks(pid: int) -> int | None:
    stat = proc_stat(pid)
    return None if stat is None else stat[2]


def pid_alive(pid: int, ticks: int | None) -> bool:
    """True while the process `pid` started at `ticks` (None: unknown, pid alone decides) lives."""
    if os.path.isdir(_PROC):
        stat = proc_stat(pid)
        return stat is not None and (ticks is None or stat[2] == ticks)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- the kernel's route --------------------------------------------------------------------------


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def pdeathsig_setup(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A preexec_fn: the kernel sends `sig` to the child when the thread that started it dies.

    None off Linux, and off the main thread: the signal fires when the starting *thread* exits,
    so a server started from a worker thread would die with that thread (the watchdog covers it)."""
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    libc = _libc()
    if libc is None:
        return None

    def setup() -> None:
        libc.prctl(PR_SET_PDEATHSIG, sig)

    return setup


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """Called first thing in a Python child servecheck started (a client worker): die when it does.

    Linux: PDEATHSIG; when the parent already died before that (the child is reparented), now."""
    if not sys.platform.startswith("linux"):
        return
    libc = _libc()
    if libc is not None:
        libc.prctl(PR_SET_PDEATHSIG, sig)
    if os.getppid() != parent_pid:
        os._exit(1)


# -- the watchdog --------------------------------------------------------------------------------


class Watchdog:
    """The watchdog of one process group, seen from servecheck: `dismiss()` after a clean stop."""

    def __init__(self, proc: subprocess.Popen[bytes], write_fd: int, pgid: int) -> None:
        self.proc = proc
        self.pgid = pgid
        self._write_fd: int | None = write_fd

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    def start(cls, pgid: int, grace_s: float = WATCH_GRACE_S) -> Watchdog | None:
        """A watchdog in process group `pgid`; None when it could not join (the group is already gone)."""
        read_fd, write_fd = os.pipe()  # both ends non-inheritable; only the watchdog gets the read end
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", os.path.abspath(__file__), str(os.getpid()), str(pgid), repr(grace_s)],
                stdin=read_fd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, process_group=pgid,
            )
        except (OSError, subprocess.SubprocessError):
            os.close(write_fd)
            return None
        finally:
            os.close(read_fd)
        return cls(proc, write_fd, pgid)

    def dismiss(self) -> None:
        """servecheck stopped the group itself: the watchdog exits without touching it."""
        fd, self._write_fd = self._write_fd, None
        if fd is not None:
            try:
                os.write(fd, _STAND_DOWN)
            except OSError:
                pass  # it is gone already (killed with its group)
            finally:
                os.close(fd)
        try:
            self.proc.wait(timeout=DISMISS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def watch(parent_pid: int, pgid: int, grace_s: float, poll_s: float = WATCH_POLL_S) -> None:
    """The watchdog's life: wait on the pipe (fd 0); on a word, exit; on its end, or a new parent, end the group."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)  # the group's own stop reaches us too; only servecheck dismisses
    while True:
        ready, _, _ = select.select([0], [], [], poll_s)
        if ready:
            if os.read(0, 1):
                return
            break
        if os.getppid() != parent_pid:
            break
    end_group(pgid, grace_s)


def group_tree(pgid: int) -> dict[int, int]:
    """{pid: start ticks} of the group's members and of every process below its leader (Linux)."""
    if not os.path.isdir(_PROC):
        return {}
    table: dict[int, tuple[int, int, int]] = {}
    for name in os.listdir(_PROC):
        if name.isdigit():
            stat = proc_stat(int(name))
            if stat is not None:
                table[int(name)] = stat
    found = {pid: s[2] for pid, s in table.items() if s[1] == pgid}
    todo = [pgid]
    while todo:
        parent = todo.pop()
        for pid, (ppid, _, ticks) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = ticks
                todo.append(pid)
    found.pop(os.getpid(), None)
    return found


def end_group(pgid: int, grace_s: float) -> None:
    """SIGTERM to the group and the tree below its leader, SIGKILL to what is left after `grace_s`."""
    tree = group_tree(pgid)
    _kill_group(pgid, signal.SIGTERM)
    for pid, ticks in tree.items():
        _kill_if(pid, ticks, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if tree and not any(pid_alive(pid, ticks) for pid, ticks in tree.items()):
            break
        time.sleep(0.05)
    for pid, ticks in group_tree(pgid).items() | tree.items():
        _kill_if(pid, ticks, signal.SIGKILL)
    _kill_group(pgid, signal.SIGKILL)  # last: the watchdog is a member


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_if(pid: int, ticks: int, sig: int) -> None:
    if pid_alive(pid, ticks):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


if __name__ == "__main__":
    watch(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))
