"""The client's own lateness, metered all run long: a ticker on the driver's event loop.

Every `TICK_S` the ticker re-arms a timer; when it fires more than `FLOOR_S` late, the window from
arming to firing is kept (`model.client.ClientLateness`). The analysis (`analysis.client_timing`)
asks of any stretch whether the client could time it. The ticker costs a wake-up a millisecond, a
few percent of one core; it never touches the network.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from servecheck.model.client import ClientLateness

# A millisecond: the finest timer an event loop keeps (epoll waits in whole milliseconds), and fine
# enough for decode steps of 3 ms and more (a GPU's small model) to be told from a late read.
TICK_S = 0.001
# A tick this late leaves a window. Below it, a timer's ordinary wake-up jitter (tens of microseconds
# on a quiet machine); the resolution the meter vouches for is a tick plus this.
FLOOR_S = 0.0005
# Windows kept in memory: a run of an hour on a machine late every tick. Past it the oldest go, and
# the stretches they covered are no longer vouched for (counted in `dropped`).
MAX_WINDOWS = 500_000


class LatenessMeter:
    """Started with the driver, stopped with it; `record(lo, hi)` is the stretch's `ClientLateness`."""

    def __init__(self, now_ns: Callable[[], int], tick_s: float = TICK_S, floor_s: float = FLOOR_S) -> None:
        self.now_ns = now_ns
        self.tick_ns = int(tick_s * 1e9)
        self.floor_ns = int(floor_s * 1e9)
        self._late: deque[tuple[int, int]] = deque()
        self._dropped_until = -1  # windows ending before this were dropped
        self._from_ns: int | None = None
        self._to_ns: int | None = None  # when it stopped
        self._task: asyncio.Task[None] | None = None
        self._epoch = 0  # bumped by rebase(): a tick armed on the old clock leaves no window

    def start(self) -> None:
        if self._task is None:
            self._from_ns = self.now_ns()
            self._task = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
            self._to_ns = self.now_ns()

    def rebase(self, now_ns: Callable[[], int]) -> None:
        """Read a new clock from now on (a Ray actor's driver is moved onto the run's clock before its
        batch): the windows and the span kept so far were on the old one, so they go."""
        self.now_ns = now_ns
        self._epoch += 1
        self._late.clear()
        self._dropped_until = -1
        if self._from_ns is not None:
            self._from_ns = now_ns()

    async def _tick(self) -> None:
        tick_s, limit = self.tick_ns / 1e9, self.tick_ns + self.floor_ns
        while True:
            epoch, armed = self._epoch, self.now_ns()
            await asyncio.sleep(tick_s)
            fired = self.now_ns()
            if fired - armed > limit and epoch == self._epoch:
                if len(self._late) >= MAX_WINDOWS:
                    self._dropped_until = self._late.popleft()[1]
                self._late.append((armed, fired))

    def record(self, lo_ns: int, hi_ns: int) -> ClientLateness | None:
        """The windows overlapping [lo_ns, hi_ns]; None when the ticker never ran."""
        if self._from_ns is None:
            return None
        covered_to = self.now_ns() if self._to_ns is None else self._to_ns
        windows = tuple((a, b) for a, b in self._late if a < hi_ns and b > lo_ns)
        return ClientLateness(self.tick_ns, self.floor_ns, self._from_ns, covered_to, windows,
                              dropped=int(self._dropped_until > lo_ns))
