"""SIGTERM and SIGHUP handled like Ctrl-C: the command's interrupted path saves its partial, and the
exit code says which signal stopped it (143, 129; 130 for Ctrl-C)."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from servecheck import exitcodes


# Signals handled like Ctrl-C, and the exit code each ends with.
SIGNAL_EXITS = {signal.SIGTERM: exitcodes.TERMINATED, signal.SIGHUP: exitcodes.HANGUP}


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C would be: every command's interrupted path saves its partial."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class SignalTrap:
    """Turns the first SIGTERM/SIGHUP into `Terminated`; later ones are ignored while the partial is saved."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.signum is not None:
            return
        self.signum = signum
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise Terminated(signum) from None
        # Inside asyncio.run, raise from a loop callback, not from whatever task is running: the loop
        # stops, asyncio.run cancels every task (closing its connections) and the interrupt reaches
        # the command, with no "Task exception was never retrieved".
        loop.call_soon_threadsafe(_raise, Terminated(signum))

    def exit_code(self, rv: int) -> int:
        """A command's interrupted exit (130) becomes 143 / 129 when a signal, not Ctrl-C, stopped it."""
        if self.signum is not None and rv == exitcodes.INTERRUPTED:
            return SIGNAL_EXITS.get(self.signum, rv)  # type: ignore[call-overload]
        return rv


def _raise(exc: BaseException) -> None:
    raise exc


@contextmanager
def trapped_signals() -> Iterator[SignalTrap]:
    trap = SignalTrap()
    if threading.current_thread() is not threading.main_thread():
        yield trap  # only the main thread may set handlers (main() called from a test's thread)
        return
    previous = {sig: signal.signal(sig, trap) for sig in SIGNAL_EXITS}
    try:
        yield trap
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
