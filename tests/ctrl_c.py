"""Ctrl-C for the tests that send a real SIGINT, whatever started the suite.

A shell without job control (a script, `make test &`, a CI runner that starts the suite in the
background) starts background jobs with SIGINT ignored; every child inherits that, and Python keeps
an ignored SIGINT ignored instead of installing its KeyboardInterrupt handler. A test's SIGINT then
never arrives: in fresh-clone runs started from a background job the three `alone` tests ended 0
(or waited out a 20 s timeout) instead of 130. These helpers give the signal back its default, for
a child (`preexec_fn`) or for the test's own process (a context manager), and nothing else."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager


def default_sigint() -> None:
    """preexec_fn of a child a test interrupts: its Python then installs KeyboardInterrupt on SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def sigint_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in this process for the block, as at a terminal."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
